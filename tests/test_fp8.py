"""The fp8 family: parity of the Transformer Engine rewrites against pure-torch references of TE's
documented math (tests/reference/te_ref.py), negative tests of the initialisation, autocast handling.

The ORIGINAL snippet runs with the references standing in for ``transformer_engine.pytorch``; the
rewritten one with real torch. The rewritten code keeps TE's ``device="cuda"``; the tests check
that and then run it on the CPU by swapping the device string.
"""

from __future__ import annotations

import ast
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reference import te_ref  # noqa: E402

from porter.findings import Applicability  # noqa: E402
from porter.testing import codes, findings, fixed  # noqa: E402

FAST = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
FAMILY = "fp8"


def port(src: str, unsafe: bool = False) -> str:
    return fixed(src, family=FAMILY, unsafe=unsafe)


def on_cpu(rewritten: str) -> str:
    assert 'device="cuda"' in rewritten, "TE allocates on the GPU by default: device must be kept"
    return rewritten.replace('device="cuda"', 'device="cpu"')


def run(src: str, fn: str, *args: object, te: bool = False) -> object:
    saved = {}
    mods = te_ref.fake_modules() if te else {}
    try:
        for name, mod in mods.items():
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


NORM = """import transformer_engine.pytorch as te


def build(d):
    return te.{cls}(d{args})
"""


@FAST
@given(
    st.sampled_from(["LayerNorm", "RMSNorm"]),
    st.sampled_from([None, 1e-6, 1e-5, 1e-3]),
    st.sampled_from([8, 33]),
    st.sampled_from([1e-3, 1.0, 50.0]),
)
def test_norm_rewrites_match_te(cls: str, eps: float | None, d: int, scale: float) -> None:
    src = NORM.format(cls=cls, args="" if eps is None else f", eps={eps}")
    out = port(src)
    assert "te." not in out and "transformer_engine" not in out
    ref = run(src, "build", d, te=True)
    new = run(on_cpu(out), "build", d)
    torch.manual_seed(d)
    with torch.no_grad():
        for p in ref.parameters():  # type: ignore[attr-defined]
            p.copy_(torch.randn_like(p))
    assert set(new.state_dict()) == set(ref.state_dict())  # type: ignore[attr-defined]
    new.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    x = torch.randn(4, d) * scale
    with torch.no_grad():
        assert torch.allclose(new(x), ref(x), atol=1e-5, rtol=1e-4)  # type: ignore[operator]


def test_trap8_naive_rmsnorm_without_eps_is_rejected() -> None:
    src = NORM.format(cls="RMSNorm", args="")
    naive = "import torch\n\n\ndef build(d):\n    return torch.nn.RMSNorm(d)\n"
    ref = run(src, "build", 16, te=True)
    x = torch.randn(3, 16) * 1e-3  # mean(x²) ~ 1e-6: eps matters
    with torch.no_grad():
        assert torch.allclose(run(on_cpu(port(src)), "build", 16)(x), ref(x), atol=1e-6)  # type: ignore[operator]
        assert not torch.allclose(run(naive, "build", 16)(x), ref(x), atol=1e-3)  # type: ignore[operator]


def test_trap25_zero_centered_gamma_is_flagged_and_naive_swap_is_wrong() -> None:
    src = NORM.format(cls="LayerNorm", args=", zero_centered_gamma=True")
    assert port(src, unsafe=True) == src
    (f,) = findings(src, family=FAMILY)
    assert f.code == "PRT604" and "zero_centered_gamma" in f.message
    ref = run(src, "build", 16, te=True)  # γ stored as 0 means a scale of 1
    naive = run("import torch\n\n\ndef build(d):\n    return torch.nn.LayerNorm(d)\n", "build", 16)
    naive.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    x = torch.randn(3, 16)
    with torch.no_grad():
        assert not torch.allclose(naive(x), ref(x), atol=1e-3)  # type: ignore[operator]


LINEAR = """import torch
import transformer_engine.pytorch as te


def build(d_in, d_out):
    torch.manual_seed(0)
    layer = te.Linear(d_in, d_out{args})
    return layer
"""


