"""Parity suite of the apex family: porter's rewritten code against apex's documented math.

Each test writes a small apex snippet, ports it with porter (``apex`` must be gone from the
result, which is then executed with real torch on CPU) and compares it with the pure-torch
reference of apex's semantics in tests/reference/apex_ref.py: optimizer trajectories over
several steps with fixed gradients, norm outputs over shapes and dtypes (hypothesis), cross
entropy and the DDP gradient reduction. The negative tests build the naive rewrites (the
plausible one-to-one swaps that are wrong) by hand and check that the same comparison rejects them, so the suite can fail.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reference import apex_ref  # noqa: E402

from porter.engine import fix  # noqa: E402
from porter.findings import Applicability  # noqa: E402
from porter.testing import findings, settings_for  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")
FAST = settings(max_examples=20, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
STEPS = 6
SHAPES = [(4, 3), (3,), (2, 2, 2)]


# -- helpers -----------------------------------------------------------------------------------

def port(src: str, *, unsafe: bool = False, **options: Any) -> str:
    settings = settings_for("apex", unsafe=unsafe, **({"apex": options} if options else {}))
    out = fix("snippet.py", src, "python", settings).text
    assert "apex" not in out, f"apex still referenced after the port:\n{out}"
    return out


def load(src: str) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(src, "<ported>", "exec"), ns)  # noqa: S102 - porter's own output on a test snippet
    return ns


def _params(dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype) for s in SHAPES]


def _grads(dtype: torch.dtype = torch.float32) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [[torch.randn(s, generator=g).to(dtype) for s in SHAPES] for _ in range(STEPS)]


def trajectory(make: Callable[[list[torch.Tensor]], Any], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    params = [torch.nn.Parameter(p.clone()) for p in _params(dtype)]
    opt = make(params)
    for grads in _grads(dtype):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return [p.detach().float() for p in params]


def same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    return all(torch.allclose(x.float(), y.float(), rtol=rtol, atol=atol) for x, y in zip(a, b, strict=True))


def _ported_optimizer(call: str, extra_args: str = "", **options: Any) -> Callable[..., Any]:
    cls = call.split("(")[0]
    src = f"from apex.optimizers import {cls}\n\n\ndef make(params{extra_args}):\n    return {call}\n"
    ns = load(port(src, **options))
    return ns["make"]


# -- FusedAdam (PRT300) ----------------------------------------------------------------------

ADAM_OPTS = st.fixed_dictionaries({
    "lr": st.sampled_from([1e-3, 3e-2, 0.1]),
    "betas": st.sampled_from([(0.9, 0.999), (0.8, 0.95)]),
    "eps": st.sampled_from([1e-8, 1e-6, 1e-3]),
    "wd": st.sampled_from([None, 0.0, 0.05, 0.3]),
    "mode": st.sampled_from([None, True, False, "variable-true", "variable-false"]),
    "positional": st.booleans(),
})


def _adam_call(o: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if o["positional"]:  # apex's slots: lr, bias_correction, betas, eps
        args = [repr(o["lr"]), "True", repr(o["betas"]), repr(o["eps"])]
    else:
        args = [f"lr={o['lr']!r}", f"betas={o['betas']!r}", f"eps={o['eps']!r}"]
    if o["wd"] is not None:
        args.append(f"weight_decay={o['wd']!r}")
    mode = o["mode"]
    if isinstance(mode, bool):
        args.append(f"adam_w_mode={mode}")
    elif mode is not None:
        args.append("adam_w_mode=mode")
    kwargs = dict(lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["wd"] or 0.0,
                  adam_w_mode=mode in (None, True, "variable-true"))
    return "FusedAdam(params, " + ", ".join(args) + ")", kwargs


@FAST
@given(ADAM_OPTS)
def test_fused_adam_matches_apex(o: dict[str, Any]) -> None:
    call, ref_kwargs = _adam_call(o)
    make = _ported_optimizer(call, ", mode", **{"assume-fp32-params": True})
    flag = o["mode"] == "variable-true"
    got = trajectory(lambda ps: make(ps, flag))
    want = trajectory(lambda ps: apex_ref.ApexAdam(ps, **ref_kwargs))
    assert same(got, want), call


def test_fused_adam_default_is_unsafe_and_opt_in_is_safe() -> None:
    src = "from apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3)\n"
    (f,) = [f for f in findings(src, family="apex") if f.code == "PRT300"]
    assert f.fix == Applicability.UNSAFE and "fp32" in f.message
    settings = settings_for("apex", apex={"assume-fp32-params": True})
    (g,) = [f for f in findings(src, settings=settings) if f.code == "PRT300"]
    assert g.fix == Applicability.SAFE
    # evidence of half/bf16 parameters in the file keeps it unsafe even with the option
    half = src + "model = model.half()\n"
    (h,) = [f for f in findings(half, settings=settings) if f.code == "PRT300"]
    assert h.fix == Applicability.UNSAFE and "line 3" in h.message


def test_fused_adam_bf16_params_drift_from_apex() -> None:
    """Why the rewrite is UNSAFE: with bf16 params torch's bf16 moments drift from apex's fp32 ones."""
    make = _ported_optimizer("FusedAdam(params, lr=1e-2)", unsafe=True)

    def run(build: Callable[[list[torch.Tensor]], Any], dtype: torch.dtype) -> torch.Tensor:
        g = torch.Generator().manual_seed(1)
        params = [torch.nn.Parameter(torch.zeros(64, dtype=dtype))]  # near 0, bf16 resolves small updates
        opt = build(params)
        for _ in range(20):
            params[0].grad = torch.randn(64, generator=g).to(dtype)
            opt.step()
        return params[0].detach().float()

    def ref(ps: list[torch.Tensor]) -> apex_ref.ApexAdam:
        return apex_ref.ApexAdam(ps, lr=1e-2)

    drift_bf16 = (run(make, torch.bfloat16) - run(ref, torch.bfloat16)).abs().max()
    drift_fp32 = (run(make, torch.float32) - run(ref, torch.float32)).abs().max()
    assert drift_fp32 < 1e-6  # exact (to rounding) for fp32 parameters
    assert drift_bf16 > 1e-4 and drift_bf16 > 100 * drift_fp32


def test_trap4_adamw_default_weight_decay() -> None:
    """Naive `AdamW(params, lr=...)` adds torch's weight_decay=0.01; apex's default is 0."""
    want = trajectory(lambda ps: apex_ref.ApexAdam(ps, lr=0.1))
    naive = trajectory(lambda ps: torch.optim.AdamW(ps, lr=0.1))
    assert not same(naive, want)
    ported = _ported_optimizer("FusedAdam(params, lr=0.1)", unsafe=True)
    assert same(trajectory(ported), want)


def test_trap6_adam_w_mode_false_is_l2_adam() -> None:
    """Naive AdamW for `adam_w_mode=False` decays decoupled; apex adds L2 to the gradient."""
    want = trajectory(lambda ps: apex_ref.ApexAdam(ps, lr=0.05, adam_w_mode=False, weight_decay=0.2))
    naive = trajectory(lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.2))
    assert not same(naive, want)
    ported = _ported_optimizer("FusedAdam(params, lr=0.05, adam_w_mode=False, weight_decay=0.2)", unsafe=True)
    assert same(trajectory(ported), want)


def test_positional_slots_bound_by_apex_order() -> None:
    """Slot 3 is bias_correction in apex, betas in torch: a positional copy breaks."""
    want = trajectory(lambda ps: apex_ref.ApexAdam(ps, lr=0.01, betas=(0.8, 0.9), eps=1e-3))
    with pytest.raises((TypeError, ValueError)):
        trajectory(lambda ps: torch.optim.AdamW(ps, 0.01, True, (0.8, 0.9), 1e-3))  # type: ignore[arg-type]
    ported = _ported_optimizer("FusedAdam(params, 0.01, True, (0.8, 0.9), 1e-3)", unsafe=True)
    assert same(trajectory(ported), want)


def test_no_bias_correction_is_flagged_and_would_differ() -> None:
    src = "from apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3, bias_correction=False)\n"
    (f,) = findings(src, family="apex")
    assert f.fix == Applicability.NONE and "bias_correction" in f.message
    want = trajectory(lambda ps: apex_ref.ApexAdam(ps, lr=0.01, bias_correction=False))
    assert not same(trajectory(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0)), want)


# -- FusedSGD (PRT301) and FusedAdagrad (PRT302) ---------------------------------------------

SGD_OPTS = st.fixed_dictionaries({
    "lr": st.sampled_from([0.01, 0.1]),
    "momentum": st.sampled_from([0.0, 0.9]),
    "dampening": st.sampled_from([0.0, 0.1]),
    "wd": st.sampled_from([0.0, 0.01]),
    "nesterov": st.booleans(),
    "positional": st.booleans(),
})


@FAST
@given(SGD_OPTS)
def test_fused_sgd_matches_apex(o: dict[str, Any]) -> None:
    nesterov = o["nesterov"] and o["momentum"] > 0 and o["dampening"] == 0
    vals = (o["lr"], o["momentum"], o["dampening"], o["wd"], nesterov)
    if o["positional"]:
        call = "FusedSGD(params, " + ", ".join(repr(v) for v in vals) + ")"
    else:
        names = ("lr", "momentum", "dampening", "weight_decay", "nesterov")
        call = "FusedSGD(params, " + ", ".join(f"{n}={v!r}" for n, v in zip(names, vals, strict=True)) + ")"
    make = _ported_optimizer(call)
    want = trajectory(lambda ps: apex_ref.ApexSGD(ps, *vals))
    assert same(trajectory(make), want), call


def test_sgd_wd_after_momentum_is_flagged_and_would_differ() -> None:
    src = "from apex.optimizers import FusedSGD\nopt = FusedSGD(params, lr=0.1, momentum=0.9, weight_decay=0.1, wd_after_momentum=True)\n"
    (f,) = findings(src, family="apex")
    assert f.fix == Applicability.NONE and "wd_after_momentum" in f.message
    want = trajectory(lambda ps: apex_ref.ApexSGD(ps, 0.1, 0.9, 0.0, 0.1, False, True))
    assert not same(trajectory(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1)), want)


@FAST
@given(st.sampled_from([0.01, 0.1]), st.sampled_from([1e-10, 1e-3]), st.sampled_from([0.0, 0.05]), st.booleans())
def test_fused_adagrad_matches_apex(lr: float, eps: float, wd: float, positional: bool) -> None:
    call = (f"FusedAdagrad(params, {lr!r}, {eps!r}, {wd!r})" if positional
            else f"FusedAdagrad(params, lr={lr!r}, eps={eps!r}, weight_decay={wd!r})")
    make = _ported_optimizer(call)
    want = trajectory(lambda ps: apex_ref.ApexAdagrad(ps, lr, eps, wd))
    assert same(trajectory(make), want), call
    if positional and eps >= 1e-3:  # eps lands on lr_decay and torch keeps eps=1e-10
        # naive positional copy: torch's slots are (lr, lr_decay, weight_decay, ...)
        naive = trajectory(lambda ps: torch.optim.Adagrad(ps, lr, eps, wd))
        assert not same(naive, want)


# -- norms (PRT310-PRT313, PRT352) --------------------------------------------------------------

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}

NORM_CASE = st.fixed_dictionaries({
    "batch": st.lists(st.integers(1, 4), min_size=1, max_size=2),
    "norm": st.lists(st.integers(1, 8), min_size=1, max_size=2),
    "dtype": st.sampled_from(DTYPES),
    "eps": st.sampled_from([None, 1e-5, 1e-6, 1e-3]),
    "affine": st.booleans(),
    "scale": st.sampled_from([1.0, 1e-3]),
})


def _input(case: dict[str, Any]) -> torch.Tensor:
    g = torch.Generator().manual_seed(sum(case["batch"]) * 31 + sum(case["norm"]))
    x = torch.randn(*case["batch"], *case["norm"], generator=g) * case["scale"]
    return x.to(case["dtype"])


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    rtol, atol = TOL[dtype]
    return a.dtype == b.dtype and torch.allclose(a.float(), b.float(), rtol=rtol, atol=atol)


def _module(call: str) -> torch.nn.Module:
    cls = call.split("(")[0]
    module = "apex.contrib.layer_norm" if cls == "FastLayerNorm" else "apex.normalization"
    src = f"from {module} import {cls}\n\n\ndef make(shape):\n    return {call}\n"
    return load(port(src, unsafe=True))["make"]


def _randomise(m: torch.nn.Module, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + 1)
    m.to(dtype)


@FAST
@given(NORM_CASE, st.sampled_from(["FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm"]))
def test_norm_modules_match_apex(case: dict[str, Any], cls: str) -> None:
    """Mixed* (UNSAFE) are compared with weights in the input dtype, where apex's output dtype agrees."""
    shape = tuple(case["norm"])
    args = "shape" + (f", eps={case['eps']!r}" if case["eps"] is not None else "")
    if not cls.startswith("Mixed"):
        args += f", elementwise_affine={case['affine']}"
    make = _module(f"{cls}({args})")
    m = make(shape)
    _randomise(m, case["dtype"])
    x = _input(case)
    eps = case["eps"] if case["eps"] is not None else 1e-5  # apex modules default to 1e-5
    if cls.endswith("LayerNorm"):
        want = apex_ref.layer_norm(x, shape, m.weight, m.bias, eps)
    else:
        want = apex_ref.rms_norm(x, shape, m.weight, eps)
    assert _close(m(x), want, case["dtype"])


