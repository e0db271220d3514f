"""The apex family's handlers for ``apex.normalization``: the fused LayerNorm/RMSNorm modules and
their functional forms."""

from __future__ import annotations

import libcst as cst

from porter.codemods.apex import _AUTOCAST_NOTE, UNSAFE
from porter.codemods.apex.args import atom, kwarg, pure, rebuild
from porter.codemods.apex.base import ApexBase, Handler, Rewrite


class NormHandlers(ApexBase):
    """Handlers for ``apex.normalization`` calls: each returns a :class:`Rewrite` or the reason it reports."""

    def _norm_module(self, node: cst.Call, qual: str, target: str, code: str, *, mixed: bool,
                     write_eps: bool) -> Rewrite | str:
        if mixed:
            b = self._bind(node, qual, ("normalized_shape", "eps"),
                           keywords=("memory_efficient", "elementwise_affine"))
        else:
            b = self._bind(node, qual, ("normalized_shape", "eps", "elementwise_affine", "memory_efficient"))
        if isinstance(b, str):
            return b
        if not b.has("normalized_shape"):
            return f"{qual} not rewritten: no `normalized_shape` argument"
        if mixed:
            reason = self._require(b, qual, "elementwise_affine", True, "apex raises for elementwise_affine=False")
            if reason:
                return reason
        reason = self._drop(b, qual, ("memory_efficient",) + (("elementwise_affine",) if mixed else ()))
        if reason:
            return reason
        keep = {"normalized_shape": "normalized_shape", "eps": "eps"}
        if not mixed:
            keep["elementwise_affine"] = "elementwise_affine"
        args = self._args(b, keep, positional=("normalized_shape",))
        if write_eps and not b.has("eps"):
            args.append(kwarg("eps", "1e-5"))
        callee, adds = self._torch(target)
        new = rebuild(node, callee, args)
        cls = target.rsplit(".", 1)[1]
        if mixed:
            return Rewrite(code, self._render(new), UNSAFE,
                            f"apex {qual.rsplit('.', 1)[1]} → torch.nn.{cls}: same values, but apex returns the "
                            "parameter dtype and torch the input dtype (e.g. bf16 input with fp32 weights now "
                            "gives bf16); cast the output to the weight dtype where that matters",
                            f"use torch.nn.{cls}", adds=adds)
        extra = " with eps=1e-5 written out (torch's default is finfo(float32).eps)" if write_eps else ""
        fix, msg = self._norm_fix(f"apex {qual.rsplit('.', 1)[1]} → torch.nn.{cls}{extra}; note: {_AUTOCAST_NOTE}")
        return Rewrite(code, self._render(new), fix, msg, f"use torch.nn.{cls}", adds=adds)

    def _rw_FusedLayerNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.LayerNorm", "PRT310", mixed=False, write_eps=False)

    def _rw_FusedRMSNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.RMSNorm", "PRT311", mixed=False, write_eps=True)

    def _rw_MixedFusedLayerNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.LayerNorm", "PRT312", mixed=True, write_eps=False)

    def _rw_MixedFusedRMSNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.RMSNorm", "PRT312", mixed=True, write_eps=True)

    def _functional(self, node: cst.Call, qual: str, params: tuple[str, ...], target: str, *,
                    mixed: bool) -> Rewrite | str:
        b = self._bind(node, qual, params + ("eps", "memory_efficient"))
        if isinstance(b, str):
            return b
        missing = [p for p in params if not b.has(p)]
        if missing:
            return f"{qual} not rewritten: `{missing[0]}` is missing"
        reason = self._drop(b, qual, ("memory_efficient",))
        if reason:
            return reason
        keep = {p: p for p in params if p != "input"}
        keep["eps"] = "eps"
        keep["input"] = "input"
        args = self._args(b, keep, positional=("input",))
        if not b.has("eps"):
            args.append(kwarg("eps", "1e-6"))
        callee, adds = self._torch(target)
        new = self._render(rebuild(node, callee, args))
        fn = qual.rsplit(".", 1)[1]
        if mixed:
            weight = b.value("weight")
            assert weight is not None
            if not pure(weight):
                return (f"{qual} not rewritten: the output must be cast to the weight's dtype and "
                        f"`{self.code(weight)}` would be evaluated twice")
            new = f"{new}.to({atom(self._src(weight), weight)}.dtype)"
        fix, msg = self._norm_fix(
            f"apex {fn} → {target.rsplit('.', 1)[1]}: arguments bound by apex's order (weight before "
            "normalized_shape), eps written out (apex's functional default is "
            f"1e-6){'; output cast to the weight dtype as apex does' if mixed else ''}; note: {_AUTOCAST_NOTE}")
        return Rewrite("PRT313", new, fix, msg, f"use torch.nn.functional.{target.rsplit('.', 1)[1]}", adds=adds)

    def _rw_fused_layer_norm_affine(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "bias", "normalized_shape"),
                                "torch.nn.functional.layer_norm", mixed=False)

    def _rw_fused_layer_norm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "normalized_shape"), "torch.nn.functional.layer_norm",
                                mixed=False)

    def _rw_fused_rms_norm_affine(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "normalized_shape"),
                                "torch.nn.functional.rms_norm", mixed=False)

    def _rw_fused_rms_norm(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "normalized_shape"), "torch.nn.functional.rms_norm",
                                mixed=False)

    def _rw_mixed_dtype_fused_layer_norm_affine(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "bias", "normalized_shape"),
                                "torch.nn.functional.layer_norm", mixed=True)

    def _rw_mixed_dtype_fused_rms_norm_affine(self, node: cst.Call, qual: str) -> Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "normalized_shape"),
                                "torch.nn.functional.rms_norm", mixed=True)


# api key -> (handler, the code its reason is reported under when it does not rewrite)
HANDLERS: dict[str, tuple[Handler, str]] = {
    "FusedLayerNorm": (NormHandlers._rw_FusedLayerNorm, "PRT310"),
    "FusedRMSNorm": (NormHandlers._rw_FusedRMSNorm, "PRT311"),
    "MixedFusedLayerNorm": (NormHandlers._rw_MixedFusedLayerNorm, "PRT312"),
    "MixedFusedRMSNorm": (NormHandlers._rw_MixedFusedRMSNorm, "PRT312"),
    "fused_layer_norm_affine": (NormHandlers._rw_fused_layer_norm_affine, "PRT313"),
    "fused_layer_norm": (NormHandlers._rw_fused_layer_norm, "PRT313"),
    "fused_rms_norm_affine": (NormHandlers._rw_fused_rms_norm_affine, "PRT313"),
    "fused_rms_norm": (NormHandlers._rw_fused_rms_norm, "PRT313"),
    "mixed_dtype_fused_layer_norm_affine": (NormHandlers._rw_mixed_dtype_fused_layer_norm_affine, "PRT313"),
    "mixed_dtype_fused_rms_norm_affine": (NormHandlers._rw_mixed_dtype_fused_rms_norm_affine, "PRT313"),
}
