"""Import bookkeeping after a Python fix: add the imports new code needs, drop dead ones.

Only imports a fix declared removable (by qualified name) are ever removed, and only when
nothing in the module references their bound name any more. Everything else stays
byte-for-byte.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import libcst as cst

from .pyimports import ImportIndex, _handler_catches_import_error, _probe_call, dotted


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


def loaded_names(text: str) -> set[str]:
    """Names the module reads (not those it only assigns), ``global`` names and ``__all__`` strings."""
    tree = ast.parse(text)
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            loaded.add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            loaded.add(node.target.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            loaded.update(node.names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                  for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                loaded.update(e.value for e in node.value.elts
                              if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return loaded


def _matches(target: str, removable: Sequence[str]) -> bool:
    return any(target == r or target.startswith(r + ".") for r in removable)


def _inert(stmt: cst.CSTNode) -> bool:
    """A statement that cannot raise: `pass` or `NAME = <literal>`."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets) and (
            isinstance(small.value, (cst.Integer, cst.Float, cst.SimpleString))
            or (isinstance(small.value, cst.Name) and small.value.value in {"True", "False", "None"})
        ):
            continue
        return False
    return True


def _import_count(body: Sequence[cst.CSTNode]) -> int:
    return sum(isinstance(small, (cst.Import, cst.ImportFrom)) for stmt in body
               if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body)


def _assigned(body: Sequence[cst.CSTNode]) -> set[str]:
    """Names a block assigns at its own level (`HAS_FLASH = True`): a gate's flags, not its imports."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = small.targets if isinstance(small, cst.Assign) else (
                    [small] if isinstance(small, cst.AnnAssign) else [])
                for t in targets:
                    if isinstance(t.target, cst.Name):
                        names.add(t.target.value)
    return names


def _bound(body: Sequence[cst.CSTNode]) -> set[str]:
    """Names a block binds at its own level (assignments, defs, classes, imports)."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        if isinstance(t.target, cst.Name):
                            names.add(t.target.value)
                elif isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                            names.add(alias.asname.name.value)
                        else:
                            names.add((dotted(alias.name) or "").split(".")[0])
        elif isinstance(stmt, (cst.If, cst.Try)):
            names |= _bound(stmt.body.body)
    return names


