"""The test doubles must implement the original libraries' documented semantics; check them
against naive references so the rest of the suite can trust them."""

import pynvml
import pytest
import torch
import torch.nn.functional as F
import xformers.ops as xops
from apex.normalization import FusedLayerNorm, FusedRMSNorm
from apex.optimizers import FusedAdam
from bitsandbytes.optim import Adam8bit
from flash_attn import flash_attn_func


def naive_attention(q, k, v, keep, scale):
    # q: (B, Sq, H, D), k/v: (B, Sk, H, D); keep: (Sq, Sk) bool
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def qkv(b=2, sq=4, sk=4, hq=4, hk=4, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, hq, d, generator=g), torch.randn(b, sk, hk, d, generator=g),
            torch.randn(b, sk, hk, d, generator=g))


@pytest.mark.parametrize("sq,sk", [(1, 6), (2, 5), (5, 5)])
def test_flash_causal_is_bottom_right(sq, sk):
    q, k, v = qkv(sq=sq, sk=sk)
    keep = torch.ones(sq, sk, dtype=torch.bool).tril(diagonal=sk - sq)
    torch.testing.assert_close(flash_attn_func(q, k, v, causal=True), naive_attention(q, k, v, keep, 8 ** -0.5))


def test_flash_single_decode_query_sees_every_key():
    q, k, v = qkv(sq=1, sk=6)
    torch.testing.assert_close(flash_attn_func(q, k, v, causal=True), flash_attn_func(q, k, v, causal=False))


def test_flash_fully_masked_rows_are_zero():
    q, k, v = qkv(sq=3, sk=2)  # row 0: j <= 0 + 2 - 3 = -1, nothing visible
    out = flash_attn_func(q, k, v, causal=True)
    assert torch.count_nonzero(out[:, 0]) == 0 and torch.isfinite(out).all()


def test_flash_gqa_groups_consecutive_heads():
    q, k, v = qkv(hq=6, hk=2, sq=3, sk=3)
    out = flash_attn_func(q, k, v, causal=True)
    for h in range(6):
        kv = h // 3  # docstring example: heads {0,1,2} -> 0, {3,4,5} -> 1
        ref = flash_attn_func(q[:, :, h:h + 1], k[:, :, kv:kv + 1], v[:, :, kv:kv + 1], causal=True)
        torch.testing.assert_close(out[:, :, h:h + 1], ref)


def test_flash_softmax_scale_and_default():
    q, k, v = qkv()
    full = torch.ones(4, 4, dtype=torch.bool)
    torch.testing.assert_close(flash_attn_func(q, k, v), naive_attention(q, k, v, full, 8 ** -0.5))
    torch.testing.assert_close(flash_attn_func(q, k, v, 0.0, 0.125), naive_attention(q, k, v, full, 0.125))


def test_flash_window_and_positional_dropout_slot():
    q, k, v = qkv(sq=5, sk=5)
    i = torch.arange(5)[:, None]
    j = torch.arange(5)[None, :]
    keep = (j <= i) & (j >= i - 1)
    torch.testing.assert_close(flash_attn_func(q, k, v, causal=True, window_size=(1, 1)),
                               naive_attention(q, k, v, keep, 8 ** -0.5))
    torch.manual_seed(0)
    dropped = flash_attn_func(q, k, v, 0.5)  # 4th positional argument is dropout_p
    assert not torch.allclose(dropped, flash_attn_func(q, k, v))


def test_xformers_lower_triangular_is_top_left():
    q, k, v = qkv(sq=2, sk=5)
    keep = torch.ones(2, 5, dtype=torch.bool).tril(diagonal=0)
    out = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())
    torch.testing.assert_close(out, naive_attention(q, k, v, keep, 8 ** -0.5))
    br = xops.memory_efficient_attention(q, k, v, xops.LowerTriangularFromBottomRightMask())
    torch.testing.assert_close(br, flash_attn_func(q, k, v, causal=True))


def test_xformers_positional_scale_and_head_check():
    q, k, v = qkv(sq=3, sk=3)
    full = torch.ones(3, 3, dtype=torch.bool)
    # (query, key, value, attn_bias, p, scale)
    torch.testing.assert_close(xops.memory_efficient_attention(q, k, v, None, 0.0, 0.3),
                               naive_attention(q, k, v, full, 0.3))
    q6, k2, v2 = qkv(hq=6, hk=2)
    with pytest.raises(ValueError):
        xops.memory_efficient_attention(q6, k2, v2)


def test_apex_norms():
    x = torch.randn(3, 5, 16)
    ln = FusedLayerNorm(16)
    rms = FusedRMSNorm(16)
    assert ln.eps == 1e-5 and rms.eps == 1e-5
    torch.testing.assert_close(ln(x), F.layer_norm(x, (16,), eps=1e-5))
    with torch.no_grad():
        rms.weight.uniform_(0.5, 1.5)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * rms.weight
    torch.testing.assert_close(rms(x), ref)
    assert rms(x.bfloat16()).dtype == torch.bfloat16


def _run(opt_cls, steps=3, **kw):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(4, 3))
    opt = opt_cls([p], **kw)
    for s in range(steps):
        p.grad = torch.randn(4, 3, generator=torch.Generator().manual_seed(s))
        opt.step()
    return p.detach()


def test_fused_adam_defaults_to_adamw_without_decay():
    torch.testing.assert_close(_run(FusedAdam, lr=1e-2), _run(torch.optim.AdamW, lr=1e-2, weight_decay=0.0))
    torch.testing.assert_close(_run(FusedAdam, lr=1e-2, weight_decay=0.1),
                               _run(torch.optim.AdamW, lr=1e-2, weight_decay=0.1))
    torch.testing.assert_close(_run(FusedAdam, lr=1e-2, weight_decay=0.1, adam_w_mode=False),
                               _run(torch.optim.Adam, lr=1e-2, weight_decay=0.1))
    assert not torch.allclose(_run(FusedAdam, lr=1e-2, bias_correction=False), _run(FusedAdam, lr=1e-2))


def test_fused_adam_zero_grad_sets_none():
    p = torch.nn.Parameter(torch.ones(2))
    opt = FusedAdam([p])
    p.grad = torch.ones(2)
    opt.zero_grad()
    assert p.grad is None


def test_bnb_adam8bit_decay_is_decoupled():
    torch.testing.assert_close(_run(Adam8bit, lr=1e-2), _run(torch.optim.Adam, lr=1e-2))
    bnb = _run(Adam8bit, lr=1e-2, weight_decay=0.5)
    adamw = _run(torch.optim.AdamW, lr=1e-2, weight_decay=0.5)
    adam_l2 = _run(torch.optim.Adam, lr=1e-2, weight_decay=0.5)
    # same decoupled decay as AdamW (bnb applies it after the Adam step: second-order difference),
    # far from torch Adam's coupled L2
    assert (bnb - adamw).abs().max() * 50 < (bnb - adam_l2).abs().max()


def test_pynvml_units():
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlShutdown()
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 287_500  # milliwatts
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    assert mem.used + mem.free == mem.total
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlDeviceGetHandleByIndex(1)
