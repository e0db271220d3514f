"""The LibCST tier's visitor base (imported only when a LibCST family runs).

All LibCST families' visitors share one parse and one batched traversal; see
:class:`porter.framework.PyContext` for the lazily built module and positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import libcst as cst

from .findings import Applicability, Finding
from .framework import PyContext


class StatementTracker(cst.BatchableCSTVisitor):
    """Runs first in the batched traversal and tells the context which top-level statement
    is being visited (so positions can be generated one statement at a time)."""

    def __init__(self, ctx: PyContext) -> None:
        super().__init__()
        self.ctx = ctx

    def _enter(self, node: cst.CSTNode) -> None:
        index = self.ctx._top.get(id(node))
        if index is not None:
            self.ctx.current_statement = index

    def get_visitors(self) -> Mapping[str, Any]:
        names = ("SimpleStatementLine", "If", "For", "While", "Try", "TryStar", "With", "FunctionDef",
                 "ClassDef", "Match")
        visitors: dict[str, Any] = {f"visit_{n}": self._enter for n in names}
        visitors["leave_Module"] = self.leave_Module
        return visitors

    def leave_Module(self, original_node: cst.Module) -> None:
        self.ctx.current_statement = None


class PyVisitor(cst.BatchableCSTVisitor):
    """Base class for a family's Python visitor (one instance per file).

    Subclasses implement ``visit_*``/``leave_*`` methods and call :meth:`report`. Use
    :meth:`qualname` to resolve names through the file's imports.
    """

    METADATA_DEPENDENCIES: ClassVar[Sequence[Any]] = ()  # positions come lazily from the context
    family: ClassVar[str] = ""

    def __init__(self, ctx: PyContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.findings: list[Finding] = []

    _method_names: ClassVar[dict[type, tuple[str, ...]]] = {}

    def get_visitors(self) -> Mapping[str, Any]:
        """LibCST's lookup (``inspect.getmembers`` on every file) cached per class: the same
        visitor methods, without paying introspection for each of thousands of files."""
        cls = type(self)
        names = PyVisitor._method_names.get(cls)
        if names is None:
            found = []
            for name in dir(cls):
                if not (name.startswith("visit_") or name.startswith("leave_")):
                    continue
                member = getattr(cls, name, None)
                if callable(member) and not getattr(member, "_is_no_op", False):
                    found.append(name)
            names = PyVisitor._method_names[cls] = tuple(found)
        return {name: getattr(self, name) for name in names}

    # -- helpers ------------------------------------------------------------------------
    def qualname(self, node: cst.BaseExpression) -> str | None:
        return self.ctx.imports.resolve(node)

    def span(self, node: cst.CSTNode) -> tuple[int, int]:
        rng = self.ctx.position_of(node)
        return (
            self.ctx.offset(rng.start.line, rng.start.column),
            self.ctx.offset(rng.end.line, rng.end.column),
        )

    def code(self, node: cst.CSTNode) -> str:
        return self.ctx.code_for(node)

    def report(
        self,
        node: cst.CSTNode,
        code: str,
        message: str,
        *,
        replacement: cst.CSTNode | str | None = None,
        fix: Applicability = Applicability.SAFE,
        **kwargs: Any,
    ) -> Finding:
        """Report ``code`` at ``node``. A ``replacement`` (node or source text) becomes the fix."""
        start, end = self.span(node)
        if isinstance(replacement, cst.CSTNode):
            replacement = self.code(replacement)
        finding = self.ctx.finding(code, message, start, end, replacement=replacement, fix=fix, **kwargs)
        self.findings.append(finding)
        return finding


class ImportDepthMixin(cst.BatchableCSTVisitor):
    """Mixin for a :class:`PyVisitor`: ``in_import`` is non-zero while the traversal is inside an
    ``import``/``from ... import`` statement (whose names are bindings, not uses). A subclass that
    needs its own ``visit_ImportFrom``/... calls ``super()`` first. Either base order works: the
    mixin's methods come before LibCST's no-op defaults in the method resolution order."""

    in_import: int = 0

    def visit_Import(self, node: cst.Import) -> None:
        self.in_import += 1

    def leave_Import(self, original_node: cst.Import) -> None:
        self.in_import -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.in_import += 1

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self.in_import -= 1
