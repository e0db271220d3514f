"""Per-function facts the attention rewrites need: assignments, `.view` uses, returns.

Private module of the attention family. A *scope* is a function body (or the module body)
without nested functions and classes. Positions are character offsets into the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst

from porter.codemods._shared.calls import UNKNOWN, option_literal

Span = Callable[[cst.CSTNode], tuple[int, int]]


@dataclass
class Assignment:
    start: int  # offset of the statement
    value: cst.BaseExpression  # the assigned expression (for unpacking: the unpacked one)
    unpacked: bool  # target was a tuple (``q, k, v = value``)
    statement: cst.SimpleStatementLine | None  # the line, when it holds only this assignment
    targets: int = 1  # number of names bound by the statement


@dataclass
class Scope:
    assigns: dict[str, list[Assignment]] = field(default_factory=dict)
    views: dict[str, list[int]] = field(default_factory=dict)  # name -> offsets of name.view(
    returned: set[str] = field(default_factory=set)
    names: dict[str, int] = field(default_factory=dict)  # name -> occurrences (stores included)
    params: set[str] = field(default_factory=set)  # the function's parameters (values from the caller)

    def last_assignment(self, name: str, before: int) -> Assignment | None:
        best = None
        for a in self.assigns.get(name, ()):
            if a.start < before and (best is None or a.start > best.start):
                best = a
        return best


class _Collector(cst.CSTVisitor):
    def __init__(self, root: cst.CSTNode, span: Span) -> None:
        super().__init__()
        self.root = root
        self.span = span
        self.scope = Scope()
        self._line: cst.SimpleStatementLine | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node if len(node.body) == 1 else None

    def leave_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = None

    def _record(self, target: cst.BaseExpression, value: cst.BaseExpression, start: int, line) -> None:
        if isinstance(target, cst.Name):
            self.scope.assigns.setdefault(target.value, []).append(Assignment(start, value, False, line))
        elif isinstance(target, (cst.Tuple, cst.List)):
            names = [el.value for el in target.elements]
            for n in names:
                if isinstance(n, cst.Name):
                    self.scope.assigns.setdefault(n.value, []).append(
                        Assignment(start, value, True, line, targets=len(names)))

    def visit_Assign(self, node: cst.Assign) -> None:
        start = self.span(node)[0]
        for t in node.targets:
            self._record(t.target, node.value, start, self._line if len(node.targets) == 1 else None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._record(node.target, node.value, self.span(node)[0], self._line)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name):
            # an in-place update changes the value: record it as an opaque assignment
            self.scope.assigns.setdefault(node.target.value, []).append(
                Assignment(self.span(node)[0], node, False, None))

    def visit_Call(self, node: cst.Call) -> None:
        f = node.func
        if isinstance(f, cst.Attribute) and f.attr.value == "view" and isinstance(f.value, cst.Name):
            self.scope.views.setdefault(f.value.value, []).append(self.span(node)[0])

    def visit_Return(self, node: cst.Return) -> None:
        v = node.value
        if isinstance(v, cst.Name):
            self.scope.returned.add(v.value)
        elif isinstance(v, cst.Tuple):
            for el in v.elements:
                if isinstance(el.value, cst.Name):
                    self.scope.returned.add(el.value.value)

    def visit_Name(self, node: cst.Name) -> None:
        self.scope.names[node.value] = self.scope.names.get(node.value, 0) + 1

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # `a.b`: `b` is not a reference to a name `b`
        node.value.visit(self)
        return False  # type: ignore[return-value]

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            node.default.visit(self)
        return False


def collect(root: cst.CSTNode, span: Span) -> Scope:
    """Facts of ``root`` (a FunctionDef or the Module)."""
    c = _Collector(root, span)
    if isinstance(root, cst.FunctionDef):
        p = root.params
        for param in (*p.posonly_params, *p.params, *p.kwonly_params):
            c.scope.params.add(param.name.value)
        for star in (p.star_arg, p.star_kwarg):
            if isinstance(star, cst.Param):
                c.scope.params.add(star.name.value)
        root.body.visit(c)
    else:
        root.visit(c)
    return c.scope


# -- proofs --------------------------------------------------------------------------------

_SPLITTERS = {"chunk": 1, "split": 1, "tensor_split": 1}  # method -> index of the dim argument


def _dim_arg(call: cst.Call, index: int) -> object:
    """The literal ``dim`` of a chunk/split call (positional ``index`` or keyword), default 0;
    ``UNKNOWN`` when it is not a literal."""
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == "dim":
            return option_literal(a.value)
        if a.keyword is None and i == index:
            return option_literal(a.value)
    return 0


def unpack_key(value: cst.BaseExpression, start: int) -> tuple[str, ...] | None:
    """A key shared by all pieces of ``q, k, v = value`` when they provably have equal shapes
    (``"shape"``) or at least equal sizes along dim 1 (``"len"``); None when unknown."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        method = value.func.attr.value
        if method == "unbind":
            return ("shape", str(start))
        if method in _SPLITTERS:
            dim = _dim_arg(value, _SPLITTERS[method])
            if dim is UNKNOWN:
                return None
            if dim in (1, -3):
                return None  # split along the sequence axis (B, S, ...)
            if dim in (0, 2, 3, 4, -1, -2):
                # pieces differ only along `dim`; heads may differ when dim is the head axis
                return ("len", str(start)) if dim in (2, -2) else ("shape", str(start))
        if method in {"permute", "transpose", "contiguous", "float", "half", "bfloat16", "to"}:
            return ("shape", str(start))  # iterating a tensor: equal-shaped slices
        return None
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "rearrange":
        return ("shape", str(start))
    return None
