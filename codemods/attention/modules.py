"""Portable stand-ins for flash-attn's attention modules (private module of the attention family).

``FlashSelfAttention``/``FlashCrossAttention`` (flash_attn.modules.mha, v2) and v1's
``flash_attn.flash_attention.FlashAttention`` hold no parameters (only an ``nn.Dropout``), so a
class with the same constructor and forward arguments, computing with SDPA, keeps checkpoints
and call sites working. porter inserts the class into the file and points the constructor at
it; the text below is the class body template (``{torch}`` is the file's name for torch).
"""

from __future__ import annotations

SELF = '''

class SDPASelfAttention({torch}.nn.Module):
    """Portable stand-in for flash_attn's FlashSelfAttention, written by porter.

    Same arguments and (B, S, 3, H, D) input; computed with scaled_dot_product_attention.
    Variable-length input (cu_seqlens) is not supported.
    """

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = {torch}.nn.Dropout(attention_dropout)

    def forward(self, qkv, causal=None, cu_seqlens=None, max_seqlen=None):
        if cu_seqlens is not None:
            raise NotImplementedError("variable-length (cu_seqlens) attention was not ported")
        causal = self.causal if causal is None else causal
        q, k, v = qkv.unbind(2)
        out = {torch}.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            dropout_p=self.drop.p if self.training else 0.0,
            is_causal=causal,
            scale=self.softmax_scale,
        )
        return out.transpose(1, 2).contiguous()
'''

CROSS = '''

class SDPACrossAttention({torch}.nn.Module):
    """Portable stand-in for flash_attn's FlashCrossAttention, written by porter.

    Same arguments, q (B, Sq, H, D) and kv (B, Sk, 2, Hk, D); causal is aligned bottom-right
    as in flash-attn >= 2.1. Variable-length input (cu_seqlens) is not supported.
    """

    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.drop = {torch}.nn.Dropout(attention_dropout)

    def forward(self, q, kv, causal=None, cu_seqlens=None, max_seqlen=None, cu_seqlens_k=None, max_seqlen_k=None):
        if cu_seqlens is not None:
            raise NotImplementedError("variable-length (cu_seqlens) attention was not ported")
        causal = self.causal if causal is None else causal
        k, v = kv.unbind(2)
        mask = causal_lower_right(q.shape[1], k.shape[1]) if causal else None
        out = {torch}.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            dropout_p=self.drop.p if self.training else 0.0,
            scale=self.softmax_scale,
            enable_gqa=k.shape[2] != q.shape[2],
        )
        return out.transpose(1, 2).contiguous()
'''

V1 = '''

class SDPAFlashAttention({torch}.nn.Module):
    """Portable stand-in for flash-attn v1's flash_attention.FlashAttention, written by porter.

    Same arguments, (B, S, 3, H, D) input and (out, None) result; computed with
    scaled_dot_product_attention. key_padding_mask and cu_seqlens are not supported.
    """

    def __init__(self, softmax_scale=None, attention_dropout=0.0):
        super().__init__()
        self.softmax_scale = softmax_scale
        self.dropout_p = attention_dropout

    def forward(self, qkv, key_padding_mask=None, causal=False, cu_seqlens=None, max_s=None, need_weights=False):
        assert not need_weights
        if key_padding_mask is not None or cu_seqlens is not None:
            raise NotImplementedError("key_padding_mask / cu_seqlens attention was not ported")
        q, k, v = qkv.unbind(2)
        out = {torch}.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            dropout_p=self.dropout_p if self.training else 0.0,
            is_causal=causal,
            scale=self.softmax_scale,
        )
        return out.transpose(1, 2).contiguous(), None
'''

# qualified name -> (class name, template, constructor positional slots, keywords, forward
# positional slot of cu_seqlens, forward keywords that select an unported path)
MODULES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...], int, tuple[str, ...]]] = {
    "flash_attn.modules.mha.FlashSelfAttention": (
        "SDPASelfAttention", SELF, ("causal", "softmax_scale", "attention_dropout"),
        ("window_size", "alibi_slopes", "deterministic"), 2, ("cu_seqlens", "max_seqlen"),
    ),
    "flash_attn.modules.mha.FlashCrossAttention": (
        "SDPACrossAttention", CROSS, ("causal", "softmax_scale", "attention_dropout"),
        ("alibi_slopes", "window_size", "deterministic"), 3,
        ("cu_seqlens", "max_seqlen", "cu_seqlens_k", "max_seqlen_k"),
    ),
    "flash_attn.flash_attention.FlashAttention": (
        "SDPAFlashAttention", V1, ("softmax_scale", "attention_dropout"), (), 1,
        ("key_padding_mask", "cu_seqlens", "max_s"),
    ),
}