@FAST
@given(NORM_CASE)
def test_fast_layer_norm_matches_apex(case: dict[str, Any]) -> None:
    shape = case["norm"][-1]
    make = _module("FastLayerNorm(shape" + (f", eps={case['eps']!r}" if case["eps"] else "") + ")")
    m = make(shape)
    _randomise(m, case["dtype"])
    case = dict(case, norm=[shape])
    x = _input(case)
    want = apex_ref.layer_norm(x, (shape,), m.weight, m.bias, case["eps"] or 1e-5)
    assert _close(m(x), want, case["dtype"])


def test_trap8_rmsnorm_eps() -> None:
    """Naive `nn.RMSNorm(h)` uses eps=finfo(fp32).eps, apex 1e-5: visible on small activations."""
    x = torch.randn(4, 16) * 1e-3
    w = torch.ones(16)
    want = apex_ref.rms_norm(x, (16,), w, 1e-5)
    naive = torch.nn.RMSNorm(16)
    assert not torch.allclose(naive(x), want, rtol=1e-3, atol=1e-4)
    ported = _module("FusedRMSNorm(shape)")(16)
    assert torch.allclose(ported(x), want, rtol=1e-5, atol=1e-6)


FUNCTIONAL = {
    # name: (apex positional call, reference)
    "fused_layer_norm_affine": ("fn(x, w, b, shape)", lambda x, w, b, s, e: apex_ref.layer_norm(x, s, w, b, e)),
    "fused_layer_norm": ("fn(x, shape)", lambda x, w, b, s, e: apex_ref.layer_norm(x, s, None, None, e)),
    "fused_rms_norm_affine": ("fn(x, w, shape)", lambda x, w, b, s, e: apex_ref.rms_norm(x, s, w, e)),
    "fused_rms_norm": ("fn(x, shape)", lambda x, w, b, s, e: apex_ref.rms_norm(x, s, None, e)),
    "mixed_dtype_fused_layer_norm_affine": (
        "fn(x, w, b, shape)", lambda x, w, b, s, e: apex_ref.layer_norm(x, s, w, b, e, out_dtype=w.dtype)),
    "mixed_dtype_fused_rms_norm_affine": (
        "fn(x, w, shape)", lambda x, w, b, s, e: apex_ref.rms_norm(x, s, w, e, out_dtype=w.dtype)),
}


