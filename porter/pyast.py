"""The stdlib-``ast`` detection tier: one cheap parse, one traversal, no LibCST.

Most findings on a large tree are inventory (``torch.cuda`` references, device strings, kernel
inventory, vendor checks): they need a syntax tree and the file's imports, not a lossless
concrete tree. A family whose rules only *report* (or whose fixes are plain text edits over
a node's range) writes its Python visitor against this module: ``AstVisitor`` subclasses with
``visit_<Node>`` / ``leave_<Node>`` methods named after :mod:`ast` classes, all families'
visitors sharing one traversal of the tree CPython already built for the parse guard.
LibCST is then parsed only for files where a LibCST family's trigger matches (a family that
rewrites code structurally), which keeps detection near the cost of ``ast.parse``.

Positions: ``ast`` columns are UTF-8 byte offsets; :meth:`AstVisitor.span` converts them to the
character offsets every finding uses, so a rule gives the same line/column on either tier.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .findings import Applicability, Finding

if TYPE_CHECKING:
    from .framework import PyContext

Handler = Callable[[Any], Any]


class AstVisitor:
    """Base class for a family's stdlib-``ast`` visitor (one instance per file).

    Implement ``visit_<AstClass>(node)`` (called before the node's children) and/or
    ``leave_<AstClass>(node)`` (after them). Children are visited in source order (decorators
    before the function, a call's positional and keyword arguments by position, a dict's keys
    and values pairwise). Visitors cannot prune: like LibCST's batched visitors, every visitor
    sees every node. Resolve names through the file's imports with :meth:`qualname`; report
    with :meth:`report`.
    """

    family: ClassVar[str] = ""
    _handlers: ClassVar[dict[type, tuple[dict[str, str], dict[str, str]]]] = {}
    # When set (in ``__init__``, before the walk): ``visit_Name`` is called only for names whose
    # ``id`` is in it. A visitor sets it only when its ``visit_Name`` does nothing for other names.
    name_ids: Container[str] | None = None

    def __init__(self, ctx: PyContext) -> None:
        self.ctx = ctx
        self.findings: list[Finding] = []

    # -- dispatch ---------------------------------------------------------------------------
    @classmethod
    def handler_names(cls) -> tuple[dict[str, str], dict[str, str]]:
        """``{ast class name: method name}`` for visits and leaves (computed once per class)."""
        found = AstVisitor._handlers.get(cls)
        if found is None:
            visits: dict[str, str] = {}
            leaves: dict[str, str] = {}
            for name in dir(cls):
                if name.startswith("visit_") and callable(getattr(cls, name)):
                    visits[name[6:]] = name
                elif name.startswith("leave_") and callable(getattr(cls, name)):
                    leaves[name[6:]] = name
            found = AstVisitor._handlers[cls] = (visits, leaves)
        return found

    # -- helpers ----------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """Qualified name of a Name/Attribute chain rooted at an imported name, else None."""
        return self.ctx.ast_imports.resolve(node)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.ctx.ast_span(node)

    def code(self, node: ast.AST) -> str:
        """The node's source text, exactly as written."""
        start, end = self.span(node)
        return self.ctx.text[start:end]

    def report(
        self,
        node: ast.AST,
        code: str,
        message: str,
        *,
        replacement: str | None = None,
        fix: Applicability = Applicability.SAFE,
        **kwargs: Any,
    ) -> Finding:
        """Report ``code`` at ``node``; ``replacement`` (source text) becomes the fix of its range."""
        start, end = self.span(node)
        finding = self.ctx.finding(code, message, start, end, replacement=replacement, fix=fix, **kwargs)
        self.findings.append(finding)
        return finding


def _ordered_children(node: ast.AST) -> Iterable[ast.AST]:
    """The node's children in source order (``ast``'s field order differs for a few classes)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield from node.decorator_list
        yield from getattr(node, "type_params", ())  # Python 3.12+: `def f[T: bound]()`, `class C[T]`
        if isinstance(node, ast.ClassDef):
            yield from node.bases
            yield from node.keywords
        else:
            yield node.args
            if node.returns is not None:
                yield node.returns
        yield from node.body
        return
    if isinstance(node, ast.Call):
        yield node.func
        if node.keywords and any(isinstance(a, ast.Starred) for a in node.args):
            # only a starred argument may follow a keyword (`f(a=1, *rest)`): source order needs sorting
            yield from sorted([*node.args, *node.keywords], key=_pos)
        else:
            yield from node.args
            yield from node.keywords
        return
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=False):
            if key is not None:
                yield key
            yield value
        return
    if isinstance(node, ast.IfExp):
        yield node.body
        yield node.test
        yield node.orelse
        return
    if isinstance(node, ast.arguments):
        yield from sorted(_argument_parts(node), key=_pos)
        return
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, ast.AST):
                    yield item
        elif isinstance(value, ast.AST):
            yield value


def _argument_parts(args: ast.arguments) -> list[ast.AST]:
    parts: list[ast.AST] = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    parts += [d for d in args.defaults if d is not None]
    parts += [d for d in args.kw_defaults if d is not None]
    if args.vararg is not None:
        parts.append(args.vararg)
    if args.kwarg is not None:
        parts.append(args.kwarg)
    return parts


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


_SKIP = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)


def walk(tree: ast.AST, visitors: Sequence[AstVisitor]) -> None:
    """One traversal of ``tree`` calling every visitor's ``visit_*``/``leave_*`` methods."""
    visit: dict[str, list[Handler]] = {}
    leave: dict[str, list[Handler]] = {}
    for v in visitors:
        visits, leaves = type(v).handler_names()
        for cls_name, meth in visits.items():
            visit.setdefault(cls_name, []).append(getattr(v, meth))
        for cls_name, meth in leaves.items():
            leave.setdefault(cls_name, []).append(getattr(v, meth))
    filtered = [v.name_ids for v in visitors if "Name" in type(v).handler_names()[0]]
    if any(ids is not None for ids in filtered):
        visit["Name"] = [_names_dispatch(list(zip(filtered, visit["Name"], strict=True)))]
    _walk(tree, _Dispatch(visit, leave))


def _names_dispatch(pairs: list[tuple[Container[str] | None, Handler]]) -> Handler:
    """One ``Name`` handler calling each visitor's ``visit_Name`` (in order) for the ids it asked for."""
    def visit_name(node: ast.Name) -> None:
        name = node.id
        for ids, handler in pairs:
            if ids is None or name in ids:
                handler(node)

    return visit_name


_SPECIAL = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Call, ast.Dict, ast.IfExp, ast.arguments)
_PLANS: dict[type, tuple[str, ...] | None] = {}
# ASDL's builtin types (``Python.asdl``): a field of one of them never holds a node
_SCALAR_TYPES = frozenset({"identifier", "string", "int", "constant"})


