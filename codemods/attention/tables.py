"""The attention family's tables: the flash-attn and xformers names it knows and how it reads them
(part of the visitor in ``visitor.py``; the family is declared in ``__init__.py``).
"""

from __future__ import annotations

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


_SDPA_ORDER = ("score_mod", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
