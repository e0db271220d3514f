"""What the flash-attn and xformers halves of the attention visitor share: the plan of one rewrite,
the torch-pin checks and emitting the SDPA call (the family is declared in ``__init__.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from porter.codemods.attention.scope import Scope
from porter.codemods.attention.tables import _SDPA_ORDER
from porter.codemods.attention.util import FlashVersion, flat, is_simple, render_call
from porter.findings import Applicability, Edit
from porter.framework import PyVisitor


@dataclass
class Plan:
    """What one rewrite emits, or why it cannot."""

    reason: str | None = None
    inputs: list[str] = field(default_factory=list)
    kwargs: list[tuple[str, str]] = field(default_factory=list)
    out_suffix: str = ""
    notes: list[str] = field(default_factory=list)
    imports: set[str] = field(default_factory=set)
    unsafe: str = ""  # why the fix is only an approximation
    edits: list[Edit] = field(default_factory=list)
    scan: list[cst.CSTNode] = field(default_factory=list)  # removed code whose imports may go
    func: str = ""  # the emitted function when not SDPA (flex_attention)


class _Blocked(Exception):
    pass


class AttentionBase(PyVisitor):
    """The helpers both halves use. The state below and ``_scope()`` are kept by the context
    tracking of ``AttentionVisitor`` (``visitor.py``)."""

    _viewed: set[int]
    _returned: set[int]
    _assigned: dict[int, str]
    _assigned_target: dict[int, str]
    _fa: FlashVersion
    _torch_pin: str | None

    _scope: Callable[[], Scope]

    def _check_torch(self, plan: Plan) -> None:
        """Block when the repo's torch pin admits no release the emitted code runs on."""
        names = {k for k, _ in plan.kwargs}
        values = " ".join(v for _, v in plan.kwargs)
        if "enable_gqa" in names or plan.func:
            need, why = (2, 5), "enable_gqa"
        elif "causal_lower_right" in values or ".tril(" in values or ".triu(" in values:
            need, why = (2, 5), "zero output for rows a mask leaves empty (flash-attn's behaviour)"
        elif "scale" in names:
            need, why = (2, 1), "the scale= argument"
        else:
            return
        if self._torch_pin and not _torch_admits(self._torch_pin, need):
            raise _Blocked(f"the repo pins torch `{self._torch_pin}`, but {why} needs torch >= "
                           f"{need[0]}.{need[1]}")

    def _not_plain(self, *exprs: cst.BaseExpression) -> str:
        bad = [f"`{flat(self.code(e))[:40]}`" for e in exprs if not is_simple(e)]
        return " and ".join(bad) + (" is" if len(bad) == 1 else " are") + " not a plain name"

    def _band(self, sq: str, sk: str, left: int | None, right: int | None, device: str) -> str:
        torch_ = self._torch()
        off = f"{sk} - {sq}"
        expr = f"{torch_}.ones({sq}, {sk}, dtype={torch_}.bool, device={device})"
        if right is not None:
            expr += f".tril({off}{_signed(right)})"
        if left is not None:
            expr += f".triu({off}{_signed(-left)})"
        return expr

    # -- shared ----------------------------------------------------------------------------------
    def _functional(self, plan: Plan) -> str:
        alias = self.ctx.imports.alias_for("torch.nn.functional")
        if alias:
            return alias
        plan.imports.add("torch")
        return "torch.nn.functional"

    def _torch(self) -> str:
        return self.ctx.imports.alias_for("torch") or "torch"

    def _causal_lower_right(self, plan: Plan) -> str:
        # only an explicit import counts: `import torch` does not load torch.nn.attention.bias
        for b in self.ctx.imports.statements:
            if not b.toplevel or b.gated:
                continue
            if b.target == "torch.nn.attention.bias.causal_lower_right":
                return b.local
            if b.target == "torch.nn.attention.bias" and b.local != "torch":
                return b.local + ".causal_lower_right"
        plan.imports.add("causal_lower_right")
        return "causal_lower_right"

    def _emit(self, node: cst.Call, code: str, short: str, plan: Plan) -> None:
        func = plan.func or self._functional(plan) + ".scaled_dot_product_attention"
        kwargs = sorted(plan.kwargs, key=lambda kv: _SDPA_ORDER.index(kv[0]))
        args = list(plan.inputs) + [f"{k}={v}" for k, v in kwargs]
        suffix = plan.out_suffix
        cid = id(node)
        if cid in self._viewed or cid in self._returned:
            suffix += ".contiguous()"
        elif cid in self._assigned:
            name = self._assigned[cid]
            scope = self._scope()
            start = self.span(node)[0]
            if name in scope.returned or any(p > start for p in scope.views.get(name, ())):
                suffix += ".contiguous()"
        start, _ = self.span(node)
        line_start = self.ctx.text.rfind("\n", 0, start) + 1
        line = self.ctx.text[line_start:start]
        indent = line[: len(line) - len(line.lstrip())]
        text = render_call(func, args, suffix, indent, start - line_start)
        adds = []
        if "torch" in plan.imports or (self._torch() == "torch" and "torch." in text
                                        and not self.ctx.imports.alias_for("torch")):
            adds.append("import torch")
        if "causal_lower_right" in plan.imports:
            adds.append("from torch.nn.attention.bias import causal_lower_right")
        if "flex_attention" in plan.imports:
            adds.append("from torch.nn.attention.flex_attention import flex_attention")
        removes = tuple(dict.fromkeys(t for n in [node, *plan.scan] for t in self._library_imports(n)))
        notes = "; ".join(plan.notes)
        fix = Applicability.UNSAFE if plan.unsafe else Applicability.SAFE
        target = "flex_attention" if plan.func else "F.scaled_dot_product_attention"
        msg = f"{short} → {target}" + (f" ({notes})" if notes else "")
        if plan.unsafe:
            msg += f"; unsafe: {plan.unsafe}"
        self.report(node, code, msg, replacement=text, fix=fix,
                    fix_title="rewrite to torch.nn.functional.scaled_dot_product_attention",
                    add_imports=tuple(adds), remove_imports=removes, edits=tuple(plan.edits))

    def _library_imports(self, node: cst.CSTNode) -> tuple[str, ...]:
        """Qualified targets of the flash_attn/xformers imports the call's names go through."""
        found: list[str] = []
        imports = self.ctx.imports

        class _V(cst.CSTVisitor):
            def visit_Attribute(inner, n: cst.Attribute) -> bool:  # noqa: N805
                n.value.visit(inner)
                return False

            def visit_Arg(inner, n: cst.Arg) -> bool:  # noqa: N805
                n.value.visit(inner)
                return False

            def visit_Name(inner, n: cst.Name) -> None:  # noqa: N805
                for target in imports.import_targets(n.value):
                    if target.startswith(("flash_attn", "xformers")):
                        found.append(target)

        node.visit(_V())
        # names imported by the same statements go too once nothing reads them (an unused
        # `flash_attn_varlen_func` beside the rewritten `flash_attn_func` keeps the gate alive)
        statements = {id(b.statement) for b in imports.statements if b.target in found}
        found += [b.target for b in imports.statements if id(b.statement) in statements and b.local != "*"]
        return tuple(dict.fromkeys(found))


def _signed(n: int) -> str:
    return "" if n == 0 else (f" + {n}" if n > 0 else f" - {-n}")


def _torch_admits(spec: str, need: tuple[int, int]) -> bool:
    """Whether the torch specifier admits a release >= ``need`` (unparsable pins: assume yes)."""
    text = spec.strip()
    if not text:
        return True
    if text.startswith("==") and "," not in text and "*" not in text:
        try:
            return Version(text.lstrip("=").strip()).release[:2] >= need
        except InvalidVersion:
            return True
    try:
        sset = SpecifierSet(text)
    except InvalidSpecifier:
        return True
    candidates = ("2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.8.0", "2.10.0", "2.13.0", "3.0.0")
    return any(sset.contains(c, prereleases=True) for c in candidates if Version(c).release[:2] >= need)
