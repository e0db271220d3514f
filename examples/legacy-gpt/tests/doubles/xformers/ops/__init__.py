"""Test double of ``xformers.ops`` (memory_efficient_attention and the basic attention biases).

Documented semantics implemented here (xformers ``ops/fmha/__init__.py``, ``attn_bias.py``):

* inputs are ``[B, M, H, K]`` (or ``[B, M, K]``, meaning one head); value may have ``Kv != K``;
  query, key and value must have the same number of heads (no GQA broadcast in 4-D);
* ``scale=None`` means ``K ** -0.5``; ``p`` (dropout) is applied whenever it is > 0;
* ``LowerTriangularMask`` is a causal mask aligned to the **top-left** corner:
  query ``i`` attends key ``j`` iff ``j <= i``, also when ``Mq != Mkv``;
* ``LowerTriangularFromBottomRightMask`` is aligned to the bottom-right corner (``j <= i + Mkv - Mq``);
* a ``torch.Tensor`` bias is added to the scores (broadcast to ``[B, H, Mq, Mkv]``).
"""

import torch

__all__ = [
    "memory_efficient_attention",
    "AttentionBias",
    "LowerTriangularMask",
    "LowerTriangularFromBottomRightMask",
]


class AttentionBias:
    """Base class of the structured biases."""

    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        raise NotImplementedError


class LowerTriangularMask(AttentionBias):
    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        mq, mk = shape[-2], shape[-1]
        keep = torch.ones(mq, mk, dtype=torch.bool, device=device).tril(diagonal=0)
        return torch.zeros(mq, mk, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))


class LowerTriangularFromBottomRightMask(AttentionBias):
    def materialize(self, shape, dtype=torch.float32, device="cpu"):
        mq, mk = shape[-2], shape[-1]
        keep = torch.ones(mq, mk, dtype=torch.bool, device=device).tril(diagonal=mk - mq)
        return torch.zeros(mq, mk, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))


def memory_efficient_attention(query, key, value, attn_bias=None, p=0.0, scale=None, *, op=None,
                               output_dtype=None):
    three_d = query.dim() == 3
    if three_d:
        query, key, value = query[:, :, None], key[:, :, None], value[:, :, None]
    if query.dim() != 4:
        raise NotImplementedError("this double supports [B, M, H, K] and [B, M, K] inputs only")
    if not (query.shape[2] == key.shape[2] == value.shape[2]):
        raise ValueError("query, key and value must have the same number of heads "
                         f"(got {query.shape[2]}, {key.shape[2]}, {value.shape[2]})")
    k_dim = query.shape[-1]
    s = k_dim ** -0.5 if scale is None else scale
    q = query.float().transpose(1, 2)
    k = key.float().transpose(1, 2)
    v = value.float().transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-1, -2)) * s  # (B, H, Mq, Mkv)
    if isinstance(attn_bias, AttentionBias):
        scores = scores + attn_bias.materialize(scores.shape, device=scores.device)
    elif isinstance(attn_bias, torch.Tensor):
        scores = scores + attn_bias.float()
    elif attn_bias is not None:
        raise NotImplementedError(f"attn_bias {type(attn_bias).__name__} is not modelled by the double")
    probs = torch.softmax(scores, dim=-1)
    if p > 0.0:
        probs = torch.nn.functional.dropout(probs, p=p, training=True)
    out = torch.matmul(probs, v).transpose(1, 2).contiguous()
    out = out.to(output_dtype or query.dtype)
    return out[:, :, 0] if three_d else out