def _functional(name: str, call: str) -> Callable[..., torch.Tensor]:
    src = (f"from apex.normalization.fused_layer_norm import {name} as fn\n\n\n"
           f"def run(x, w, b, shape):\n    return {call}\n")
    return load(port(src))["run"]


@FAST
@given(NORM_CASE, st.sampled_from(sorted(FUNCTIONAL)), st.booleans())
def test_functional_norms_match_apex(case: dict[str, Any], name: str, mixed_weights: bool) -> None:
    call, ref = FUNCTIONAL[name]
    shape = tuple(case["norm"])
    x = _input(case)
    g = torch.Generator().manual_seed(3)
    wdtype = torch.float32 if (mixed_weights and name.startswith("mixed")) else case["dtype"]
    w = (torch.randn(shape, generator=g) * 0.5 + 1).to(wdtype)
    b = torch.randn(shape, generator=g).to(wdtype)
    run = _functional(name, call)
    got = run(x, w, b, shape)
    want = ref(x, w, b, shape, 1e-6)  # apex's functional default eps
    assert _close(got, want, case["dtype"] if got.dtype == case["dtype"] else torch.bfloat16), (name, got.dtype)


@FAST
@given(st.sampled_from(DTYPES), st.sampled_from([None, 1e-6]), st.booleans(), st.sampled_from([1, 2, 4]))
def test_group_norm_and_sync_batchnorm_match_apex(dtype: torch.dtype, eps: float | None, affine: bool,
                                                  groups: int) -> None:
    extra = (f", eps={eps!r}" if eps else "") + f", affine={affine}"
    src = ("from apex.contrib.group_norm import GroupNorm\nfrom apex.parallel import SyncBatchNorm\n\n\n"
           f"def make():\n    return GroupNorm({groups}, 8{extra}), SyncBatchNorm(8{extra})\n")
    gn, bn = load(port(src))["make"]()
    _randomise(gn, dtype)
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(2, 8, 3, 3, generator=g) * 0.01).to(dtype)  # small: eps matters
    want = apex_ref.group_norm(x, groups, gn.weight, gn.bias, eps or 1e-5)
    assert _close(gn(x), want, dtype)
    bn.eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(8, generator=g))
        bn.running_var.copy_(torch.rand(8, generator=g) + 0.5)
    xf = x.float()
    want_bn = apex_ref.batch_norm_eval(xf, bn.running_mean, bn.running_var, bn.weight, bn.bias, eps or 1e-5)
    assert _close(bn(xf), want_bn, torch.float32)


