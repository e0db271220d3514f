"""The warp_size family's Python rules (H20 warp arithmetic, CUDA kernels embedded in strings) on the
stdlib-ast tier; the C++ analysis they share loads only when a file embeds a kernel. Declared in
``porter.codemods.warp_size``.
"""

from __future__ import annotations

import ast
import re

from porter.codemods.warp_size import _NONE, NAME
from porter.framework import PyContext
from porter.pyast import AstVisitor
from porter.pyast_strings import Literal, literal_parts

# -- Python side: embedded CUDA sources (report only) and H20 -------------------------------------------
_EMBEDDED = re.compile(r"__global__|__device__")
_EMBEDDED_NOTE = (" (CUDA source embedded in a Python string: report only; patch the kernel source by hand or move "
                  "it to a .cu file)")


def _embeds(value: str) -> bool:
    """A literal's text can hold a kernel only when its value does (escapes never create one)."""
    return "__global__" in value or "__device__" in value


class WarpPyVisitor(AstVisitor):
    """H20 arithmetic and CUDA kernels embedded in string literals, on the stdlib-``ast`` tier.

    Each literal of an implicit concatenation is analysed on its own (``"a" "b"`` holds two
    sources), at the offsets of its text as written: a literal without escapes (or a raw one) is
    analysed verbatim and its sites keep their exact columns; one whose escapes change the
    text is analysed by value and its sites sit at the literal's start.
    """

    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._parts_of_fstring: set[int] = set()  # the literal pieces ast keeps inside a JoinedStr

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        hit = False
        for value in node.values:
            if isinstance(value, ast.Constant):
                self._parts_of_fstring.add(id(value))
                hit = hit or _embeds(value.value)
        if hit:
            self._literals(node)

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        if node.format_spec is not None:  # a format spec's text is no string literal of its own
            for value in node.format_spec.values:
                if isinstance(value, ast.Constant):
                    self._parts_of_fstring.add(id(value))
            self._parts_of_fstring.add(id(node.format_spec))

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, str):
            if not _embeds(value) or id(node) in self._parts_of_fstring:
                return
        elif not isinstance(value, bytes) or (b"__global__" not in value and b"__device__" not in value):
            return
        self._literals(node)

    def _literals(self, node: ast.AST) -> None:
        if id(node) in self._parts_of_fstring:
            return
        for lit in literal_parts(self.ctx, node):
            self._embedded(lit)

    def _embedded(self, lit: Literal) -> None:
        raw = lit.text
        if not _EMBEDDED.search(raw):
            return
        prefix_len = 0
        while prefix_len < len(raw) and raw[prefix_len] not in "'\"":
            prefix_len += 1
        prefix = raw[:prefix_len]
        quote = raw[prefix_len : prefix_len + 3] if raw[prefix_len : prefix_len + 3] in ('"""', "'''") else raw[prefix_len]
        body = raw[prefix_len + len(quote) : len(raw) - len(quote)]
        exact = "r" in prefix.lower() or "\\" not in body
        text = body if exact else lit.value
        if not isinstance(text, str):
            return
        start = lit.start
        base = start + prefix_len + len(quote)
        from porter.codemods.warp_size.engine import LOGICAL, analyse  # only for a file that embeds a kernel

        for s in analyse(text, LOGICAL).sites:
            s_start, s_end = (base + s.start, base + s.end) if exact else (start, start)
            self.findings.append(self.ctx.finding(s.code, s.message + _EMBEDDED_NOTE, s_start, s_end))

    def visit_BinOp(self, node: ast.BinOp) -> None:
        op = node.op
        if isinstance(op, ast.FloorDiv) and _int(node.right) == 32:
            inner = node.left
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Add) and _int(inner.right) == 31:
                self.report(node, "PRT520", "`(n + 31) // 32` counts 32-lane warps or 32-bit mask words on the "
                            "Python side: it must follow the kernels' warp size (64-bit masks on HIP wave64).",
                            fix=_NONE)
        elif isinstance(op, ast.Mult):
            left, right = node.left, node.right
            if (_int(left) == 32 or _int(right) == 32) and any(
                    isinstance(n, ast.Name) and "warp" in self._written(n).lower() for n in (left, right)):
                self.report(node, "PRT520", "`num_warps * 32` sizes threads in 32-lane warps on the Python side: "
                            "use the device's warp size (torch.cuda.get_device_properties(d).warp_size) for "
                            "physical-warp kernels.", fix=_NONE)


    def _written(self, name: ast.Name) -> str:
        """The identifier as written (``ast`` normalises identifiers, NFKC: ``ｗarps`` is ``warps``)."""
        return self.code(name)


def _int(node: ast.expr) -> int | None:
    """The value of an integer literal (not a bool), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None
