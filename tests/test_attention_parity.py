"""Parity suite of the attention family: rewritten code against the original libraries' semantics.

For each rewrite rule, a small snippet is ported by porter; the ORIGINAL snippet is executed
with the pure-torch references (tests/reference/attention_ref.py) standing in for flash_attn /
xformers, the REWRITTEN snippet with real torch, and the outputs are compared in fp32. The
negative tests build the naive rewrites (plausible one-to-one swaps that are wrong) by hand and check that this same comparison
rejects them, so the suite is known to be able to fail.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from reference.attention_ref import fake_modules  # noqa: E402

from porter.framework import RepoFacts  # noqa: E402
from porter.testing import findings, fixed  # noqa: E402

ATOL = 2e-5
FAST = settings(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def port(src: str, pins: dict[str, str] | None = None) -> str:
    return fixed(src, family="attention", facts=RepoFacts(pins=pins or {}))


def run(src: str, *args: torch.Tensor, era: str | None = None) -> torch.Tensor:
    """Execute ``src`` and call its ``attn``; with ``era`` the reference packages are importable."""
    saved = {}
    mods = fake_modules(era) if era else {}
    try:
        for name, mod in mods.items():
            saved[name] = sys.modules.get(name)
            sys.modules[name] = mod
        # a real module: flex_attention's eager path (dynamo) imports the score_mod's module by name
        mod = types.ModuleType("porter_attention_snippet")
        saved.setdefault(mod.__name__, sys.modules.get(mod.__name__))
        sys.modules[mod.__name__] = mod
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(src, "<snippet>", "exec"), mod.__dict__)
            return mod.__dict__["attn"](*args)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def agree(original: str, rewritten: str, *args: torch.Tensor, era: str = "v2.1+") -> bool:
    """True when the rewritten snippet (real torch only) matches the original on the references."""
    want = run(original, *args, era=era)
    try:
        got = run(rewritten, *args)
    except Exception:  # noqa: BLE001 - a naive rewrite may also crash
        return False
    return got.shape == want.shape and bool(torch.allclose(got, want, atol=ATOL, rtol=1e-4))


def check(original: str, *args: torch.Tensor, pins: dict[str, str] | None = None, era: str = "v2.1+",
          must_rewrite: bool = True) -> str:
    rewritten = port(original, pins)
    if must_rewrite:
        assert "flash_attn" not in rewritten and "xformers" not in rewritten, rewritten
        assert "scaled_dot_product_attention(" in rewritten or "flex_attention(" in rewritten
    assert agree(original, rewritten, *args, era=era), f"parity failed\n--- original\n{original}\n--- rewritten\n{rewritten}"
    return rewritten


def rand(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g)


# -- strategies -------------------------------------------------------------------------------

dims = st.fixed_dictionaries({
    "b": st.integers(1, 2),
    "sq": st.sampled_from([1, 2, 3, 5, 7]),
    "sk": st.sampled_from([1, 2, 4, 5, 8]),
    "hk": st.integers(1, 2),
    "group": st.sampled_from([1, 2, 3]),
    "d": st.sampled_from([4, 8]),
})
scales = st.sampled_from([None, 0.3, 1.7])
window_sides = st.sampled_from([-1, 0, 1, 3])


def _opt(name: str, value: object) -> str:
    return "" if value is None else f", {name}={value!r}"


# -- PRT100 flash_attn_func -------------------------------------------------------------------


@FAST
@given(dims=dims, causal=st.booleans(), scale=scales, left=window_sides, right=window_sides,
       style=st.sampled_from(["kw", "positional"]))
def test_flash_attn_func_parity(dims, causal, scale, left, right, style) -> None:
    b, sq, sk, hk, g, d = (dims[k] for k in ("b", "sq", "sk", "hk", "group", "d"))
    q, k, v = rand(b, sq, hk * g, d), rand(b, sk, hk, d, seed=1), rand(b, sk, hk, d, seed=2)
    if style == "positional":
        call = f"flash_attn_func(q, k, v, 0.0, {scale!r}, {causal!r})"
    else:
        call = f"flash_attn_func(q, k, v{_opt('softmax_scale', scale)}, causal={causal!r}"
        call += "" if (left, right) == (-1, -1) else f", window_size=({left}, {right})"
        call += ")"
    src = f"import torch\nfrom flash_attn import flash_attn_func\n\n\ndef attn(q, k, v):\n    return {call}\n"
    check(src, q, k, v)


@FAST
@given(dims=dims, causal=st.booleans(), scale=scales)
def test_flash_attn_func_same_source_is_causal(dims, causal, scale) -> None:
    """q, k, v unpacked from one tensor: Sq == Sk is proven, so `is_causal` is used."""
    b, s, h, d = dims["b"], dims["sq"], dims["hk"], dims["d"]
    qkv = rand(b, s, 3, h, d)
    src = ("import torch\nimport flash_attn\n\n\ndef attn(qkv):\n    q, k, v = qkv.unbind(dim=2)\n"
           f"    return flash_attn.flash_attn_func(q, k, v{_opt('softmax_scale', scale)}, causal={causal!r})\n")
    out = check(src, qkv)
    if causal:
        assert "is_causal=True" in out and "causal_lower_right" not in out


def test_flash_attn_func_dynamic_causal_and_view() -> None:
    src = (
        "import torch\nfrom flash_attn.flash_attn_interface import flash_attn_func\n\n\n"
        "def attn(q, k, v):\n    causal = q.shape[1] > 1\n    out = flash_attn_func(q, k, v, causal=causal)\n"
        "    return out.view(out.shape[0], out.shape[1], -1)\n"
    )
    for sq, sk in ((3, 5), (1, 4), (4, 4)):
        check(src, rand(2, sq, 4, 8), rand(2, sk, 2, 8, seed=1), rand(2, sk, 2, 8, seed=2))


def test_flash_attn_v20_pin_is_top_left() -> None:
    src = ("from flash_attn import flash_attn_func\n\n\ndef attn(q, k, v):\n"
           "    return flash_attn_func(q, k, v, causal=True)\n")
    q, k, v = rand(1, 3, 2, 8), rand(1, 6, 2, 8, seed=1), rand(1, 6, 2, 8, seed=2)
    out = check(src, q, k, v, pins={"flash-attn": "==2.0.4"}, era="v2.0")
    assert "is_causal=True" in out
    # and the 2.1+ rewrite of the same call is NOT right for a 2.0 repo
    assert not agree(src, port(src), q, k, v, era="v2.0")


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(dims=dims, causal=st.booleans(), scale=scales, left=window_sides, softcap=st.sampled_from([0.0, 0.5, 4.0]),
       alibi=st.sampled_from([None, "h", "bh"]))
def test_flash_softcap_alibi_flex_parity(dims, causal, scale, left, softcap, alibi) -> None:
    """softcap / ALiBi go through flex_attention's score_mod, in flash's order."""
    b, sq, sk, hk, g, d = (dims[k] for k in ("b", "sq", "sk", "hk", "group", "d"))
    if softcap == 0.0 and alibi is None:
        softcap = 2.0
    hq = hk * g
    q, k, v = rand(b, sq, hq, d), rand(b, sk, hk, d, seed=1), rand(b, sk, hk, d, seed=2)
    slopes = rand(hq, seed=3).abs() if alibi == "h" else rand(b, hq, seed=3).abs()
    window = "" if left < 0 else f", window_size=({left}, -1)"
    ali = "" if alibi is None else ", alibi_slopes=slopes"
    src = ("from flash_attn import flash_attn_func\n\n\ndef attn(q, k, v, slopes):\n"
           f"    return flash_attn_func(q, k, v{_opt('softmax_scale', scale)}, causal={causal!r}, "
           f"softcap={softcap!r}{ali}{window})\n")
    out = check(src, q, k, v, slopes)
    assert "flex_attention(" in out


def test_naive_flex_with_alibi_before_softcap_fails() -> None:
    """flash applies the softcap first, then ALiBi; the reverse order is caught."""
    src = ("from flash_attn import flash_attn_func\n\n\ndef attn(q, k, v, slopes):\n"
           "    return flash_attn_func(q, k, v, softcap=2.0, alibi_slopes=slopes)\n")
    q, k, v, slopes = rand(1, 4, 2, 8), rand(1, 6, 2, 8, seed=1), rand(1, 6, 2, 8, seed=2), rand(2, seed=3).abs()
    good = port(src)
    assert agree(src, good, q, k, v, slopes)
    off = "(k.shape[1] - q.shape[1])"
    bias = f"slopes.broadcast_to((q.shape[0], q.shape[2]))[b, h] * (q_idx + {off} - kv_idx).abs()"
    naive = ("import torch\nfrom torch.nn.attention.flex_attention import flex_attention\n\n\n"
             "def attn(q, k, v, slopes):\n    return flex_attention(q.transpose(1, 2), k.transpose(1, 2), "
             f"v.transpose(1, 2), score_mod=lambda score, b, h, q_idx, kv_idx: 2.0 * torch.tanh((score - {bias}) / 2.0)"
             ").transpose(1, 2)\n")
    assert not agree(src, naive, q, k, v, slopes)


# -- PRT101 / PRT102 / PRT104 -----------------------------------------------------------------


@FAST
@given(dims=dims, causal=st.booleans(), scale=scales, left=window_sides, right=window_sides,
       simple=st.booleans())
def test_flash_attn_qkvpacked_parity(dims, causal, scale, left, right, simple) -> None:
    b, s, h, d = dims["b"], dims["sq"], dims["hk"], dims["d"]
    qkv = rand(b, s, 3, h, d)
    arg = "qkv" if simple else "qkv.float()"
    window = "" if (left, right) == (-1, -1) else f", window_size=({left}, {right})"
    if not simple:
        window = ""  # a window needs qkv.shape[1] twice: only rewritten for a plain name
    src = ("from flash_attn import flash_attn_qkvpacked_func\n\n\ndef attn(qkv):\n"
           f"    return flash_attn_qkvpacked_func({arg}, 0.0, {scale!r}, {causal!r}{window})\n")
    out = check(src, qkv)
    if causal:
        assert "causal_lower_right" not in out


@FAST
@given(dims=dims, causal=st.booleans(), scale=scales, simple=st.booleans())
def test_flash_attn_kvpacked_parity(dims, causal, scale, simple) -> None:
    b, sq, sk, hk, g, d = (dims[k] for k in ("b", "sq", "sk", "hk", "group", "d"))
    q, kv = rand(b, sq, hk * g, d), rand(b, sk, 2, hk, d, seed=3)
    arg = "kv" if simple or not causal else "kv"
    arg = arg if simple else "kv.contiguous()"
    src = ("from flash_attn import flash_attn_kvpacked_func\n\n\ndef attn(q, kv):\n"
           f"    return flash_attn_kvpacked_func(q, {arg}, softmax_scale={scale!r}, causal={causal!r})\n")
    rewritten = port(src)
    if not simple and causal:
        assert "flash_attn_kvpacked_func(" in rewritten  # needs kv.shape[1]: reported, not rewritten
        return
    check(src, q, kv)


@FAST
@given(dims=dims, causal=st.booleans())
def test_flash_attn_with_kvcache_parity(dims, causal) -> None:
    b, sq, sk, hk, g, d = (dims[k] for k in ("b", "sq", "sk", "hk", "group", "d"))
    q, kc, vc = rand(b, sq, hk * g, d), rand(b, sk, hk, d, seed=4), rand(b, sk, hk, d, seed=5)
    src = ("from flash_attn import flash_attn_with_kvcache\n\n\ndef attn(q, k_cache, v_cache):\n"
           f"    return flash_attn_with_kvcache(q, k_cache, v_cache, causal={causal!r})\n")
    check(src, q, kc, vc)


# -- PRT200 xformers ----------------------------------------------------------------------------

BIASES = [
    "None",
    "xops.LowerTriangularMask()",
    "xops.LowerTriangularFromBottomRightMask()",
    "xops.LowerTriangularFromBottomRightLocalAttentionMask(2)",
    "xops.LowerTriangularFromBottomRightMask().make_local_attention(3)",
    "xops.LocalAttentionFromBottomRightMask(1, 2)",
    "xops.LocalAttentionFromBottomRightMask(window_left=0, window_right=0)",
    "xops.LowerTriangularMask().add_bias(bias)",
    "xops.LowerTriangularMaskWithTensorBias(bias)",
    "bias",
]


@FAST
@given(dims=dims, rank=st.sampled_from([3, 4]), bias=st.sampled_from(BIASES), scale=scales,
       positional=st.booleans())
def test_xformers_parity(dims, rank, bias, scale, positional) -> None:
    b, mq, mk, h, d = dims["b"], dims["sq"], dims["sk"], dims["hk"] + 1, dims["d"]
    head = (h,) if rank == 4 else ()
    q, k, v = rand(b, mq, *head, d), rand(b, mk, *head, d, seed=6), rand(b, mk, *head, d, seed=7)
    tb = rand(b, *head, mq, mk, seed=8)
    if "Local" in bias and mk < mq:
        bias = "None"  # xformers' bottom-right local masks need Mk >= Mq for non-empty rows
    if positional:
        call = f"xops.memory_efficient_attention(q, k, v, {bias}, 0.0, {scale!r})"
    else:
        call = f"xops.memory_efficient_attention(q, k, v, attn_bias={bias}, scale={scale!r}, op=None)"
    src = ("import torch\nimport xformers.ops as xops\n\n\n"
           f"def attn(q, k, v, bias):\n    bias = bias.to(q.dtype)\n    return {call}\n")
    check(src, q, k, v, tb)


def test_xformers_local_bias_variable() -> None:
    src = ("import torch\nfrom xformers.ops import memory_efficient_attention, LowerTriangularMask\n\n\n"
           "def attn(q, k, v):\n    mask = LowerTriangularMask()\n"
           "    return memory_efficient_attention(q, k, v, attn_bias=mask)\n")
    out = check(src, rand(2, 5, 3, 8), rand(2, 7, 3, 8, seed=1), rand(2, 7, 3, 8, seed=2))
    assert "mask = " not in out


# -- negative tests: the naive rewrites must fail this suite ------------------------------------

_F = "import torch\nimport torch.nn.functional as F\n\n\ndef attn(q, k, v):\n    return {}\n"
_FA = "from flash_attn import flash_attn_func\n\n\ndef attn(q, k, v):\n    return {}\n"
_XF = "import xformers.ops as xops\n\n\ndef attn(q, k, v):\n    return {}\n"


def _naive(original: str, naive_expr: str, *args: torch.Tensor) -> Callable[[], bool]:
    return lambda: agree(original, _F.format(naive_expr), *args)


T = "{}.transpose(1, 2)"
QT, KT, VT = T.format("q"), T.format("k"), T.format("v")


@pytest.mark.parametrize(
    ("trap", "original", "naive", "sq", "sk", "hq", "hk"),
    [
        ("2-no-transpose", "flash_attn_func(q, k, v)", "F.scaled_dot_product_attention(q, k, v)", 4, 4, 2, 2),
        ("1-is_causal-for-Sq!=Sk", "flash_attn_func(q, k, v, causal=True)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, is_causal=True).transpose(1, 2)", 3, 5, 2, 2),
        ("1-decode-step-Sq=1", "flash_attn_func(q, k, v, causal=True)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, is_causal=True).transpose(1, 2)", 1, 5, 2, 2),
        ("16-softmax_scale-lost", "flash_attn_func(q, k, v, softmax_scale=0.3)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}).transpose(1, 2)", 4, 4, 2, 2),
        ("3-positional-by-SDPA-order", "flash_attn_func(q, k, v, 0.0, 0.3)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, 0.0, 0.3).transpose(1, 2)", 4, 4, 2, 2),
        ("10-gqa-tiled-with-repeat", "flash_attn_func(q, k, v)",
         f"F.scaled_dot_product_attention({QT}, k.repeat(1, 1, 3, 1).transpose(1, 2), "
         f"v.repeat(1, 1, 3, 1).transpose(1, 2)).transpose(1, 2)", 4, 4, 6, 2),
        ("11-window-right-not-forced-to-0", "flash_attn_func(q, k, v, causal=True, window_size=(2, 2))",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, attn_mask=torch.ones(q.shape[1], k.shape[1], "
         "dtype=torch.bool).tril(k.shape[1] - q.shape[1] + 2).triu(k.shape[1] - q.shape[1] - 2)).transpose(1, 2)",
         4, 6, 2, 2),
        ("1-top-left-window-offset", "flash_attn_func(q, k, v, window_size=(1, 1))",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, attn_mask=torch.ones(q.shape[1], k.shape[1], "
         "dtype=torch.bool).tril(1).triu(-1)).transpose(1, 2)", 3, 6, 2, 2),
    ],
)
def test_naive_flash_rewrites_fail(trap, original, naive, sq, sk, hq, hk) -> None:
    q, k, v = rand(2, sq, hq, 8), rand(2, sk, hk, 8, seed=1), rand(2, sk, hk, 8, seed=2)
    src = _FA.format(original)
    assert agree(src, port(src), q, k, v), "porter's own rewrite must pass"
    assert not _naive(src, naive, q, k, v)(), f"trap {trap}: the naive rewrite was not caught"


@pytest.mark.parametrize(
    ("trap", "original", "naive", "rank"),
    [
        ("2-transposing-3d-input", "xops.memory_efficient_attention(q, k, v)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}).transpose(1, 2)", 3),
        ("2-no-transpose-4d", "xops.memory_efficient_attention(q, k, v)",
         "F.scaled_dot_product_attention(q, k, v)", 4),
        ("3-slot6-scale-lands-on-is_causal", "xops.memory_efficient_attention(q, k, v, None, 0.0, 0.3)",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, None, 0.0, 0.3).transpose(1, 2)", 4),
        ("1-LowerTriangularMask-is-top-left", "xops.memory_efficient_attention(q, k, v, xops.LowerTriangularMask())",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, attn_mask=torch.nn.attention.bias.causal_lower_right("
         "q.shape[1], k.shape[1])).transpose(1, 2)", 4),
        ("11-window-W-counts-the-diagonal",
         "xops.memory_efficient_attention(q, k, v, xops.LowerTriangularFromBottomRightLocalAttentionMask(2))",
         f"F.scaled_dot_product_attention({QT}, {KT}, {VT}, attn_mask=torch.ones(q.shape[1], k.shape[1], "
         "dtype=torch.bool).tril(k.shape[1] - q.shape[1]).triu(k.shape[1] - q.shape[1] - 2)).transpose(1, 2)", 4),
    ],
)
def test_naive_xformers_rewrites_fail(trap, original, naive, rank) -> None:
    import torch.nn.attention.bias  # noqa: F401 - the naive snippet uses the dotted path

    head = (3,) if rank == 4 else ()
    q, k, v = rand(2, 4, *head, 8), rand(2, 6, *head, 8, seed=1), rand(2, 6, *head, 8, seed=2)
    src = _XF.format(original)
    assert agree(src, port(src), q, k, v), "porter's own rewrite must pass"
    assert not _naive(src, naive, q, k, v)(), f"trap {trap}: the naive rewrite was not caught"


def test_dropout_is_applied_in_eval() -> None:
    """flash's functional applies dropout_p in eval too; the rewrite must not gate it."""
    src = _FA.format("flash_attn_func(q, k, v, dropout_p=0.5)")
    out = port(src)
    assert "dropout_p=0.5" in out and "training" not in out
    q = rand(1, 6, 2, 8)
    torch.manual_seed(0)
    with torch.no_grad():
        a = run(out, q, q, q)
    assert not torch.allclose(a, run(out.replace("dropout_p=0.5", "dropout_p=0.0"), q, q, q))