@pytest.mark.parametrize("args", ["", ", bias=False", ", params_dtype=torch.float64"])
def test_linear_rewrite_matches_te_math_and_init(args: str) -> None:
    src = LINEAR.format(args=args)
    out = port(src)
    assert [f.fix for f in findings(src, family=FAMILY)] == [Applicability.SAFE]
    ref = run(src, "build", 256, 128, te=True)
    new = run(on_cpu(out), "build", 256, 128)
    assert set(new.state_dict()) == set(ref.state_dict())  # type: ignore[attr-defined]
    assert new.weight.dtype == ref.weight.dtype  # type: ignore[attr-defined]
    w = new.weight.detach().double()  # type: ignore[attr-defined]
    assert abs(w.std().item() - te_ref.TE_INIT_STD) < 0.002 and abs(w.mean().item()) < 0.002
    if new.bias is not None:  # type: ignore[attr-defined]
        assert torch.all(new.bias == 0)  # type: ignore[attr-defined]
    new.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    x = torch.randn(5, 256, dtype=ref.weight.dtype)  # type: ignore[attr-defined]
    with torch.no_grad():
        assert torch.allclose(new(x), ref(x), atol=1e-5)  # type: ignore[operator]


def test_trap25_naive_linear_swap_init_is_rejected() -> None:
    naive = ("import torch\n\n\ndef build(d_in, d_out):\n    torch.manual_seed(0)\n"
             "    return torch.nn.Linear(d_in, d_out)\n")
    lin = run(naive, "build", 64, 64)
    std = lin.weight.detach().std().item()  # type: ignore[attr-defined]
    assert abs(std - te_ref.TE_INIT_STD) > 0.01  # kaiming-uniform: 1/sqrt(3*64) ≈ 0.072
    assert lin.weight.device.type == "cpu"  # type: ignore[attr-defined]  # and TE would be on the GPU
    assert not torch.all(lin.bias == 0)  # type: ignore[attr-defined]


def test_linear_custom_init_method_is_applied() -> None:
    src = LINEAR.format(args=", init_method=lambda w: torch.nn.init.constant_(w, 0.5)")
    out = port(src)
    new = run(on_cpu(out), "build", 8, 4)
    ref = run(src, "build", 8, 4, te=True)
    assert torch.all(new.weight == 0.5) and torch.equal(new.weight, ref.weight)  # type: ignore[attr-defined]
    assert torch.all(new.bias == 0)  # type: ignore[attr-defined]


def test_linear_without_statement_is_unsafe_with_init_difference() -> None:
    src = "import transformer_engine.pytorch as te\nlayers = [te.Linear(4, 4) for _ in range(2)]\n"
    (f,) = findings(src, family=FAMILY)
    assert f.fix == Applicability.UNSAFE and "kaiming" in f.message
    assert port(src) == src


def test_linear_blockers_named() -> None:
    src = ("import transformer_engine.pytorch as te\n"
           "a = te.Linear(4, 4, sequence_parallel=True)\nb = te.Linear(4, 4, get_rng_state_tracker=f)\n")
    found = findings(src, family=FAMILY)
    assert codes(found) == ["PRT604", "PRT604"]
    assert "sequence_parallel" in found[0].message and "get_rng_state_tracker" in found[1].message


def test_blocker_with_a_computed_value_is_elided() -> None:
    # the message named the non-literal's sentinel (`<object object at 0x...>`): a new text every run
    src = "import transformer_engine.pytorch as te\na = te.Linear(4, 4, sequence_parallel=cfg.sp)\n"
    (f,) = findings(src, family=FAMILY)
    assert "`sequence_parallel=…`" in f.message and "object at" not in f.message


LNL = """import torch
import transformer_engine.pytorch as te


def build(d):
    torch.manual_seed(0)
    layer = te.LayerNormLinear(d, 2 * d{args})
    return layer
"""


@pytest.mark.parametrize("args", ["", ", normalization='RMSNorm', bias=False", ", eps=1e-3, return_layernorm_output=True"])
def test_layernorm_linear_shim_matches_te_and_keeps_names(args: str) -> None:
    src = LNL.format(args=args)
    out = port(src)
    assert "class PorterLayerNormLinear" in out and "transformer_engine" not in out
    ref = run(src, "build", 16, te=True)
    new = run(on_cpu(out), "build", 16)
    assert list(new.state_dict()) == list(ref.state_dict())  # type: ignore[attr-defined]
    w = new.weight.detach()  # type: ignore[attr-defined]
    assert torch.all(new.layer_norm_weight == 1) and 0.01 < w.std().item() < 0.04  # type: ignore[attr-defined]
    torch.manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():  # type: ignore[attr-defined]
            p.copy_(torch.randn_like(p))
    new.load_state_dict(ref.state_dict())  # type: ignore[attr-defined]
    x = torch.randn(3, 16)
    with torch.no_grad():
        got, want = new(x), ref(x)  # type: ignore[operator]
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == 2
        assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want, strict=True))
    else:
        assert torch.allclose(got, want, atol=1e-5)


