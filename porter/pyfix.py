"""Import bookkeeping after a Python fix: add the imports new code needs, drop dead ones.

Only imports a fix declared removable (by qualified name) are ever removed, and only when
nothing in the module references their bound name any more. Everything else stays
byte-for-byte.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst

from .pyimports import ImportIndex, dotted


def referenced_names(text: str) -> set[str]:
    """Names the module still uses (loads, stores, attribute roots, ``__all__`` strings)."""
    tree = ast.parse(text)
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(
                    node.value, (ast.List, ast.Tuple)
                ):
                    used.update(
                        e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                    )
    return used


def _matches(target: str, removable: Sequence[str]) -> bool:
    return any(target == r or target.startswith(r + ".") for r in removable)


class _Remover(cst.CSTTransformer):
    def __init__(self, removable: Sequence[str], used: set[str]) -> None:
        super().__init__()
        self.removable = removable
        self.used = used
        # removed statements whose leading lines hold comments: the comments move to the next statement
        self._comments: dict[int, Sequence[cst.EmptyLine]] = {}

    def _dead(self, local: str, target: str) -> bool:
        return _matches(target, self.removable) and local not in self.used

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import | cst.RemovalSentinel:
        keep = []
        for alias in updated.names:
            name = dotted(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local, target = alias.asname.name.value, name
            else:
                local, target = name.split(".")[0], name
            if not self._dead(local, target):
                keep.append(alias)
        return _rebuild(updated, keep)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        if isinstance(updated.names, cst.ImportStar) or updated.module is None:
            return updated
        base = "." * len(updated.relative) + (dotted(updated.module) or "")
        keep = []
        for alias in updated.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            if not self._dead(local, f"{base}.{name}"):
                keep.append(alias)
        return _rebuild(updated, keep)

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if not updated.body:
            if any(ln.comment is not None for ln in original.leading_lines):
                self._comments[id(original)] = original.leading_lines
            return cst.RemoveFromParent()
        return updated

    def _keep_comments(self, before: Sequence[cst.BaseStatement], after: list[cst.BaseStatement]) -> \
            tuple[list[cst.BaseStatement], Sequence[cst.EmptyLine]]:
        """Give the comments above a removed import to the statement that now follows them."""
        if not self._comments:
            return after, ()
        out = list(after)
        carry: list[cst.EmptyLine] = []
        j = 0
        for stmt in before:
            lines = self._comments.pop(id(stmt), None)
            if lines is not None:
                kept = list(lines)
                while kept and kept[-1].comment is None:  # the next statement keeps its own spacing
                    kept.pop()
                carry += kept
                continue
            if j >= len(out):
                break
            if carry and isinstance(out[j], (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                out[j] = out[j].with_changes(leading_lines=[*carry, *out[j].leading_lines])
                carry = []
            j += 1
        return out, tuple(carry)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body, carry = self._keep_comments(original.body, list(updated.body))
        if not body:
            return updated.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=carry)])
        footer = [*carry, *updated.footer] if carry else updated.footer  # comments after the last statement
        return updated.with_changes(body=_drop_leading_blank(original.body, body), footer=footer)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body, carry = self._keep_comments(original.body, list(updated.body))
        footer = [*carry, *updated.footer] if carry else updated.footer
        return updated.with_changes(body=body, footer=footer)



def _drop_leading_blank(before: Sequence[cst.CSTNode], after: Sequence[cst.CSTNode]) -> list[cst.CSTNode]:
    """When an indented block's first statement was removed, the new first statement does not
    start with the blank lines that used to separate it from the removed one (module level
    keeps them: they separate imports from definitions)."""
    body = list(after)
    if not body or not before or len(body) >= len(before):
        return body
    first = body[0]
    removed_first = not (before[0] is first or before[0].deep_equals(first))
    lines = getattr(first, "leading_lines", ())
    if removed_first and lines and all(ln.comment is None for ln in lines):
        body[0] = first.with_changes(leading_lines=())
    return body


def _rebuild(node, keep):  # type: ignore[no-untyped-def]
    if len(keep) == len(node.names):
        return node
    if not keep:
        return cst.RemoveFromParent()
    last = node.names[-1]
    if keep[-1] is not last:
        # the new last name takes over the old last name's trailing comma (or its absence), so a
        # parenthesised multi-line import keeps its layout
        keep[-1] = keep[-1].with_changes(comma=last.comma)
    return node.with_changes(names=keep)


def _has_import(index: ImportIndex, stmt: cst.Import | cst.ImportFrom) -> bool:
    probe = ImportIndex(cst.Module(body=[cst.SimpleStatementLine(body=[stmt])]))
    for binding in probe.statements:
        for existing in index.bindings.get(binding.local, ()):
            if existing.target == binding.target and not existing.gated:
                return True
    return False


def _insert_at(module: cst.Module) -> int:
    """Index in ``module.body`` after the leading docstring/__future__/import block."""
    pos = 0
    body = module.body
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine):
            first = stmt.body[0] if stmt.body else None
            if i == 0 and isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString)):
                pos = 1
                continue
            if all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
                pos = i + 1
                continue
        break
    return pos


def fix_imports(text: str, add: Sequence[str], remove: Sequence[str]) -> str:
    """Return ``text`` with the ``add`` statements present and dead ``remove`` imports gone."""
    if not add and not remove:
        return text
    module = cst.parse_module(text)
    if remove:
        used = referenced_names(text)
        module = module.visit(_Remover(tuple(remove), used))
    if add:
        index = ImportIndex(module)
        new_lines = []
        for statement in dict.fromkeys(add):
            line = cst.parse_statement(statement)
            assert isinstance(line, cst.SimpleStatementLine)
            stmt = line.body[0]
            assert isinstance(stmt, (cst.Import, cst.ImportFrom))
            if not _has_import(index, stmt):
                new_lines.append(line)
        if new_lines:
            at = _insert_at(module)
            body = list(module.body)
            if at < len(body) and at > 0 and not isinstance(body[at - 1], cst.SimpleStatementLine):
                pass
            body[at:at] = new_lines
            module = module.with_changes(body=body)
    return module.code
