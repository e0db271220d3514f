"""The import index of ``porter.pyimports`` over a stdlib ``ast`` module.

``AstImportIndex`` records exactly what ``ImportIndex`` records for the LibCST tree of the same
source (bindings, availability gates and their fallbacks, module-level rebindings, availability
flags) and answers the same queries, so detection can run on ``ast.parse`` trees, which are far
cheaper to build than LibCST ones. The ``statement``/``gate`` fields of its records hold ``ast``
nodes (a ``Rebind``'s statement is the ``Assign``/``AnnAssign`` itself, not LibCST's line). Like
``ImportIndex`` it walks statements only, never expressions.

Where the two trees differ in shape the port follows what ``ImportIndex`` sees: several small
statements on one line are separate statements here; an ``elif`` is the single ``If`` of its
parent's ``orelse`` at the parent's column (a nested ``if`` under ``else:`` is indented deeper; both
are walked alike, only the gate wording differs);
``None``/``True``/``False`` are constants here but names in LibCST.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .importindex import _GATE_EXCEPTIONS, BaseImportIndex, Binding, Gate

__all__ = ["AstImportIndex", "ast_dotted"]

_TRY = (ast.Try, *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LOOPS = (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
_WITH = (ast.With, ast.AsyncWith)
# statements that bind no name the index records and hold no statements: skipped at once
_PLAIN = frozenset({ast.Expr, ast.Return, ast.Pass, ast.AugAssign, ast.Raise, ast.Delete, ast.Global,
                    ast.Nonlocal, ast.Assert, ast.Break, ast.Continue})
_MATCH = (ast.Match,) if hasattr(ast, "Match") else ()
_PROBES = {"find_spec", "find_loader", "module_available", "package_available"}


def ast_dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` as a string for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def _handler_catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((ast_dotted(t) or "").split(".")[-1] in _GATE_EXCEPTIONS for t in types)


def _is_sentinel(value: ast.expr) -> bool:
    """`None`, `False`, a number or string: a marker, not an alternative implementation.

    The literals LibCST's version accepts: no complex numbers, no ``...``."""
    if isinstance(value, ast.Constant):
        v = value.value
        return v is None or isinstance(v, (bool, int, float, str, bytes))
    return isinstance(value, ast.JoinedStr)


def _is_name(value: ast.expr) -> bool:
    """A Name/Attribute in LibCST's tree: ``None``/``True``/``False`` are names there."""
    if isinstance(value, (ast.Name, ast.Attribute)):
        return True
    return isinstance(value, ast.Constant) and (value.value is None or value.value is True or value.value is False)


def _probe_call(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Compare):
        if len(expr.ops) != 1:
            return False
        comparator = expr.comparators[0]
        if isinstance(expr.ops[0], (ast.IsNot, ast.NotEq)) and isinstance(comparator, ast.Constant) \
                and comparator.value is None:
            return _probe_call(expr.left)
        return False
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in _PROBES:
        return True
    return name.startswith("is_") and name.endswith("_available") and name not in {"is_available"} \
        and not name.startswith("is_torch")


def _is_elif(stmt: ast.If) -> bool:
    """Whether ``stmt.orelse`` is an ``elif`` (LibCST: an ``If`` node) rather than an ``else:`` block."""
    orelse = stmt.orelse
    return len(orelse) == 1 and isinstance(orelse[0], ast.If) and orelse[0].col_offset == stmt.col_offset


def _import_from_base(node: ast.ImportFrom) -> str:
    return "." * (node.level or 0) + (node.module or "")


