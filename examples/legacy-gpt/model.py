"""
GPT-style decoder used for the legacy-gpt experiments.

Started from a nanoGPT fork in late 2022, then moved to FlashAttention-2 (June 2023),
rotary embeddings, RMSNorm and grouped-query attention (n_kv_heads < n_heads) so the
7B-ish configs fit the KV cache on a single A100-80GB at 8k context.

Attention backends, in order of preference:
  1. flash-attn >= 2.1  (flash_attn_func, (B, S, H, D) layout, native GQA)
  2. xformers memory_efficient_attention (needs the KV heads repeated by hand)
There is intentionally no "slow" path: the math path does not fit in memory at 8k.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from apex.normalization import FusedLayerNorm, FusedRMSNorm

try:
    from flash_attn import flash_attn_func
    HAS_FLASH = True
except ImportError:
    HAS_FLASH = False

try:
    import xformers.ops as xops
    HAS_XFORMERS = True
except ImportError:
    HAS_XFORMERS = False


@dataclass
class GPTConfig:
    vocab_size: int = 50304  # GPT-2 vocab padded up to a multiple of 64
    block_size: int = 2048   # max context (KV cache length)
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int = 4       # GQA: every KV head serves n_head // n_kv_head query heads
    n_embd: int = 768
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    bias: bool = False
    rope_theta: float = 10000.0
    # muP-style attention: scores scaled by 1/d instead of 1/sqrt(d) (see README, "Scaling")
    mup_attn: bool = True
    use_flash: bool = True
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.n_embd // self.n_head


def precompute_rope(head_dim, max_len, theta=10000.0, device=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    t = torch.arange(max_len, device=device).float()
    freqs = torch.outer(t, inv_freq)  # (S, D/2)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    # x: (B, S, H, D), NeoX-style halves; cos/sin: (S, D/2)
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos = cos[None, :, None, :].to(x.dtype)
    sin = sin[None, :, None, :].to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def repeat_kv(x, n_rep):
    """(B, S, Hkv, D) -> (B, S, Hkv * n_rep, D); query head h reads KV head h // n_rep."""
    if n_rep == 1:
        return x
    B, S, Hkv, D = x.shape
    return x[:, :, :, None, :].expand(B, S, Hkv, n_rep, D).reshape(B, S, Hkv * n_rep, D)


class KVCache:
    """Pre-allocated per-layer key/value cache in flash-attn layout (B, S_max, Hkv, D)."""

    def __init__(self, n_layer, batch_size, max_len, n_kv_head, head_dim, device=None, dtype=torch.float32):
        shape = (batch_size, max_len, n_kv_head, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layer)]
        self.max_len = max_len

    def update(self, layer, start_pos, k, v):
        end = start_pos + k.size(1)
        assert end <= self.max_len, "KV cache overflow"
        self.k[layer][:, start_pos:end] = k
        self.v[layer][:, start_pos:end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]


class CausalSelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        assert config.n_head % config.n_kv_head == 0
        self.layer_idx = layer_idx
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.n_rep = config.n_head // config.n_kv_head
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.n_embd, self.n_head * self.head_dim, bias=config.bias)
        self.wk = nn.Linear(config.n_embd, self.n_kv_head * self.head_dim, bias=config.bias)
        self.wv = nn.Linear(config.n_embd, self.n_kv_head * self.head_dim, bias=config.bias)
        self.wo = nn.Linear(self.n_head * self.head_dim, config.n_embd, bias=config.bias)
        self.attn_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.softmax_scale = 1.0 / self.head_dim if config.mup_attn else 1.0 / math.sqrt(self.head_dim)
        self.use_flash = HAS_FLASH and config.use_flash

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        B, T, C = x.size()
        q = self.wq(x).view(B, T, self.n_head, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_head, self.head_dim)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)

        if kv_cache is not None:
            # decode: T == 1 query against start_pos + 1 cached keys
            k, v = kv_cache.update(self.layer_idx, start_pos, k, v)

        dropout_p = self.attn_dropout if self.training else 0.0
        if self.use_flash:
            # flash-attn >= 2.1 aligns the causal mask to the bottom-right corner, so a single
            # decode query sees the whole cache. GQA is handled inside the kernel.
            y = flash_attn_func(q, k, v, dropout_p, softmax_scale=self.softmax_scale, causal=True)
        elif HAS_XFORMERS:
            k = repeat_kv(k, self.n_rep)
            v = repeat_kv(v, self.n_rep)
            # LowerTriangularMask is top-left aligned: only valid while q and k have the same
            # length (prefill from an empty cache, training). One decode token needs no mask.
            attn_bias = xops.LowerTriangularMask() if T > 1 else None
            y = xops.memory_efficient_attention(q, k, v, attn_bias, dropout_p, self.softmax_scale)
        else:
            raise RuntimeError("legacy-gpt needs flash-attn>=2.1 or xformers (pip install -r requirements.txt)")

        y = y.view(B, T, C)
        return self.resid_dropout(self.wo(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = int(config.mlp_ratio * config.n_embd)
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.ln_1 = FusedRMSNorm(config.n_embd)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = FusedRMSNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x, cos, sin, kv_cache=None, start_pos=0):
        x = x + self.attn(self.ln_1(x), cos, sin, kv_cache, start_pos)
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
            ln_f=FusedLayerNorm(config.n_embd, eps=config.norm_eps),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

        cos, sin = precompute_rope(config.head_dim, config.block_size, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("wo.weight") or name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def new_kv_cache(self, batch_size, max_len=None, device=None, dtype=None):
        c = self.config
        return KVCache(c.n_layer, batch_size, max_len or c.block_size, c.n_kv_head, c.head_dim,
                       device=device or self.lm_head.weight.device,
                       dtype=dtype or self.lm_head.weight.dtype)

    def forward(self, idx, targets=None, kv_cache=None, start_pos=0):
        B, T = idx.size()
        assert start_pos + T <= self.config.block_size, f"sequence too long: {start_pos + T}"
        cos = self.rope_cos[start_pos:start_pos + T]
        sin = self.rope_sin[start_pos:start_pos + T]
        x = self.transformer.drop(self.transformer.wte(idx))
        for block in self.transformer.h:
            x = block(x, cos, sin, kv_cache, start_pos)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizer_groups(self, weight_decay):
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 else no_decay).append(p)
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
