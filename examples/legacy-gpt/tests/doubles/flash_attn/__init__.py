"""Test double of flash-attn 2.x for CPU test runs (pure torch, slow, exact math).

Implements the documented semantics of ``flash_attn.flash_attn_func`` as of flash-attn >= 2.1:

* layout ``(B, S, H, D)`` for q, k, v and the output;
* ``causal=True`` is aligned to the **bottom-right** corner of the (Sq, Sk) score matrix:
  query row ``i`` may attend key ``j`` iff ``j <= i + (Sk - Sq)`` (changed in 2.1; 2.0 was top-left);
* ``window_size=(left, right)``: key ``j`` is visible iff
  ``i + Sk - Sq - left <= j <= i + Sk - Sq + right`` (-1 = unbounded; ``causal`` forces right = 0);
* ``softcap > 0``: ``score = softcap * tanh(score / softcap)`` after scaling, before masks and ALiBi;
* ``alibi_slopes`` ((H,) or (B, H)): adds ``-slope * |i + Sk - Sq - j|``;
* GQA/MQA: ``Hq % Hk == 0`` and query head ``h`` uses KV head ``h // (Hq // Hk)``;
* ``softmax_scale=None`` means ``D ** -0.5``; rows with no visible key output 0;
* ``dropout_p`` is applied whenever it is > 0 (the caller passes 0.0 in eval).

The real kernels accept only fp16/bf16 CUDA tensors; this double also accepts fp32 CPU tensors
(it computes in fp32 and returns the input dtype) so the repo's tests run on a laptop.
"""

import torch

__version__ = "2.5.6"

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func"]


def _visible(sq, sk, causal, window_size, device):
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    diag = i + (sk - sq)  # bottom-right alignment
    keep = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if right >= 0:
        keep &= j <= diag + right
    if left >= 0:
        keep &= j >= diag - left
    return keep, (diag - j).abs()


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise RuntimeError("flash_attn_func expects (batch, seqlen, nheads, headdim) tensors")
    b, sq, hq, d = q.shape
    _, sk, hk, _ = k.shape
    if v.shape[:3] != k.shape[:3]:
        raise RuntimeError("k and v must have the same batch, seqlen and nheads")
    if hq % hk != 0:
        raise RuntimeError("Number of heads in key/value must divide number of heads in query")
    if d > 256:
        raise RuntimeError("FlashAttention forward only supports head dimension at most 256")
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    group = hq // hk

    qf = q.float().transpose(1, 2)  # (B, Hq, Sq, D)
    # query head h reads KV head h // group: consecutive grouping
    kf = k.float().transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, dim=1)

    scores = torch.matmul(qf, kf.transpose(-1, -2)) * scale  # (B, H, Sq, Sk)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    keep, dist = _visible(sq, sk, causal, tuple(window_size), q.device)
    if alibi_slopes is not None:
        slopes = alibi_slopes.float()
        slopes = slopes[None, :, None, None] if slopes.dim() == 1 else slopes[:, :, None, None]
        scores = scores - slopes * dist.float()
    scores = scores.masked_fill(~keep, float("-inf"))

    lse = torch.logsumexp(scores, dim=-1)  # (B, H, Sq); -inf on fully masked rows
    probs = torch.exp(scores - lse[..., None])
    probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows -> zero output
    if dropout_p > 0.0:
        probs = torch.nn.functional.dropout(probs, p=dropout_p, training=True)
    out = torch.matmul(probs, vf).transpose(1, 2).contiguous().to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    q, k, v = qkv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    k, v = kv.unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)

