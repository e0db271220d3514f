"""Parity of the quantization rewrites against pure-torch references of bitsandbytes (CPU).

The ORIGINAL snippet runs with tests/reference/quant_ref.py standing in for ``bitsandbytes``; the
snippet porter rewrote runs with real torch / torchao. Negative tests build the naive rewrites (the
plausible one-to-one swaps that are wrong) by hand and check that the same comparison rejects them.
"""

from __future__ import annotations

import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reference import quant_ref  # noqa: E402

from porter.testing import fixed  # noqa: E402

FAST = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def port(src: str, unsafe: bool = False) -> str:
    return fixed(src, family="quantization", unsafe=unsafe)


def run(src: str, fn: str, *args: object, fakes: dict | None = None) -> object:
    saved = {}
    try:
        for name, mod in (fakes or {}).items():
            saved[name] = sys.modules.get(name)
            sys.modules[name] = mod
        ns: dict = {"__name__": "snippet"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(src, "<snippet>", "exec"), ns)
            return ns[fn](*args)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


# -- 32-bit Adam ------------------------------------------------------------------------------------
def _train(src: str, seed: int, steps: int, shape: tuple[int, ...], fakes: dict | None = None) -> torch.Tensor:
    torch.manual_seed(seed)
    p = torch.nn.Parameter(torch.randn(*shape))
    grads = [torch.randn(*shape) for _ in range(steps)]

    def go() -> torch.Tensor:
        opt = run(src, "make", [p], fakes=fakes)
        for g in grads:
            p.grad = g.clone()
            opt.step()  # type: ignore[attr-defined]
        return p.detach().clone()

    return go()


def _adam_src(cls: str, args: str) -> str:
    return f"import bitsandbytes as bnb\n\n\ndef make(params):\n    return bnb.optim.{cls}(params{args})\n"


ADAM_CASES = st.tuples(
    st.sampled_from(["Adam", "AdamW", "PagedAdam", "AdamW32bit", "PagedAdamW32bit"]),
    st.sampled_from([1e-3, 3e-4, 1e-2]),
    st.sampled_from([None, 0.0, 0.1, 0.01]),
    st.sampled_from([(0.9, 0.999), (0.8, 0.95)]),
    st.sampled_from([(5,), (3, 7)]),
)


@FAST
@given(ADAM_CASES)
def test_adam32_rewrite_matches_bnb(case: tuple) -> None:
    cls, lr, wd, betas, shape = case
    args = f", lr={lr}, betas={betas}" + ("" if wd is None else f", weight_decay={wd}")
    src = _adam_src(cls, args)
    out = port(src, unsafe=True)
    assert "bnb." not in out and "import bitsandbytes" not in out
    got = _train(out, 0, 6, shape)
    cpu_backend = _train(src, 0, 6, shape, quant_ref.fake_modules(decay_after=False))
    gpu_kernel = _train(src, 0, 6, shape, quant_ref.fake_modules(decay_after=True))
    # exact (fp32 rounding) against bnb's CPU backend, which decays before the update like torch
    assert torch.allclose(got, cpu_backend, atol=1e-6, rtol=1e-6)
    effective_wd = wd if wd is not None else (0.01 if "AdamW" in cls else 0.0)
    if effective_wd == 0:
        assert torch.allclose(got, gpu_kernel, atol=1e-6, rtol=1e-6)
    else:
        # the GPU kernel decays after the update: each step differs by lr*wd*|update| <= lr*wd*lr*~1
        bound = 6 * lr * effective_wd * lr * 1.5 + 2e-6  # plus fp32 rounding of |p| ~ 1
        assert (got - gpu_kernel).abs().max() <= bound


def test_gpu_kernel_decay_placement_is_a_real_difference() -> None:
    """Why PRT400 is unsafe with weight decay: the difference exceeds fp32 rounding."""
    src = _adam_src("AdamW", ", lr=1e-2, weight_decay=0.1")
    got = _train(port(src, unsafe=True), 3, 10, (64,))
    gpu = _train(src, 3, 10, (64,), quant_ref.fake_modules(decay_after=True))
    diff = (got - gpu).abs().max().item()
    assert 1e-5 < diff <= 10 * 1e-2 * 0.1 * 1e-2 * 1.5


def test_trap5_naive_coupled_adam_is_rejected() -> None:
    src = _adam_src("Adam", ", lr=1e-2, weight_decay=0.1")
    naive = "import torch\n\n\ndef make(params):\n    return torch.optim.Adam(params, lr=1e-2, weight_decay=0.1)\n"
    want = _train(src, 1, 6, (8,), quant_ref.fake_modules(decay_after=False))
    assert torch.allclose(_train(port(src, unsafe=True), 1, 6, (8,)), want, atol=1e-6)
    assert not torch.allclose(_train(naive, 1, 6, (8,)), want, atol=1e-4)


def test_naive_adamw_without_explicit_decay_is_rejected() -> None:
    """bnb Adam (wd=0) → torch AdamW with its default wd=0.01 would decay silently."""
    src = _adam_src("Adam", ", lr=1e-2")
    naive = "import torch\n\n\ndef make(params):\n    return torch.optim.AdamW(params, lr=1e-2)\n"
    want = _train(src, 2, 6, (8,), quant_ref.fake_modules())
    assert torch.allclose(_train(port(src), 2, 6, (8,)), want, atol=1e-6)
    assert not torch.allclose(_train(naive, 2, 6, (8,)), want, atol=1e-6)


