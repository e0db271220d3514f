"""NVIDIA apex → portable PyTorch (PRT300–PRT399).

apex's fused optimizers, norms, ``amp``, ``parallel`` and a few ``contrib`` modules need
apex's CUDA extensions. This family rewrites the calls whose torch replacement is exact
and reports every other apex site with the reason it was not
rewritten.

Design decisions:

- **FusedAdam and parameter dtypes.** apex keeps Adam moments in fp32 for fp16/bf16
  parameters; torch keeps them in the parameter dtype. porter cannot see
  parameter dtypes, so the FusedAdam rewrite is an UNSAFE fix by default. A project that
  trains fp32 parameters (including apex amp O1, where parameters stay fp32) asserts it
  with ``[tool.porter.apex] assume-fp32-params = true``; the fix is then SAFE, unless the
  file itself casts to half/bfloat16, where it stays UNSAFE.
- **Arguments that only tune speed or memory** (``set_grad_none``, ``memory_efficient``,
  ``message_size``, ``delay_allreduce``...) are dropped, but only when their expression has
  no side effects; otherwise the site is flagged.
- **Keywords are emitted in the order the source evaluated them**; changed defaults are
  appended explicitly.
- **Norms and autocast.** apex norms return the autocast dtype under autocast, torch norms
  fp32. Norm rewrites are SAFE (same values, a note in the message) unless the
  file itself uses autocast, where the dtype change is observable: then UNSAFE.
- **Gated imports stay.** An ``import apex...`` inside ``try/except ImportError`` also sets
  availability flags (``has_apex = True``); porter rewrites the calls but never removes such
  an import, so the flags keep their meaning.
- **apex amp** is flagged with a checklist (its only exact rewrite is ``master_params``):
  O1's per-op cast lists differ from autocast (APPROX) and a GradScaler must be threaded
  through the training loop by hand; O2/O3 have no torch equivalent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.config import Option
from porter.findings import Applicability, Category
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "apex"
SAFE, UNSAFE, NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE

_AUTOCAST_NOTE = (
    "under autocast apex casts to the autocast dtype and returns fp16/bf16, while the torch "
    "norm runs in fp32 and returns fp32 there (same values to rounding, different dtype)"
)
_STEP_NOTE = (
    "apex counts `step` per parameter group, torch per parameter (they differ only for a "
    "parameter whose grad is None on some steps); apex optimizer checkpoints do not load into torch"
)


def _doc(*lines: str) -> str:
    return "\n".join(lines)


RULES = (
    rule("PRT300", "apex-fused-adam", NAME,
         "apex `FusedAdam` → `torch.optim.AdamW`/`Adam` (fused), bound by apex's signature.",
         Category.REPLACE, fix=SAFE, effort_hours=0.5,
         explanation=_doc(
             "`FusedAdam(adam_w_mode=True)` (the default) is AdamW, `adam_w_mode=False` is Adam with L2. "
             "porter binds positional arguments by apex's order (slot 3 is `bias_correction`, "
             "not `betas`) and writes `weight_decay` explicitly: apex defaults to 0.0, torch AdamW to 0.01. "
             "A non-literal `adam_w_mode` becomes `Adam(decoupled_weight_decay=...)`.",
             "",
             "**Fix level.** Exact for fp32 parameters. For fp16/bf16 parameters apex keeps the moments in "
             "fp32 and torch in the parameter dtype, so the trajectories drift. porter cannot "
             "see parameter dtypes: the fix is UNSAFE unless `[tool.porter.apex] assume-fp32-params = true`.",
             "",
             "Flagged: `bias_correction` not literally True (torch always corrects), `master_weights`, "
             "`amsgrad` (apex raises), star-arguments. " + _STEP_NOTE + "."),
         example="```python\nopt = FusedAdam(model.parameters(), 1e-4, True, (0.9, 0.98))\n# becomes\n"
         "opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.0, fused=True)\n```"),
    rule("PRT301", "apex-fused-sgd", NAME, "apex `FusedSGD` → `torch.optim.SGD(fused=True)`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="Same update as torch SGD: weight decay before momentum, the momentum buffer starts as "
         "the first gradient, Nesterov adds `momentum*buf`; the buffer has the parameter dtype in both. "
         "Flagged: `wd_after_momentum` not literally False, a missing `lr` (apex has no default; torch's "
         "is 1e-3)."),
    rule("PRT302", "apex-fused-adagrad", NAME, "apex `FusedAdagrad` → `torch.optim.Adagrad(fused=True)`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="Keywords only: torch's positional order is `(lr, lr_decay, weight_decay, "
         "initial_accumulator_value, eps)`, apex's `(lr, eps, weight_decay)`. `adagrad_w_mode=True` "
         "(decoupled decay) has no torch equivalent and is flagged."),
    rule("PRT303", "apex-fused-lamb", NAME, "apex `FusedLAMB`/`FusedMixedPrecisionLamb`: torch has no LAMB.",
         Category.REPLACE, effort_hours=4.0,
         explanation="torch 2.13 has no LAMB. Keep apex built from ROCm/apex (it ships `apex.optimizers`), or "
         "port a LAMB implementation and re-tune. apex defaults: lr=1e-3, eps=1e-6, weight_decay=0.01, "
         "adam_w_mode=True, grad_averaging=True, max_grad_norm=1.0, use_nvlamb=False."),
    rule("PRT304", "apex-fused-novograd", NAME, "apex `FusedNovoGrad`: torch has no NovoGrad.",
         Category.REPLACE, effort_hours=4.0,
         explanation="Keep apex built from ROCm/apex, or port NovoGrad by hand."),
    rule("PRT310", "apex-fused-layer-norm", NAME, "apex `FusedLayerNorm` → `torch.nn.LayerNorm`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="Same parameters (`weight`, `bias`), same defaults (eps=1e-5); apex itself falls back to "
         "`F.layer_norm` off CUDA. `memory_efficient` only trades memory and is dropped. Note: "
         + _AUTOCAST_NOTE + "."),
    rule("PRT311", "apex-fused-rms-norm", NAME,
         "apex `FusedRMSNorm` → `torch.nn.RMSNorm` with `eps` written out.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="`torch.nn.RMSNorm(eps=None)` means `finfo(float32).eps` (≈1.19e-7), apex's default is "
         "1e-5, so porter always writes `eps`. Both compute in fp32 and return the input dtype. "
         "Note: " + _AUTOCAST_NOTE + "."),
    rule("PRT312", "apex-mixed-fused-norm", NAME,
         "apex `MixedFusedLayerNorm`/`MixedFusedRMSNorm` return the *parameter* dtype; torch norms the input dtype.",
         Category.REPLACE, fix=UNSAFE, effort_hours=0.5,
         explanation="The module rewrite cannot add `.to(weight.dtype)` at the call sites, so it is an UNSAFE "
         "fix: identical values, but the output dtype becomes the input dtype (e.g. bf16 input with fp32 "
         "weights now returns bf16 instead of fp32). Cast the output where it matters."),
    rule("PRT313", "apex-functional-norm", NAME,
         "apex functional norms → `F.layer_norm`/`F.rms_norm` (different argument order, eps 1e-6).",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="`fused_layer_norm_affine(input, weight, bias, normalized_shape, eps=1e-6)` puts the "
         "weight before the shape, unlike `F.layer_norm(input, normalized_shape, weight, bias, eps=1e-5)`. "
         "porter binds by apex's order, emits keywords and always writes eps (the functional default is "
         "1e-6, the modules' 1e-5). The `mixed_dtype_*` forms get `.to(weight.dtype)` to keep their "
         "output dtype."),
    rule("PRT330", "apex-amp-initialize", NAME,
         "`apex.amp.initialize` (removed upstream in 25.07): port to torch.amp by hand (checklist).",
         Category.REPLACE, effort_hours=2.0,
         explanation=_doc(
             "apex amp was removed from NVIDIA/apex in 25.07 (ROCm/apex still ships it). The portable "
             "route is `torch.autocast(\"cuda\", dtype=...)` around forward and loss, and "
             "`torch.amp.GradScaler(\"cuda\")` for fp16. It is not a one-call rewrite:",
             "",
             "- O0: fp32, remove the call (apex also casts the model to fp32);",
             "- O1: APPROX, autocast's per-op cast lists differ from apex's patched function lists;",
             "- O2/O3: FLAG, torch has no fp16 model copy with fp32 master weights (use bf16 autocast);",
             "- a static `loss_scale` cannot be reproduced (GradScaler is always dynamic); apex caps the "
             "dynamic scale at `max_loss_scale=2**24`, GradScaler has no cap.")),
    rule("PRT331", "apex-amp-scale-loss", NAME,
         "`with amp.scale_loss(...)`: becomes `scaler.scale(loss).backward()` plus `scaler.step/update`.",
         Category.REPLACE, effort_hours=1.0,
         explanation="apex unscales the gradients when the `with` block exits; GradScaler keeps them scaled "
         "until `scaler.step`. Code that clips or reads gradients between backward and step must call "
         "`scaler.unscale_(optimizer)` first. `delay_unscale=True` and several `loss_id`s "
         "have no GradScaler equivalent."),
    rule("PRT332", "apex-amp-master-params", NAME,
         "`amp.master_params(opt)` → a generator over `opt.param_groups`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.1,
         explanation="apex's `master_params` is literally `for group in opt.param_groups: for p in "
         "group['params']: yield p`; porter inlines it. (Clip only after `scaler.unscale_(opt)`.)"),
    rule("PRT333", "apex-amp-state-dict", NAME,
         "`amp.state_dict()`/`amp.load_state_dict()` → the GradScaler's; old checkpoints do not load.",
         Category.REPLACE, effort_hours=0.5,
         explanation="`scaler.state_dict()`/`scaler.load_state_dict()` hold the loss scale, but the format "
         "differs from apex's: checkpoints written with apex amp need their amp entry dropped."),
    rule("PRT334", "apex-amp-other", NAME, "Other `apex.amp` APIs (cast registries, old API).",
         Category.REPLACE, effort_hours=1.0,
         explanation="`amp.register_*_function`, `half_function`, `float_function`, `disable_casts`, the old "
         "`amp.init()` handle: use `torch.autocast` regions and `torch.amp.custom_fwd(cast_inputs=...)`."),
    rule("PRT340", "apex-ddp", NAME,
         "apex `DistributedDataParallel` → `torch.nn.parallel.DistributedDataParallel`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.5,
         explanation=_doc(
             "Exact when `gradient_average=True` (apex averages like torch). With `gradient_average=False` "
             "apex **sums** gradients: flagged. porter writes `broadcast_buffers=False` "
             "because apex never broadcasts buffers (torch does in every forward by default); the keyword "
             "exists in every torch release (2.13 deprecates it with a warning; its replacement "
             "`forward_sync_buffers` is a TypeError before 2.13 and still syncs buffers at construction). "
             "Older torch releases may still broadcast buffers from rank 0 once at construction (apex only "
             "parameters); this matters only when buffers differ across ranks at that point.",
             "",
             "Dropped (scheduling/rounding only): `message_size`, `delay_allreduce`, "
             "`allreduce_trigger_params`, `num_allreduce_streams`, `gradient_predivide_factor`, `prof`. "
             "Flagged: `allreduce_always_fp32=True` (APPROX for fp16 grads), `retain_allreduce_buffers=True`, "
             "`allreduce_communicators`, `shared_param`, `gradient_average_split_factor`.")),
    rule("PRT341", "apex-sync-batchnorm", NAME, "apex `SyncBatchNorm` → `torch.nn.SyncBatchNorm`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="Same first six arguments and parameter names. `channel_last=True` and `fuse_relu=True` "
         "are flagged."),
    rule("PRT342", "apex-convert-syncbn", NAME,
         "`apex.parallel.convert_syncbn_model` → `torch.nn.SyncBatchNorm.convert_sync_batchnorm`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.1,
         explanation="Exact with `channel_last=False`. torch's SyncBatchNorm needs a cuda (ROCm), xpu or "
         "privateuse1 device, as apex's did."),
    rule("PRT350", "apex-clip-grad-norm", NAME,
         "`apex.contrib.clip_grad.clip_grad_norm_` → `torch.nn.utils.clip_grad_norm_`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.1,
         explanation="Same arguments and result; apex's version only fuses the norm kernel."),
    rule("PRT351", "apex-xentropy", NAME,
         "`SoftmaxCrossEntropyLoss.apply` → `F.cross_entropy(reduction=\"none\")`, `ignore_index` written out.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="apex returns per-example losses and its `padding_idx` defaults to **0**, not -100: "
         "porter writes `reduction=\"none\"` and `ignore_index` explicitly. The label-smoothing "
         "formula is the same; `half_to_float=True` becomes `logits.float()`."),
    rule("PRT352", "apex-fast-layer-norm", NAME, "`apex.contrib.layer_norm.FastLayerNorm` → `torch.nn.LayerNorm`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.1,
         explanation="Same parameters (`weight`, `bias`) and eps default."),
    rule("PRT353", "apex-group-norm", NAME, "`apex.contrib.group_norm.GroupNorm` → `torch.nn.GroupNorm`.",
         Category.REPLACE, fix=SAFE, effort_hours=0.25,
         explanation="Exact without `act`. With `act=\"silu\"`/`\"swish\"` apex fuses a SiLU; a module swap "
         "would change the state_dict keys, so porter flags it."),
    rule("PRT390", "apex-no-portable-equivalent", NAME,
         "An apex API with no 1:1 portable replacement (contrib kernels, fp16_utils, RNN, mlp...).",
         Category.REPLACE, effort_hours=4.0,
         explanation="`DistributedFusedAdam`/`DistributedFusedLAMB` (ZeRO sharding: FSDP2 + AdamW is a "
         "redesign), ASP sparsity, transducer, focal_loss, bottleneck, peer_memory, fused_dense, mlp, "
         "fp16_utils, RNN... Keep apex built from ROCm/apex or port by hand."),
    rule("PRT398", "apex-indirect-use", NAME,
         "An apex class or function used without a direct call (passed, aliased, isinstance).",
         Category.REPLACE, effort_hours=0.5,
         explanation="porter rewrites direct calls only, where it can bind the arguments. A reference that "
         "escapes (`norm_layer=FusedLayerNorm`, `cls = FusedAdam`) must be replaced by hand; the message "
         "names the torch equivalent and the default to write out."),
    rule("PRT397", "apex-class-by-name", NAME,
         "An apex class named by a string: a registry entry, a `startswith(\"apex\")` dispatch, a Hydra "
         "`_target_` or Lightning `class_path` in a YAML config.",
         Category.REPLACE, effort_hours=0.5,
         explanation="The string is imported at run time (`hydra.utils.instantiate`, `importlib`, a project "
         "registry), so it fails on ROCm like an import of apex, while name resolution never sees it. porter "
         "reports it with the torch equivalent but does not rewrite it: the keyword arguments come from the "
         "configuration, and the exact mapping needs them (FusedAdam's `weight_decay` default is 0.0, "
         "AdamW's 0.01; `adam_w_mode=False` means Adam; `bias_correction=False` has no torch equivalent).",
         example="```yaml\noptimizer:\n  _target_: apex.optimizers.FusedAdam  # reported\n  lr: 1e-4\n"
         "  weight_decay: 0.0\n# port: _target_: torch.optim.AdamW, with weight_decay written out\n```"),
)


# The exact gate of ApexVisitor. Its report sites and what each needs:
# - calls and references (PRT300-PRT353 rewrites and flags, PRT334 amp, PRT390, PRT398): a name whose
#   head is bound by an import and that resolves to `apex.*` (every key of its API tables starts with
#   `apex.`), hence an import statement of `apex` or one of its submodules;
# - PRT397 (an apex class named by a string, or `name.startswith("apex.")` dispatch): one string literal
#   (a piece of an implicit concatenation counts alone) whose value starts with `apex`.
# A file that only says "apex" in a comment, a word of a docstring or an identifier is not LibCST-parsed.
def python_gate(ctx: PyContext) -> bool:
    """Can ApexVisitor report on this file? (exact: see the derivation above)"""
    from porter.codemods._py_gates import any_literal, imports_module

    if imports_module(ctx, lambda m: m.split(".")[0] == "apex"):
        return True
    return any_literal(ctx, lambda v: "apex" in v, lambda v: v.startswith("apex"))


FAMILY = Family(
    name=NAME,
    title="apex → torch.optim, torch.nn norms, torch DDP and torch.amp",
    order=30,
    rules=RULES,
    tokens=("apex",),
    python="porter.codemods.apex.visitor:ApexVisitor",
    python_gate="porter.codemods.apex:python_gate",
    checkers={"yaml": "porter.codemods.apex.visitor:check_yaml"},
    description="Replaces NVIDIA apex's fused optimizers, norms, parallel wrappers and contrib helpers by "
    "their torch equivalents where the math is the same, binding arguments by apex's signatures and "
    "writing every changed default (AdamW weight_decay, RMSNorm eps, functional-norm eps, ignore_index) "
    "explicitly. apex amp is reported with a porting checklist.",
    verified="Fixture tests (tests/fixtures/apex) check each rewrite, each blocking condition and "
    "idempotence; parity tests (tests/test_apex_parity.py) run the rewritten code on CPU against pure-torch "
    "references of apex's documented math (optimizer trajectories, norm outputs over shapes and dtypes, "
    "cross entropy), and negative tests show that the naive rewrites (apex's positional order, its weight-decay and eps "
    "defaults, autocast output dtypes, cross-entropy reduction, gradient summing) fail them.",
    review="FusedAdam rewrites with fp16/bf16 parameters (moment precision), output dtypes of norms under "
    "autocast, apex optimizer checkpoints, and every amp site (manual port).",
    options=(
        Option("fused", "bool", True, "The torch optimizers that replace apex's fused ones get `fused=True` "
               "(left out when the torch pins do not guarantee the keyword: it only selects a kernel)."),
        Option("assume-fp32-params", "bool", False, "The project trains fp32 parameters: the FusedAdam rewrite "
               "is SAFE (unless the file casts to half/bfloat16)."),
    ),
)
