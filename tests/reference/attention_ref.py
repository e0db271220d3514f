"""Pure-torch references of flash-attn's and xformers' attention, from their documented semantics.

Written from the flash-attn docstrings/README (bottom-right causal since 2.1, top-left before,
sliding windows, softcap then ALiBi, consecutive GQA grouping, zero output for rows that see
no key) and xformers' ``memory_efficient_attention``/``attn_bias`` docs. Everything is an
explicit masked softmax in float64: no SDPA, no flex_attention, so the references cannot share
a bug with the code porter emits.

``flash_attn_module(era)`` and ``xformers_ops_module()`` return module objects that stand in
for the real packages when the parity tests execute an *original* snippet.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch

# -- the core -------------------------------------------------------------------------------------


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    allowed: torch.Tensor | None = None,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention on ``(B, S, H, D)`` tensors; K/V may have fewer heads (query head h uses KV head
    ``h // (Hq // Hk)``). ``allowed`` is a boolean ``(Sq, Sk)`` matrix (True = may attend);
    ``bias`` is added to the scores (broadcast to ``(B, H, Sq, Sk)``). Rows with no allowed key
    (or only -inf scores) return 0. Computed in float64, returned in ``q``'s dtype."""
    dtype = q.dtype
    q64, k64, v64 = q.double(), k.double(), v.double()
    _, sq, hq, d = q64.shape
    sk, hk = k64.shape[1], k64.shape[2]
    assert hq % hk == 0, "query heads must be a multiple of KV heads"
    group = hq // hk
    kv_head = torch.arange(hq) // group  # consecutive grouping
    k64 = k64[:, :, kv_head]
    v64 = v64[:, :, kv_head]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    scores = torch.einsum("bqhd,bkhd->bhqk", q64, k64) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    if alibi_slopes is not None:
        slopes = alibi_slopes.double()
        slopes = slopes[None, :, None, None] if slopes.dim() == 1 else slopes[:, :, None, None]
        scores = scores - slopes * (i + sk - sq - j).abs()
    if bias is not None:
        scores = scores + bias.double()
    if allowed is None:
        allowed = torch.ones(sq, sk, dtype=torch.bool)
    scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    live = torch.isfinite(row_max)
    weights = torch.exp(scores - torch.where(live, row_max, torch.zeros_like(row_max)))
    denom = weights.sum(dim=-1, keepdim=True)
    probs = torch.where(live, weights / torch.where(live, denom, torch.ones_like(denom)), torch.zeros_like(weights))
    out = torch.einsum("bhqk,bkhd->bqhd", probs, v64)
    return out.to(dtype).contiguous()  # flash-attn and xformers return contiguous outputs


