"""The flash-attn half of the attention visitor: functions, modules, and their plans (the family is
declared in ``__init__.py``).
"""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import UNKNOWN, bind, option_literal
from porter.codemods.attention.modules import MODULES
from porter.codemods.attention.scope import unpack_key
from porter.codemods.attention.shared import AttentionBase, Plan, _Blocked, _signed, _torch_admits
from porter.codemods.attention.tables import (
    _FA_CODES,
    _FA_MODULES,
    _FA_SPECS,
    _FA_V2_ONLY,
    _FA_VARLEN,
    _fa_short,
)
from porter.codemods.attention.util import atom, bind_error, flat, is_simple
from porter.findings import Applicability, Edit


class FlashMixin(AttentionBase):
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
        bound = bind(node, positional, keywords=positional + extra)
        plan = Plan()
        if short == "flash_attn_func" and self._v2_proof() and not self._fa.known:
            npos = len([a for a in node.args if a.keyword is None and not a.star])
            if npos >= 4 and qual != "flash_attn.flash_attn_func":
                plan.notes.append(f"v2 (q, k, v, dropout_p, ...) API: {self._v2_proof()}")
        try:
            if bound.problems:
                raise _Blocked(bind_error(bound, " (flash-attn changed the later positional slots between releases)"))
            self._plan_flash(node, short, bound.values(), plan)
            self._check_torch(plan)
        except _Blocked as exc:
            self.report(node, code, f"{short} not rewritten: {exc}", fix=Applicability.NONE)
            return
        self._emit(node, code, short, plan)

    def _flash_module(self, node: cst.Call, qual: str) -> None:
        """FlashSelfAttention / FlashCrossAttention / v1 FlashAttention → a portable class in the file."""
        cls, template, positional, extra, cu_slot, unported = MODULES[qual]
        label = qual.rsplit(".", 1)[-1]
        bound = bind(node, positional, keywords=positional + extra)
        try:
            if bound.problems:
                raise _Blocked(bind_error(bound))
            a = bound.values()
            for name, default in (("window_size", (-1, -1)), ("alibi_slopes", None), ("deterministic", False)):
                value = option_literal(a.get(name), default)
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
            return option_literal(a.get(name), default)

        if lit("return_attn_probs", False) is not False or lit("return_softmax_lse", False) is not False:
            which = "return_attn_probs" if "return_attn_probs" in a else "return_softmax_lse"
            raise _Blocked(f"{which} is not literally False (SDPA returns neither the softmax LSE nor the "
                           "attention probabilities)")
        softcap = lit("softcap", 0.0)
        if softcap is UNKNOWN or not isinstance(softcap, (int, float)) or softcap < 0:
            raise _Blocked("softcap is not a literal number: porter cannot tell whether it is 0 (off)")
        alibi = a.get("alibi_slopes") if lit("alibi_slopes", None) is not None else None
        use_flex = softcap > 0 or alibi is not None
        if use_flex:
            dp = lit("dropout_p", 0.0)
            if dp is UNKNOWN or dp not in (0, 0.0):
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
        if window is UNKNOWN or not (isinstance(window, tuple) and len(window) == 2
                                     and all(isinstance(w, int) for w in window)):
            raise _Blocked("window_size is not a literal (left, right) pair of ints: porter cannot tell "
                           "which sides are unbounded (-1)")
        left, right = window
        top_left = self._fa.era in ("v1", "v2.0")
        if (left >= 0 or right >= 0) and top_left:
            raise _Blocked(f"window_size needs flash-attn >= 2.3 but the repo pins {self._fa.note}")
        if left >= 0 or right >= 0:
            if causal is UNKNOWN:
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
        causal = option_literal(a.get("causal"), False)
        window = option_literal(a.get("window_size"), (-1, -1))
        if causal is UNKNOWN or window is UNKNOWN:
            raise _Blocked("causal and window_size must be literals for the flex_attention score_mod")
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
        scale_is_none = option_literal(scale, None) is None
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


def qsrc_dev(q: cst.BaseExpression, v: FlashMixin) -> str:
    return f"{flat(v.code(q))}.device" if is_simple(q) else "None"
