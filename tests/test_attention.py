"""Unit tests of the attention family: rules, versions, imports, proofs, fixture modules at runtime."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

from porter import registry
from porter.codemods.attention.util import flash_version
from porter.findings import Applicability
from porter.framework import RepoFacts
from porter.testing import findings, fixed

FIXTURES = Path(__file__).parent / "fixtures" / "attention"


def port(src: str, pins: dict[str, str] | None = None, unsafe: bool = False) -> str:
    return fixed(src, family="attention", facts=RepoFacts(pins=pins or {}), unsafe=unsafe)


def found(src: str, pins: dict[str, str] | None = None) -> list:
    return findings(src, family="attention", facts=RepoFacts(pins=pins or {}))


# -- rules ------------------------------------------------------------------------------------


def test_rules_are_documented_and_in_range() -> None:
    fam = registry.family("attention")
    assert fam is not None and fam.order == 20
    for r in fam.rules:
        n = int(r.code[3:])
        assert 100 <= n <= 299, r.code
        assert r.explanation and r.summary and r.name == r.name.lower()
        if r.fix == Applicability.SAFE:
            assert "safe" in r.explanation.lower()


# -- versions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "era", "known"),
    [
        (None, "v2.1+", False),
        ("", "v2.1+", False),
        ("==2.0.4", "v2.0", True),
        ("==2.5.8+cu122torch2.3", "v2.1+", True),
        ("==1.0.9", "v1", True),
        (">=2.3", "v2.1+", True),
        ("<2.1", "v2.0", True),  # newest admitted is 2.0.x
        ("~=2.0.0", "v2.0", True),
        (">=2.0", "v2.1+", True),
        ("not a spec", "v2.1+", False),
    ],
)
def test_flash_version(spec, era, known) -> None:
    v = flash_version(spec)
    assert (v.era, v.known) == (era, known)
    if not known:
        assert "assumed" in v.note


def test_unknown_version_is_stated_in_message() -> None:
    src = "from flash_attn import flash_attn_func\n\n\ndef f(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n"
    (f,) = found(src)
    assert "assumed the current release" in f.message and f.fix == Applicability.SAFE
    (g,) = found(src, {"flash-attn": "==2.6.3"})
    assert "assumed" not in g.message and "2.1+" in g.message


def test_old_torch_pin_blocks_only_what_it_must() -> None:
    src = "from flash_attn import flash_attn_func\n\n\ndef f(q, k, v):\n    return flash_attn_func(q, k, v)\n"
    (f,) = found(src, {"torch": "==2.3.1"})
    assert f.fix == Applicability.SAFE and "repeat_interleave" in f.message
    (g,) = found(src, {"torch": ">=2.1"})
    assert g.fix == Applicability.SAFE
    xf = "import xformers.ops as xops\n\n\ndef f(q, k, v):\n    return xops.memory_efficient_attention(q, k, v{})\n"
    assert found(xf.format(""), {"torch": "==2.0.0"})[0].fix == Applicability.SAFE
    assert found(xf.format(", scale=0.5"), {"torch": "==2.0.0"})[0].fix == Applicability.NONE
    assert found(xf.format(", scale=0.5"), {"torch": ">=2.0,<2.2"})[0].fix == Applicability.SAFE
    bottom_right = xf.format(", xops.LowerTriangularFromBottomRightMask()")
    assert found(bottom_right, {"torch": "<2.5"})[0].fix == Applicability.NONE


def test_a_starred_window_size_is_not_a_literal_pair() -> None:
    # `(*w, 1, 2)` was read as the pair (1, 2) (the starred part skipped) and rewritten as a SAFE band mask
    src = ("from flash_attn import flash_attn_func\n\n\ndef f(q, k, v, w):\n"
           "    return flash_attn_func(q, k, v, window_size=(*w, 1, 2))\n")
    (f,) = found(src, {"flash-attn": "==2.6.3"})
    assert f.fix == Applicability.NONE and "window_size is not a literal (left, right) pair" in f.message
    assert port(src, {"flash-attn": "==2.6.3"}) == src
    plain = src.replace("(*w, 1, 2)", "(1, 2)")
    assert found(plain, {"flash-attn": "==2.6.3"})[0].fix == Applicability.SAFE


# -- imports and aliases ----------------------------------------------------------------------


def test_reuses_functional_alias_and_drops_dead_imports() -> None:
    src = (
        "import torch.nn.functional as F\nfrom flash_attn import flash_attn_func  # fast\n\n# keep me\n\n\n"
        "def f(q, k, v):\n    return flash_attn_func(q, k, v)  # call\n"
    )
    out = port(src)
    assert out.startswith("import torch.nn.functional as F\n\n# keep me\n")
    assert "F.scaled_dot_product_attention(" in out and "flash_attn" not in out
    assert out.rstrip().endswith("# call")


def test_adds_import_torch_and_respects_torch_alias() -> None:
    src = "import flash_attn\n\n\ndef f(q, k, v):\n    return flash_attn.flash_attn_func(q, k, v)\n"
    out = port(src)
    assert out.startswith("import torch\n") and "torch.nn.functional.scaled_dot_product_attention" in out
    src2 = "import torch as th\nimport flash_attn\n\n\ndef f(q, k, v):\n    return flash_attn.flash_attn_func(q, k, v)\n"
    out2 = port(src2)
    assert "th.nn.functional.scaled_dot_product_attention" in out2 and "import torch\n" not in out2


def test_import_kept_while_other_uses_remain() -> None:
    src = ("from flash_attn import flash_attn_func\n\n\ndef f(q, k, v):\n    a = flash_attn_func(q, k, v)\n"
           "    return a, flash_attn_func(q, k, v, return_attn_probs=True)\n")
    out = port(src)
    assert out.startswith("from flash_attn import flash_attn_func\n")
    assert out.count("flash_attn_func(") == 1


def test_second_apply_changes_nothing() -> None:
    for path in sorted(FIXTURES.glob("*.in.py")):
        once = port(path.read_text())
        assert port(once) == once, path.name


# -- proofs of equal lengths -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prelude", "proven"),
    [
        ("q, k, v = qkv.unbind(2)", True),
        ("q, k, v = qkv.chunk(3, dim=-1)", True),
        ("q, k, v = torch.split(qkv, 64, dim=1)", False),  # not a method form: unknown
        ("q, k, v = qkv.chunk(3, dim=1)", False),  # split along the sequence axis
        ("q, k, v = rearrange(qkv, 'b s (t h d) -> t b s h d', t=3, h=4)", True),
        ("k = torch.cat([past_k, k], dim=1)", False),  # KV cache: Sk grows
        ("q = q.view(b, s, h, d)\n    k = k.view(b, s, h, d)", True),
        ("q = q.view(b, s, h, d)\n    k = k.view(b, t, h, d)", False),
    ],
)
def test_equal_length_proofs(prelude: str, proven: bool) -> None:
    src = ("import torch\nfrom flash_attn import flash_attn_func\n\n\ndef f(qkv, q, k, v, past_k, b, s, t, h, d):\n"
           f"    {prelude}\n    return flash_attn_func(q, k, v, causal=True)\n")
    out = port(src)
    assert ("is_causal=True" in out) is proven, out
    assert ("causal_lower_right(q.shape[1], k.shape[1])" in out) is (not proven), out


def test_same_tensor_proves_equal_shapes() -> None:
    src = "from flash_attn import flash_attn_func\n\n\ndef f(x):\n    return flash_attn_func(x, x, x, causal=True)\n"
    out = port(src)
    assert "is_causal=True" in out and "enable_gqa" not in out


# -- unsafe fix -------------------------------------------------------------------------------


def test_deterministic_is_unsafe_only() -> None:
    src = "from flash_attn import flash_attn_func\n\n\ndef f(q, k, v):\n    return flash_attn_func(q, k, v, deterministic=True)\n"
    (f,) = found(src)
    assert f.fix == Applicability.UNSAFE and "deterministic" in f.message
    assert port(src) == src
    assert "scaled_dot_product_attention" in port(src, unsafe=True)
    det_false = src.replace("deterministic=True", "deterministic=False")
    assert found(det_false)[0].fix == Applicability.SAFE


# -- the rewritten fixture modules import and run without flash-attn / xformers ------------------


def _load(path: Path, block: bool) -> dict:
    saved = {}
    names = ("flash_attn", "xformers", "xformers.ops")
    try:
        if block:
            for n in names:
                saved[n] = sys.modules.get(n)
                sys.modules[n] = None  # type: ignore[assignment]  # import raises ImportError
        ns: dict = {"__name__": path.stem.replace(".", "_")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(path.read_text(), str(path), "exec"), ns)
        return ns
    finally:
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old


@pytest.mark.parametrize("name", ["flash_basic", "flash_gate", "xformers_basic"])
def test_rewritten_fixture_imports_without_the_packages(name: str) -> None:
    pytest.importorskip("torch")
    ns = _load(FIXTURES / f"{name}.out.py", block=True)
    if name == "flash_gate":
        assert ns["HAS_FLASH"] is True  # the gate now selects the portable path
    if name == "xformers_basic":
        assert ns["XFORMERS_AVAILABLE"] is True


def test_xformers_unbind_is_torch_unbind_and_proves_equal_lengths() -> None:
    src = ("from xformers.ops import unbind\nfrom flash_attn import flash_attn_func\n\n\ndef f(qkv):\n"
           "    q, k, v = unbind(qkv, 2)\n    return flash_attn_func(q, k, v, causal=True)\n")
    out = port(src)
    assert "q, k, v = torch.unbind(qkv, dim=2)" in out and "is_causal=True" in out
    assert "xformers" not in out and "flash_attn" not in out and out.startswith("import torch\n")
    torch = pytest.importorskip("torch")
    from reference.attention_ref import fake_modules

    qkv = torch.randn(2, 5, 3, 2, 8)
    ns: dict = {}
    exec(out, ns)
    ref = fake_modules()["flash_attn"].flash_attn_func(*qkv.unbind(2), causal=True)
    assert torch.allclose(ns["f"](qkv), ref, atol=2e-5)