class _Remover(cst.CSTTransformer):
    def __init__(self, removable: Sequence[str], used: set[str], loads: set[str] | None = None,
                 aliases: dict[str, str] | None = None, exported: frozenset[str] = frozenset()) -> None:
        super().__init__()
        # names other modules of the repository import: a gate flag among them is never folded and its
        # imports stay (its readers elsewhere may still use the package behind it)
        self.exported = exported
        self._protected: set[int] = set()  # gates being visited whose imports must stay
        self.removable = removable
        self.used = used
        # removed statements whose leading lines hold comments: the comments move to the next statement
        self._comments: dict[int, Sequence[cst.EmptyLine]] = {}
        self.loads = loads if loads is not None else used
        # module-level `X = Y` rebindings whose value goes through a removable import: X -> root of Y
        self.aliases = aliases or {}

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.BaseStatement | cst.FlattenSentinel | cst.RemovalSentinel:
        """A gate whose imports were all removed cannot fail any more: keep what its body does
        (literal flags), drop the handlers, unless they bind a name the module still reads."""
        if id(original) in self._protected:
            self._protected.discard(id(original))
            return updated
        before = _import_count(original.body.body)
        if before == 0 or _import_count(updated.body.body) != 0 or updated.finalbody is not None:
            return updated
        if not all(_handler_catches_import_error(h) for h in updated.handlers):
            return updated
        body = [s for s in updated.body.body if not _only_pass(s)]
        if not all(_inert(s) for s in body):
            return updated
        if updated.orelse is not None:
            return updated
        only_handler = set()
        for h in updated.handlers:
            only_handler |= _bound(h.body.body)
        if any(_assigned(b) & self.exported for b in [body, *(h.body.body for h in updated.handlers)]):
            return updated
        only_handler -= _bound(body)
        if only_handler & self.loads:
            return updated
        if not body:
            return cst.RemoveFromParent()
        body[0] = body[0].with_changes(leading_lines=list(updated.leading_lines) + list(body[0].leading_lines))
        return cst.FlattenSentinel(body)

    def _guards_exported(self, node: cst.Try | cst.If) -> bool:
        """A gate that sets a flag other modules import: its imports stay, so the flag keeps telling
        the truth about the package to those modules."""
        if not self.exported:
            return False
        blocks = [node.body.body]
        if isinstance(node, cst.Try):
            blocks += [h.body.body for h in node.handlers]
        elif node.orelse is not None and isinstance(node.orelse, cst.Else):
            blocks.append(node.orelse.body.body)
        return any(_assigned(b) & self.exported for b in blocks)

    def visit_Try(self, node: cst.Try) -> bool:
        if self._guards_exported(node):
            self._protected.add(id(node))
        return True

    def visit_If(self, node: cst.If) -> bool:
        if self._guards_exported(node):
            self._protected.add(id(node))
        return True

    def _dead(self, local: str, target: str) -> bool:
        if self._protected:
            return False
        return _matches(target, self.removable) and local not in self.loads

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

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.BaseStatement | cst.FlattenSentinel | cst.RemovalSentinel:
        """``if is_x_available(): <imports>`` whose imports were all removed: the probe has no effect
        any more; keep the inert rest of its body, drop the no-package branch unless it binds a
        name the module still reads."""
        if id(original) in self._protected:
            self._protected.discard(id(original))
            return updated
        if _import_count(original.body.body) == 0 or _import_count(updated.body.body) != 0:
            return updated
        if not _probe_call(updated.test):
            return updated
        body = [s for s in updated.body.body if not _only_pass(s)]
        if not all(_inert(s) for s in body):
            return updated
        orelse = updated.orelse
        if orelse is not None:
            if isinstance(orelse, cst.If):
                return updated
            if _bound(orelse.body.body) - _bound(body) & self.loads:
                return updated
        if not body:
            return cst.RemoveFromParent()
        body[0] = body[0].with_changes(leading_lines=list(updated.leading_lines) + list(body[0].leading_lines))
        return cst.FlattenSentinel(body)

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if not updated.body:
            if any(ln.comment is not None for ln in original.leading_lines):
                self._comments[id(original)] = original.leading_lines
            return cst.RemoveFromParent()
        if len(updated.body) == 1 and isinstance(updated.body[0], cst.Assign):
            small = updated.body[0]
            if len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                name = small.targets[0].target.value
                if name in self.aliases and name not in self.loads:
                    return cst.RemoveFromParent()  # `attn = flash_attn_func`, no longer read
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


def _only_pass(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, cst.Pass) for s in stmt.body)


def _dead_aliases(module: cst.Module, removable: Sequence[str]) -> dict[str, str]:
    """Module-level ``X = Y`` rebindings (also inside gates) whose value goes through an import
    of a removable target."""
    index = ImportIndex(module)
    out = {}
    for name, rb in index.rebinds.items():
        if any(_matches(t, removable) for t in index.import_targets(rb.via)):
            out[name] = rb.via
    return out


# side-effect-free standard modules a folded gate's handler typically used (`logging.error(...)`)
_PLAIN_STDLIB = ("logging", "warnings", "sys", "os", "inspect", "traceback")


def _remove_dead(module: cst.Module, removable: tuple[str, ...], exported: frozenset[str] = frozenset()) -> cst.Module:
    before = loaded_names(module.code)
    for _ in range(3):  # an alias removed frees the import it went through
        text = module.code
        aliases = _dead_aliases(module, removable)
        new = module.visit(_Remover(removable, referenced_names(text), loaded_names(text), aliases, exported))
        if new.code == text:
            break
        module = new
    # a folded gate's handler was the last reader of `import logging`: that import goes too
    text = module.code
    after = loaded_names(text)
    index = ImportIndex(module)
    freed = tuple(b.target for b in index.statements
                  if b.toplevel and not b.gated and b.local in before - after and b.target in _PLAIN_STDLIB
                  and isinstance(b.statement, cst.Import))
    if freed:
        module = module.visit(_Remover(freed, referenced_names(text), after, {}, exported))
    return module


def fix_imports(text: str, add: Sequence[str], remove: Sequence[str], exported: frozenset[str] = frozenset()) -> str:
    """Return ``text`` with the ``add`` statements present and dead ``remove`` imports gone (a gate
    whose flag is in ``exported``, the names other modules import, is kept)."""
    if not add and not remove:
        return text
    module = cst.parse_module(text)
    if remove:
        module = _remove_dead(module, tuple(remove), exported)
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