def band(sq: int, sk: int, *, causal: str | None = None, left: int = -1, right: int = -1) -> torch.Tensor:
    """Boolean (Sq, Sk) visibility. ``causal``: "bottom-right" (flash >= 2.1: j <= i + Sk - Sq),
    "top-left" (j <= i) or None. ``left``/``right``: flash window sides around the bottom-right
    diagonal (-1 = unbounded)."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    diag = i + sk - sq
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if causal == "bottom-right":
        ok &= j <= diag
    elif causal == "top-left":
        ok &= j <= i
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


# -- flash-attn ----------------------------------------------------------------------------------


def _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs, era):
    assert dropout_p == 0.0, "the reference cannot reproduce dropout draws"
    assert not return_attn_probs
    sq, sk = q.shape[1], k.shape[1]
    left, right = window_size
    if causal:
        right = 0  # flash forces the right side to 0 when causal
    if era == "v2.0":
        if left >= 0 or window_size[1] >= 0:
            raise TypeError("flash-attn 2.0 has no window_size")
        allowed = band(sq, sk, causal="top-left" if causal else None)
    else:
        allowed = band(sq, sk, causal="bottom-right" if causal else None, left=left, right=right)
    return masked_attention(q, k, v, scale=softmax_scale, allowed=allowed, softcap=softcap,
                            alibi_slopes=alibi_slopes)


def flash_attn_module(era: str = "v2.1+") -> types.ModuleType:
    """A stand-in for the ``flash_attn`` package (v2 API) with the semantics of ``era``."""
    mod = types.ModuleType("flash_attn")

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        return _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      return_attn_probs, era)

    def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                  softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        q, k, v = qkv.unbind(2)  # qkv is (B, S, 3, H, D)
        return _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      return_attn_probs, era)

    def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                 softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        k, v = kv.unbind(2)  # kv is (B, Sk, 2, Hk, D)
        return _flash(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      return_attn_probs, era)

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                                softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                                return_softmax_lse=False):
        assert k is None and v is None and cache_seqlens is None and rotary_cos is None
        return _flash(q, k_cache, v_cache, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes,
                      return_softmax_lse, era)

    for fn in (flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func, flash_attn_with_kvcache):
        setattr(mod, fn.__name__, fn)
    mod.flash_attn_interface = mod  # type: ignore[attr-defined]
    return mod


class FlashSelfAttention(torch.nn.Module):
    """flash_attn.modules.mha.FlashSelfAttention: qkv (B, S, 3, H, D); dropout only in training."""

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0, window_size=(-1, -1),
                 alibi_slopes=None, deterministic=False):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = torch.nn.Dropout(attention_dropout)
        self.window_size = window_size

    def forward(self, qkv, causal=None, cu_seqlens=None, max_seqlen=None):
        assert cu_seqlens is None
        causal = self.causal if causal is None else causal
        assert not self.training or self.drop.p == 0.0, "the reference cannot reproduce dropout draws"
        q, k, v = qkv.unbind(2)
        return _flash(q, k, v, 0.0, self.softmax_scale, causal, self.window_size, 0.0, None, False, "v2.1+")


class FlashCrossAttention(torch.nn.Module):
    """flash_attn.modules.mha.FlashCrossAttention: q (B, Sq, H, D), kv (B, Sk, 2, Hk, D)."""

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0, alibi_slopes=None,
                 window_size=(-1, -1), deterministic=False):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = torch.nn.Dropout(attention_dropout)
        self.window_size = window_size

    def forward(self, q, kv, causal=None, cu_seqlens=None, max_seqlen=None, cu_seqlens_k=None, max_seqlen_k=None):
        assert cu_seqlens is None
        causal = self.causal if causal is None else causal
        assert not self.training or self.drop.p == 0.0, "the reference cannot reproduce dropout draws"
        k, v = kv.unbind(2)
        return _flash(q, k, v, 0.0, self.softmax_scale, causal, self.window_size, 0.0, None, False, "v2.1+")


class FlashAttention(torch.nn.Module):
    """flash-attn v1 flash_attention.FlashAttention: returns (out, None); dropout only in training."""

    def __init__(self, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.softmax_scale = softmax_scale
        self.dropout_p = attention_dropout

    def forward(self, qkv, key_padding_mask=None, causal=False, cu_seqlens=None, max_s=None, need_weights=False):
        assert key_padding_mask is None and cu_seqlens is None
        assert not self.training or self.dropout_p == 0.0, "the reference cannot reproduce dropout draws"
        q, k, v = qkv.unbind(2)
        out = _flash(q, k, v, 0.0, self.softmax_scale, causal, (-1, -1), 0.0, None, False, "v2.0")
        return out, None


# -- xformers ------------------------------------------------------------------------------------


class _Bias:
    """An xformers attention-bias object: additive (Mq, Mk) bias (0 or -inf) plus an optional tensor."""

    def allowed(self, mq: int, mk: int) -> torch.Tensor:
        return torch.ones(mq, mk, dtype=torch.bool)

    tensor: torch.Tensor | None = None


class LowerTriangularMask(_Bias):
    """Top-left causal: query i sees keys j <= i (also when Mq != Mk)."""

    def allowed(self, mq: int, mk: int) -> torch.Tensor:
        i = torch.arange(mq)[:, None]
        j = torch.arange(mk)[None, :]
        return j <= i

    def add_bias(self, bias: torch.Tensor) -> LowerTriangularMaskWithTensorBias:
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    def __init__(self, bias: torch.Tensor) -> None:
        self.tensor = bias


class LowerTriangularFromBottomRightMask(_Bias):
    """Bottom-right causal: j <= i + Mk - Mq."""

    def allowed(self, mq: int, mk: int) -> torch.Tensor:
        i = torch.arange(mq)[:, None]
        j = torch.arange(mk)[None, :]
        return j <= i + mk - mq

    def make_local_attention(self, window_size: int) -> LowerTriangularFromBottomRightLocalAttentionMask:
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)


class LowerTriangularFromBottomRightLocalAttentionMask(_Bias):
    """Bottom-right causal band of ``window_size`` keys counting the diagonal itself."""

    def __init__(self, window_size: int) -> None:
        self.window_size = window_size

    def allowed(self, mq: int, mk: int) -> torch.Tensor:
        i = torch.arange(mq)[:, None]
        j = torch.arange(mk)[None, :]
        diag = i + mk - mq
        return (j <= diag) & (j > diag - self.window_size)


class LocalAttentionFromBottomRightMask(_Bias):
    """Keys within ``window_left`` before and ``window_right`` after the bottom-right diagonal."""

    def __init__(self, window_left: int, window_right: int) -> None:
        self.window_left = window_left
        self.window_right = window_right

    def allowed(self, mq: int, mk: int) -> torch.Tensor:
        i = torch.arange(mq)[:, None]
        j = torch.arange(mk)[None, :]
        diag = i + mk - mq
        return (j >= diag - self.window_left) & (j <= diag + self.window_right)


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                               output_dtype=None):
    """xformers semantics: ``[B, M, H, K]``, or ``[B, M, K]`` meaning one head; the bias is added."""
    assert p == 0.0, "the reference cannot reproduce dropout draws"
    assert output_dtype is None
    if query.dim() == 5:  # [B, M, G, H, K]: every (group, head) pair attends on its own
        assert attn_bias is None or not isinstance(attn_bias, torch.Tensor), "5-D tensor biases: not modelled"
        b_, m_, g_, h_, _ = query.shape
        flat = [t.reshape(t.shape[0], t.shape[1], g_ * h_, t.shape[-1]) for t in (query, key, value)]
        out = memory_efficient_attention(*flat, attn_bias=attn_bias, scale=scale)
        return out.reshape(b_, m_, g_, h_, out.shape[-1])
    three_d = query.dim() == 3
    if three_d:
        query, key, value = query[:, :, None], key[:, :, None], value[:, :, None]
    assert query.shape[2] == key.shape[2], "xformers 4-D inputs need equal head counts"
    mq, mk = query.shape[1], key.shape[1]
    allowed = None
    tensor = None
    if isinstance(attn_bias, torch.Tensor):
        tensor = attn_bias[:, None] if three_d else attn_bias  # 3-D bias is [B, Mq, Mk]
    elif attn_bias is not None:
        allowed = attn_bias.allowed(mq, mk)
        if attn_bias.tensor is not None:
            tensor = attn_bias.tensor[:, None] if three_d else attn_bias.tensor
    out = masked_attention(query, key, value, scale=scale, allowed=allowed, bias=tensor)
    return out[:, :, 0] if three_d else out


def unbind(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
    """xformers.ops.unbind: the slices of ``x`` along ``dim`` (a cheaper backward is its only difference)."""
    return tuple(x.select(dim, i) for i in range(x.shape[dim]))


def xformers_ops_module() -> types.ModuleType:
    """A stand-in for ``xformers.ops`` (and ``xformers.ops.fmha``/``attn_bias``)."""
    mod = types.ModuleType("xformers.ops")
    names: dict[str, Any] = {
        "memory_efficient_attention": memory_efficient_attention,
        "memory_efficient_attention_forward": memory_efficient_attention,
        "unbind": unbind,
        "LowerTriangularMask": LowerTriangularMask,
        "LowerTriangularMaskWithTensorBias": LowerTriangularMaskWithTensorBias,
        "LowerTriangularFromBottomRightMask": LowerTriangularFromBottomRightMask,
        "LowerTriangularFromBottomRightLocalAttentionMask": LowerTriangularFromBottomRightLocalAttentionMask,
        "LocalAttentionFromBottomRightMask": LocalAttentionFromBottomRightMask,
    }
    for key, value in names.items():
        setattr(mod, key, value)
    mod.fmha = mod  # type: ignore[attr-defined]
    mod.attn_bias = mod  # type: ignore[attr-defined]
    return mod


def fake_modules(era: str = "v2.1+") -> dict[str, types.ModuleType]:
    """``sys.modules`` entries that make ``import flash_attn`` / ``import xformers.ops`` load the references."""
    fa = flash_attn_module(era)
    xops = xformers_ops_module()
    xf = types.ModuleType("xformers")
    xf.ops = xops  # type: ignore[attr-defined]
    mha = types.ModuleType("flash_attn.modules.mha")
    mha.FlashSelfAttention = FlashSelfAttention  # type: ignore[attr-defined]
    mha.FlashCrossAttention = FlashCrossAttention  # type: ignore[attr-defined]
    v1 = types.ModuleType("flash_attn.flash_attention")
    v1.FlashAttention = FlashAttention  # type: ignore[attr-defined]
    modules = types.ModuleType("flash_attn.modules")
    modules.mha = mha  # type: ignore[attr-defined]
    return {
        "flash_attn": fa,
        "flash_attn.flash_attn_interface": fa,
        "flash_attn.modules": modules,
        "flash_attn.modules.mha": mha,
        "flash_attn.flash_attention": v1,
        "xformers": xf,
        "xformers.ops": xops,
        "xformers.ops.fmha": xops,
        "xformers.ops.fmha.attn_bias": xops,
    }
