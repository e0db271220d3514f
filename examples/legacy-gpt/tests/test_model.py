import pytest
import torch
from conftest import tiny_model

import model as model_mod
from generate import generate


def _tokens(batch, length, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=g)


def test_prefill_forward_shapes_and_causality(model, config):
    idx = _tokens(2, 12, config.vocab_size)
    logits, loss = model(idx)
    assert logits.shape == (2, 12, config.vocab_size)
    assert loss is None and torch.isfinite(logits).all()
    # changing the last token must not change the earlier positions
    idx2 = idx.clone()
    idx2[:, -1] = (idx2[:, -1] + 1) % config.vocab_size
    logits2, _ = model(idx2)
    torch.testing.assert_close(logits2[:, :-1], logits[:, :-1])
    assert not torch.allclose(logits2[:, -1], logits[:, -1])


@pytest.mark.parametrize("use_flash", [True, False])
def test_kv_cache_decode_matches_full_forward(use_flash):
    # a decode step is 1 query against the whole cache: the causal mask must be bottom-right aligned
    m = tiny_model(use_flash=use_flash).eval()
    vocab = m.config.vocab_size
    prompt, new = 7, 5
    idx = _tokens(2, prompt + new, vocab, seed=1)
    full, _ = m(idx)
    cache = m.new_kv_cache(2, max_len=prompt + new)
    logits, _ = m(idx[:, :prompt], kv_cache=cache, start_pos=0)
    torch.testing.assert_close(logits, full[:, :prompt], rtol=1e-5, atol=1e-5)
    for pos in range(prompt, prompt + new):
        step, _ = m(idx[:, pos:pos + 1], kv_cache=cache, start_pos=pos)
        assert step.shape == (2, 1, vocab)
        torch.testing.assert_close(step[:, 0], full[:, pos], rtol=1e-5, atol=1e-5)


def test_xformers_fallback_matches_flash_path():
    flash = tiny_model(seed=3, use_flash=True).eval()
    xfm = tiny_model(seed=3, use_flash=False).eval()
    assert flash.transformer.h[0].attn.use_flash and not xfm.transformer.h[0].attn.use_flash
    idx = _tokens(1, 10, flash.config.vocab_size, seed=2)
    torch.testing.assert_close(flash(idx)[0], xfm(idx)[0], rtol=1e-5, atol=1e-5)


def test_gqa_shapes(config):
    m = tiny_model().eval()
    attn = m.transformer.h[0].attn
    assert config.n_kv_head < config.n_head
    assert attn.wk.out_features == config.n_kv_head * config.head_dim
    assert attn.wq.out_features == config.n_head * config.head_dim


def test_softmax_scale_reaches_the_kernel():
    idx = _tokens(1, 9, 96, seed=4)
    a = tiny_model(seed=5, mup_attn=True).eval()(idx)[0]
    b = tiny_model(seed=5, mup_attn=False).eval()(idx)[0]
    assert not torch.allclose(a, b)


def test_greedy_generate_matches_uncached_argmax(model, config):
    idx = _tokens(1, 6, config.vocab_size, seed=6)
    out = generate(model, idx, max_new_tokens=6, temperature=0.0)
    ref = idx
    for _ in range(6):
        logits, _ = model(ref)
        ref = torch.cat([ref, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ref)


def test_sampling_uses_the_softmax_fallback(model, config):
    idx = _tokens(2, 4, config.vocab_size, seed=7)
    g = torch.Generator().manual_seed(0)
    out = generate(model, idx, max_new_tokens=3, temperature=0.8, top_k=10, generator=g)
    assert out.shape == (2, 7)
    assert model_mod.HAS_FLASH and model_mod.HAS_XFORMERS
