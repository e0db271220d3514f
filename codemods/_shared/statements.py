"""Statement context for calls: which calls are the whole right-hand side of an assignment, and
which are items of a ``with`` statement. The quantization and fp8 families need it to add statements
after a module swap (explicit initialisation) or to drop a context manager.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from porter.findings import Edit

if TYPE_CHECKING:
    from porter.framework import PyContext


@dataclass(frozen=True)
class AssignSite:
    statement: cst.SimpleStatementLine  # the line holding exactly one assignment
    target: cst.BaseExpression  # a Name or Attribute chain


@dataclass(frozen=True)
class WithSite:
    statement: cst.With
    item: cst.WithItem


_INDENT = re.compile(r"[ \t]*")


def line_indent(ctx: PyContext, line: int) -> str:
    m = _INDENT.match(ctx.line_text(line))
    return m.group(0) if m else ""


def _simple_target(node: cst.BaseExpression) -> bool:
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


class StatementTracker:
    """Mixin for a PyVisitor: call ``track_statement``/``track_with`` from the visit methods;
    :meth:`multiline` and :meth:`insert_after` read the visitor's ``ctx`` and ``span``."""

    if TYPE_CHECKING:  # provided by PyVisitor
        ctx: PyContext

        def span(self, node: cst.CSTNode) -> tuple[int, int]: ...

    def __init__(self) -> None:
        self.assign_sites: dict[int, AssignSite] = {}
        self.with_sites: dict[int, WithSite] = {}

    def track_statement(self, node: cst.SimpleStatementLine) -> None:
        if len(node.body) != 1:
            return
        small = node.body[0]
        target: cst.BaseExpression | None = None
        value: cst.BaseExpression | None = None
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target, value = small.target, small.value
        if target is not None and isinstance(value, cst.Call) and _simple_target(target):
            self.assign_sites[id(value)] = AssignSite(node, target)

    def track_with(self, node: cst.With) -> None:
        for item in node.items:
            if isinstance(item.item, cst.Call):
                self.with_sites[id(item.item)] = WithSite(node, item)

    def multiline(self, node: cst.CSTNode) -> tuple[bool, str]:
        """Whether ``node`` spans several lines, and the indentation of its first line."""
        start, end = self.span(node)
        line, _ = self.ctx.position(start)
        return "\n" in self.ctx.text[start:end], line_indent(self.ctx, line)

    def insert_after(self, statement: cst.SimpleStatementLine, lines: Sequence[str]) -> Edit:
        """An edit that adds ``lines`` after ``statement``, at its indentation."""
        start, end = self.span(statement)
        line, _ = self.ctx.position(start)
        end_line, _ = self.ctx.position(end)
        indent = line_indent(self.ctx, line)
        text = "".join(f"{indent}{ln}\n" for ln in lines)
        starts = self.ctx.line_starts
        if end_line < len(starts):
            return Edit(starts[end_line], starts[end_line], text)
        return Edit(len(self.ctx.text), len(self.ctx.text), "\n" + text.rstrip("\n"))