def test_trap_functional_argument_order_and_eps() -> None:
    x = torch.randn(3, 8) * 1e-3
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    want = apex_ref.layer_norm(x, (8,), w, b, 1e-6)
    with pytest.raises(TypeError):  # naive copy of apex's positional order
        torch.nn.functional.layer_norm(x, w, b, (8,))  # type: ignore[arg-type]
    naive_eps = torch.nn.functional.layer_norm(x, (8,), w, b)  # torch's eps=1e-5
    assert not torch.allclose(naive_eps, want, rtol=1e-4, atol=1e-5)
    assert torch.allclose(_functional("fused_layer_norm_affine", "fn(x, w, b, shape)")(x, w, b, (8,)), want,
                          rtol=1e-5, atol=1e-6)
    want_rms = apex_ref.rms_norm(x, (8,), w, 1e-6)
    naive_rms = torch.nn.functional.rms_norm(x, (8,), w)  # eps=None
    assert not torch.allclose(naive_rms, want_rms, rtol=1e-4, atol=1e-5)


def test_trap17_mixed_norm_output_dtype() -> None:
    """Mixed* return the parameter dtype: the functional rewrite casts; a plain F.layer_norm does not."""
    x = torch.randn(2, 8).bfloat16()
    w, b = torch.rand(8) + 0.5, torch.randn(8)
    want = apex_ref.layer_norm(x, (8,), w, b, 1e-6, out_dtype=torch.float32)
    naive = torch.nn.functional.layer_norm(x, (8,), w, b, 1e-6)
    assert naive.dtype != want.dtype
    got = _functional("mixed_dtype_fused_layer_norm_affine", "fn(x, w, b, shape)")(x, w, b, (8,))
    assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=1e-2, atol=1e-2)
    # the module rewrite is UNSAFE for exactly this reason: values agree, dtype is the input's
    src = "from apex.normalization import MixedFusedLayerNorm\nm = MixedFusedLayerNorm(8)\n"
    (f,) = findings(src, family="apex")
    assert f.fix == Applicability.UNSAFE and "dtype" in f.message
    m = _module("MixedFusedLayerNorm(shape)")(8)
    out = m(x)
    assert out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), apex_ref.layer_norm(x, (8,), m.weight, m.bias, 1e-5, out_dtype=torch.float32),
                          rtol=2e-2, atol=2e-2)