# -- refusals for the traps porter does not rewrite --------------------------------------------


@pytest.mark.parametrize(
    ("call", "code", "reason"),
    [
        ("flash_attn_func(q, k, v, return_attn_probs=True)", "PRT100", "return_attn_probs"),  # no probabilities from SDPA
        ("flash_attn_func(q, k, v, 0.1, softcap=30.0)", "PRT100", "no dropout"),  # flex has no dropout
        ("flash_attn_func(q, k, v, alibi_slopes=self.s(x))", "PRT100", "not a plain name"),
        ("flash_attn_func(q, k, v, 0.0, None, True, (4, 0))", "PRT100", "positional argument 7"),  # positions differ across versions
        ("flash_attn_func(q, k, v, window_size=w)", "PRT100", "window_size"),
        ("FlashSelfAttention(window_size=(8, 0))", "PRT110", "window_size"),
        ("flash_attn_varlen_func(q, k, v, cu, cu, 8, 8)", "PRT103", "variable-length"),
        ("flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)", "PRT104", "cache_seqlens"),
        ("flash_attn_func(self.q(x), self.k(x), v, causal=True)", "PRT100", "`self.q(x)` and `self.k(x)` are not a plain name"),
    ],
)
def test_flagged_not_rewritten(call: str, code: str, reason: str) -> None:
    src = ("from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache\n"
           "from flash_attn.modules.mha import FlashSelfAttention\n\n\n"
           f"def attn(self, x, q, k, v, kc, vc, cu, lens, slopes, w):\n    a = {call}\n    return a\n")
    found = [f for f in findings(src, family="attention") if f.code == code]
    assert found and found[0].fix.value == "none" and reason in found[0].message, found
    assert port(src) == src