class AstImportIndex(BaseImportIndex):
    """Every import binding in an ``ast`` module, with ``ImportIndex``'s semantics and queries."""

    _dotted = staticmethod(ast_dotted)

    def __init__(self, tree: ast.Module) -> None:
        super().__init__()
        self._walk(tree.body, gated=False, toplevel=True)
        self._finish()

    def resolve(self, expr: ast.AST) -> str | None:
        """``BaseImportIndex.resolve``: the chain's root name is looked up before the chain is
        spelled out (most chains start at a local name and resolve to nothing)."""
        root = expr
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        if root.id not in self.bindings and root.id not in self.rebinds:
            return None  # what resolve_name answers for a name without binding or rebinding
        return super().resolve(expr)

    # -- construction -------------------------------------------------------------------
    def _walk(self, body: Sequence[ast.stmt], *, gated: bool, toplevel: bool, gate: Gate | None = None,
              fallback_of: tuple[Gate, ...] = (), module_level: bool = True) -> None:
        """Record ``body``'s bindings. ``gate``: the innermost availability gate whose package path
        this is; ``fallback_of``: every gate whose no-package path this is (innermost first)."""
        for stmt in body:
            if type(stmt) in _PLAIN:
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._add(stmt, gated=gated, toplevel=toplevel, gate=gate, paths=fallback_of)
                if fallback_of:
                    self._fallback_import(stmt, fallback_of)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and module_level:
                self._assignment(stmt, gate, fallback_of)
            elif isinstance(stmt, ast.Assign):
                first = stmt.targets[0]
                if fallback_of or len(stmt.targets) > 1 or not isinstance(first, ast.Name) or first.id in self.bindings:
                    self._local_assignment(stmt, fallback_of)
            elif isinstance(stmt, ast.AnnAssign):
                self._local_assignment(stmt, fallback_of)
            elif isinstance(stmt, _TRY):
                catches = any(_handler_catches_import_error(h) for h in stmt.handlers)
                inner = stmt if catches else gate
                if catches:
                    self.gates.append(stmt)
                self._walk(stmt.body, gated=gated or catches, toplevel=toplevel, gate=inner,
                           fallback_of=fallback_of, module_level=module_level)
                self._conditional += 1  # a handler or the else block may not run
                for handler in stmt.handlers:
                    fb = (stmt, *fallback_of) if catches and _handler_catches_import_error(handler) else fallback_of
                    self._walk(handler.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fb,
                               module_level=module_level)
                self._walk(stmt.orelse, gated=gated or catches, toplevel=toplevel, gate=inner,
                           fallback_of=fallback_of, module_level=module_level)
                self._conditional -= 1
                self._walk(stmt.finalbody, gated=gated, toplevel=toplevel, gate=gate,
                           fallback_of=fallback_of, module_level=module_level)
            elif isinstance(stmt, _FUNCS):
                kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
                if module_level:
                    self._defs.setdefault(stmt.name, []).append(fallback_of)
                    if gate is None and not fallback_of:
                        self._earlier.setdefault(stmt.name, ("def", stmt))
                if not self._in_class:  # a method is an attribute, not a name
                    self._note(stmt.name, fallback_of, kind, stmt, True)
                if fallback_of:
                    self._fallback(stmt.name, fallback_of, stmt, kind, True)
                saved = self._enter(stmt, kind == "class")
                self._walk(stmt.body, gated=gated, toplevel=False, gate=gate, fallback_of=(),
                           module_level=False)
                self._leave(saved)
            elif isinstance(stmt, ast.If):
                self._if(stmt, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                         module_level=module_level)
            elif isinstance(stmt, _LOOPS):
                loop = not isinstance(stmt, _WITH)  # a loop's body and else block may not run
                self._conditional += loop
                self._walk(stmt.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                           module_level=module_level)
                orelse = getattr(stmt, "orelse", None)
                if orelse:
                    self._walk(orelse, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)
                self._conditional -= loop
            elif isinstance(stmt, _MATCH):
                self._conditional += 1
                for case in stmt.cases:  # any case may run: each is walked like an `if` branch
                    self._walk(case.body, gated=gated, toplevel=toplevel, gate=gate, fallback_of=fallback_of,
                               module_level=module_level)
                self._conditional -= 1

    def _elif(self, stmt: ast.If) -> ast.If | None:
        return stmt.orelse[0] if _is_elif(stmt) else None  # type: ignore[return-value]

    def _else(self, stmt: ast.If) -> list[ast.stmt] | None:
        return stmt.orelse or None

    def _probe(self, test: ast.expr) -> bool:
        if isinstance(test, ast.Name):
            return test.id in self.flags
        return _probe_call(test)

    def _fallback_import(self, node: ast.Import | ast.ImportFrom, gates: tuple[Gate, ...]) -> None:
        for alias in node.names:
            if alias.name == "*":
                return
            if alias.asname is not None:
                local = alias.asname
            else:
                local = alias.name.split(".")[0] if isinstance(node, ast.Import) else alias.name
            if isinstance(node, ast.Import):
                module = alias.name
            else:
                module = _import_from_base(node) if node.module is not None else "."
            self._fallback_module(local, gates, node, module)

    def _local_assignment(self, stmt: ast.Assign | ast.AnnAssign, fallback_of: tuple[Gate, ...]) -> None:
        """An assignment in a def or class body: a fallback in a function-local gate (`except
        ImportError: attn = naive_attention`), and a binding for the competing-binding check."""
        if stmt.value is None:
            return  # `x: int` binds nothing
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        imported = self.bindings  # only names imported so far can compete (a local walk is cheap)
        for t in targets:
            if isinstance(t, ast.Name):
                if (fallback_of and isinstance(stmt, ast.Assign)) or t.id in imported:
                    real = not (len(targets) == 1 and _is_sentinel(stmt.value))
                    if fallback_of and isinstance(stmt, ast.Assign):
                        self._fallback(t.id, fallback_of, stmt, "assignment", real)
                    if real and t.id in imported:
                        self._note(t.id, fallback_of, "assignment", stmt, True)
            elif isinstance(t, (ast.Tuple, ast.List)):
                for el in t.elts:
                    el = el.value if isinstance(el, ast.Starred) else el
                    if isinstance(el, ast.Name) and el.id in imported:
                        self._note(el.id, fallback_of, "assignment", stmt, True)

    def _assignment(self, node: ast.Assign | ast.AnnAssign, gate: Gate | None, fallback_of: tuple[Gate, ...]) -> None:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
        value = node.value
        # (name, the value it gets when that is known element-wise)
        pairs: list[tuple[str, ast.expr | None]] = []
        for t in targets:
            if isinstance(t, ast.Name):
                pairs.append((t.id, value if len(targets) == 1 else None))
            elif isinstance(t, (ast.Tuple, ast.List)):
                values: list[ast.expr | None] = [None] * len(t.elts)
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(t.elts) and not any(
                        isinstance(e, ast.Starred) for e in (*t.elts, *value.elts)):
                    values = list(value.elts)  # `a, b = x, y`
                for el, v in zip(t.elts, values, strict=True):
                    if isinstance(el, ast.Starred):
                        el = el.value
                    if isinstance(el, ast.Name):
                        pairs.append((el.id, v if len(targets) == 1 else None))
        for name, v in pairs:
            self._defs.setdefault(name, []).append(fallback_of)
            if gate is None and not fallback_of and value is not None:
                self._earlier.setdefault(name, ("assignment" if v is None or not _is_sentinel(v) else "sentinel", node))
            real = value is not None and not (v is not None and _is_sentinel(v))
            if value is not None:
                self._note(name, fallback_of, "assignment", node, real)
            if fallback_of:
                self._fallback(name, fallback_of, node, "assignment", real)
            elif gate is not None and name in self._earlier and not (v is not None and _is_name(v)):
                # `LlamaRMSNorm = partial(FusedRMSNorm, eps=1e-6)` in the gate overrides an earlier
                # definition: that definition is what runs without the package
                kind, stmt = self._earlier[name]
                self._fallback(name, (gate,), stmt, "earlier", kind != "sentinel")
            if v is None:
                continue
            if isinstance(gate, ast.Try) and not fallback_of and isinstance(v, ast.Constant) and v.value is True:
                self.flags[name] = gate
            elif _probe_call(v):  # `HAS_FLASH = importlib.util.find_spec("flash_attn") is not None`
                self.flags[name] = node
            if not fallback_of and isinstance(v, (ast.Name, ast.Attribute)):
                self._rebind(name, v, node, gate)

    def _add(self, node: ast.Import | ast.ImportFrom, *, gated: bool, toplevel: bool, gate: Gate | None = None,
             paths: tuple[Gate, ...] = ()) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if alias.asname is not None:
                    local, target = alias.asname, name
                else:
                    local = target = name.split(".")[0]
                self._bind(Binding(local, target, node, gated, toplevel, name, gate), paths)
            return
        base = _import_from_base(node)
        if len(node.names) == 1 and node.names[0].name == "*":
            self._bind(Binding("*", base + ".*", node, gated, toplevel, base, gate), paths)
            return
        sep = "" if base.endswith(".") else "."
        for alias in node.names:
            local = alias.asname if alias.asname is not None else alias.name
            self._bind(Binding(local, f"{base}{sep}{alias.name}", node, gated, toplevel, base, gate), paths)