def test_trap25_module_parameter_names_and_init() -> None:
    """Swapped modules keep apex's parameter names and initial values (checkpoints load)."""
    src = ("from apex.normalization import FusedLayerNorm, FusedRMSNorm, MixedFusedLayerNorm, MixedFusedRMSNorm\n"
           "from apex.contrib.layer_norm import FastLayerNorm\n"
           "from apex.contrib.group_norm import GroupNorm\n"
           "from apex.parallel import SyncBatchNorm\n"
           "mods = dict(FusedLayerNorm=FusedLayerNorm(8), FusedRMSNorm=FusedRMSNorm(8),\n"
           "            MixedFusedLayerNorm=MixedFusedLayerNorm(8), MixedFusedRMSNorm=MixedFusedRMSNorm(8),\n"
           "            FastLayerNorm=FastLayerNorm(8), GroupNorm=GroupNorm(2, 8), SyncBatchNorm=SyncBatchNorm(8))\n")
    mods = load(port(src, unsafe=True))["mods"]
    for name, expected in apex_ref.STATE_KEYS.items():
        state = mods[name].state_dict()
        assert set(state) == set(expected), name
        for key, init in expected.items():
            t = state[key].float()
            assert torch.equal(t, torch.ones_like(t) if init == "ones" else torch.zeros_like(t)), (name, key)