def test_v1_flash_attn_func_is_flagged() -> None:
    """The v1 function of the same name is a different API."""
    src = ("from flash_attn.flash_attn_interface import flash_attn_func\n\n\n"
           "def attn(qkv, cu, m):\n    return flash_attn_func(qkv, cu, 0.0, m, causal=True)\n")
    assert [f.code for f in findings(src, family="attention")] == ["PRT105"]
    assert port(src) == src
    pinned = findings(src, family="attention", facts=RepoFacts(pins={"flash-attn": "==1.0.9"}))
    assert [f.code for f in pinned] == ["PRT105"]
    v2 = findings(src, family="attention", facts=RepoFacts(pins={"flash-attn": ">=2.3"}))
    assert [f.code for f in v2] == ["PRT100"]


# -- whole fixture modules: the original on the references vs the rewritten file ------------------

_FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "attention"


def _module(name: str, kind: str, era: str | None) -> dict:
    src = (_FIXTURES / f"{name}.{kind}.py").read_text()
    saved = {}
    try:
        for n, mod in (fake_modules(era) if era else {}).items():
            saved[n] = sys.modules.get(n)
            sys.modules[n] = mod
        mod = types.ModuleType(f"porter_attention_fixture_{name}_{kind}")
        sys.modules[mod.__name__] = mod  # kept: its functions may run flex_attention later
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(src, name, "exec"), mod.__dict__)
        return mod.__dict__
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=ATOL, rtol=1e-4))


