"""The apex family's handlers for ``apex.optimizers``: FusedAdam, FusedSGD and FusedAdagrad are
rewritten, FusedLAMB and FusedNovoGrad reported."""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import MISSING, UNKNOWN, Bound
from porter.codemods.apex import _STEP_NOTE, NAME, SAFE, UNSAFE
from porter.codemods.apex.args import kwarg, rebuild
from porter.codemods.apex.base import ApexBase, Handler, Rewrite


def _grad_none_note(b: Bound) -> str:
    if not b.has("set_grad_none"):
        return ""
    return ("; set_grad_none dropped: with torch >= 2.0 apex's zero_grad() also sets grads to None when it is "
            "False (it calls Optimizer.zero_grad()), so zero_grad() behaves the same")


class OptimizerHandlers(ApexBase):
    """Handlers for ``apex.optimizers`` calls: each returns a :class:`Rewrite` or the reason it reports."""

    _ADAM = ("params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
             "set_grad_none", "capturable", "master_weights")

    def _fused_opt(self, target: str) -> bool:
        """Whether to write ``fused=True`` on ``target``: the option is on and the repository's torch pin (when
        it names one) guarantees the release that added the keyword. ``fused`` only selects a kernel (torch's
        foreach default is the same algorithm), so leaving it out keeps the rewrite exact on an older torch."""
        if not self.ctx.settings.option(NAME, "fused", True):
            return False
        from packaging.version import Version

        from porter.apis import MIN_VERSIONS, pin_guarantees

        need = next((r for r in MIN_VERSIONS.get(f"{target}(fused)", ()) if r.startswith("torch>=")), None)
        pin = self.ctx.facts.pins.get("torch") if self.ctx.facts is not None else None
        if need is None or not pin:
            return True  # no pin: the semantic gate judges the fix as a whole
        return pin_guarantees(pin, Version(need.split(">=", 1)[1]))

    def _rw_FusedAdam(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, self._ADAM)
        if isinstance(b, str):
            return b
        for reason in (
            self._require(b, qual, "bias_correction", True,
                          "torch Adam/AdamW always apply bias correction"),
            self._require(b, qual, "master_weights", False,
                          "torch has no fp32 master-weight copy for fp16 parameters"),
            self._require(b, qual, "amsgrad", False, "apex raises for amsgrad=True"),
            self._drop(b, qual, ("set_grad_none",)),
        ):
            if reason:
                return reason
        if not b.has("params"):
            return f"{qual} not rewritten: no `params` argument"
        mode = self._lit(b, "adam_w_mode")
        keep = {n: n for n in ("params", "lr", "betas", "eps", "weight_decay", "capturable")}
        if mode is MISSING or (mode is not UNKNOWN and bool(mode)):
            target, cls = "torch.optim.AdamW", "AdamW"
        elif mode is UNKNOWN:
            target, cls = "torch.optim.Adam", "Adam(decoupled_weight_decay=adam_w_mode)"
            keep["adam_w_mode"] = "decoupled_weight_decay"
        else:
            target, cls = "torch.optim.Adam", "Adam (coupled L2)"
        cap = self._lit(b, "capturable")
        if cap is not UNKNOWN and not cap:
            keep.pop("capturable")
        args = self._args(b, keep, positional=("params",))
        if not b.has("weight_decay"):
            args.append(kwarg("weight_decay", "0.0"))
        if self._fused_opt(target):
            args.append(kwarg("fused", "True"))
        callee, adds = self._torch(target)
        new = rebuild(node, callee, args)
        assume = bool(self.ctx.settings.option(NAME, "assume-fp32-params", False))
        if assume and not self._low_precision:
            fix = SAFE
            why = "exact: parameters are fp32 ([tool.porter.apex] assume-fp32-params)"
        else:
            fix = UNSAFE
            why = ("exact only for fp32 parameters: for fp16/bf16 parameters apex keeps exp_avg/exp_avg_sq "
                   "in fp32, torch in the parameter dtype (moments rounded to 8/11 significant bits every "
                   "step, so training drifts)")
            if self._low_precision:
                why += f"; this file mentions half/bfloat16 (line {self._low_precision})"
            else:
                why += "; set [tool.porter.apex] assume-fp32-params = true if they are fp32"
        return Rewrite("PRT300", self._render(new), fix,
                        f"apex FusedAdam → torch.optim.{cls} with weight_decay explicit: {why}. {_STEP_NOTE}"
                        f"{_grad_none_note(b)}",
                        f"use torch.optim.{cls.split('(')[0].split(' ')[0]}", adds=adds)

    _SGD = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "wd_after_momentum",
            "materialize_master_grads", "set_grad_none")

    def _rw_FusedSGD(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, self._SGD)
        if isinstance(b, str):
            return b
        if not b.has("lr"):
            return f"{qual} not rewritten: `lr` is missing (apex requires it; torch SGD would silently use 1e-3)"
        for reason in (
            self._require(b, qual, "wd_after_momentum", False,
                          "torch SGD applies weight decay before momentum only"),
            self._drop(b, qual, ("materialize_master_grads", "set_grad_none")),
        ):
            if reason:
                return reason
        keep = {n: n for n in ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov")}
        args = self._args(b, keep, positional=("params",))
        if self._fused_opt("torch.optim.SGD"):
            args.append(kwarg("fused", "True"))
        callee, adds = self._torch("torch.optim.SGD")
        new = rebuild(node, callee, args)
        return Rewrite("PRT301", self._render(new), SAFE,
                        "apex FusedSGD → torch.optim.SGD: the same update (decay before momentum, buffer "
                        "initialised to the first gradient, same Nesterov form)" + _grad_none_note(b),
                        "use torch.optim.SGD", adds=adds)

    def _rw_FusedAdagrad(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode"))
        if isinstance(b, str):
            return b
        for reason in (
            self._require(b, qual, "adagrad_w_mode", False,
                          "torch Adagrad has no decoupled weight decay"),
            self._drop(b, qual, ("set_grad_none",)),
        ):
            if reason:
                return reason
        args = self._args(b, {n: n for n in ("params", "lr", "eps", "weight_decay")}, positional=("params",))
        if self._fused_opt("torch.optim.Adagrad"):
            args.append(kwarg("fused", "True"))
        callee, adds = self._torch("torch.optim.Adagrad")
        new = rebuild(node, callee, args)
        return Rewrite("PRT302", self._render(new), SAFE,
                        "apex FusedAdagrad → torch.optim.Adagrad (keywords: torch's positional order differs; "
                        "lr_decay=0 and initial_accumulator_value=0 match apex)" + _grad_none_note(b),
                        "use torch.optim.Adagrad", adds=adds)

    def _rw_FusedLAMB(self, node: cst.Call, qual: str) -> str:
        return (f"{qual}: torch 2.13 has no LAMB optimizer; keep apex built from ROCm/apex or port LAMB by "
                "hand (apex defaults lr=1e-3, eps=1e-6, weight_decay=0.01, max_grad_norm=1.0)")

    def _rw_FusedNovoGrad(self, node: cst.Call, qual: str) -> str:
        return f"{qual}: torch 2.13 has no NovoGrad optimizer; keep apex built from ROCm/apex or port it by hand"


# api key -> (handler, the code its reason is reported under when it does not rewrite)
HANDLERS: dict[str, tuple[Handler, str]] = {
    "FusedAdam": (OptimizerHandlers._rw_FusedAdam, "PRT300"),
    "FusedSGD": (OptimizerHandlers._rw_FusedSGD, "PRT301"),
    "FusedAdagrad": (OptimizerHandlers._rw_FusedAdagrad, "PRT302"),
    "FusedLAMB": (OptimizerHandlers._rw_FusedLAMB, "PRT303"),
    "FusedNovoGrad": (OptimizerHandlers._rw_FusedNovoGrad, "PRT304"),
}