# -- contrib: xentropy (PRT351), clip_grad_norm_ (PRT350) --------------------------------------

@FAST
@given(st.sampled_from([None, 0.0, 0.1]), st.sampled_from([None, 0, 3, -100]), st.sampled_from([None, False, True]),
       st.sampled_from([torch.float32, torch.bfloat16]))
def test_xentropy_matches_apex(smoothing: float | None, padding: int | None, h2f: bool | None,
                               dtype: torch.dtype) -> None:
    args = ["logits", "labels"]
    if smoothing is not None or padding is not None or h2f is not None:
        args.append(repr(smoothing or 0.0))
    if padding is not None or h2f is not None:
        args.append(repr(0 if padding is None else padding))
    if h2f is not None:
        args.append(repr(h2f))
    src = ("from apex.contrib.xentropy import SoftmaxCrossEntropyLoss\n\n\n"
           f"def run(logits, labels):\n    return SoftmaxCrossEntropyLoss.apply({', '.join(args)})\n")
    run = load(port(src))["run"]
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(12, 7, generator=g).to(dtype)
    labels = torch.randint(0, 7, (12,), generator=g)
    labels[:3] = 0
    labels[3] = 3
    want = apex_ref.xentropy(logits, labels, smoothing or 0.0, 0 if padding is None else padding, bool(h2f))
    got = run(logits, labels)
    assert got.dtype == want.dtype and got.shape == (12,)
    assert torch.allclose(got.float(), want.float(), rtol=2e-2 if dtype != torch.float32 else 1e-5, atol=1e-5)


def test_trap18_xentropy_padding_idx_and_reduction() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(10, 5, generator=g)
    labels = torch.tensor([0, 1, 2, 0, 4, 3, 0, 1, 2, 3])
    want = apex_ref.xentropy(logits, labels, 0.0)  # padding_idx defaults to 0
    naive = torch.nn.functional.cross_entropy(logits, labels, reduction="none")  # ignore_index=-100
    assert not torch.allclose(naive, want)
    naive_mean = torch.nn.functional.cross_entropy(logits, labels, ignore_index=0)
    assert naive_mean.shape != want.shape


def test_clip_grad_norm_matches_apex() -> None:
    src = ("from apex.contrib.clip_grad import clip_grad_norm_\n\n\n"
           "def run(params):\n    return clip_grad_norm_(params, 0.5, 2.0)\n")
    run = load(port(src))["run"]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    grads = _grads()[0]
    for p, gr in zip(params, grads, strict=True):
        p.grad = gr.clone()
    total = torch.sqrt(sum((gr.float() ** 2).sum() for gr in grads))
    norm = run(params)
    coef = min(1.0, 0.5 / (float(total) + 1e-6))
    assert torch.allclose(norm, total)
    for p, gr in zip(params, grads, strict=True):
        assert torch.allclose(p.grad, gr * coef, rtol=1e-5, atol=1e-7)


