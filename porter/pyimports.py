"""A light import index for one Python module.

porter resolves names through the module's own import statements (``import a.b as c``,
``from a.b import x as y``) instead of LibCST's ScopeProvider: it is an order of magnitude
cheaper and enough for library APIs, which are reached through imports. Local shadowing of
an imported name is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

# Submodules that importing their package loads (checked against torch 2.13's import side
# effects), so `torch.nn.functional.x` works after a plain `import torch`.
_LOADED_BY_PARENT = frozenset({
    "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.parallel", "torch.nn.utils",
    "torch.nn.attention", "torch.optim", "torch.amp", "torch.cuda", "torch.cuda.amp", "torch.cuda.nvtx",
    "torch.backends", "torch.backends.cuda", "torch.backends.cudnn", "torch.version", "torch.distributed",
    "torch.utils", "torch.utils.data", "torch.utils.checkpoint", "torch.autograd", "torch.testing",
})

_GATE_EXCEPTIONS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


def dotted(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` as a string for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if isinstance(expr, cst.Name):
        parts.append(expr.value)
        return ".".join(reversed(parts))
    return None


@dataclass(frozen=True)
class Binding:
    local: str  # the name bound in the module ("F", "flash_attn", "fa")
    target: str  # what it refers to ("torch.nn.functional", "flash_attn.flash_attn_func")
    statement: cst.Import | cst.ImportFrom
    gated: bool  # inside `try: ... except ImportError`
    toplevel: bool  # at module level (not inside a def/class)
    module: str  # the imported module ("flash_attn" for both import forms)


def _handler_catches_import_error(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types: list[cst.BaseExpression]
    if isinstance(handler.type, cst.Tuple):
        types = [el.value for el in handler.type.elements]
    else:
        types = [handler.type]
    return any((dotted(t) or "").split(".")[-1] in _GATE_EXCEPTIONS for t in types)


class ImportIndex:
    """Every import binding in a module, found by walking statements only."""

    def __init__(self, module: cst.Module) -> None:
        self.bindings: dict[str, list[Binding]] = {}
        self.statements: list[Binding] = []
        self._walk(module.body, gated=False, toplevel=True)

    # -- construction -------------------------------------------------------------------
    def _walk(self, body: object, *, gated: bool, toplevel: bool) -> None:
        for stmt in _iter_statements(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self._add(small, gated=gated, toplevel=toplevel)
            elif isinstance(stmt, (cst.Try, cst.TryStar)):
                catches = any(_handler_catches_import_error(h) for h in stmt.handlers)
                self._walk(stmt.body, gated=gated or catches, toplevel=toplevel)
                for handler in stmt.handlers:
                    self._walk(handler.body, gated=gated, toplevel=toplevel)
                if stmt.orelse is not None:
                    self._walk(stmt.orelse.body, gated=gated, toplevel=toplevel)
                if stmt.finalbody is not None:
                    self._walk(stmt.finalbody.body, gated=gated, toplevel=toplevel)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self._walk(stmt.body, gated=gated, toplevel=False)
            elif isinstance(stmt, cst.If):
                self._walk(stmt.body, gated=gated, toplevel=toplevel)
                orelse = stmt.orelse
                while orelse is not None:
                    self._walk(orelse.body, gated=gated, toplevel=toplevel)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
            elif isinstance(stmt, (cst.With, cst.For, cst.While)):
                self._walk(stmt.body, gated=gated, toplevel=toplevel)
                orelse = getattr(stmt, "orelse", None)
                if orelse is not None:
                    self._walk(orelse.body, gated=gated, toplevel=toplevel)

    def _add(self, node: cst.Import | cst.ImportFrom, *, gated: bool, toplevel: bool) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                name = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local, target = alias.asname.name.value, name
                else:
                    local = target = name.split(".")[0]
                self._bind(Binding(local, target, node, gated, toplevel, name))
            return
        if node.module is None:  # `from . import x`
            base = "." * len(node.relative)
        else:
            base = "." * len(node.relative) + (dotted(node.module) or "")
        if isinstance(node.names, cst.ImportStar):
            self._bind(Binding("*", base + ".*", node, gated, toplevel, base))
            return
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            sep = "" if base.endswith(".") else "."
            self._bind(Binding(local, f"{base}{sep}{name}", node, gated, toplevel, base))

    def _bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.local, []).append(binding)
        self.statements.append(binding)

    # -- queries ------------------------------------------------------------------------
    def resolve_name(self, name: str) -> str | None:
        found = self.bindings.get(name)
        return found[0].target if found else None

    def resolve(self, expr: cst.BaseExpression) -> str | None:
        """Qualified name of a Name/Attribute chain rooted at an imported name, else None."""
        text = dotted(expr)
        if text is None:
            return None
        head, _, rest = text.partition(".")
        target = self.resolve_name(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def alias_for(self, target: str) -> str | None:
        """A local expression that names ``target`` through an existing import, if any.

        ``alias_for("torch.nn.functional")`` is ``"F"`` after ``import torch.nn.functional as F``
        and ``"torch.nn.functional"`` after ``import torch``. A path through a submodule is used
        only when that submodule is loaded: by the file's own imports, or because importing its
        package loads it (``import torch`` loads ``torch.nn`` but not ``torch.nn.attention.bias``).
        """
        loaded = set(_LOADED_BY_PARENT)
        for binding in self.statements:
            if isinstance(binding.statement, cst.Import) and not binding.gated:
                parts = binding.module.split(".")
                loaded.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        best: tuple[int, int, str] | None = None  # (rank, length, text): `import` forms first
        for binding in self.statements:
            if not binding.toplevel or binding.gated or binding.local == "*":
                continue
            if binding.target == target:
                return binding.local
            if not target.startswith(binding.target + "."):
                continue
            # the longest loaded module on the way; what follows it must be one attribute
            module = binding.target
            for name in loaded:
                if target.startswith(name + ".") and len(name) > len(module) and name.startswith(module + "."):
                    module = name
            if "." in target[len(module) + 1 :]:
                continue
            candidate = binding.local + target[len(binding.target):]
            key = (0 if isinstance(binding.statement, cst.Import) else 1, len(candidate), candidate)
            if best is None or key < best:
                best = key
        return best[2] if best else None

    def modules(self) -> Iterator[Binding]:
        return iter(self.statements)


def _iter_statements(body: object) -> Iterator[cst.CSTNode]:
    if isinstance(body, cst.Module):
        yield from body.body
    elif isinstance(body, cst.IndentedBlock):
        yield from body.body
    elif isinstance(body, cst.SimpleStatementSuite):
        yield cst.SimpleStatementLine(body=body.body)
    elif isinstance(body, (list, tuple)):
        yield from body
