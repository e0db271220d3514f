"""flash-attn and xformers attention → ``torch.nn.functional.scaled_dot_product_attention``.

Rules PRT100–PRT199 cover flash-attn, PRT200–PRT299 xformers. A call is rewritten only when the rewrite is exact under conditions this module
checks statically (arguments bound by the *source* signature, literal options, provable
sequence lengths, the repo's pinned flash-attn version); every other call is reported with
the argument or condition that blocked it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "attention"

# -- rules ------------------------------------------------------------------------------------

_SAFETY = (
    "**Fix safety.** The fix is *safe* because it is applied only when porter has checked, "
    "statically, every condition under which the rewrite is "
    "EXACT: the same math, differing only by floating-point rounding and, with "
    "`dropout_p > 0`, by the random stream. Ruff's convention (a fix that may change behaviour is unsafe) would "
    "call any flash→SDPA swap unsafe; porter does not, because an unchecked swap is never "
    "emitted at all: what it cannot prove is reported (fix: none) with the blocking argument. "
    "`deterministic=True` is the one approximation: SDPA has no per-call deterministic "
    "backward, so that fix is *unsafe* (needs `--unsafe-fixes`) and says so."
)

_FA_COMMON = (
    "flash-attn has no ROCm wheel on PyPI. PyTorch's SDPA computes the same attention with "
    "fused kernels on NVIDIA and AMD.\n\n"
    "What the rewrite does:\n\n"
    "- binds every argument by flash-attn's own signature (its positional slots differ from "
    "SDPA's: slot 4 is `dropout_p`, not `attn_mask`) and emits keywords only; a positional "
    "argument past `causal` is reported, because its meaning changed between releases;\n"
    "- transposes `(B, S, H, D)` to SDPA's `(B, H, S, D)` on the way in and back on the way "
    "out, adding `.contiguous()` when the result is later `.view`ed or returned;\n"
    "- `softmax_scale` → `scale=`; `dropout_p` unchanged (both apply it in eval mode too);\n"
    "- `causal=True`: `is_causal=True` when porter proves `Sq == Sk` (qkv-packed, the same "
    "tensor, or q/k unpacked from one tensor) or the repo pins flash-attn 2.0/v1 (top-left); "
    "otherwise `attn_mask=causal_lower_right(Sq, Sk)` (flash-attn ≥ 2.1 aligns the mask "
    "bottom-right). The version comes from the repo's manifests; when unknown porter assumes "
    "the current release and says so. When `Sq > Sk`, rows with no visible key are 0 in "
    "flash-attn; torch warns that its fused lower-right kernels may give NaN there;\n"
    "- `window_size=(l, r)` (literal) → a boolean `attn_mask` built with `tril`/`triu` on the "
    "offset `Sk - Sq` (`r = 0` when causal);\n"
    "- grouped/multi-query attention → `enable_gqa` (consecutive grouping, same as flash).\n\n"
    "- `softcap > 0` or `alibi_slopes` → `torch.nn.attention.flex_attention.flex_attention` with a "
    "`score_mod` applying, in flash-attn's order, the cap, then the ALiBi bias "
    "`-slope[b, h] * |i + Sk - Sq - j|`, then the causal/window masks (`-inf`; rows left empty "
    "give 0 in both). Exact (flex computes scores in fp32); only when `dropout_p` is literally 0, "
    "since flex has no dropout. Eager flex is slow: run it under `torch.compile`.\n\n"
    "Reported, not rewritten: `return_attn_probs=True` (SDPA returns no LSE/probabilities), "
    "softcap/ALiBi with dropout, non-literal windows or softcaps, positional arguments past "
    "`causal`, `*args/**kwargs`, and shapes porter would have to evaluate twice.\n\n"
    "Calls are found through the file's imports, function-local imports, module-level rebindings "
    "(`attn = flash_attn_func`) and attributes bound in the class (`self._attn = flash_attn_func`). "
    "A call through a private attribute bound once and only called in its class is rewritten (the "
    "binding goes with the last call); a public or conditionally bound attribute is reported. A name "
    "with a fallback binding in its availability gate (`except ImportError: def flash_attn_func(...)`) "
    "is never rewritten: without flash-attn the fallback is what runs. `flash_attn_func` with four or "
    "more positional arguments is taken as v2's `(q, k, v, dropout_p, ...)` when the module imports a "
    "`flash_attn_varlen_*` function (a v2-only name; v1 called it `flash_attn_unpadded_*`) or the repo "
    "pins v2.\n\n" + _SAFETY
)

RULES = (
    rule("PRT100", "flash-attn-func", NAME,
         "`flash_attn_func(q, k, v, ...)` → `F.scaled_dot_product_attention` (exact conditions checked).",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=1.0,
         explanation=_FA_COMMON,
         example="```python\nout = flash_attn_func(q, k, v, 0.1, causal=True)\n# becomes\n"
         "out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), "
         "v.transpose(1, 2), attn_mask=causal_lower_right(q.shape[1], k.shape[1]), "
         "dropout_p=0.1, enable_gqa=k.shape[2] != q.shape[2]).transpose(1, 2)\n```"),
    rule("PRT101", "flash-attn-qkvpacked-func", NAME,
         "`flash_attn_qkvpacked_func(qkv, ...)` → SDPA on `qkv[:, :, 0/1/2]` (Sq == Sk, so `is_causal`).",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=1.0,
         explanation="`qkv` is `(B, S, 3, H, D)`: the query, key and value are its slices along "
         "dim 2, so the lengths are equal and `causal=True` is exactly `is_causal=True` in every "
         "flash-attn version. Otherwise as PRT100.\n\n" + _FA_COMMON),
    rule("PRT102", "flash-attn-kvpacked-func", NAME,
         "`flash_attn_kvpacked_func(q, kv, ...)` → SDPA on `q` and `kv[:, :, 0/1]`.",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=1.0,
         explanation="`kv` is `(B, Sk, 2, Hk, D)`. Otherwise as PRT100.\n\n" + _FA_COMMON),
    rule("PRT103", "flash-attn-varlen", NAME,
         "Variable-length flash-attn (`cu_seqlens`): `flash_attn_varlen_*`, v1 `flash_attn_unpadded_*`.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="Packed `(T, H, D)` sequences with cumulative lengths. The portable routes "
         "are `torch.nn.attention.varlen.varlen_attn` (GPU only, torch ≥ 2.12, no dropout, "
         "bottom-right causal per sequence) or SDPA with a block-diagonal boolean mask; v1 names "
         "use top-left causal. porter reports these sites for a manual port."),
    rule("PRT104", "flash-attn-with-kvcache", NAME,
         "`flash_attn_with_kvcache(q, k_cache, v_cache, ...)`: rewritten only for a full cache without "
         "in-place updates.",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=3.0,
         explanation="With no `k`/`v` to append, no rotary, no `cache_seqlens`, `cache_batch_idx`, "
         "`cache_leftpad` or `block_table`, the call is attention over the whole cache with "
         "bottom-right causal alignment, rewritten as PRT100. Every other form updates the cache "
         "in place or masks per batch; porter reports it with the argument that blocked it.\n\n"
         + _SAFETY),
    rule("PRT105", "flash-attn-v1-func", NAME,
         "flash-attn v1 `flash_attn_func(qkv, cu_seqlens, dropout_p, max_s, ...)` (same name, other API).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="flash-attn v1's `flash_attn_func` is a variable-length, qkv-packed function "
         "with top-left causal alignment; v2 reused the name for `(q, k, v, ...)`. porter decides "
         "by the pinned version, the import form (only v2 exports it from `flash_attn`) and the "
         "arguments; when it cannot tell, or the call is v1, it reports the site."),
    rule("PRT110", "flash-attn-module", NAME,
         "flash-attn attention modules (`FlashSelfAttention`, `FlashCrossAttention`, v1 `FlashAttention`) → "
         "a portable SDPA class added to the file.",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=2.0,
         explanation="These modules hold no parameters (only an `nn.Dropout`), so porter adds a class with the "
         "same constructor and forward arguments (`SDPASelfAttention`, `SDPACrossAttention`, "
         "`SDPAFlashAttention`) that computes with SDPA: qkv/kv unpacked with `unbind(2)`, `(B, S, H, D)` "
         "transposed in and out, dropout `p if self.training else 0.0` (the modules, unlike the functions, "
         "apply dropout only in training), bottom-right causal for cross-attention, GQA via `enable_gqa`, "
         "and v1's `(out, None)` result. The constructor call is pointed at the new class; checkpoints load "
         "unchanged.\n\nApplied only when the constructor's `window_size`/`alibi_slopes`/`deterministic` are "
         "literal defaults and every call of the instance in the file (found through the attribute or "
         "name it is assigned to) passes no `cu_seqlens`/`max_seqlen`/`key_padding_mask`; the class "
         "raises `NotImplementedError` on those arguments in case a caller elsewhere passes them. "
         "`flash_attn.modules.mha.MHA` (a whole block with its own parameters) and v1 `FlashMHA` are "
         "reported for a manual port.\n\n" + _SAFETY),
    rule("PRT111", "flash-attn-3", NAME,
         "FlashAttention-3 (`flash_attn_interface`, Hopper only): port by hand.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=2.0,
         explanation="The FA3 package's functions returned `(out, softmax_lse)` in some releases and "
         "have their own arguments; porter does not rewrite them."),
    rule("PRT200", "xformers-memory-efficient-attention", NAME,
         "`xformers.ops.memory_efficient_attention` → `F.scaled_dot_product_attention` (exact conditions checked).",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=1.0,
         explanation="xformers has no ROCm wheel on PyPI (only experimental builds).\n\n"
         "What the rewrite does:\n\n"
         "- binds `(query, key, value, attn_bias, p, scale)` by xformers' signature (slot 6 is "
         "`scale`, SDPA's slot 6 is `is_causal`) and emits keywords only; `op=` only picks a kernel "
         "and is dropped;\n"
         "- moves the head axis with `.transpose(1, -2)` in and out: that is `transpose(1, 2)` for "
         "4-D `[B, M, H, K]` inputs and a no-op for 3-D `[B, M, K]` inputs (H = 1), which SDPA takes "
         "as they are; for 5-D `[B, M, G, H, K]` (xformers' GQA form) it gives `[B, H, G, M, K]`, so every "
         "(group, head) pair still attends on its own. A *tensor* bias is passed as it is, which fits "
         "3-D and 4-D inputs; a 5-D tensor bias would need its G and H axes swapped (not detected);\n"
         "- `attn_bias`: `None`; `LowerTriangularMask()` → `is_causal=True` (both top-left, also for "
         "Mq ≠ Mkv); `LowerTriangularFromBottomRightMask()` → `causal_lower_right(Mq, Mkv)`; local "
         "masks → a boolean `tril`/`triu` mask (xformers' window W counts the diagonal: flash's "
         "`left = W - 1`); `LowerTriangularMaskWithTensorBias(t)`/`.add_bias(t)` → `t` plus `-inf` "
         "above the diagonal; a tensor → `attn_mask=` (xformers adds it, SDPA adds a float mask);\n"
         "- `p` → `dropout_p`, `scale` → `scale=`.\n\n"
         "Reported, not rewritten: block-diagonal, padded-keys, paged and gappy biases (PRT201), "
         "`output_dtype`, a bias porter cannot identify as a tensor or a known mask, and shapes "
         "porter would have to evaluate twice.\n\n" + _SAFETY),
    rule("PRT201", "xformers-block-diagonal-bias", NAME,
         "`memory_efficient_attention` with a block-diagonal / padded / paged bias: port by hand.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="These biases pack several sequences into one `[1, T, H, K]` batch or describe a "
         "KV cache. The portable routes are `varlen_attn` (GPU, no dropout) or SDPA with a boolean "
         "block-diagonal mask built from the recorded lengths; `BlockDiagonalCausalMask` is top-left "
         "per block, unlike varlen's bottom-right."),
    rule("PRT202", "xformers-unbind", NAME,
         "`xformers.ops.unbind(x, dim)` → `torch.unbind(x, dim=dim)`.",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.1,
         explanation="xformers' `unbind` returns the same views as `torch.unbind` (its only difference is a "
         "cheaper backward when the pieces are stacked again). The rewrite keeps the arguments, bound by "
         "xformers' signature `(x, dim)`, as keywords.\n\n" + _SAFETY),
    rule("PRT210", "xformers-components", NAME,
         "`xformers.components` was removed in xformers 0.0.34: rebuild on SDPA / nn.MultiheadAttention.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=3.0,
         explanation="The whole `components` package (attention registry, feedforward, positional "
         "embeddings) was deleted upstream; there is no drop-in replacement."),
)


# The exact gate of AttentionVisitor: every finding it reports comes from a call whose callee (or the
# `self.<attr>` binding it goes through, PRT1xx/PRT2xx alike) resolves through the file's imports to
# a qualified name starting with `flash_attn` (flash_attn, flash_attn_interface...) or `xformers.`;
# the import index resolves a name only through an import statement, and a resolved name keeps the
# imported module as its prefix. No such import statement anywhere in the file: nothing to report
# (a file that only mentions xformers or flash_attn in a string or a comment is not LibCST-parsed).
def _attention_module(module: str) -> bool:
    return module.startswith("flash_attn") or module.split(".")[0] == "xformers"


def python_gate(ctx: PyContext) -> bool:
    """Can AttentionVisitor report on this file? (exact: see the derivation above)"""
    from porter.codemods._py_gates import imports_module

    return imports_module(ctx, _attention_module)


FAMILY = Family(
    name=NAME,
    title="flash-attn and xformers attention to PyTorch SDPA",
    order=20,
    rules=RULES,
    tokens=("flash_attn", "xformers"),
    python="porter.codemods.attention.visitor:AttentionVisitor",
    python_gate="porter.codemods.attention:python_gate",
    description="Rewrites flash-attn and xformers attention calls to "
    "`torch.nn.functional.scaled_dot_product_attention` (softcap/ALiBi to `flex_attention`), which "
    "run on NVIDIA and AMD, replaces flash-attn's attention modules with parameter-free SDPA classes, "
    "and removes the imports that only served them. Only rewrites that are exact under conditions "
    "porter checked are applied; the rest are reported with the blocking argument.",
    verified="Fixture tests (tests/fixtures/attention) pin every rewrite and every refusal; the parity "
    "suite (tests/test_attention_parity.py) runs each rewritten snippet and the rewritten fixture modules "
    "against pure-torch references of flash-attn's and xformers' documented semantics (masked softmax, "
    "bottom-right causal, windows, softcap, ALiBi, GQA, packed layouts, biases, module dropout gating) "
    "over random shapes including Sq != Sk and Sq = 1, and checks that the naive rewrites "
    "(top-left causal masks with Sq != Sk, a dropped softmax scale, swapped layouts) fail it.",
    review="Sites reported without a fix (varlen/cu_seqlens, KV-cache updates, block-diagonal biases, "
    "return_attn_probs, softcap/ALiBi with dropout, biases of unknown type). With Sq > Sk a bottom-right "
    "causal mask leaves rows without keys: flash-attn returns 0 there, torch's fused lower-right kernels "
    "may return NaN (torch warns). Dropout draws differ from flash-attn's random stream. flex_attention "
    "is slow in eager mode: compile it. `enable_gqa` and lower-right masks on ROCm: verify on the device.",
)
