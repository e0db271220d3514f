"""NVIDIA Transformer Engine → torch.nn modules, and its FP8 autocast (PRT600-PRT699).

- ``te.Linear`` → ``torch.nn.Linear`` with ``device="cuda"`` kept (TE allocates on the GPU) and TE's
  initialisation written out after the assignment (weight ~ N(0, 0.023) or the given
  ``init_method``, zero bias): SAFE under static conditions (no tensor/sequence
  parallelism, no userbuffers, ``return_bias=False``...). Where no statement can follow the call
  (inside a list, a call argument) the swap is UNSAFE: nn.Linear's kaiming init differs.
- ``te.LayerNorm``/``te.RMSNorm`` → ``torch.nn.LayerNorm``/``RMSNorm`` with eps and device written out;
  flagged when ``zero_centered_gamma`` is set (TE stores γ-1).
- ``te.LayerNormLinear`` → a ``PorterLayerNormLinear`` class inserted into the file that keeps TE's
  parameter names (``layer_norm_weight``...) and init (SAFE under the same conditions as Linear).
- ``te.fp8_autocast``/``te.autocast``: ``enabled=False`` → ``contextlib.nullcontext()`` (SAFE);
  otherwise UNSAFE (FP8 → parameter dtype) with the torchao.float8 route in the message.
- recipes, ``fp8_model_init`` and the other TE modules are flagged with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.findings import Applicability, Category
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "fp8"
TE = "transformer_engine.pytorch"
TE_INIT_STD = "0.023"  # transformer_engine.pytorch.utils.get_default_init_method()

LINEAR_PARAMS = ("in_features", "out_features", "sequence_parallel", "fuse_wgrad_accumulation", "tp_group",
                 "tp_size", "get_rng_state_tracker", "rng_tracker_name", "init_method", "bias", "return_bias",
                 "params_dtype", "parallel_mode", "parameters_split", "device")
LINEAR_EXTRA = ("delay_wgrad_compute", "symmetric_ar_type", "save_original_input", "name")
# argument -> the literal values under which the swap is exact
LINEAR_REQUIRED: dict[str, tuple[object, ...]] = {
    "sequence_parallel": (False,),
    "fuse_wgrad_accumulation": (False,),
    "tp_group": (None,),
    "tp_size": (1,),
    "get_rng_state_tracker": (None,),
    "rng_tracker_name": (None,),
    "return_bias": (False,),
    "parallel_mode": (None,),
    "parameters_split": (None,),
    "delay_wgrad_compute": (False,),
    "symmetric_ar_type": (None,),
}
LNL_PARAMS = ("in_features", "out_features", "eps", "sequence_parallel", "fuse_wgrad_accumulation", "tp_group",
              "tp_size", "get_rng_state_tracker", "init_method", "bias", "normalization", "return_bias",
              "params_dtype", "parallel_mode", "return_layernorm_output", "return_layernorm_output_gathered",
              "parameters_split", "zero_centered_gamma", "device")
LNL_EXTRA = ("rng_tracker_name", "delay_wgrad_compute", "symmetric_ar_type", "name")
LNL_REQUIRED: dict[str, tuple[object, ...]] = {
    **LINEAR_REQUIRED,
    "return_layernorm_output_gathered": (False,),
    "zero_centered_gamma": (False,),
}
SHIM_NAME = "PorterLayerNormLinear"
# The module porter writes into a file for te.LayerNormLinear: TE's parameter names and init, torch math.
SHIM_CODE = '''
class PorterLayerNormLinear(torch.nn.Module):
    """Transformer Engine's LayerNormLinear in plain torch (inserted by porter, rule PRT603).

    Keeps TE's parameter names (layer_norm_weight, layer_norm_bias, weight, bias) and init, so TE
    checkpoints load (minus TE's `_extra_state` FP8 metadata).
    """

    def __init__(self, in_features, out_features, eps=1e-5, bias=True, normalization="LayerNorm",
                 return_layernorm_output=False, device="cuda", dtype=None, init_method=None):
        super().__init__()
        self.in_features = in_features
        self.eps = eps
        self.normalization = normalization
        self.return_layernorm_output = return_layernorm_output
        factory = {"device": device, "dtype": dtype}
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(in_features, **factory))
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(in_features, **factory))
        else:
            self.register_parameter("layer_norm_bias", None)
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, **factory))
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        with torch.no_grad():
            if init_method is None:
                torch.nn.init.normal_(self.weight, mean=0.0, std=0.023)
            else:
                init_method(self.weight)

    def forward(self, x):
        shape = (self.in_features,)
        if self.normalization == "LayerNorm":
            ln_out = torch.nn.functional.layer_norm(x, shape, self.layer_norm_weight, self.layer_norm_bias, self.eps)
        else:
            ln_out = torch.nn.functional.rms_norm(x, shape, self.layer_norm_weight, self.eps)
        out = torch.nn.functional.linear(ln_out, self.weight, self.bias)
        return (out, ln_out) if self.return_layernorm_output else out
'''
NORM_PARAMS = ("normalized_shape", "eps", "sequence_parallel", "params_dtype", "zero_centered_gamma",
               "hidden_size", "device", "dtype", "sm_margin")
OTHER_MODULES = {
    "LayerNormMLP": "a fused LayerNorm + MLP with its own parameter names (layer_norm_weight, fc1_weight, "
    "fc2_weight...) and activation options",
    "TransformerLayer": "a whole transformer block with TE-specific parameter names, fused attention and "
    "FP8 handling",
    "MultiheadAttention": "TE attention with its own QKV parameter layout and names",
    "DotProductAttention": "TE's fused attention backends (flash/cuDNN) with their own mask and layout "
    "arguments; port to torch.nn.functional.scaled_dot_product_attention by hand",
    "GroupedLinear": "several GEMMs with per-group parameters (weight0, weight1...)",
    "Fp8Padding": "FP8-specific padding", "Fp8Unpadding": "FP8-specific padding",
}
RECIPES = {
    "DelayedScaling": "TE's delayed scaling (amax history, default 1024 steps, HYBRID = e4m3 forward / e5m2 "
    "backward) has no torchao counterpart; the closest is Float8LinearConfig.from_recipe_name(\"tensorwise\") "
    "(dynamic per-tensor current scaling)",
    "Float8CurrentScaling": "closest: torchao Float8LinearConfig.from_recipe_name(\"tensorwise\") (per-tensor "
    "current scaling; check the fp8 formats)",
    "MXFP8BlockScaling": "MXFP8 block scaling has only prototype support in torchao (mx_formats)",
    "Float8BlockScaling": "closest: Float8LinearConfig.from_recipe_name(\"rowwise\") (a different granularity)",
    "NVFP4BlockScaling": "NVFP4 has no ROCm equivalent",
}
AUTOCASTS = {"fp8_autocast": ("enabled", "calibrating", "fp8_recipe", "fp8_group", "_graph"),
             "autocast": ("enabled", "calibrating", "recipe", "amax_reduction_group", "_graph")}
MODEL_INITS = {"fp8_model_init", "quantized_model_init"}

_CKPT = ("TE checkpoints also hold `<name>._extra_state` (FP8 metadata): load them with strict=False or "
         "drop those keys")

RULES = (
    rule("PRT600", "te-linear", NAME,
         "`te.Linear` → `torch.nn.Linear` with device and TE's initialisation kept.",
         Category.REPLACE, fix=Applicability.SAFE, effort_hours=0.5,
         explanation="Outside FP8 autocast, `te.Linear` computes `x @ W.T + b` like `torch.nn.Linear`. porter "
         "keeps `device=\"cuda\"` (TE allocates on the GPU, nn.Linear on the CPU), maps `params_dtype` to "
         "`dtype`, and writes TE's init out after the assignment: weight ~ N(0, 0.023) (or the given "
         "`init_method`) and a zero bias. Parameter names `weight`/`bias` are the same; " + _CKPT +
         ". The swap is blocked (flag) by tensor or sequence parallelism, userbuffers (`ub_*`), "
         "`return_bias=True`, `parameters_split`, `fuse_wgrad_accumulation`, `delay_wgrad_compute` or an RNG "
         "tracker. Where no statement can follow the call, the fix is unsafe (nn.Linear's kaiming init). "
         "FP8 execution itself is reported at each `fp8_autocast` (PRT610).",
         example="```python\nself.proj = te.Linear(d, 4 * d, bias=False)\n# becomes\n"
         "self.proj = torch.nn.Linear(in_features=d, out_features=4 * d, bias=False, device=\"cuda\")\n"
         "torch.nn.init.normal_(self.proj.weight, mean=0.0, std=0.023)\n```"),
    rule("PRT601", "te-layernorm", NAME,
         "`te.LayerNorm` → `torch.nn.LayerNorm` (eps and device written out).",
         Category.REPLACE, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="Same math and the same init (weight 1, bias 0) and parameter names. porter writes "
         "`eps` (1e-5) and `device=\"cuda\"` explicitly. `zero_centered_gamma=True` computes `x̂·(1+γ)+β` "
         "with γ stored as γ-1, so it is flagged (a checkpoint conversion `w+1` is needed)."),
    rule("PRT602", "te-rmsnorm", NAME,
         "`te.RMSNorm` → `torch.nn.RMSNorm` with eps=1e-5 written out (torch's default differs).",
         Category.REPLACE, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="`torch.nn.RMSNorm(eps=None)` uses finfo(float32).eps ≈ 1.19e-7 while TE uses 1e-5, "
         "so the eps is always written out. `zero_centered_gamma=True` is flagged."),
    rule("PRT603", "te-layernorm-linear", NAME,
         "`te.LayerNormLinear` → a torch module that keeps TE's parameter names checkpoints depend on.",
         Category.REPLACE, fix=Applicability.SAFE, effort_hours=1.0,
         explanation="TE registers `layer_norm_weight`, `layer_norm_bias` (LayerNorm only), `weight` and "
         "`bias`; `nn.Sequential(nn.LayerNorm(...), nn.Linear(...))` would rename them to `0.weight`, "
         "`1.weight`... and break checkpoints. porter inserts a small `PorterLayerNormLinear` "
         "class after the file's imports (norm then linear through torch.nn.functional, TE's names and "
         "init, `return_layernorm_output` kept) and calls it with every argument written out. The same "
         "static conditions as PRT600 apply; `zero_centered_gamma`, `return_bias`, "
         "`return_layernorm_output_gathered` and parallelism block it. " + _CKPT + "."),
    rule("PRT604", "te-module-blocked", NAME,
         "A `te.Linear`/`LayerNorm`/`RMSNorm` whose arguments block an exact swap.",
         Category.REPLACE, effort_hours=1.0,
         explanation="The message names the argument: tensor/sequence parallelism, userbuffers, "
         "`return_bias`, `zero_centered_gamma`, hidden `*args`/`**kwargs`, unknown arguments."),
    rule("PRT610", "te-fp8-autocast", NAME,
         "`te.fp8_autocast`/`te.autocast`: FP8 execution with TE recipes.",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=2.0,
         explanation="`enabled=False` does nothing: porter replaces it with `contextlib.nullcontext()` "
         "(safe). Otherwise FP8 has no portable drop-in: the unsafe fix drops the FP8 context so the "
         "modules run in their parameter dtype (e.g. BF16: more precise than FP8, slower). To keep FP8 on "
         "MI300+/SM89+, call `torchao.float8.convert_to_float8_training(model, "
         "config=Float8LinearConfig.from_recipe_name(\"tensorwise\"))` once after the model is built "
         "(dynamic per-tensor scaling, not TE's delayed scaling; GEMM dimensions divisible by 16). "
         "`fp8_autocast` is deprecated in TE; porter never emits it."),
    rule("PRT611", "te-fp8-recipe", NAME,
         "A Transformer Engine FP8 recipe (DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling...).",
         Category.REPLACE, effort_hours=1.0,
         explanation="Recipes configure TE's FP8 scaling. torchao.float8 offers tensorwise/rowwise dynamic "
         "scaling only; the message names the closest config and what differs."),
    rule("PRT612", "te-fp8-model-init", NAME,
         "`te.fp8_model_init`/`quantized_model_init`: parameters allocated in FP8.",
         Category.REPLACE, effort_hours=1.0,
         explanation="torch.nn modules keep high-precision parameters; drop the context and let "
         "torchao.float8 cast at matmul time."),
    rule("PRT620", "te-other-module", NAME,
         "A Transformer Engine module with no torch.nn drop-in (LayerNormMLP, TransformerLayer...).",
         Category.REPLACE, effort_hours=4.0,
         explanation="These fuse several layers and use TE-specific parameter names; port by hand, keeping "
         "the state_dict keys, or use ROCm/TransformerEngine (not evaluated)."),
)


# The exact gate of Fp8Visitor: every report (PRT600-PRT620) is at a call, attribute, argument or
# assigned value whose qualified name, resolved through the file's imports, starts with
# `transformer_engine.pytorch.` or `transformer_engine.common.recipe.`: the import index resolves a
# name only through an import statement, so the file must import `transformer_engine` or a submodule.
def python_gate(ctx: PyContext) -> bool:
    """Can Fp8Visitor report on this file? (exact: see the derivation above)"""
    from porter.codemods._py_gates import imports_module

    return imports_module(ctx, lambda m: m.split(".")[0] == "transformer_engine")


FAMILY = Family(
    name=NAME,
    title="Transformer Engine → torch.nn modules (FP8 via torchao.float8)",
    order=50,
    rules=RULES,
    tokens=("transformer_engine",),
    python="porter.codemods.fp8.visitor:Fp8Visitor",
    python_gate="porter.codemods.fp8:python_gate",
    description="Replaces Transformer Engine's Linear, LayerNorm and RMSNorm with torch.nn modules and "
    "LayerNormLinear with an inserted torch module that keeps TE's parameter names, keeping their device "
    "(`cuda`), eps and initialisation, and drops disabled FP8 autocast contexts. With "
    "--unsafe-fixes it also drops enabled FP8 contexts (BF16/parameter-dtype execution).",
    verified="Fixture tests for every rule; CPU parity of the rewritten modules against pure-torch references "
    "of TE's documented LayerNorm/RMSNorm (eps, zero_centered_gamma) and Linear math and init; negative tests "
    "for the naive swaps (init, device, zero-centred gamma, LayerNormLinear parameter names) and the removed "
    "torchao factories.",
    review="FP8 training needs torchao.float8 on MI300+/SM89+ (different scaling recipe); TE checkpoints carry "
    "`_extra_state` keys; LayerNormLinear/LayerNormMLP/TransformerLayer need a hand port.",
)