# -- DDP (PRT340) and convert_syncbn_model (PRT342) ---------------------------------------------

def _ddp_worker(rank: int, world: int, init_file: str, out_dir: str, ported_src: str) -> None:
    import torch.distributed as dist

    # a bounded rendezvous: a rank that never arrives fails the test instead of hanging it
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        wrapped = load(ported_src)["wrap"](model)
        x = torch.full((4, 3), float(rank + 1))
        wrapped(x).pow(2).sum().backward()
        local = torch.nn.Linear(3, 2)
        local.load_state_dict(model.state_dict())
        local(x).pow(2).sum().backward()
        torch.save({"ddp": model.weight.grad.clone(), "local": local.weight.grad.clone()},
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_trap19_ddp_gradient_average() -> None:
    """apex DDP (gradient_average=True) averages like torch DDP; gradient_average=False sums and is flagged."""
    src = ("from apex.parallel import DistributedDataParallel as DDP\n\n\n"
           "def wrap(model):\n    return DDP(model, delay_allreduce=True)\n")
    ported = port(src)
    assert "DistributedDataParallel(model, broadcast_buffers=False)" in ported
    flagged = "from apex.parallel import DistributedDataParallel as DDP\nm = DDP(model, gradient_average=False)\n"
    (f,) = findings(flagged, family="apex")
    assert f.fix == Applicability.NONE and "SUMS" in f.message
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        # spawn, not fork: under pytest-xdist the worker has threads, and a forked child can deadlock
        torch.multiprocessing.start_processes(_ddp_worker, args=(2, init_file, tmp, ported), nprocs=2,
                                              start_method="spawn")
        res = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
    local = [r["local"] for r in res]
    for r in res:
        assert torch.allclose(r["ddp"], apex_ref.ddp_reduce(local, gradient_average=True), rtol=1e-5, atol=1e-6)
        # the naive rewrite of gradient_average=False (torch DDP, which averages) does not sum
        assert not torch.allclose(r["ddp"], apex_ref.ddp_reduce(local, gradient_average=False))


def test_convert_syncbn_model_converts_batchnorm() -> None:
    src = ("from apex.parallel import convert_syncbn_model\n\n\n"
           "def run(m):\n    return convert_syncbn_model(m)\n")
    run = load(port(src))["run"]
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.InstanceNorm2d(4))
    with torch.no_grad():
        m[1].running_mean.fill_(0.5)
    out = run(m)
    assert isinstance(out[1], torch.nn.SyncBatchNorm) and torch.equal(out[1].running_mean, torch.full((4,), 0.5))
    assert isinstance(out[2], torch.nn.InstanceNorm2d)  # apex skips instance norms; so does torch


# -- amp (PRT330-PRT333): the unscale_ step before gradient clipping --------------------------

def test_amp_master_params_is_the_param_group_generator() -> None:
    src = ("from apex import amp\n\n\n"
           "def run(opt):\n    return list(amp.master_params(opt))\n")
    run = load(port(src))["run"]
    a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    opt = torch.optim.SGD([{"params": [a, b]}, {"params": [c], "lr": 0.5}], lr=0.1)
    assert [id(p) for p in run(opt)] == [id(a), id(b), id(c)]


def test_trap20_clipping_needs_unscale() -> None:
    """apex unscales grads when scale_loss exits; with GradScaler clipping before unscale_ is wrong."""
    src = ("from apex import amp\n"
           "with amp.scale_loss(loss, opt) as scaled:\n    scaled.backward()\n")
    (f,) = findings(src, family="apex")
    assert f.code == "PRT331" and f.fix == Applicability.NONE and "unscale_" in f.message

    def run(unscale_first: bool | None) -> torch.Tensor:
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.randn(4))
        opt = torch.optim.SGD([p], lr=1.0)
        loss = (p * torch.arange(1.0, 5.0)).sum() * 3
        if unscale_first is None:  # apex semantics: unscaled grads at clip time
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p], 1.0)
            opt.step()
            return p.detach()
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_([p], 1.0)
        scaler.step(opt)
        scaler.update()
        return p.detach()

    want = run(None)
    assert torch.allclose(run(True), want)
    assert not torch.allclose(run(False), want)