def test_trap25_layernorm_linear_naive_sequential_renames_params() -> None:
    src = LNL.format(args="")
    ref = run(src, "build", 8, te=True)
    naive = run("import torch\n\n\ndef build(d):\n    return torch.nn.Sequential(torch.nn.LayerNorm(d), "
                "torch.nn.Linear(d, 2 * d))\n", "build", 8)
    want = {"layer_norm_weight", "layer_norm_bias", "weight", "bias"}
    assert set(ref.state_dict()) == want  # type: ignore[attr-defined]
    assert set(naive.state_dict()) != want  # type: ignore[attr-defined]
    new = run(on_cpu(port(src)), "build", 8)
    assert set(new.state_dict()) == want  # type: ignore[attr-defined]


def test_layernorm_linear_blocked_cases_are_flagged() -> None:
    for args in (", tp_size=2", ", zero_centered_gamma=True", ", return_bias=True", ", normalization=kind"):
        src = LNL.format(args=args)
        assert port(src, unsafe=True) == src, args
        (f,) = findings(src, family=FAMILY)
        assert f.code == "PRT603" and f.fix == Applicability.NONE and "not rewritten because" in f.message


def test_layernorm_linear_shim_inserted_once() -> None:
    src = ("import transformer_engine.pytorch as te\n\n\nclass M:\n    def __init__(self):\n"
           "        self.a = te.LayerNormLinear(4, 4)\n        self.b = te.LayerNormLinear(4, 8)\n")
    out = port(src)
    assert out.count("class PorterLayerNormLinear") == 1 and out.count("PorterLayerNormLinear(") == 3
    assert "import torch\n" in out
    ast.parse(out)
    assert port(out) == out


AUTOCAST = """import torch
import transformer_engine.pytorch as te


def step(model, x):
    with te.fp8_autocast(enabled=False):
        y = model(x)
    return y
"""


def test_disabled_autocast_becomes_nullcontext() -> None:
    out = port(AUTOCAST)
    assert "contextlib.nullcontext()" in out and "import contextlib" in out and "transformer_engine" not in out
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(run(out, "step", model, x), run(AUTOCAST, "step", model, x, te=True))  # type: ignore[arg-type]


def test_enabled_autocast_is_unsafe_only() -> None:
    src = AUTOCAST.replace("enabled=False", "enabled=True")
    (f,) = findings(src, family=FAMILY)
    assert f.fix == Applicability.UNSAFE and "convert_to_float8_training" in f.message
    assert port(src) == src
    assert "nullcontext()" in port(src, unsafe=True)


def test_torchao_float8_route_runs_on_cpu_within_tolerance() -> None:
    """The route PRT610 names: convert_to_float8_training (emulated on CPU) stays near BF16/FP32."""
    pytest.importorskip("torchao")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    ref.load_state_dict(model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert_to_float8_training(model, config=Float8LinearConfig(emulate=True))
    x = torch.randn(16, 32)
    with torch.no_grad():
        got, want = model(x), ref(x)
    rel = ((got - want).norm() / want.norm()).item()
    assert 0 < rel < 0.1  # e4m3 has a 3-bit mantissa: a few percent, never exact


def test_rewrites_keep_code_outside_edited_calls() -> None:
    src = (  # comments and odd spacing around the call survive byte for byte
        "import transformer_engine.pytorch as te   # TE\n\n"
        "class M:\n    def __init__(self, d):\n        # the norm\n"
        "        self.n = te.RMSNorm(d)   # trailing\n        self.k = 3  # other\n"
    )
    out = port(src)
    assert "        # the norm\n" in out and "   # trailing\n" in out and "self.k = 3  # other" in out
    assert "import transformer_engine" not in out  # the import became unused
    ast.parse(out)
    assert port(out) == out


_COMMENT = st.text(alphabet=st.characters(codec="ascii", categories=("L", "N", "Zs")), max_size=20)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(_COMMENT, _COMMENT, st.sampled_from(["", " ", "    "]), st.sampled_from(["\n", "\n\n"]))
def test_text_around_the_edited_call_is_byte_identical(before: str, after: str, pad: str, gap: str) -> None:
    head = f"import torch\nimport transformer_engine.pytorch as te  # {before}\n{gap}x = 1{pad}# {after}\n"
    tail = f"{gap}y = [2,{pad}3]  # {before}\n"
    src = head + "norm = te.LayerNorm(8)\n" + tail
    out = port(src)
    new_head = head.replace(f"import transformer_engine.pytorch as te  # {before}\n", "")
    assert out.startswith(new_head.split("\n", 1)[0]) and out.endswith(tail)
    assert f"{gap}x = 1{pad}# {after}\n" in out
    assert port(out) == out
