"""The xformers half of the attention visitor: memory_efficient_attention, its biases, and unbind
(the family is declared in ``__init__.py``).
"""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import UNKNOWN, bind, option_literal
from porter.codemods.attention.shared import AttentionBase, Plan, _Blocked
from porter.codemods.attention.tables import _TENSOR_METHODS, _XF_BLOCK, _xf_short
from porter.codemods.attention.util import atom, bind_error, flat, is_simple
from porter.findings import Applicability, Edit


class XformersMixin(AttentionBase):
    # -- xformers ------------------------------------------------------------------------------
    def _xformers(self, node: cst.Call, qual: str, short: str) -> None:
        bound = bind(node, ("query", "key", "value", "attn_bias", "p", "scale"), keywords=("op", "output_dtype"))
        plan = Plan()
        code = "PRT200"
        try:
            if bound.problems:
                raise _Blocked(bind_error(bound, " (`op` and `output_dtype` are keyword-only)"))
            code = self._plan_xformers(node, bound.values(), plan)
            self._check_torch(plan)
        except _Blocked as exc:
            msg = str(exc)
            code = "PRT201" if msg.startswith("block-diagonal") else "PRT200"
            self.report(node, code, f"{short} not rewritten: {msg}", fix=Applicability.NONE)
            return
        self._emit(node, code, short, plan)

    def _xformers_unbind(self, node: cst.Call, qual: str) -> None:
        bound = bind(node, ("x", "dim"))
        x, dim = bound.value("x"), bound.value("dim")
        if bound.problems or x is None or dim is None:
            self.report(node, "PRT202", f"xformers unbind not rewritten: {bind_error(bound) or 'x or dim missing'}",
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
        output_dtype = option_literal(a.get("output_dtype"), None)
        if output_dtype is UNKNOWN:
            raise _Blocked("output_dtype is not literally None (SDPA returns the query dtype)")
        if output_dtype is not None:
            raise _Blocked("output_dtype is set (SDPA returns the query dtype)")
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
            if option_literal(scale) is not None:
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
        if option_literal(bias) is None:
            return "none", None, None, None
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
                sides.append(("none", None) if option_literal(side) is None else None)
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
                    bnd = bind(expr, ("window_left", "window_right"))
                    wl = _int_arg(bnd.value("window_left"))
                    wr = _int_arg(bnd.value("window_right"))
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


def _int_arg(expr: cst.BaseExpression | None) -> int:
    value = option_literal(expr)
    if not isinstance(value, int) or isinstance(value, bool):  # UNKNOWN, MISSING (no argument) included
        raise _Blocked("the local-attention window is not a literal int")
    return value
