"""The attention family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.attention`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from porter.codemods.attention import NAME
from porter.codemods.attention.modules import MODULES
from porter.codemods.attention.scope import Scope, collect, unpack_key
from porter.codemods.attention.util import (
    NotLiteral,
    atom,
    bind,
    flash_version,
    flat,
    is_simple,
    literal,
    render_call,
)
from porter.findings import Applicability, Edit
from porter.framework import PyContext, PyVisitor
from porter.pyimports import dotted

# -- tables -----------------------------------------------------------------------------------

_FA_ROOTS = ("flash_attn.flash_attn_interface.", "flash_attn.")
_FA_SPECS = {
    # name: (stable positional prefix, all keywords)
    "flash_attn_func": (
        ("q", "k", "v", "dropout_p", "softmax_scale", "causal"),
        ("window_size", "softcap", "alibi_slopes", "deterministic", "return_attn_probs"),
    ),
    "flash_attn_qkvpacked_func": (
        ("qkv", "dropout_p", "softmax_scale", "causal"),
        ("window_size", "softcap", "alibi_slopes", "deterministic", "return_attn_probs"),
    ),
    "flash_attn_kvpacked_func": (
        ("q", "kv", "dropout_p", "softmax_scale", "causal"),
        ("window_size", "softcap", "alibi_slopes", "deterministic", "return_attn_probs"),
    ),
    "flash_attn_with_kvcache": (
        ("q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens"),
        ("cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal", "window_size",
         "softcap", "rotary_interleaved", "alibi_slopes", "num_splits", "return_softmax_lse"),
    ),
}
_FA_CODES = {"flash_attn_func": "PRT100", "flash_attn_qkvpacked_func": "PRT101",
             "flash_attn_kvpacked_func": "PRT102", "flash_attn_with_kvcache": "PRT104"}
_FA_VARLEN = {
    "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_unpadded_func", "flash_attn_unpadded_qkvpacked_func", "flash_attn_unpadded_kvpacked_func",
}
_FA_V2_ONLY = {"flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func"}
_FA_MODULES = {
    "flash_attn.modules.mha.FlashSelfAttention": "FlashSelfAttention",
    "flash_attn.modules.mha.FlashCrossAttention": "FlashCrossAttention",
    "flash_attn.modules.mha.MHA": "MHA",
    "flash_attn.flash_attention.FlashAttention": "FlashAttention (v1)",
    "flash_attn.flash_attention.FlashMHA": "FlashMHA (v1)",
}
_XF_FUNCS = {"memory_efficient_attention", "memory_efficient_attention_forward"}
_XF_PREFIXES = ("xformers.ops.fmha.attn_bias.", "xformers.ops.fmha.", "xformers.ops.")
_XF_BLOCK = ("BlockDiagonal", "Paged", "Gappy", "PaddedKeys")
_TENSOR_METHODS = {
    "to", "float", "half", "bfloat16", "masked_fill", "expand", "expand_as", "repeat", "unsqueeze",
    "view", "reshape", "type_as", "contiguous", "clone", "permute", "transpose", "squeeze",
}


def _xf_short(qual: str | None) -> str | None:
    """``memory_efficient_attention`` for any spelling under xformers.ops, else None."""
    if not qual:
        return None
    for p in _XF_PREFIXES:
        if qual.startswith(p):
            rest = qual[len(p):]
            return rest if "." not in rest else None
    return None


def _fa_short(qual: str | None) -> str | None:
    if not qual:
        return None
    for p in _FA_ROOTS:
        if qual.startswith(p) and "." not in qual[len(p):]:
            return qual[len(p):]
    return None


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


# -- the visitor --------------------------------------------------------------------------------


class AttentionVisitor(PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._scopes: list[cst.CSTNode] = [ctx.module]
        self._facts: dict[int, Scope] = {}
        self._viewed: set[int] = set()  # calls directly followed by .view(...)
        self._returned: set[int] = set()  # calls directly returned
        self._assigned: dict[int, str] = {}  # call -> name it is assigned to
        self._assigned_target: dict[int, str] = {}  # call -> name or attribute chain it is assigned to
        self._classes: list[cst.ClassDef] = []
        # (class, attribute) -> (binding line, indexes of the findings of its calls, bound value)
        self._attr_calls: dict[tuple[int, str], tuple[cst.CSTNode | None, list[int], cst.BaseExpression]] = {}
        self._attr_cache: dict[int, dict[str, list[cst.BaseExpression]]] = {}
        self._fa = flash_version(ctx.facts.pins.get("flash-attn"))
        self._torch_pin = ctx.facts.pins.get("torch")

    # -- context tracking ----------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "view" and isinstance(node.value, cst.Call):
            self._viewed.add(id(node.value))

    def visit_Return(self, node: cst.Return) -> None:
        if isinstance(node.value, cst.Call):
            self._returned.add(id(node.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and len(node.targets) == 1:
            t = node.targets[0].target
            if isinstance(t, cst.Name):
                self._assigned[id(node.value)] = t.value
            if isinstance(t, (cst.Name, cst.Attribute)) and dotted(t):
                self._assigned_target[id(node.value)] = dotted(t) or ""

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.value, cst.Call) and isinstance(node.target, cst.Name):
            self._assigned[id(node.value)] = node.target.value

    def _scope(self) -> Scope:
        root = self._scopes[-1]
        facts = self._facts.get(id(root))
        if facts is None:
            facts = collect(root, self.span)
            self._facts[id(root)] = facts
        return facts

    # -- dispatch ------------------------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        cls = self._classes.pop()
        for (cid, attr), (line, hits, value) in list(self._attr_calls.items()):
            if cid != id(cls):
                continue
            self._finish_attribute(attr, line, hits, value)

    def _self_attributes(self, cls: cst.ClassDef) -> dict[str, list[tuple[cst.BaseExpression, cst.CSTNode | None]]]:
        """``self.X = value`` assignments anywhere in the class's methods, with the statement line
        when it holds only that assignment."""
        found = self._attr_cache.get(id(cls))
        if found is None:
            found = {}
            line: list[cst.SimpleStatementLine | None] = [None]

            class _V(cst.CSTVisitor):
                def visit_SimpleStatementLine(inner, n: cst.SimpleStatementLine) -> None:  # noqa: N805
                    line[0] = n if len(n.body) == 1 else None

                def visit_Assign(inner, n: cst.Assign) -> None:  # noqa: N805
                    for t in n.targets:
                        tt = t.target
                        if isinstance(tt, cst.Attribute) and isinstance(tt.value, cst.Name) and \
                                tt.value.value == "self":
                            found.setdefault(tt.attr.value, []).append(
                                (n.value, line[0] if len(n.targets) == 1 else None))

                def visit_AugAssign(inner, n: cst.AugAssign) -> None:  # noqa: N805
                    tt = n.target
                    if isinstance(tt, cst.Attribute) and isinstance(tt.value, cst.Name) and tt.value.value == "self":
                        found.setdefault(tt.attr.value, []).append((n.value, None))

            cls.visit(_V())
            self._attr_cache[id(cls)] = found
        return found

    def _attribute_bound(self, node: cst.Call) -> None:
        """``self._attn(q, k, v)`` where the class binds ``self._attn = flash_attn_func``.

        Rewritten like a direct call when the binding is provably that function at every use: a
        private attribute (leading underscore) bound once, unconditionally, and read nowhere in
        the module but by calls ``self._attn(...)`` in this class; when every such call is
        rewritten, the binding goes too. Otherwise found and reported with the reason."""
        f = node.func
        if not (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self"
                and self._classes):
            return
        cls = self._classes[-1]
        attr = f.attr.value
        values = self._self_attributes(cls).get(attr, ())
        quals = []
        for value, _ in values:
            options = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
            for opt in options:
                q = self.qualname(opt) if isinstance(opt, (cst.Name, cst.Attribute)) else None
                if q and q.startswith(("flash_attn", "xformers.")):
                    quals.append(q)
        if not quals:
            return
        qual = quals[0]
        short = _fa_short(qual) or _xf_short(qual) or qual.rsplit(".", 1)[-1]
        if qual.startswith("xformers."):
            code = "PRT200"
        elif short in _FA_VARLEN:
            code = "PRT103"
        else:
            code = _FA_CODES.get(short, "PRT100")
        conditional = len(values) > 1 or any(isinstance(v, cst.IfExp) for v, _ in values)
        reason = ""
        if conditional:
            reason = "it is bound conditionally or more than once"
        elif not attr.startswith("_"):
            reason = "the attribute is public, so code elsewhere may call or replace it"
        elif self._attr_mentions(attr) != 1 + self._self_calls(cls, attr):
            reason = f"`.{attr}` is also read or assigned elsewhere in this module"
        if reason:
            self.report(node, code, f"{short} called through the attribute self.{attr} (bound to {qual} in this "
                        f"class): not rewritten, because {reason}; call the portable function directly here "
                        "(see this rule's rewrite) or port by hand", fix=Applicability.NONE, data={"qualname": qual})
            return
        before = len(self.findings)
        self._dispatch(node, qual)
        entry = self._attr_calls.setdefault((id(cls), attr), (values[0][1], [], values[0][0]))
        entry[1].extend(range(before, len(self.findings)))

    def _attr_mentions(self, attr: str) -> int:
        import re

        return len(re.findall(rf"\.{re.escape(attr)}\b", self.ctx.text))

    def _self_calls(self, cls: cst.ClassDef, attr: str) -> int:
        count = [0]

        class _V(cst.CSTVisitor):
            def visit_Call(inner, n: cst.Call) -> None:  # noqa: N805
                g = n.func
                if isinstance(g, cst.Attribute) and g.attr.value == attr and isinstance(g.value, cst.Name) \
                        and g.value.value == "self":
                    count[0] += 1

        cls.visit(_V())
        return count[0]

    def _finish_attribute(self, attr: str, line: cst.CSTNode | None, hits: list[int],
                          value: cst.BaseExpression) -> None:
        """Every call through ``self.<attr>`` was rewritten: drop its binding too, with the imports."""
        found = [self.findings[i] for i in hits]
        if not found or line is None or any(f.fix == Applicability.NONE or not f.edits for f in found):
            return
        start, end = self.span(line)
        text = self.ctx.text
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].strip():
            return
        nl = text.find("\n", end)
        drop = Edit(line_start, len(text) if nl < 0 else nl + 1, "")
        head = (dotted(value) or "").split(".")[0]
        targets = self.ctx.imports.import_targets(head)
        for i in hits:
            f = self.findings[i]
            self.findings[i] = replace(
                f, edits=f.edits + (drop,), remove_imports=tuple(dict.fromkeys(f.remove_imports + targets)),
                message=f"{f.message}; called through self.{attr}, bound once in this class, whose binding "
                "goes with its last call")

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.qualname(node.func)
        if not qual:
            self._attribute_bound(node)
            return
        self._dispatch(node, qual)

    def _dispatch(self, node: cst.Call, qual: str) -> None:
        if qual.startswith("flash_attn"):
            self._flash(node, qual)
        elif qual.startswith("xformers."):
            short = _xf_short(qual)
            if short in _XF_FUNCS:
                self._xformers(node, qual, short)
            elif short == "unbind" or qual == "xformers.ops.unbind.unbind":
                self._xformers_unbind(node, qual)
            elif qual.startswith("xformers.components"):
                self.report(node, "PRT210", f"{qual}: xformers.components was removed in xformers 0.0.34; "
                            "rebuild this on SDPA or nn.MultiheadAttention", fix=Applicability.NONE)

    # -- flash-attn ----------------------------------------------------------------------------
    def _flash(self, node: cst.Call, qual: str) -> None:
        if qual.startswith("flash_attn_interface.") or qual == "flash_attn_interface":
            self.report(node, "PRT111", f"{qual} is FlashAttention-3 (Hopper only); port it by hand to "
                        "F.scaled_dot_product_attention", fix=Applicability.NONE)
            return
        if qual in MODULES:
            self._flash_module(node, qual)
            return
        if qual in _FA_MODULES:
            self.report(node, "PRT110", f"flash-attn module {_FA_MODULES[qual]}: its forward calls cannot be "
                        "followed statically; port it to F.scaled_dot_product_attention by hand, keeping "
                        "`p if self.training else 0.0` for dropout", fix=Applicability.NONE)
            return
        short = _fa_short(qual)
        if short is None:
            return
        if short in _FA_VARLEN:
            v1 = " (flash-attn v1 name: top-left causal)" if "unpadded" in short else ""
            self.report(node, "PRT103", f"{short}{v1}: variable-length (cu_seqlens) attention is not "
                        "rewritten; port it to varlen_attn (GPU, torch>=2.12, no dropout) or SDPA with a "
                        "block-diagonal mask", fix=Applicability.NONE)
            return
        if short not in _FA_SPECS:
            return
        if short == "flash_attn_func":
            why_v1 = self._v1_reason(node, qual)
            if why_v1:
                self.report(node, "PRT105", why_v1, fix=Applicability.NONE)
                return
        code = _FA_CODES[short]
        positional, extra = _FA_SPECS[short]
        bound = bind(node, positional, positional + extra,
                     positional_note=" (flash-attn changed the later positional slots between releases)")
        plan = Plan()
        if short == "flash_attn_func" and self._v2_proof() and not self._fa.known:
            npos = len([a for a in node.args if a.keyword is None and not a.star])
            if npos >= 4 and qual != "flash_attn.flash_attn_func":
                plan.notes.append(f"v2 (q, k, v, dropout_p, ...) API: {self._v2_proof()}")
        try:
            if bound.error:
                raise _Blocked(bound.error)
            self._plan_flash(node, short, bound.args, plan)
            self._check_torch(plan)
        except _Blocked as exc:
            self.report(node, code, f"{short} not rewritten: {exc}", fix=Applicability.NONE)
            return
        self._emit(node, code, short, plan)

    def _flash_module(self, node: cst.Call, qual: str) -> None:
        """FlashSelfAttention / FlashCrossAttention / v1 FlashAttention → a portable class in the file."""
        cls, template, positional, extra, cu_slot, unported = MODULES[qual]
        label = qual.rsplit(".", 1)[-1]
        bound = bind(node, positional, positional + extra)
        try:
            if bound.error:
                raise _Blocked(bound.error)
            a = bound.args
            for name, default in (("window_size", (-1, -1)), ("alibi_slopes", None), ("deterministic", False)):
                try:
                    value = literal(a.get(name), default)
                except NotLiteral:
                    value = _NONLIT
                if value != default:
                    raise _Blocked(f"{name} is not literally {default!r} (no portable stand-in: port it by hand)")
            if cls in self.ctx.imports.bindings or cls in self._module_names():
                raise _Blocked(f"the name {cls} is already used in this file")
            target = self._assigned_target.get(id(node))
            if target is None:
                raise _Blocked("the instance is not assigned to a name or attribute porter can follow, so its "
                               "forward calls (cu_seqlens?) cannot be checked")
            bad = self._module_calls(target, cu_slot, unported)
            if bad:
                raise _Blocked(f"`{bad}` calls it with an argument the portable class does not support "
                               f"({', '.join(unported)})")
            if qual.endswith("FlashCrossAttention") and self._torch_pin and not _torch_admits(self._torch_pin, (2, 5)):
                raise _Blocked(f"the repo pins torch `{self._torch_pin}`, but enable_gqa needs torch >= 2.5")
        except _Blocked as exc:
            self.report(node, "PRT110", f"flash-attn module {label} not rewritten: {exc}", fix=Applicability.NONE)
            return
        torch_ = self._torch()
        kwargs = ", ".join(f"{k}={flat(self.code(a[k]))}" for k in positional if k in a)
        offset = self._class_insertion_point()
        adds = [] if self.ctx.imports.alias_for("torch") else ["import torch"]
        if "causal_lower_right" in template:
            adds.append("from torch.nn.attention.bias import causal_lower_right")
        insertion = Edit(offset, offset, template.lstrip("\n").format(torch=torch_) + "\n\n")
        self.report(node, "PRT110", f"flash-attn module {label} → {cls}, a parameter-free portable class porter adds to "
                    "this file (same arguments and state_dict; SDPA; dropout only in training, as flash-attn's "
                    "module); its forward calls here pass no cu_seqlens", replacement=f"{cls}({kwargs})",
                    fix=Applicability.SAFE, fix_title=f"use the portable {cls}", add_imports=tuple(adds),
                    remove_imports=self._library_imports(node.func), edits=(insertion,))

    def _module_names(self) -> set[str]:
        names = set()
        for stmt in self.ctx.module.body:
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                names.add(stmt.name.value)
        return names

    def _class_insertion_point(self) -> int:
        """Offset of the line where the first top-level class or function (with decorators) starts."""
        for stmt in self.ctx.module.body:
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                first = stmt.decorators[0] if stmt.decorators else stmt
                start = self.span(first)[0]
                return self.ctx.text.rfind("\n", 0, start) + 1
        return len(self.ctx.text) if self.ctx.text.endswith("\n") else len(self.ctx.text)

    def _module_calls(self, target: str, cu_slot: int, unported: tuple[str, ...]) -> str | None:
        """Source of the first call of the instance (``target`` = attribute or name) that passes
        an unported argument, else None."""
        attr = target.rsplit(".", 1)[-1]
        hit: list[str] = []
        code = self.code

        class _V(cst.CSTVisitor):
            def visit_Call(inner, n: cst.Call) -> None:  # noqa: N805
                f = n.func
                if isinstance(f, cst.Attribute) and f.attr.value == "forward":
                    f = f.value
                name = f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else None
                if name != attr:
                    return
                npos = len([x for x in n.args if x.keyword is None])
                if any(x.star for x in n.args) or npos > cu_slot or any(
                    x.keyword is not None and x.keyword.value in unported for x in n.args
                ):
                    hit.append(flat(code(n))[:60])

        self.ctx.module.visit(_V())
        return hit[0] if hit else None

    def _v2_proof(self) -> str:
        """Why the module provably uses flash-attn v2's API, or "": it imports a ``flash_attn_varlen_*``
        function, a name that exists only from v2.0 on (v1 called them ``flash_attn_unpadded_*``)."""
        for b in self.ctx.imports.statements:
            name = b.target.rsplit(".", 1)[-1]
            module = b.target.rsplit(".", 1)[0]
            if name in _FA_V2_ONLY and module in ("flash_attn", "flash_attn.flash_attn_interface"):
                return (f"the module imports {name} from {module}, which exists only in flash-attn >= 2.0 "
                        "(v1 named it flash_attn_unpadded_*)")
        return ""

    def _v1_reason(self, node: cst.Call, qual: str) -> str | None:
        """Why this `flash_attn_func` call may be flash-attn v1's (qkv, cu_seqlens, ...) API."""
        kws = {a.keyword.value for a in node.args if a.keyword is not None}
        if kws & {"cu_seqlens", "max_s", "qkv"}:
            return ("flash_attn_func called with v1 arguments (qkv, cu_seqlens, dropout_p, max_s): "
                    "variable-length v1 API with top-left causal; port it by hand")
        if self._fa.era == "v1":
            return (f"flash_attn_func under {self._fa.note}: the v1 function takes "
                    "(qkv, cu_seqlens, dropout_p, max_s); port it by hand")
        npos = len([a for a in node.args if a.keyword is None and not a.star])
        top_level = qual == "flash_attn.flash_attn_func"  # only v2 exports it from the package
        if npos >= 4 and not top_level and not self._fa.known and not self._v2_proof():
            return ("flash_attn_func with 4 positional arguments from flash_attn.flash_attn_interface and "
                    "no pinned version: could be v1 (qkv, cu_seqlens, dropout_p, max_s) or v2 "
                    "(q, k, v, dropout_p); pin flash-attn or pass dropout_p by keyword")
        return None

    def _plan_flash(self, node: cst.Call, short: str, a: dict[str, cst.BaseExpression], plan: Plan) -> None:
        # -- arguments that block or are dropped
        def lit(name: str, default: object) -> object:
            try:
                return literal(a.get(name), default)
            except NotLiteral:
                return _NONLIT

        if lit("return_attn_probs", False) is not False or lit("return_softmax_lse", False) is not False:
            which = "return_attn_probs" if "return_attn_probs" in a else "return_softmax_lse"
            raise _Blocked(f"{which} is not literally False (SDPA returns neither the softmax LSE nor the "
                           "attention probabilities)")
        softcap = lit("softcap", 0.0)
        if softcap is _NONLIT or not isinstance(softcap, (int, float)) or softcap < 0:
            raise _Blocked("softcap is not a literal number: porter cannot tell whether it is 0 (off)")
        alibi = a.get("alibi_slopes") if lit("alibi_slopes", None) is not None else None
        use_flex = softcap > 0 or alibi is not None
        if use_flex:
            dp = lit("dropout_p", 0.0)
            if dp is _NONLIT or dp not in (0, 0.0):
                raise _Blocked("softcap/alibi_slopes are exact only through flex_attention, which has no dropout, "
                               "and dropout_p is not literally 0")
            if alibi is not None and not is_simple(alibi):
                raise _Blocked(f"alibi_slopes `{flat(self.code(alibi))[:40]}` is not a plain name (the score_mod "
                               "reads it for every score)")
        if short == "flash_attn_with_kvcache":
            for name in ("k", "v", "rotary_cos", "rotary_sin", "cache_seqlens", "cache_batch_idx",
                         "cache_leftpad", "block_table"):
                if lit(name, None) is not None:
                    raise _Blocked(f"`{name}` is set (in-place cache update, rotary or per-batch cache lengths "
                                   "need a hand-written mask and cache update)")
            if "num_splits" in a:
                plan.notes.append("num_splits (performance only) dropped")
        det = lit("deterministic", False)
        if det is not False:
            plan.unsafe = ("deterministic=" + flat(self.code(a["deterministic"])) + " dropped: SDPA has no "
                           "per-call deterministic backward (forward is identical; backward may differ "
                           "run to run at rounding level)")

        # -- tensors
        pos = self.span(node)[0]
        if short == "flash_attn_qkvpacked_func":
            qkv = a.get("qkv")
            if qkv is None:
                raise _Blocked("qkv is missing")
            src = self.code(qkv)
            if is_simple(qkv):
                plan.inputs = [f"{src}[:, :, {i}].transpose(1, 2)" for i in range(3)]
            else:
                plan.inputs = [f"*{atom(flat(src), qkv)}.permute(2, 0, 3, 1, 4)"]
            q_expr = k_expr = qkv
            equal_len, equal_heads = True, True
            sq = sk = f"{src}.shape[1]" if is_simple(qkv) else None
            hq = hk = None
        else:
            q_expr = a.get("q")
            if q_expr is None:
                raise _Blocked("q is missing")
            qsrc = flat(self.code(q_expr))
            plan.inputs.append(f"{atom(qsrc, q_expr)}.transpose(1, 2)")
            if short == "flash_attn_kvpacked_func":
                kv = a.get("kv")
                if kv is None:
                    raise _Blocked("kv is missing")
                kvsrc = flat(self.code(kv))
                if is_simple(kv):
                    plan.inputs += [f"{kvsrc}[:, :, {i}].transpose(1, 2)" for i in range(2)]
                else:
                    plan.inputs.append(f"*{atom(kvsrc, kv)}.permute(2, 0, 3, 1, 4)")
                k_expr = kv
                hk = f"{kvsrc}.shape[3]" if is_simple(kv) else None
            else:
                kname, vname = ("k", "v") if short == "flash_attn_func" else ("k_cache", "v_cache")
                k_expr, v_expr = a.get(kname), a.get(vname)
                if k_expr is None or v_expr is None:
                    raise _Blocked(f"{kname}/{vname} missing")
                ksrc, vsrc = flat(self.code(k_expr)), flat(self.code(v_expr))
                plan.inputs += [f"{atom(ksrc, k_expr)}.transpose(1, 2)", f"{atom(vsrc, v_expr)}.transpose(1, 2)"]
                hk = f"{ksrc}.shape[2]" if is_simple(k_expr) else None
            sq = f"{qsrc}.shape[1]" if is_simple(q_expr) else None
            sk = f"{flat(self.code(k_expr))}.shape[1]" if is_simple(k_expr) else None
            hq = f"{qsrc}.shape[2]" if is_simple(q_expr) else None
            key_q = self._shape_key(q_expr, pos)
            key_k = self._shape_key(k_expr, pos) if short != "flash_attn_kvpacked_func" else None
            equal_heads = key_q is not None and key_q == key_k and key_q[0] == "shape"
            equal_len = key_q is not None and key_q[1:] == (key_k or ("",))[1:]

        if use_flex:
            self._plan_flex(a, short, plan, softcap, alibi, q_expr, k_expr, equal_heads, hq, hk)
            return
        # -- dropout and scale
        if "dropout_p" in a:
            plan.kwargs.append(("dropout_p", flat(self.code(a["dropout_p"]))))
        scale = a.get("softmax_scale")
        if scale is not None and lit("softmax_scale", None) is not None:
            plan.kwargs.append(("scale", flat(self.code(scale))))

        # -- causal and window
        causal_node = a.get("causal")
        causal = lit("causal", False)
        window = lit("window_size", (-1, -1))
        if window is _NONLIT or not (isinstance(window, tuple) and len(window) == 2
                                     and all(isinstance(w, int) for w in window)):
            raise _Blocked("window_size is not a literal (left, right) pair of ints: porter cannot tell "
                           "which sides are unbounded (-1)")
        left, right = window
        top_left = self._fa.era in ("v1", "v2.0")
        if (left >= 0 or right >= 0) and top_left:
            raise _Blocked(f"window_size needs flash-attn >= 2.3 but the repo pins {self._fa.note}")
        if left >= 0 or right >= 0:
            if causal is _NONLIT:
                raise _Blocked("window_size together with a non-literal causal")
            if causal:
                right = 0
            if sq is None or sk is None:
                raise _Blocked("window_size needs the query and key lengths for the mask, but "
                               f"{self._not_plain(q_expr, k_expr)} (porter would evaluate it twice)")
            plan.kwargs.insert(0, ("attn_mask", self._band(sq, sk, left if left >= 0 else None,
                                                          right if right >= 0 else None, qsrc_dev(q_expr, self))))
            plan.notes.append(f"window_size=({window[0]}, {window[1]}) → boolean band mask "
                              f"(offset Sk-Sq, right={right})")
            plan.imports.add("torch")
        elif causal is not False:
            ctext = "True" if causal is True else flat(self.code(causal_node))  # type: ignore[arg-type]
            if equal_len or top_left:
                plan.kwargs.append(("is_causal", ctext))
                plan.notes.append("causal → is_causal (" + ("Sq == Sk proven" if equal_len else self._fa.note)
                                  + ")")
            else:
                if sq is None or sk is None:
                    raise _Blocked("causal needs the bottom-right mask causal_lower_right(Sq, Sk) (Sq == Sk not "
                                   f"proven), but {self._not_plain(q_expr, k_expr)} (porter would evaluate it "
                                   "twice)")
                clr = self._causal_lower_right(plan)
                mask = f"{clr}({sq}, {sk})"
                if causal is not True:
                    mask = f"{mask} if {atom(ctext, causal_node)} else None"  # type: ignore[arg-type]
                plan.kwargs.insert(0, ("attn_mask", mask))
                plan.notes.append(f"causal → causal_lower_right(Sq, Sk) ({self._fa.note})")
        # -- GQA
        if short != "flash_attn_qkvpacked_func" and not equal_heads:
            old = bool(self._torch_pin) and not _torch_admits(self._torch_pin or "", (2, 5))
            if old and hq is not None and hk is not None and len(plan.inputs) == 3:
                # torch < 2.5 has no enable_gqa: repeat each KV head for its group (consecutive, as flash)
                for i in (1, 2):
                    plan.inputs[i] += f".repeat_interleave({hq} // {hk}, dim=1)"
                plan.notes.append(f"GQA by repeat_interleave (torch pin `{self._torch_pin}` < 2.5)")
            elif hq is not None and hk is not None:
                plan.kwargs.append(("enable_gqa", f"{hk} != {hq}"))
            else:
                plan.kwargs.append(("enable_gqa", "True"))
        plan.out_suffix = ".transpose(1, 2)"

    def _plan_flex(self, a: dict[str, cst.BaseExpression], short: str, plan: Plan, softcap: float,
                   alibi: cst.BaseExpression | None, q_expr: cst.BaseExpression, k_expr: cst.BaseExpression,
                   equal_heads: bool, hq: str | None, hk: str | None) -> None:
        """softcap / ALiBi: flex_attention with a score_mod in flash-attn's order (cap, then bias, then mask)."""
        if self._fa.era in ("v1", "v2.0"):
            raise _Blocked(f"softcap/alibi_slopes do not exist in {self._fa.note}")
        try:
            causal = literal(a.get("causal"), False)
            window = literal(a.get("window_size"), (-1, -1))
        except NotLiteral:
            raise _Blocked("causal and window_size must be literals for the flex_attention score_mod") from None
        if not (isinstance(window, tuple) and len(window) == 2 and all(isinstance(w, int) for w in window)):
            raise _Blocked("window_size is not a literal (left, right) pair of ints")
        left, right = window
        if causal:
            right = 0
        torch_ = self._torch()
        packed = short == "flash_attn_qkvpacked_func"
        needs_off = bool(causal) or left >= 0 or right >= 0 or alibi is not None
        if packed:
            off = ""
            qsrc = flat(self.code(q_expr))
        else:
            if needs_off and not (is_simple(q_expr) and is_simple(k_expr)):
                raise _Blocked(f"the score_mod needs the query and key lengths, but {self._not_plain(q_expr, k_expr)}")
            qsrc = flat(self.code(q_expr))
            off = f" + ({flat(self.code(k_expr))}.shape[1] - {qsrc}.shape[1])"
        body = "score"
        if softcap > 0:
            body = f"{softcap!r} * {torch_}.tanh(score / {softcap!r})"
        if alibi is not None:
            if packed and not is_simple(q_expr):
                raise _Blocked("alibi_slopes with a qkv that is not a plain name")
            heads = f"{qsrc}.shape[3]" if packed else f"{qsrc}.shape[2]"
            slopes = f"{flat(self.code(alibi))}.broadcast_to(({qsrc}.shape[0], {heads}))[b, h]"
            body = f"{body} - {slopes} * (q_idx{off} - kv_idx).abs()"
        conds = []
        if causal or right >= 0:
            conds.append(f"(kv_idx <= q_idx{off}{_signed(max(right, 0))})")
        if left >= 0:
            conds.append(f"(kv_idx >= q_idx{off}{_signed(-left)})")
        if conds:
            body = f"{torch_}.where({' & '.join(conds)}, {body}, -float(\"inf\"))"
        plan.kwargs.append(("score_mod", f"lambda score, b, h, q_idx, kv_idx: {body}"))
        scale = a.get("softmax_scale")
        try:
            scale_is_none = literal(scale, None) is None
        except NotLiteral:
            scale_is_none = False
        if not scale_is_none:
            plan.kwargs.append(("scale", flat(self.code(scale))))  # type: ignore[arg-type]
        if not packed and not equal_heads:
            plan.kwargs.append(("enable_gqa", f"{hk} != {hq}" if hq and hk else "True"))
        plan.func = "flex_attention"
        plan.imports.add("flex_attention")
        plan.imports.add("torch")
        plan.notes.append("softcap then ALiBi then masks in a flex_attention score_mod, as flash-attn orders them "
                          "(exact; eager flex is slow: run it under torch.compile)")
        plan.out_suffix = ".transpose(1, 2)"

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

    def _shape_key(self, expr: cst.BaseExpression, pos: int) -> tuple[str, ...] | None:
        """A key equal for two tensors that provably have the same shape (or length)."""
        if not isinstance(expr, cst.Name):
            return ("shape", "code:" + self.code(expr)) if is_simple(expr) else None
        scope = self._scope()
        assign = scope.last_assignment(expr.value, pos)
        if assign is None:
            return ("shape", "name:" + expr.value)
        value = assign.value
        if assign.unpacked:
            if isinstance(value, cst.Call) and self.qualname(value.func) in {
                "torch.unbind", "xformers.ops.unbind", "xformers.ops.unbind.unbind"
            }:
                return ("shape", str(assign.start))  # unbind: equal-shaped pieces
            return unpack_key(value, assign.start)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in {
            "view", "reshape"
        } and len(value.args) >= 3 and all(a.keyword is None and not a.star for a in value.args):
            dim1 = value.args[1].value
            if isinstance(dim1, (cst.Name, cst.Attribute, cst.Integer)):
                return ("len", "dim1:" + self.code(dim1))
        return ("shape", "name:" + expr.value + "@" + str(assign.start))

    # -- xformers ------------------------------------------------------------------------------
    def _xformers(self, node: cst.Call, qual: str, short: str) -> None:
        bound = bind(node, ("query", "key", "value", "attn_bias", "p", "scale"),
                     ("query", "key", "value", "attn_bias", "p", "scale", "op", "output_dtype"),
                     positional_note=" (`op` and `output_dtype` are keyword-only)")
        plan = Plan()
        code = "PRT200"
        try:
            if bound.error:
                raise _Blocked(bound.error)
            code = self._plan_xformers(node, bound.args, plan)
            self._check_torch(plan)
        except _Blocked as exc:
            msg = str(exc)
            code = "PRT201" if msg.startswith("block-diagonal") else "PRT200"
            self.report(node, code, f"{short} not rewritten: {msg}", fix=Applicability.NONE)
            return
        self._emit(node, code, short, plan)

    def _xformers_unbind(self, node: cst.Call, qual: str) -> None:
        bound = bind(node, ("x", "dim"), ("x", "dim"))
        x, dim = bound.args.get("x"), bound.args.get("dim")
        if bound.error or x is None or dim is None:
            self.report(node, "PRT202", f"xformers unbind not rewritten: {bound.error or 'x or dim missing'}",
                        fix=Applicability.NONE)
            return
        torch_ = self._torch()
        text = f"{torch_}.unbind({flat(self.code(x))}, dim={flat(self.code(dim))})"
        adds = ("import torch",) if not self.ctx.imports.alias_for("torch") else ()
        self.report(node, "PRT202", "xformers unbind → torch.unbind (same views)", replacement=text,
                    fix=Applicability.SAFE, fix_title="use torch.unbind", add_imports=adds,
                    remove_imports=self._library_imports(node))

    def _plan_xformers(self, node: cst.Call, a: dict[str, cst.BaseExpression], plan: Plan) -> str:
        q, k, v = a.get("query"), a.get("key"), a.get("value")
        if q is None or k is None or v is None:
            raise _Blocked("query/key/value missing")
        try:
            if literal(a.get("output_dtype"), None) is not None:
                raise _Blocked("output_dtype is set (SDPA returns the query dtype)")
        except NotLiteral:
            raise _Blocked("output_dtype is not literally None (SDPA returns the query dtype)") from None
        for t in (q, k, v):
            plan.inputs.append(f"{atom(flat(self.code(t)), t)}.transpose(1, -2)")
        plan.notes.append("head axis moved with .transpose(1, -2): swaps M and H of 4-D [B, M, H, K], "
                          "a no-op for 3-D [B, M, K]")
        if "op" in a:
            plan.notes.append("op= (kernel choice) dropped")
        sq = f"{flat(self.code(q))}.shape[1]" if is_simple(q) else None
        sk = f"{flat(self.code(k))}.shape[1]" if is_simple(k) else None
        bias = a.get("attn_bias")
        pos = self.span(node)[0]
        kind, payload, extra_edit, removed = self._classify_bias(bias, pos)
        if kind == "cond":
            cond, inner_kind, inner_payload, negate = payload  # type: ignore[misc]
            if inner_kind == "causal_tl_bias":
                raise _Blocked("a conditional LowerTriangularMaskWithTensorBias has no mapping in porter")
            inner: list[tuple[str, str]] = []
            self._bias_kwargs(inner_kind, inner_payload, q, k, sq, sk, plan, inner)
            ctext = flat(self.code(cond))
            if isinstance(cond, (cst.IfExp, cst.Lambda, cst.NamedExpr)) and not cond.lpar:
                ctext = f"({ctext})"
            if len(inner) != 1:
                raise _Blocked("a conditional attn_bias porter cannot map")
            (name, value), = inner
            if name == "is_causal":
                plan.kwargs.append((name, f"not {atom(ctext, cond)}" if negate else ctext))
            else:
                value = atom(value, cst.parse_expression(value))
                plan.kwargs.append((name, f"None if {ctext} else {value}" if negate else
                                    f"{value} if {ctext} else None"))
            plan.notes.append("conditional bias → conditional " + name)
        else:
            self._bias_kwargs(kind, payload, q, k, sq, sk, plan, plan.kwargs)
        if extra_edit is not None and removed is not None:
            plan.edits.append(extra_edit)
            plan.scan.append(removed)
            plan.notes.append("its now unused bias assignment removed")
        if "p" in a:
            plan.kwargs.append(("dropout_p", flat(self.code(a["p"]))))
        scale = a.get("scale")
        if scale is not None:
            try:
                is_none = literal(scale) is None
            except NotLiteral:
                is_none = False
            if not is_none:
                plan.kwargs.append(("scale", flat(self.code(scale))))
        plan.out_suffix = ".transpose(1, -2)"
        return "PRT200"

    def _bias_kwargs(self, kind: str, payload: object, q: cst.BaseExpression, k: cst.BaseExpression,
                     sq: str | None, sk: str | None, plan: Plan, out: list[tuple[str, str]]) -> None:
        """SDPA keyword(s) for one xformers bias kind, appended to ``out``."""
        needs = (f"the bias needs Mq and Mkv (query.shape[1], key.shape[1]), but {self._not_plain(q, k)} "
                 "(porter would evaluate it twice)")
        if kind == "causal_tl":
            out.append(("is_causal", "True"))
            plan.notes.append("LowerTriangularMask → is_causal=True (both top-left)")
        elif kind == "causal_br":
            if sq is None or sk is None:
                raise _Blocked(needs)
            out.append(("attn_mask", f"{self._causal_lower_right(plan)}({sq}, {sk})"))
            plan.notes.append("LowerTriangularFromBottomRightMask → causal_lower_right")
        elif kind == "band":
            if sq is None or sk is None:
                raise _Blocked(needs)
            left, right = payload  # type: ignore[misc]
            out.append(("attn_mask", self._band(sq, sk, left, right, f"{flat(self.code(q))}.device")))
            plan.imports.add("torch")
            plan.notes.append(f"local attention bias → boolean band mask (left={left}, right={right})")
        elif kind == "tensor":
            out.append(("attn_mask", flat(self.code(payload))))  # type: ignore[arg-type]
            plan.notes.append("tensor bias → attn_mask (added to the scores by both)")
        elif kind == "causal_tl_bias":
            if sq is None or sk is None:
                raise _Blocked(needs)
            t = payload
            tsrc = atom(flat(self.code(t)), t)  # type: ignore[arg-type]
            torch_ = self._torch()
            out.append(("attn_mask", f"{tsrc} + {torch_}.full(({sq}, {sk}), float(\"-inf\"), "
                                f"dtype={tsrc}.dtype, device={tsrc}.device).triu(1)"))
            plan.imports.add("torch")
            plan.notes.append("causal mask with tensor bias → bias plus -inf above the top-left diagonal")

    def _classify_bias(
        self, bias: cst.BaseExpression | None, pos: int
    ) -> tuple[str, object, Edit | None, cst.CSTNode | None]:
        """(kind, payload, edit removing a now-dead local bias assignment, the removed value)."""
        if bias is None:
            return "none", None, None, None
        try:
            if literal(bias) is None:
                return "none", None, None, None
        except NotLiteral:
            pass
        edit = None
        expr = bias
        if isinstance(bias, cst.Name):
            scope = self._scope()
            assign = scope.last_assignment(bias.value, pos)
            reaching = [a for a in scope.assigns.get(bias.value, ()) if a.start < pos]
            mixed = len(reaching) > 1 or (reaching and bias.value in scope.params)
            if mixed and all(not self._mentions_xformers(a.value) and self._tensor_evident(a.value) for a in reaching):
                mixed = False  # every value the call can see is a tensor (`bias = bias.to(q.dtype)`)
            if mixed:
                # the last assignment above the call need not be the value that reaches it (`if
                # is_causal: attn_mask = LowerTriangularMask()` over a tensor parameter)
                raise _Blocked(f"attn_bias `{bias.value}` can reach the call from "
                               f"{len(reaching) + (bias.value in scope.params)} places (a parameter, branches): "
                               "porter cannot tell whether it is a tensor or an xformers bias object there")
            if assign is None:
                raise _Blocked(f"attn_bias `{bias.value}` comes from outside this function: porter cannot tell "
                               "whether it is a tensor or an xformers bias object")
            if assign.unpacked:
                raise _Blocked(f"attn_bias `{bias.value}` is unpacked from a tuple: its type is unknown")
            expr = assign.value
            if self._mentions_xformers(expr):
                # a mask object built locally: inline its meaning; drop the assignment if this call is
                # its only use (two occurrences: the assignment and this argument)
                if (assign.statement is not None and len(scope.assigns.get(bias.value, ())) == 1
                        and scope.names.get(bias.value, 0) == 2):
                    start, end = self.span(assign.statement)
                    line_start = self.ctx.text.rfind("\n", 0, start) + 1
                    if self.ctx.text[line_start:start].strip() == "":
                        end_nl = self.ctx.text.find("\n", end)
                        end = len(self.ctx.text) if end_nl < 0 else end_nl + 1
                        edit = Edit(line_start, end, "")
            else:
                if self._tensor_evident(expr):
                    return "tensor", bias, None, None
                raise _Blocked(f"attn_bias `{bias.value}` = `{flat(self.code(expr))[:60]}`: porter cannot tell "
                               "whether it is a tensor or an xformers bias object")
        kind, payload = self._bias_kind(expr)
        return kind, payload, edit, (expr if edit is not None else None)

    def _bias_kind(self, expr: cst.BaseExpression) -> tuple[str, object]:
        if isinstance(expr, cst.IfExp):
            # `Mask() if cond else None` (or the reverse): one side must be None
            sides = []
            for side in (expr.body, expr.orelse):
                try:
                    sides.append(("none", None) if literal(side) is None else None)
                except NotLiteral:
                    sides.append(None)
            if sides[1] is not None and sides[0] is None:
                kind, payload = self._bias_kind(expr.body)
                return "cond", (expr.test, kind, payload, False)
            if sides[0] is not None and sides[1] is None:
                kind, payload = self._bias_kind(expr.orelse)
                return "cond", (expr.test, kind, payload, True)
            raise _Blocked("a conditional attn_bias needs None on one side")
        for qual in self._xformers_names(expr):
            hit = next((part for part in _XF_BLOCK if part in qual), None)
            if hit is not None:
                cls = next(p for p in qual.split(".") if hit in p)
                raise _Blocked(f"block-diagonal / padded / paged bias {cls} (varlen or KV-cache layout)")
        if isinstance(expr, cst.Call):
            qual = self.qualname(expr.func)
            short = _xf_short(qual)
            args = expr.args
            if short is not None:
                cls = short
                if any(part in cls for part in _XF_BLOCK):
                    raise _Blocked(f"block-diagonal / padded / paged bias {cls} (varlen or KV-cache layout)")
                if cls == "LowerTriangularMask" and not args:
                    return "causal_tl", None
                if cls == "LowerTriangularFromBottomRightMask" and not args:
                    return "causal_br", None
                if cls == "LowerTriangularMaskWithTensorBias" and len(args) == 1 and args[0].keyword is None:
                    return "causal_tl_bias", args[0].value
                if cls == "LowerTriangularFromBottomRightLocalAttentionMask" and len(args) == 1:
                    w = _int_arg(args[0].value)
                    return "band", (w - 1, 0)
                if cls == "LocalAttentionFromBottomRightMask" and len(args) == 2:
                    bnd = bind(expr, ("window_left", "window_right"), ("window_left", "window_right"))
                    wl = _int_arg(bnd.args.get("window_left"))
                    wr = _int_arg(bnd.args.get("window_right"))
                    return "band", (wl, wr)
                raise _Blocked(f"attn_bias {cls}({flat(self.code(expr))[len(self.code(expr.func)) + 1:-1]}) "
                               "has no exact SDPA mapping in porter")
            f = expr.func
            if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Call):
                inner = _xf_short(self.qualname(f.value.func))
                if inner is not None and not f.value.args:
                    if inner == "LowerTriangularMask" and f.attr.value == "add_bias" and len(args) == 1:
                        return "causal_tl_bias", args[0].value
                    if (inner == "LowerTriangularFromBottomRightMask" and f.attr.value == "make_local_attention"
                            and len(args) == 1):
                        return "band", (_int_arg(args[0].value) - 1, 0)
                    raise _Blocked(f"attn_bias {inner}().{f.attr.value}(...) has no exact SDPA mapping in porter")
        if self._mentions_xformers(expr):
            raise _Blocked(f"attn_bias `{flat(self.code(expr))[:60]}` is an xformers bias porter does not map")
        if self._tensor_evident(expr):
            return "tensor", expr
        raise _Blocked(f"attn_bias `{flat(self.code(expr))[:60]}`: porter cannot tell whether it is a tensor or an "
                       "xformers bias object")

    def _mentions_xformers(self, expr: cst.BaseExpression) -> bool:
        return bool(self._xformers_names(expr))

    def _xformers_names(self, expr: cst.BaseExpression) -> list[str]:
        """Qualified names reached through xformers imports inside ``expr`` (outermost chains)."""
        found: list[str] = []
        resolve = self.qualname

        class _V(cst.CSTVisitor):
            def visit_Attribute(inner, n: cst.Attribute) -> bool:  # noqa: N805
                q = resolve(n)
                if q and q.startswith("xformers"):
                    found.append(q)
                    return False
                return True

            def visit_Name(inner, n: cst.Name) -> None:  # noqa: N805
                q = resolve(n)
                if q and q.startswith("xformers"):
                    found.append(q)

        expr.visit(_V())
        return found

    def _tensor_evident(self, expr: cst.BaseExpression) -> bool:
        """True when ``expr`` is visibly a tensor: a torch.* call or a tensor-method chain on one."""
        if isinstance(expr, cst.Call):
            qual = self.qualname(expr.func)
            if qual and qual.startswith("torch.") and not qual.startswith("torch.nn.attention"):
                return True
            f = expr.func
            if isinstance(f, cst.Attribute) and f.attr.value in _TENSOR_METHODS:
                return True
        if isinstance(expr, cst.BinaryOperation):
            return self._tensor_evident(expr.left) or self._tensor_evident(expr.right)
        return False

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


_NONLIT = object()
_SDPA_ORDER = ("score_mod", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _signed(n: int) -> str:
    return "" if n == 0 else (f" + {n}" if n > 0 else f" - {-n}")


def _int_arg(expr: cst.BaseExpression | None) -> int:
    try:
        value = literal(expr)
    except NotLiteral:
        raise _Blocked("the local-attention window is not a literal int") from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Blocked("the local-attention window is not a literal int")
    return value


def qsrc_dev(q: cst.BaseExpression, v: AttentionVisitor) -> str:
    return f"{flat(v.code(q))}.device" if is_simple(q) else "None"


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


