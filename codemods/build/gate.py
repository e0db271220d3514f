"""The facts of the build family's ``python_gate``, gathered in the shared stdlib-``ast`` walk.

The gate (``porter.codemods.build``) needs three things from the whole tree: a keyword argument
``nvcc=`` / ``extra_cuda_cflags=``, a dict with a ``"nvcc"`` key, and a string literal whose value
the LibCST visitor reports. Scanning the tree for them on its own costs a second traversal of
every file the family's tokens admit; this visitor notes them while every ast-tier family walks
the tree anyway. It reports nothing. Every node the scan would test, the shared walk visits
(``porter.pyast.walk`` reaches each node ``ast.walk`` does), and each test is the scan's own, so
the gate's answer is the same. A test that raises marks the facts failed and the gate scans the
tree itself, as before.
"""

from __future__ import annotations

import ast
import re

from porter.codemods._py_gates import literal_values
from porter.codemods.build import GATE_FACTS, NAME, NEEDLES, _reported_literal
from porter.framework import PyContext
from porter.pyast import AstVisitor

_KEYWORDS = frozenset({"nvcc", "extra_cuda_cflags"})
_NEEDLES = re.compile("|".join(map(re.escape, NEEDLES)))


def _needle(value: str) -> bool:
    """Whether ``value`` holds a flag (or flag prefix) the visitor reports as a substring."""
    return _NEEDLES.search(value) is not None


class BuildGateFacts(AstVisitor):
    """Whether the tree holds a keyword, dict key or literal that lets ``BuildVisitor`` report."""

    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self.hit = False
        self.failed = False

    def leave_Module(self, node: ast.Module) -> None:
        self.ctx.cache[GATE_FACTS] = self  # a complete walk's facts, read by the family's python_gate

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg in _KEYWORDS:
            self.hit = True

    def visit_Dict(self, node: ast.Dict) -> None:
        if not self.hit and any(isinstance(k, ast.Constant) and k.value == "nvcc" for k in node.keys):
            self.hit = True

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        # literal_values yields nothing for a Constant that is no str or lacks a needle
        if not self.hit and isinstance(value, str) and _needle(value):
            self._literal(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not self.hit:
            self._literal(node)

    def _literal(self, node: ast.AST) -> None:
        try:
            if any(_reported_literal(v) for v in literal_values(self.ctx, node, _needle)):
                self.hit = True
        except Exception:  # noqa: BLE001 - the gate then scans the tree itself, exactly as without facts
            self.failed = True
