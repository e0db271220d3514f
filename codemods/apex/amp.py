"""The apex family's handlers for ``apex.amp``: initialize, scale_loss, master_params, state_dict and
load_state_dict."""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import MISSING, UNKNOWN, bind
from porter.codemods.apex import SAFE
from porter.codemods.apex.args import BIND_WORDING, atom
from porter.codemods.apex.base import ApexBase, Handler, Rewrite

_AMP_CHECKLIST = (
    "checklist: (1) create `scaler = torch.amp.GradScaler(\"cuda\")` once; (2) wrap forward and loss in "
    "`with torch.autocast(\"cuda\", dtype=torch.float16):`; (3) replace each `with amp.scale_loss(loss, opt) "
    "as s: s.backward()` by `scaler.scale(loss).backward()`; (4) call `scaler.unscale_(opt)` before gradient "
    "clipping; (5) replace `opt.step()` by `scaler.step(opt); scaler.update()`; (6) save/load "
    "`scaler.state_dict()` instead of `amp.state_dict()`"
)

_AMP_HELPERS = {
    "float_function": "run it with autocast disabled on float32 inputs (`with torch.autocast(\"cuda\", "
                      "enabled=False):` and `.float()`; for an autograd Function "
                      "`@torch.amp.custom_fwd(device_type=\"cuda\", cast_inputs=torch.float32)`)",
    "half_function": "autocast already runs matmuls/convolutions in fp16; otherwise cast the inputs with "
                     "`torch.amp.custom_fwd(device_type=\"cuda\", cast_inputs=torch.float16)`",
    "bfloat16_function": "cast the inputs with `torch.amp.custom_fwd(device_type=\"cuda\", "
                         "cast_inputs=torch.bfloat16)`",
    "promote_function": "torch.autocast promotes mixed-dtype inputs of its promote-list ops itself; cast "
                        "explicitly elsewhere",
    "disable_casts": "use `with torch.autocast(\"cuda\", enabled=False):`",
}