def test_flash_basic_fixture_runs_like_the_original() -> None:
    orig, new = _module("flash_basic", "in", "v2.1+"), _module("flash_basic", "out", None)
    torch.manual_seed(0)
    block = orig["Attention"](32, 4, 2).eval()
    ported = new["Attention"](32, 4, 2).eval()
    ported.load_state_dict(block.state_dict())
    x = rand(2, 5, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _same(block(x), ported(x))
        q, k, v = rand(2, 3, 4, 8), rand(2, 6, 2, 8, seed=1), rand(2, 6, 2, 8, seed=2)
        assert _same(orig["cross"](q, k, v), new["cross"](q, k, v))
        qkv = rand(2, 5, 3, 2, 8)
        for causal in (True, False):
            assert _same(orig["packed"](qkv, causal), new["packed"](qkv, causal))
        kv = rand(2, 200, 2, 2, 8, seed=3)
        q2 = rand(2, 150, 4, 8, seed=4)
        assert _same(orig["kv_packed"](q2, kv), new["kv_packed"](q2, kv))


def test_xformers_basic_fixture_runs_like_the_original() -> None:
    orig, new = _module("xformers_basic", "in", "v2.1+"), _module("xformers_basic", "out", None)
    torch.manual_seed(0)
    block = orig["MemEffAttention"](24, num_heads=3).eval()
    ported = new["MemEffAttention"](24, num_heads=3).eval()
    ported.load_state_dict(block.state_dict())
    x = rand(2, 7, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _same(block(x), ported(x))
        q, k, v = rand(6, 4, 8), rand(6, 9, 8, seed=1), rand(6, 9, 8, seed=2)  # 3-D inputs
        assert _same(orig["causal_3d"](q, k, v), new["causal_3d"](q, k, v))
        q4, k4, v4 = rand(2, 4, 3, 8), rand(2, 9, 3, 8, seed=1), rand(2, 9, 3, 8, seed=2)
        assert _same(orig["bottom_right"](q4, k4, v4), new["bottom_right"](q4, k4, v4))


@pytest.mark.parametrize(("hq", "hk", "sq", "sk"), [(6, 2, 3, 5), (4, 4, 4, 4), (3, 1, 1, 6)])
def test_gqa_by_repeat_interleave_for_old_torch_pins(hq, hk, sq, sk) -> None:
    """GQA with a torch < 2.5 pin: KV heads are repeated consecutively (h // group), not tiled."""
    src = _FA.format("flash_attn_func(q, k, v)")
    out = port(src, {"torch": "==2.4.0"})
    assert "repeat_interleave(q.shape[2] // k.shape[2], dim=1)" in out and "enable_gqa" not in out
    q, k, v = rand(2, sq, hq, 8), rand(2, sk, hk, 8, seed=1), rand(2, sk, hk, 8, seed=2)
    assert agree(src, out, q, k, v)
    if 1 < hk < hq:  # with one KV head, tiling and interleaving coincide
        assert not agree(src, out.replace("repeat_interleave(", "repeat(1, ").replace(", dim=1)", ", 1, 1)"), q, k, v)


# -- PRT110 module wrappers ------------------------------------------------------------------------


@pytest.mark.parametrize("training", [False, True])
def test_flash_modules_fixture_parity(training: bool) -> None:
    # the rewritten file still imports flash_attn for its flagged Varlen class: load it with the
    # references present, and check the ported classes are the portable ones
    orig, new = _module("flash_modules", "in", "v2.1+"), _module("flash_modules", "out", "v2.1+")
    torch.manual_seed(0)
    a, b = orig["SelfAttn"](24, 3).train(training), new["SelfAttn"](24, 3).train(training)
    assert type(b.inner_attn).__name__ == "SDPASelfAttention"
    assert type(new["CrossAttn"]().inner_cross_attn).__name__ == "SDPACrossAttention"
    b.load_state_dict(a.state_dict())  # same parameter names: checkpoints load unchanged
    x = rand(2, 5, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _same(a(x), b(x))
        for scale in (None, 0.2):
            q, kv = rand(2, 3, 4, 8), rand(2, 6, 2, 2, 8, seed=1)  # Sq < Sk, GQA 4 -> 2
            assert _same(orig["CrossAttn"](scale)(q, kv), new["CrossAttn"](scale)(q, kv))


def test_module_dropout_is_gated_on_training() -> None:
    """The modules apply dropout only in training; a port that always applies it is caught."""
    orig, new = _module("flash_modules", "in", "v2.1+"), _module("flash_modules", "out", "v2.1+")
    src = (_FIXTURES / "flash_modules.out.py").read_text()
    naive_src = src.replace("dropout_p=self.drop.p if self.training else 0.0", "dropout_p=self.drop.p")
    assert naive_src != src
    mod = types.ModuleType("porter_attention_naive_modules")
    sys.modules[mod.__name__] = mod
    saved = {n: sys.modules.get(n) for n in fake_modules()}
    sys.modules.update(fake_modules())
    try:
        exec(compile(naive_src, "naive", "exec"), mod.__dict__)
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old
    torch.manual_seed(0)
    a = orig["SelfAttn"](24, 3, dropout=0.5).eval()
    b, c = new["SelfAttn"](24, 3, dropout=0.5).eval(), mod.SelfAttn(24, 3, dropout=0.5).eval()
    b.load_state_dict(a.state_dict())
    c.load_state_dict(a.state_dict())
    x = rand(2, 5, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _same(a(x), b(x))
        assert not _same(a(x), c(x))


def test_v1_flash_attention_module_parity() -> None:
    src = ("import torch\nfrom flash_attn.flash_attention import FlashAttention\n\n\n"
           "class Block(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.attn = FlashAttention(softmax_scale=0.3)\n\n"
           "    def forward(self, qkv):\n        out, _ = self.attn(qkv, causal=True)\n        return out\n\n\n"
           "def attn(qkv):\n    return Block().eval()(qkv)\n")
    out = port(src)
    assert "SDPAFlashAttention(softmax_scale=0.3)" in out and "flash_attn" not in out
    qkv = rand(2, 5, 3, 2, 8)
    assert agree(src, out, qkv)


@pytest.mark.parametrize(("sq", "sk"), [(1, 5), (4, 4), (3, 6)])
def test_xformers_conditional_bias_parity(sq: int, sk: int) -> None:
    src = ("import xformers.ops as xops\n\n\ndef attn(q, k, v):\n"
           "    bias = xops.LowerTriangularMask() if q.shape[1] > 1 else None\n"
           "    a = xops.memory_efficient_attention(q, k, v, bias, 0.0, 0.25)\n"
           "    b = xops.memory_efficient_attention(q, k, v, None if q.shape[1] == 1 else "
           "xops.LowerTriangularFromBottomRightMask())\n"
           "    return a + b\n")
    out = check(src, rand(2, sq, 3, 8), rand(2, sk, 3, 8, seed=1), rand(2, sk, 3, 8, seed=2))
    assert "is_causal=q.shape[1] > 1" in out and "None if q.shape[1] == 1 else causal_lower_right(" in out


@pytest.mark.parametrize("bias", ["None", "xops.LowerTriangularMask()", "xops.LowerTriangularFromBottomRightMask()"])
def test_xformers_5d_gqa_layout_parity(bias: str) -> None:
    """[B, M, G, H, K] inputs (xformers' GQA form, K/V expanded over H): `.transpose(1, -2)` still
    puts M next to K, so each (group, head) pair attends on its own as in xformers."""
    src = _XF.format(f"xops.memory_efficient_attention(q, k, v, {bias})")
    q = rand(2, 3, 2, 3, 8)
    k = rand(2, 5, 2, 1, 8, seed=1).expand(2, 5, 2, 3, 8)
    v = rand(2, 5, 2, 1, 8, seed=2).expand(2, 5, 2, 3, 8)
    check(src, q, k, v)