# classes whose plan follows their ASDL signature: every value of a planned field is a node, a
# list of nodes, or None (an absent optional child)
_TYPED: set[type] = set()


def _scalar_fields(cls: type) -> frozenset[str] | None:
    """The fields of ``cls`` that the grammar types as identifiers, strings, ints or constants.

    Read from the class's ASDL signature (its docstring, ``Name(identifier id, expr_context ctx)``);
    None when the signature does not name exactly the class's fields.
    """
    doc = (cls.__doc__ or "").split("\n", 1)[0].strip()
    head = cls.__name__ + "("
    if not doc.startswith(head) or not doc.endswith(")"):
        return None
    inner = doc[len(head):-1].strip()
    declared: dict[str, str] = {}
    for part in inner.split(",") if inner else ():
        words = part.split()
        if len(words) != 2:
            return None
        kind, name = words
        declared[name] = kind.rstrip("?*")
    if tuple(declared) != tuple(cls._fields):
        return None
    if any(kind in _NODE_FREE and name not in ("ctx", "op", "ops", "type_ignores") for name, kind in declared.items()):
        return None  # an operator or context under another name: not the grammar this reads
    return frozenset(name for name, kind in declared.items() if kind in _SCALAR_TYPES)


_NODE_FREE = frozenset({"expr_context", "boolop", "operator", "unaryop", "cmpop", "type_ignore"})


def _plan(cls: type) -> tuple[str, ...] | None:
    """The fields of ``cls`` that can hold child nodes, in order (None: a source-order special case)."""
    if issubclass(cls, _SPECIAL):
        plan = None
    else:
        scalars = _scalar_fields(cls)
        if scalars is not None:
            _TYPED.add(cls)
        plan = tuple(f for f in cls._fields if f not in ("ctx", "op", "ops", "type_ignores")
                     and f not in (scalars or ()))
    _PLANS[cls] = plan
    return plan


class _Dispatch(dict):
    """``{node class: (visit handlers, child fields, leave handlers)}`` for one walk, filled on first
    sight of a class from the name-keyed handler lists."""

    __slots__ = ("visit", "leave")

    def __init__(self, visit: Mapping[str, list[Handler]], leave: Mapping[str, list[Handler]]) -> None:
        super().__init__()
        self.visit = visit
        self.leave = leave

    def __missing__(self, cls: type) -> tuple[list[Handler] | None, tuple[str, ...] | None, bool, list[Handler] | None]:
        name = cls.__name__
        plan = _PLANS[cls] if cls in _PLANS else _plan(cls)
        entry = self[cls] = (self.visit.get(name) or None, plan, cls in _TYPED, self.leave.get(name) or None)
        return entry


def _walk(node: ast.AST, dispatch: _Dispatch) -> None:
    cls = node.__class__
    handlers, plan, typed, leaves = dispatch[cls]
    if handlers:
        for h in handlers:
            h(node)
    if typed:  # every planned value is a child node, a list of them, or None
        for field in plan:  # type: ignore[union-attr]
            value = getattr(node, field, None)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    _walk(item, dispatch)
            else:
                _walk(value, dispatch)
    elif plan is not None:
        for field in plan:
            value = getattr(node, field, None)
            if value is None:
                continue
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, ast.AST) and not isinstance(item, _SKIP):
                        _walk(item, dispatch)
            elif isinstance(value, ast.AST) and not isinstance(value, _SKIP):
                _walk(value, dispatch)
    elif cls is ast.Call and not (node.keywords and any(a.__class__ is ast.Starred for a in node.args)):
        # the common call (keywords after every positional argument) without a generator
        _walk(node.func, dispatch)
        for arg in node.args:
            _walk(arg, dispatch)
        for kw in node.keywords:
            _walk(kw, dispatch)
    else:
        for child in _ordered_children(node):
            if not isinstance(child, _SKIP):
                _walk(child, dispatch)
    if leaves:
        for h in leaves:
            h(node)


def string_value(node: ast.AST) -> str | None:
    """The value of a plain string literal (implicit concatenation included), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None