# -- 8-bit Adam → torchao (constructed, not stepped: the first step compiles for ~20 s) -----------------
def test_adam8bit_rewrite_builds_torchao_adamw8bit_with_bnb_hyperparameters() -> None:
    pytest.importorskip("torchao")
    src = _adam_src("Adam8bit", ", lr=2e-3, betas=(0.8, 0.9), weight_decay=0.05")
    out = port(src, unsafe=True)
    opt = run(out, "make", [torch.nn.Parameter(torch.zeros(4096))])
    import torchao.optim

    assert type(opt) is torchao.optim.AdamW8bit
    group = opt.param_groups[0]  # type: ignore[attr-defined]
    assert group["betas"] == (0.8, 0.9) and group["weight_decay"] == 0.05 and group["eps"] == 1e-8
    assert float(group["lr"]) == pytest.approx(2e-3)
    assert opt.block_size == 256  # type: ignore[attr-defined]
    # default weight decays are written out: Adam8bit 0, AdamW8bit 1e-2 (torchao's AdamW8bit default is 1e-2)
    plain = run(port(_adam_src("Adam8bit", ""), unsafe=True), "make", [torch.nn.Parameter(torch.zeros(8))])
    assert plain.param_groups[0]["weight_decay"] == 0  # type: ignore[attr-defined]


# -- Linear8bitLt → nn.Linear ----------------------------------------------------------------------
LINEAR8 = """import bitsandbytes as bnb
import torch


def build(d_in, d_out):
    torch.manual_seed(0)
    layer = bnb.nn.Linear8bitLt(d_in, d_out, bias=True, threshold=THRESHOLD)
    return layer
"""


@pytest.mark.parametrize("threshold", [0.0, 6.0])
def test_linear8bitlt_rewrite_is_within_int8_error(threshold: float) -> None:
    src = LINEAR8.replace("THRESHOLD", str(threshold))
    out = port(src, unsafe=True)
    assert "nn.Linear(" in out and "bnb" not in out
    ref = run(src, "build", 64, 32, fakes=quant_ref.fake_modules())
    new = run(out, "build", 64, 32)
    assert set(new.state_dict()) == set(ref.state_dict()) == {"weight", "bias"}  # type: ignore[attr-defined]
    new.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    torch.manual_seed(1)
    x = torch.randn(16, 64)
    x[:, 3] *= 20  # an outlier feature
    want, got = ref(x), new(x)  # type: ignore[operator]
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 0.02  # the stated difference: int8 rounding, about 1% relative
    assert rel > 0  # and it is an approximation, not exact


def test_int8_weight_only_torchao_is_within_stated_tolerance() -> None:
    """The torchao route PRT410/PRT421 point to: quantize_ with Int8WeightOnlyConfig on CPU."""
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    ref = torch.nn.Linear(64, 32)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(8, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_(lin, Int8WeightOnlyConfig())
    with torch.no_grad():
        got, full = lin(x), ref(x)
        emulated = quant_ref.int8_weight_only_linear(x, ref.weight, ref.bias)
        bnb = quant_ref.llm_int8_linear(x, ref.weight, ref.bias, threshold=6.0)
    rel = ((got - full).norm() / full.norm()).item()
    assert rel < 0.01  # "about 0.5% relative" in the PRT421 message
    assert ((emulated - full).norm() / full.norm()).item() < 0.01  # per-row int8 weights in pure torch
    # LLM.int8 (bnb) and torchao int8 weight-only are different quantizers: never identical
    assert not torch.allclose(got, bnb, atol=1e-5)


# -- Embedding ----------------------------------------------------------------------------------------
EMBED = """import bitsandbytes as bnb
import torch


def build(n, d, pad):
    torch.manual_seed(0)
    emb = bnb.nn.Embedding(n, d, padding_idx=pad)
    return emb
"""


def test_embedding_rewrite_keeps_xavier_init_and_padding_row() -> None:
    out = port(EMBED, unsafe=True)
    assert "xavier_uniform_" in out
    n, d, pad = 300, 40, 7
    ref = run(EMBED, "build", n, d, pad, fakes=quant_ref.fake_modules())
    new = run(out, "build", n, d, pad)
    bound = (6 / (n + d)) ** 0.5
    for emb in (ref, new):
        w = emb.weight.detach()  # type: ignore[attr-defined]
        assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
        assert torch.all(w[pad] == 0)
    idx = torch.tensor([[1, 7, 299]])
    new.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    assert torch.equal(new(idx), ref(idx))  # type: ignore[operator]
    naive = EMBED.replace("bnb.nn.Embedding", "torch.nn.Embedding").replace("import bitsandbytes as bnb\n", "")
    w = run(naive, "build", n, d, pad).weight.detach()  # type: ignore[attr-defined]
    assert w.abs().max() > bound  # N(0, 1) init: the check rejects the naive swap
