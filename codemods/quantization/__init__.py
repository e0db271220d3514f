"""bitsandbytes and its Hugging Face switches (PRT400-PRT499).

Quantization is never exact across libraries. What porter does:

- 32-bit bnb Adam/AdamW (any paging) → ``torch.optim.Adam``/``AdamW`` with bnb's *decoupled* decay
  kept and every hyperparameter written out: SAFE with zero weight decay when nothing in
  the file hints at fp16/bf16 parameters (bnb keeps fp32 state for them); with decay UNSAFE, since
  bnb's GPU kernel decays after the update and torch before it (a difference of lr*wd*update).
- 8-bit bnb Adam/AdamW → ``torchao.optim.AdamW8bit`` (UNSAFE: a different 8-bit implementation).
- ``Linear8bitLt`` training fp16 weights → ``torch.nn.Linear`` (UNSAFE: full-precision matmul).
- ``bnb.nn.Embedding`` → ``torch.nn.Embedding`` plus bnb's xavier init (UNSAFE: see PRT413).
- transformers v5 removed ``from_pretrained(load_in_8bit=/load_in_4bit=)``: rewritten to
  ``quantization_config=BitsAndBytesConfig(...)`` (SAFE, stays on bnb).
- ``BitsAndBytesConfig(load_in_8bit=True)`` → ``TorchAoConfig(quant_type=Int8WeightOnlyConfig())``
  (UNSAFE); 4-bit configs are flagged with the quant type they really use (default fp4).
- everything else is flagged with the blocking argument.

``[tool.porter.quantization] strategy = "bitsandbytes-rocm"`` keeps the Python code on
bitsandbytes (ROCm-capable from 0.50) and turns the torchao rewrites into pin advice.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from porter.config import Option
from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "quantization"
STRATEGIES = ("torchao", "bitsandbytes-rocm")
BNB_PIN = "bitsandbytes>=0.50"
ROCM_NOTE = (f"keep bitsandbytes and pin `{BNB_PIN}` (its ROCm/HIP build supports LLM.int8, 8-bit "
             "optimizers and 4-bit QLoRA on AMD CDNA/RDNA from 0.50.0)")

# -- bitsandbytes optimizers -------------------------------------------------------------------
ADAM_32 = {"Adam", "AdamW", "Adam32bit", "AdamW32bit", "PagedAdam", "PagedAdamW", "PagedAdam32bit",
           "PagedAdamW32bit"}
ADAM_8 = {"Adam8bit", "AdamW8bit", "PagedAdam8bit", "PagedAdamW8bit"}
WITH_OPTIM_BITS = {"Adam", "AdamW", "PagedAdam", "PagedAdamW"}  # slot 6 is optim_bits in every version
NO_EQUIVALENT = {
    "Lion": "torch 2.13 has no Lion optimizer",
    "LAMB": "torch 2.13 has no LAMB optimizer",
    "LARS": "torch 2.13 has no LARS optimizer",
    "AdEMAMix": "torch 2.13 has no AdEMAMix optimizer",
    "SGD": "bnb SGD's momentum/state mapping to torch.optim.SGD is not verified",
    "RMSprop": "bnb RMSprop's hyperparameter mapping to torch.optim.RMSprop is not verified",
    "Adagrad": "bnb Adagrad's hyperparameter mapping to torch.optim.Adagrad is not verified",
    "Momentum": "bnb Momentum has no verified torch mapping",
}
ADAM_PARAMS = ("params", "lr", "betas", "eps", "weight_decay", "amsgrad")
ADAM_KEYWORDS = ("optim_bits", "args", "min_8bit_size", "percentile_clipping", "block_wise", "is_paged")
ADAM_DEFAULTS = {"lr": "1e-3", "betas": "(0.9, 0.999)", "eps": "1e-8"}

# -- bitsandbytes.nn ---------------------------------------------------------------------------
LINEAR8_PARAMS = ("input_features", "output_features", "bias", "has_fp16_weights", "threshold", "index",
                  "device")
LINEAR4_PARAMS = ("input_features", "output_features", "bias", "compute_dtype", "compress_statistics",
                  "quant_type", "quant_storage", "device")
EMBED_PARAMS = ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type",
                "scale_grad_by_freq", "sparse", "_weight", "device")
BNB_STATE_CLASSES = {"Params4bit", "Int8Params", "Embedding8bit", "Embedding4bit", "EmbeddingFP4",
                     "EmbeddingNF4", "OutlierAwareLinear", "SwitchBackLinearBnb"}

# -- transformers ------------------------------------------------------------------------------
BNB_CONFIG_PARAMS = ("load_in_8bit", "load_in_4bit", "llm_int8_threshold", "llm_int8_skip_modules",
                     "llm_int8_enable_fp32_cpu_offload", "llm_int8_has_fp16_weight",
                     "bnb_4bit_compute_dtype", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
                     "bnb_4bit_quant_storage")
MOVABLE = BNB_CONFIG_PARAMS[2:]  # from_pretrained kwargs that transformers 4.x folded into the config
TORCHAO_STRING_TYPES = {
    "int8_weight_only": "Int8WeightOnlyConfig()",
    "int4_weight_only": "Int4WeightOnlyConfig()",
    "int8_dynamic_activation_int8_weight": "Int8DynamicActivationInt8WeightConfig()",
    "float8_weight_only": "Float8WeightOnlyConfig()",
    "float8_dynamic_activation_float8_weight": "Float8DynamicActivationFloat8WeightConfig()",
}
REMOVED_FACTORIES = {  # torchao snake_case factories removed before 0.18
    "int8_weight_only": "Int8WeightOnlyConfig",
    "int4_weight_only": "Int4WeightOnlyConfig",
    "int8_dynamic_activation_int8_weight": "Int8DynamicActivationInt8WeightConfig",
    "float8_weight_only": "Float8WeightOnlyConfig",
    "float8_dynamic_activation_float8_weight": "Float8DynamicActivationFloat8WeightConfig",
}
HF_BNB_OPTIMS = {  # transformers TrainingArguments(optim=...) names backed by bitsandbytes
    "adamw_bnb_8bit": "adamw_torch_8bit", "adamw_8bit": "adamw_torch_8bit", "paged_adamw_8bit": "adamw_torch_8bit",
    "paged_adamw_32bit": "adamw_torch", "lion_8bit": None, "lion_32bit": None, "paged_lion_8bit": None,
    "paged_lion_32bit": None, "ademamix_8bit": None, "paged_ademamix_8bit": None, "paged_ademamix_32bit": None,
    "rmsprop_bnb": None, "rmsprop_bnb_8bit": None, "rmsprop_bnb_32bit": None,
}
LOW_BIT_OPTIM = {"Adam8bit", "Adam4bit", "AdamFp8", "AdamW8bit", "AdamW4bit", "AdamWFp8",
                 "CPUOffloadOptimizer"}

_OPT_DOC = (
    "bitsandbytes' Adam kernels apply **decoupled** weight decay (`p *= 1 - lr*wd`) for every Adam "
    "class, so `bnb.optim.Adam(weight_decay>0)` is AdamW, not torch Adam."
)

RULES = (
    rule("PRT400", "bnb-adam-32bit", NAME,
         "A bitsandbytes Adam/AdamW optimizer with 32-bit state; torch.optim has the same algorithm.",
         Category.REPLACE, fix=Applicability.SAFE, effort_hours=0.25,
         explanation=_OPT_DOC + "\n\nThe 32-bit classes (`Adam`, `AdamW`, `Adam32bit`, `AdamW32bit`, "
         "`PagedAdam*`) compute `m/(sqrt(v)+eps·√bc2)·lr·√bc2/bc1`, which is torch's Adam update. porter "
         "rewrites them to `torch.optim.AdamW` (or `torch.optim.Adam` when weight decay is 0) with lr, "
         "betas, eps and weight_decay written out. Paging only moves memory and is dropped.\n\n"
         "The fix is **safe only with zero weight decay** and no sign of half-precision parameters in the "
         "file. With weight decay it is unsafe: bnb's CUDA/HIP kernel applies the decay *after* the "
         "update (`p' = (p + u)(1 - lr·wd)`) while torch applies it before (`p' = p(1 - lr·wd) + u`); "
         "each step differs by `lr·wd·u` (bnb's CPU backend matches torch). bnb keeps fp32 state even "
         "for fp16/bf16 parameters while torch keeps state in the parameter dtype. `amsgrad=True`, "
         "`percentile_clipping != 100`, `args=` and unknown arguments block the rewrite. With "
         "`strategy = \"bitsandbytes-rocm\"` the code is kept.",
         example="```python\nopt = bnb.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.1)\n# becomes\n"
         "opt = torch.optim.AdamW(params=model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, "
         "weight_decay=0.1)\n```"),
    rule("PRT401", "bnb-adam-8bit", NAME,
         "A bitsandbytes 8-bit Adam/AdamW optimizer; torchao.optim.AdamW8bit is an approximation.",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=0.5,
         explanation=_OPT_DOC + " porter therefore maps every 8-bit bnb Adam to "
         "`torchao.optim.AdamW8bit` with the weight decay written out, never to torchao's coupled "
         "`Adam8bit`.\n\nBoth keep the moments in 8-bit blockwise (256) dynamic-map codes and keep "
         "tensors under 4096 elements in fp32; torchao also keeps tensors whose size is not a multiple of "
         "256 in fp32, quantizes with its own rounding and steps through `torch.compile`. Updates differ "
         "by the 8-bit state quantization error, optimizer state_dicts are not interchangeable, and "
         "paging is lost. Unsafe fix."),
    rule("PRT402", "bnb-optimizer-no-equivalent", NAME,
         "A bitsandbytes optimizer with no verified torch/torchao equivalent (Lion, LAMB, LARS, ...).",
         Category.REPLACE, effort_hours=2.0,
         explanation="Keep bitsandbytes (ROCm-capable from 0.50) or port by hand."),
    rule("PRT403", "bnb-optimizer-blocked", NAME,
         "A bitsandbytes Adam optimizer whose arguments block an automatic rewrite.",
         Category.REPLACE, effort_hours=1.0,
         explanation="The message names the blocking argument: `amsgrad=True` (bnb rejects it in "
         "recent versions), `percentile_clipping`, `args=`, `block_wise=False`, a non-default "
         "`min_8bit_size` for 8-bit state, positional arguments past `amsgrad` (their order changed "
         "between bnb versions), `*args`/`**kwargs`, or a non-literal `optim_bits`."),
    rule("PRT410", "bnb-linear-8bit", NAME,
         "`bnb.nn.Linear8bitLt` (LLM.int8): int8 matmul with optional fp16 outliers.",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=1.0,
         explanation="With `has_fp16_weights=True` (the default) the layer trains fp16 weights and "
         "quantizes weights and activations to int8 in every forward; `torch.nn.Linear` computes the "
         "same product in full precision (unsafe fix: outputs differ by the int8 rounding, and memory "
         "use is unchanged). With `has_fp16_weights=False` (int8 inference weights) porter flags it: "
         "build `torch.nn.Linear` and run `torchao.quantization.quantize_(model, Int8WeightOnlyConfig())` "
         "after loading weights (per-row int8 weights, no outlier decomposition), or keep bitsandbytes."),
    rule("PRT411", "bnb-linear-4bit", NAME,
         "`bnb.nn.Linear4bit`/`LinearNF4`/`LinearFP4`: 4-bit weights with no exact torchao equivalent.",
         Category.REPLACE, effort_hours=2.0,
         explanation="The default `quant_type` of `Linear4bit` is **fp4**, not nf4. fp4 has no "
         "torchao format; nf4 exists as torchao `to_nf4(weight, block_size=64, scaler_block_size=256)` "
         "(an independent implementation, approximate) but not as a drop-in module. "
         "`Int4WeightOnlyConfig` is a different integer quantizer (group 128) and has no CPU kernel. "
         "Keep bitsandbytes>=0.50 on ROCm or port by hand."),
    rule("PRT412", "bnb-quantized-state", NAME,
         "bitsandbytes-specific quantized parameters or embeddings (Params4bit, Int8Params, Embedding4bit...).",
         Category.REPLACE, effort_hours=2.0,
         explanation="These hold bnb's serialized quantization state; there is no portable equivalent."),
    rule("PRT413", "bnb-embedding", NAME,
         "`bnb.nn.Embedding` → `torch.nn.Embedding` with bnb's xavier-uniform initialisation.",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=0.25,
         explanation="The forward is `torch.nn.Embedding`'s. bnb initialises the weight with "
         "`xavier_uniform_` (then zeroes `padding_idx`) instead of N(0, 1), so porter writes "
         "that initialisation out after the assignment. The fix is unsafe because bnb.nn.Embedding "
         "also forces 32-bit optimizer state for its weight in bnb 8-bit optimizers, which a remaining "
         "8-bit optimizer would no longer honour, and because the initial values come from a different "
         "position in the RNG stream (same distribution)."),
    rule("PRT414", "bnb-stable-embedding", NAME,
         "`bnb.nn.StableEmbedding`: embedding + LayerNorm with parameter names `weight`, `norm.*`.",
         Category.REPLACE, effort_hours=1.0,
         explanation="Needs a small module that keeps `weight`, `norm.weight` and `norm.bias`, xavier "
         "init and the LayerNorm computed in the default dtype; porter does not emit it."),
    rule("PRT420", "hf-load-in-kbit", NAME,
         "`from_pretrained(load_in_8bit=True / load_in_4bit=True)`: removed in transformers v5.",
         Category.SHIM, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="transformers v5 dropped the kwargs (PR #41287). porter moves them, and the "
         "bnb options passed beside them, into `quantization_config=BitsAndBytesConfig(...)`: the same "
         "quantization, still on bitsandbytes (exact). `=False` is never reported. Non-literal values, "
         "an existing `quantization_config` or `**kwargs` are reported without a fix; calls other than "
         "`from_pretrained` are PRT424.",
         example="```python\nAutoModel.from_pretrained(name, load_in_8bit=True)\n# becomes\n"
         "AutoModel.from_pretrained(name, quantization_config=BitsAndBytesConfig(load_in_8bit=True))\n```"),
    rule("PRT424", "bnb-quantization-switch", NAME,
         "`load_in_8bit=True`/`load_in_4bit=True` outside `from_pretrained` (a kwargs dict, accelerate's "
         "BnbQuantizationConfig, a project function).",
         Category.REPLACE, severity=Severity.INFO, effort_hours=0.5,
         explanation="An audit finding: the switch turns on bitsandbytes quantization somewhere porter cannot "
         "follow. It needs a ROCm-capable bitsandbytes (>=0.50) or a port to torchao; if the value reaches "
         "transformers' `from_pretrained`, v5 rejects the kwarg (use `quantization_config=`). `=False` is "
         "never reported."),
    rule("PRT425", "hf-trainer-bnb-optimizer", NAME,
         "A transformers Trainer optimizer name backed by bitsandbytes (`optim=\"paged_adamw_8bit\"`...).",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=0.25,
         explanation="transformers builds these optimizers from bitsandbytes. The 8-bit AdamW names map to "
         "`\"adamw_torch_8bit\"` (torchao's AdamW8bit: a different 8-bit implementation, see PRT401) and "
         "`\"paged_adamw_32bit\"` to `\"adamw_torch\"` (the same algorithm with fp32 state in the parameter "
         "dtype; with weight decay bnb's GPU kernel decays after the update, see PRT400): unsafe fixes, "
         "applied only where the string is the value of `optim=` or the default of an `optim` field/option. "
         "Lion, AdEMAMix and bnb RMSprop have no torch equivalent: keep bitsandbytes>=0.50."),
    rule("PRT426", "bnb-class-by-name", NAME,
         "A bitsandbytes class named by a string: a registry entry, a `startswith(\"bitsandbytes\")` dispatch, "
         "a Hydra `_target_` or Lightning `class_path` in a YAML config.",
         Category.REPLACE, effort_hours=0.5,
         explanation="The string is imported at run time, so it needs bitsandbytes like an import does, while "
         "name resolution never sees it. porter reports it with the portable class but does not rewrite it: "
         "the keyword arguments come from the configuration, and the mapping depends on them (bnb Adam decays "
         "decoupled, so `weight_decay > 0` means AdamW; 8-bit state maps only approximately to torchao)."),
    rule("PRT427", "peft-kbit-preparation", NAME,
         "peft `prepare_model_for_kbit_training` / `prepare_model_for_int8_training`: written for a "
         "bitsandbytes-quantized model.",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.25,
         explanation="Both cast the non-quantized parameters to fp32 and enable gradient checkpointing and input "
         "gradients, on the assumption that the model was loaded with `load_in_8bit`/`load_in_4bit` "
         "(bitsandbytes). `prepare_model_for_int8_training` was deprecated and then removed from peft (use "
         "`prepare_model_for_kbit_training`; its old signature took `output_embedding_layer_name` and "
         "`layer_norm_names`). On ROCm keep bitsandbytes>=0.50, or, when the model is no longer quantized, "
         "replace the call by `model.gradient_checkpointing_enable()` plus `model.enable_input_require_grads()` "
         "and decide about the fp32 upcast (it changes memory use and numerics)."),
    rule("PRT415", "bnb-module-swap", NAME,
         "A hand-written helper that walks a model and swaps `nn.Linear` children for bitsandbytes layers.",
         Category.REPLACE, effort_hours=1.0,
         explanation="The helper builds `bnb.nn.Linear8bitLt`/`Linear4bit` layers (often with `Int8Params`/"
         "`Params4bit` weights) and `setattr`s them into the model. Port the whole helper, not its calls: "
         "build the model with `torch.nn.Linear` and quantize it once with "
         "`torchao.quantization.quantize_(model, Int8WeightOnlyConfig(), filter_fn=...)` (per-row int8 "
         "weights, no LLM.int8 outlier path: an approximation), or keep bitsandbytes>=0.50 on ROCm. porter "
         "never rewrites a layer inside such a helper: replacing one class while the helper still assigns "
         "bitsandbytes parameters would leave a half-ported, still bnb-dependent module."),
    rule("PRT421", "hf-bitsandbytes-config", NAME,
         "transformers `BitsAndBytesConfig`: 8-bit maps to TorchAoConfig(Int8WeightOnlyConfig()) (approx).",
         Category.REPLACE, fix=Applicability.UNSAFE, effort_hours=1.0,
         explanation="`load_in_8bit=True` → `TorchAoConfig(quant_type=Int8WeightOnlyConfig(), "
         "modules_to_not_convert=<llm_int8_skip_modules>)`: per-row int8 weights instead of LLM.int8 "
         "(int8 weights and activations, outliers above `llm_int8_threshold`=6.0 in fp16). Unsafe fix. "
         "4-bit configs are flagged: the default `bnb_4bit_quant_type` is fp4 (no torchao format) and nf4 "
         "has no stable TorchAoConfig path; `bnb_4bit_compute_dtype=None` means fp32 compute. "
         "CPU offload and trainable fp16 weights block the rewrite."),
    rule("PRT422", "torchao-string-quant-type", NAME,
         "`TorchAoConfig(\"int8_weight_only\")`: transformers 5 accepts only config instances.",
         Category.SHIM, effort_hours=0.25,
         explanation="Pass an `AOBaseConfig` instance, e.g. `TorchAoConfig(quant_type=Int8WeightOnlyConfig())`."),
    rule("PRT423", "torchao-removed-api", NAME,
         "A torchao API removed before 0.18 (`prototype.low_bit_optim`, snake_case quant factories).",
         Category.SHIM, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="`torchao.prototype.low_bit_optim.X` moved to `torchao.optim.X` (same class): safe "
         "fix. The snake_case factories (`int8_weight_only()`...) became config classes "
         "(`Int8WeightOnlyConfig`...) whose defaults changed (`version=2` tensors), so porter only flags them."),
)


# -- the LibCST trigger ------------------------------------------------------------------------
# ``python_gate`` below is derived from every report site of ``visitor.QuantizationVisitor``; a
# finding needs at least one of:
#   1. a Name/Attribute chain resolving through the file's imports to
#      - ``bitsandbytes.optim.*`` / ``bitsandbytes.nn.*``: constructions (PRT400-403, PRT410-415)
#        and references as values (``_reference``: aliases, Arg values, base classes);
#      - ``peft.prepare_model_for_{kbit,int8}_training`` (PRT427);
#      - ``transformers[.utils.quantization_config].BitsAndBytesConfig`` / ``TorchAoConfig`` (PRT421/422);
#      - ``torchao.quantization.<removed factory>`` or ``torchao.prototype.low_bit_optim.*`` (PRT423).
#      A resolved name starts with the root of an import binding's target (module-level rebindings
#      resolve through imports), so the index holds a binding rooted at that package, whose name the
#      import statement spells out; and LibCST compares identifiers as written, so the last name of
#      the chain (or of the import that binds it) is in the text: "bitsandbytes" (import), one of
#      PEFT_KBIT, "BitsAndBytesConfig"/"TorchAoConfig", a REMOVED_FACTORIES name or "low_bit_optim".
#   2. ``from torchao.prototype.low_bit_optim import ...`` anywhere (PRT423): "low_bit_optim" in the text.
#   3. a keyword argument ``load_in_8bit=``/``load_in_4bit=`` (PRT420/PRT424): the identifier in the text.
#   4. a string literal (each part of an implicit concatenation is read on its own by LibCST, the
#      whole by ``literal()``): a dict or subscript key "load_in_8bit"/"load_in_4bit" (PRT424), a
#      value of HF_BNB_OPTIMS (PRT425), a dotted path "bitsandbytes.X" (PRT426) or a `.startswith()`
#      argument equal to "bitsandbytes"/"bitsandbytes."/"bnb"/"bnb." (PRT426). ``ast`` folds the parts
#      into one Constant whose value contains each part's value, so some str Constant contains one of
#      these words or equals "bnb"/"bnb.". The raw text proves nothing here: an escape (``"\x62nb"``)
#      or a concatenation (``"load_in_" "8bit"``, read whole by ``literal()``) hides the word.
_KBIT_WORDS = ("load_in_8bit", "load_in_4bit", "low_bit_optim")
_IMPORT_WORDS = {
    "bitsandbytes": ("bitsandbytes",),
    "peft": ("prepare_model_for_kbit_training", "prepare_model_for_int8_training"),
    "transformers": ("BitsAndBytesConfig", "TorchAoConfig"),
    "torchao": tuple(REMOVED_FACTORIES),
}
_LITERAL_WORDS = re.compile("|".join(re.escape(w) for w in (*HF_BNB_OPTIMS, "bitsandbytes", "load_in_8bit",
                                                            "load_in_4bit")))
_BNB_PREFIXES = ("bnb", "bnb.")


def python_gate(ctx: PyContext) -> bool:
    """Whether ``QuantizationVisitor`` can report anything on this file (see the derivation above)."""
    text = ctx.text
    if any(w in text for w in _KBIT_WORDS):  # 2, 3 (and 4's "load_in_" keys when written plainly)
        return True
    roots = {root for root, words in _IMPORT_WORDS.items() if root in text and any(w in text for w in words)}
    if roots and any(b.target.split(".", 1)[0] in roots for b in ctx.ast_imports.statements):  # 1
        return True
    for node in ast.walk(ctx.tree):  # 4
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in _BNB_PREFIXES or _LITERAL_WORDS.search(node.value) is not None):
            return True
    return False


FAMILY = Family(
    name=NAME,
    title="bitsandbytes → torch.optim / torchao, and transformers quantization switches",
    order=40,
    rules=RULES,
    tokens=("bitsandbytes", "prepare_model_for_", "load_in_8bit", "load_in_4bit", "BitsAndBytesConfig", "TorchAoConfig",
            "low_bit_optim", "weight_only", "float8_dynamic", "_8bit", "_32bit", "rmsprop_bnb"),
    python="porter.codemods.quantization.visitor:QuantizationVisitor",
    python_gate="porter.codemods.quantization:python_gate",
    checkers={"yaml": "porter.codemods.quantization.visitor:check_yaml"},
    description="Replaces bitsandbytes' 32-bit Adam optimizers with torch.optim (bnb's decoupled weight "
    "decay preserved), moves transformers' removed `load_in_8bit=`/`load_in_4bit=` kwargs into "
    "`quantization_config=BitsAndBytesConfig(...)`, and, with --unsafe-fixes, moves 8-bit optimizers, "
    "LLM.int8 configs and modules to torchao / torch.nn. Strategy `bitsandbytes-rocm` keeps bitsandbytes.",
    verified="Fixture tests for every rule; CPU parity of the 32-bit Adam rewrite against a pure-torch "
    "reference of bnb's kernel math (with and without weight decay); int8 weight-only torchao error bounds; "
    "negative tests for traps 5, 21, 22 and 30.",
    review="8-bit/4-bit quantization never matches across libraries: re-evaluate model quality after an "
    "unsafe fix; optimizer and quantized-model checkpoints are not interchangeable.",
    options=(
        Option("strategy", "string", "torchao", "`bitsandbytes-rocm` keeps the code on bitsandbytes and turns "
               "the torchao rewrites into pin advice.", choices=STRATEGIES),
    ),
)