class AmpHandlers(ApexBase):
    """Handlers for ``apex.amp`` calls: each returns a :class:`Rewrite` or the reason it reports."""

    _INIT = ("models", "optimizers", "enabled", "opt_level", "cast_model_type", "patch_torch_functions",
             "keep_batchnorm_fp32", "master_weights", "loss_scale", "cast_model_outputs", "num_losses",
             "verbosity", "min_loss_scale", "max_loss_scale")

    def _rw_amp_initialize(self, node: cst.Call, qual: str) -> str:
        b = bind(node, self._INIT)
        head = ("apex.amp.initialize (apex amp was removed upstream in 25.07) needs a hand port to "
                "torch.amp: ")
        if b.problems:
            return head + f"porter cannot bind it ({b.describe(BIND_WORDING)}); " + _AMP_CHECKLIST
        enabled = self._lit(b, "enabled")
        if enabled is not MISSING and enabled is not UNKNOWN and not enabled:
            return head + ("enabled=False makes every amp call a no-op: replace the call by its model/"
                           "optimizer arguments and each `with amp.scale_loss(loss, opt) as s: s.backward()` "
                           "by `loss.backward()`")
        level = self._lit(b, "opt_level")
        parts = []
        if level is MISSING:
            level = "O1"
        if level == "O0":
            parts.append("O0 is fp32 training with loss scale 1: remove the call (apex also casts the model "
                         "to fp32) and replace each scale_loss block by `loss.backward()`")
        elif level == "O1":
            parts.append("O1 → wrap forward and loss in `torch.autocast(\"cuda\", dtype=torch.float16)` "
                         "(APPROX: autocast's per-op cast lists differ from apex's patched functions); "
                         + _AMP_CHECKLIST)
        elif level in ("O2", "O3"):
            parts.append(f"{level} keeps an fp16 model{' with fp32 master weights' if level == 'O2' else ''}: "
                         "torch has no equivalent; train in bf16 autocast (or fp16 autocast + GradScaler) "
                         "with fp32 parameters instead and re-validate, or keep ROCm/apex")
        else:
            parts.append("opt_level is not a literal, so porter cannot tell O0/O1/O2/O3 apart: O1 maps to "
                         "autocast + GradScaler (APPROX), O2/O3 have no torch equivalent; " + _AMP_CHECKLIST)
        scale = self._lit(b, "loss_scale")
        if scale is not MISSING and scale != "dynamic":
            parts.append("a static loss_scale cannot be reproduced: GradScaler is always dynamic")
        for name in ("cast_model_type", "keep_batchnorm_fp32", "master_weights", "cast_model_outputs"):
            if b.has(name):
                parts.append(f"`{name}` has no torch.amp counterpart")
        if b.has("num_losses") and self._lit(b, "num_losses") != 1:
            parts.append("several losses (num_losses) share one GradScaler in torch")
        if level != "O0":
            parts.append("apex caps the dynamic scale at max_loss_scale=2**24, GradScaler has no cap")
        return head + "; ".join(parts)

    def _rw_amp_scale_loss(self, node: cst.Call, qual: str) -> str:
        b = bind(node, ("loss", "optimizers", "loss_id", "model", "delay_unscale", "delay_overflow_check"))
        extra = []
        if not b.problems:
            if b.has("loss_id") and self._lit(b, "loss_id") != 0:
                extra.append("several loss_ids have no GradScaler equivalent (use one scaler)")
            if b.has("delay_unscale") and self._lit(b, "delay_unscale") is not False:
                extra.append("delay_unscale=True (gradient accumulation) maps to calling scaler.step only "
                             "on the last micro-batch")
        return ("apex.amp.scale_loss not rewritten (a GradScaler has to be threaded through the training loop "
                "by hand): replace `with amp.scale_loss(loss, opt) as s: s.backward()` by "
                "`scaler.scale(loss).backward()` and `opt.step()` by `scaler.step(opt); scaler.update()`; apex "
                "unscaled the grads when the block exited, GradScaler does not: call `scaler.unscale_(opt)` "
                "before any clipping or gradient inspection"
                + ("; " + "; ".join(extra) if extra else ""))

    def _rw_amp_master_params(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, ("optimizer",))
        if isinstance(b, str):
            return b
        opt = b.value("optimizer")
        if opt is None:
            return f"{qual} not rewritten: no optimizer argument"
        text = f"(p for group in {atom(self._src(opt), opt)}.param_groups for p in group[\"params\"])"
        return Rewrite("PRT332", text, SAFE,
                        "amp.master_params(opt) is a generator over opt.param_groups; inlined (with a "
                        "GradScaler, call scaler.unscale_(opt) before clipping these)", "inline master_params")

    def _rw_amp_state_dict(self, node: cst.Call, qual: str) -> str:
        return ("apex.amp.state_dict() not rewritten (it needs the GradScaler of the hand port): save `scaler.state_dict()` of the torch.amp.GradScaler that replaces "
                "amp; the formats differ, so old checkpoints' amp entries cannot be loaded")

    def _rw_amp_load_state_dict(self, node: cst.Call, qual: str) -> str:
        return ("apex.amp.load_state_dict() not rewritten (it needs the GradScaler of the hand port): load into `scaler.load_state_dict()` of the GradScaler that "
                "replaces amp; checkpoints written by apex amp have a different format and must skip it")


# api key -> (handler, the code its reason is reported under when it does not rewrite)
HANDLERS: dict[str, tuple[Handler, str]] = {
    "amp.initialize": (AmpHandlers._rw_amp_initialize, "PRT330"),
    "amp.scale_loss": (AmpHandlers._rw_amp_scale_loss, "PRT331"),
    "amp.master_params": (AmpHandlers._rw_amp_master_params, "PRT332"),
    "amp.state_dict": (AmpHandlers._rw_amp_state_dict, "PRT333"),
    "amp.load_state_dict": (AmpHandlers._rw_amp_load_state_dict, "PRT333"),
}
