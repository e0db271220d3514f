"""What the apex family's rewrite handlers share: the result of a handler, the argument checks,
and how a replacement is spelled and rendered at the call's place. The visitor in ``visitor.py``
composes the handler mixins (``optimizers``, ``norms``, ``amp``, ``parallel``, ``contrib``) on
this base.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

from porter.codemods._shared.calls import MISSING, UNKNOWN, Bound, bind, literal
from porter.codemods.apex import SAFE, UNSAFE
from porter.codemods.apex.args import BIND_WORDING, as_keyword, as_positional, pure
from porter.findings import Applicability
from porter.framework import PyVisitor

_TORCH_MODULES = frozenset({"torch", "torch.optim", "torch.nn", "torch.nn.functional", "torch.nn.parallel",
                            "torch.nn.utils"})


@dataclass(frozen=True)
class Rewrite:
    """A handler's fix; ``adds`` are the imports its replacement needs (none when a name is in scope)."""

    code: str
    replacement: str
    fix: Applicability
    message: str
    title: str
    adds: tuple[str, ...] = ()


# A handler: (visitor, call, qualified name) -> the rewrite, or the reason it is only reported.
Handler = Callable[[Any, cst.Call, str], Rewrite | str]


class ApexBase(PyVisitor):
    """The per-file state the handlers read (set by ``ApexVisitor``) and their shared checks."""

    _indents: list[str]  # indentation of the enclosing blocks, maintained by the traversal
    _low_precision: int  # first line mentioning half/bfloat16 (0: none)
    _autocast: int  # first line using autocast (0: none)

    def _norm_fix(self, message: str) -> tuple[Applicability, str]:
        """SAFE, unless this file uses autocast, where the output dtype difference is observable."""
        if self._autocast:
            return UNSAFE, (f"{message}; UNSAFE here because this file uses autocast (line {self._autocast}), "
                            "where the output dtype changes")
        return SAFE, message

    def _torch(self, target: str) -> tuple[str, tuple[str, ...]]:
        """How to spell ``target`` here, and the import to add if none names it."""
        alias = self.ctx.imports.alias_for(target)
        # alias_for() extends only `import` bindings; `from torch import optim` binds a module too
        for b in self.ctx.imports.statements:
            if (b.toplevel and not b.gated and b.target in _TORCH_MODULES and target.startswith(b.target + ".")
                    and self.ctx.imports.bindings[b.local][0] is b):
                candidate = b.local + target[len(b.target):]
                if alias is None or len(candidate) < len(alias):
                    alias = candidate
        if alias is not None:
            return alias, ()
        return target, ("import torch",)

    def _render(self, node: cst.CSTNode) -> str:
        """Code for a new node placed at the current block depth (continuation lines indented)."""
        module = self.ctx.module
        state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                                 indent_tokens=list(self._indents))
        node._codegen(state)
        return "".join(state.tokens)

    def _src(self, node: cst.CSTNode) -> str:
        """The source text of an original node, exactly as written."""
        start, end = self.span(node)
        return self.ctx.text[start:end]

    # -- shared checks ----------------------------------------------------------------------
    def _bind(self, node: cst.Call, qual: str, params: tuple[str, ...], keywords: tuple[str, ...] = ()) -> Bound | str:
        b = bind(node, params, keywords=keywords)
        if b.problems:
            return f"{qual} not rewritten: {b.describe(BIND_WORDING)}"
        return b

    def _lit(self, b: Bound, name: str) -> object:
        return literal(b.value(name))

    def _require(self, b: Bound, qual: str, name: str, ok: object, why: str) -> str | None:
        """A reason to flag unless argument ``name`` is absent or literally ``ok``."""
        val = self._lit(b, name)
        if val is MISSING or (val is not UNKNOWN and val == ok and type(val) is type(ok)):
            return None
        shown = self.code(b.value(name)) if b.value(name) is not None else "?"
        state = " (not a literal)" if val is UNKNOWN else ""
        return f"{qual} not rewritten: `{name}={shown}`{state}; {why}"

    def _drop(self, b: Bound, qual: str, names: tuple[str, ...]) -> str | None:
        for name in names:
            v = b.value(name)
            if v is not None and not pure(v):
                return (f"{qual} not rewritten: `{name}` has no torch counterpart and dropping it would "
                        f"drop the evaluation of `{self.code(v)}`")
        return None

    def _args(self, b: Bound, keep: dict[str, str], positional: tuple[str, ...] = ()) -> list[cst.Arg]:
        """Kept arguments in source order, renamed by ``keep`` (apex name -> torch keyword)."""
        out: list[cst.Arg] = []
        for name in b.order:
            if name not in keep:
                continue
            arg = b.args[name]
            if name in positional and all(
                b.args[n].keyword is None for n in b.order[: b.order.index(name) + 1]
            ):
                out.append(as_positional(arg))
            else:
                out.append(as_keyword(arg, keep[name]))
        return out
