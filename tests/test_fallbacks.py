"""Availability gates: fallback bindings, dead gates, name resolution through rebindings.

A name with a fallback binding on its gate's no-package path ports to that fallback (what
runs on a machine without the package); names without one port to the rewrite, and the
gate goes once nothing reads its imports.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import libcst as cst
import pytest

from porter.fallbacks import guard
from porter.findings import Applicability, Edit, Finding
from porter.framework import RepoFacts
from porter.pyimports import ImportIndex
from porter.testing import findings, fixed

FIXTURES = Path(__file__).parent / "fixtures"

RMS_GATE = '''import torch
from torch import nn

try:
    from apex.normalization import FusedRMSNorm as RMSNorm
except ImportError:
    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
            return y.type_as(x) * self.weight


def make(d):
    return RMSNorm(d)
'''


def _by_line(found: list[Finding], code: str) -> dict[int, Finding]:
    return {f.line: f for f in found if f.code == code}


# -- the analysis ---------------------------------------------------------------------------------


def test_index_finds_real_fallbacks_and_sentinels() -> None:
    index = ImportIndex(cst.parse_module(RMS_GATE))
    fb = index.fallback("RMSNorm")
    assert fb is not None and fb.real and fb.kind == "class"
    src = "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    flash_attn_func = None\n"
    fb = ImportIndex(cst.parse_module(src)).fallback("flash_attn_func")
    assert fb is not None and not fb.real  # a placeholder is not an alternative implementation
    src = "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    HAS = False\n"
    assert ImportIndex(cst.parse_module(src)).fallback("flash_attn_func") is None


def test_index_if_gate_else_branch_is_the_fallback() -> None:
    src = ("if is_flash_attn_2_available():\n    from flash_attn import flash_attn_func\nelse:\n"
           "    from .naive import flash_attn_func\n")
    index = ImportIndex(cst.parse_module(src))
    assert index.bindings["flash_attn_func"][0].gated
    fb = index.fallback("flash_attn_func")
    assert fb is not None and fb.real and fb.kind == "import"


def test_index_resolves_rebindings_and_lazy_imports() -> None:
    src = ("try:\n    from flash_attn.flash_attn_interface import flash_attn_func as _f\n    flash_attn_func = _f\n"
           "except ImportError:\n    flash_attn_func = None\nattn = flash_attn_func\n"
           "def g():\n    from flash_attn import flash_attn_func as fa\n    return fa\n")
    index = ImportIndex(cst.parse_module(src))
    assert index.resolve_name("attn") == "flash_attn.flash_attn_interface.flash_attn_func"
    assert index.resolve_name("flash_attn_func") == "flash_attn.flash_attn_interface.flash_attn_func"
    assert index.import_targets("attn") == ("flash_attn.flash_attn_interface.flash_attn_func",)
    assert index.resolve_name("fa") == "flash_attn.flash_attn_func"


def test_index_does_not_resolve_a_name_bound_twice() -> None:
    src = "from flash_attn import flash_attn_func\nattn = flash_attn_func\nattn = my_attention\n"
    assert ImportIndex(cst.parse_module(src)).resolve_name("attn") is None


def test_module_aliases_resolve_to_the_exported_name() -> None:
    src = "import bitsandbytes as bnb\nopt = bnb.optim.adam.Adam8bit\n"
    index = ImportIndex(cst.parse_module(src))
    expr = cst.parse_expression("bnb.optim.adam.Adam8bit")
    assert index.resolve(expr) == "bitsandbytes.optim.Adam8bit"


# -- the guard, for every family ------------------------------------------------------------------


def test_guard_turns_any_familys_fix_on_a_fallback_name_into_a_report() -> None:
    index = ImportIndex(cst.parse_module(RMS_GATE))
    start = RMS_GATE.index("RMSNorm(d)")
    fix = Finding("PRT999", "X → Y", fix=Applicability.SAFE,
                  edits=(Edit(start, start + len("RMSNorm(d)"), "torch.nn.RMSNorm(d, eps=1e-5)"),))
    keep = Finding("PRT998", "passes the name through", fix=Applicability.SAFE,
                   edits=(Edit(start, start + len("RMSNorm(d)"), "wrap(RMSNorm(d))"),))
    elsewhere = Finding("PRT997", "touches other code", fix=Applicability.SAFE,
                        edits=(Edit(0, len("import torch"), "import torch as torch"),))
    out = guard([fix, keep, elsewhere], RMS_GATE, index, None)
    assert out[0].fix == Applicability.NONE and not out[0].edits
    assert "fallback binding" in out[0].message and "class RMSNorm" in out[0].message
    assert out[1].fix == Applicability.NONE  # passing the name through still changes that use
    assert out[2] is elsewhere


def test_apex_norm_with_a_fallback_class_is_not_rewritten() -> None:
    # before: RMSNorm(d) became torch.nn.RMSNorm(d, eps=1e-5), though without apex the eps=1e-6 class ran
    assert fixed(RMS_GATE, family="apex") == RMS_GATE
    found = _by_line(findings(RMS_GATE, family="apex"), "PRT311")
    assert found[19].fix == Applicability.NONE and "fallback" in found[19].message


def test_packages_keeps_the_fallback_and_drops_the_import_branch() -> None:
    out = fixed(RMS_GATE, family="packages")
    assert "apex" not in out and "try:" not in out
    assert "class RMSNorm(nn.Module):\n    def __init__(self, dim, eps=1e-6):" in out
    compile(out, "t.py", "exec")
    # numerically, the module now runs exactly the fallback the original ran without apex
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8) * 1e-3
    ns_old: dict = {}
    saved = sys.modules.get("apex")
    sys.modules["apex"] = None  # type: ignore[assignment]  # import fails: the fallback path
    try:
        exec(compile(RMS_GATE, "old.py", "exec"), ns_old)
    finally:
        sys.modules.pop("apex") if saved is None else sys.modules.__setitem__("apex", saved)
    ns_new: dict = {}
    exec(compile(out, "new.py", "exec"), ns_new)
    old, new = ns_old["make"](8), ns_new["make"](8)
    assert torch.equal(old(x), new(x))


@pytest.mark.parametrize("handler", ["    HAS = False\n", "    print('no apex')\n    HAS = False\n",
                                     "    raise RuntimeError('install apex')\n", "    pass\n"])
def test_prt021_claims_no_fallback_without_an_alternative_binding(handler: str) -> None:
    src = f"try:\n    from apex.normalization import FusedRMSNorm\n    HAS = True\nexcept ImportError:\n{handler}"
    (gate,) = [f for f in findings(src, family="packages") if f.code == "PRT021"]
    assert "no fallback" in gate.message and "runs its fallback" not in gate.message
    assert gate.fix == Applicability.NONE
    if "raise" in handler:
        assert "raises" in gate.message


def test_prt021_wording_on_the_fixture() -> None:
    path = FIXTURES / "packages" / "fallback_gates.in.py"
    gates = _by_line(findings(path.read_text(), family="packages"), "PRT021")
    assert "fallback binding of RMSNorm" in gates[10].message and gates[10].fix == Applicability.SAFE
    assert "no fallback binding" in gates[25].message and "logs or warns and sets a flag" in gates[25].message
    assert "raises" in gates[34].message
    assert "fallback binding of FusedLayerNorm; no fallback for MixedFusedLayerNorm" in gates[40].message
    assert gates[40].fix == Applicability.NONE  # partial: not collapsed
    assert gates[46].fix == Applicability.NONE  # handler reads the exception


# -- dead imports ---------------------------------------------------------------------------------


def test_unused_cuda_only_import_is_removed_only_where_it_is_dead() -> None:
    src = "import apex\nimport torch\n\nx = torch.ones(1)\n"
    assert fixed(src, family="packages") == "import torch\n\nx = torch.ones(1)\n"
    used = "import apex\n\nopt = apex.optimizers.FusedAdam\n"
    assert fixed(used, family="packages") == used
    gated = "try:\n    import apex\n    HAS_APEX = True\nexcept ImportError:\n    HAS_APEX = False\n"
    assert fixed(gated, family="packages") == gated  # a probe: its outcome sets the flag
    assert fixed(src, "pkg/__init__.py", family="packages") == src  # may be a re-export
    side = "import pycuda.autoinit\n"
    assert fixed(side, family="packages") == side


def test_dead_gate_collapses_to_the_flag_and_the_alias_goes() -> None:
    path = FIXTURES / "attention" / "dead_gate.in.py"
    out = fixed(path.read_text(), family="attention")
    assert "flash_attn" not in out and "try:" not in out and "attn_impl" not in out
    assert "\nFLASH = True\n" in out


def test_gate_kept_while_a_handler_binding_is_still_read() -> None:
    src = ("try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n    def helper():\n"
           "        return 1\n\n\ndef attn(q, k, v):\n    return flash_attn_func(q, k, v), helper()\n")
    out = fixed(src, family="attention")
    assert "def helper" in out and "scaled_dot_product_attention" in out


# -- resolution misses ----------------------------------------------------------------------------


def test_find_spec_through_dunder_import_is_an_availability_probe() -> None:
    src = "ok = __import__('importlib').util.find_spec('flash_attn') is not None\n"
    assert [f.code for f in findings(src, family="packages")] == ["PRT023"]


def test_attribute_bound_flash_call_is_found_and_flagged() -> None:
    src = ("import torch\nfrom flash_attn import flash_attn_func\n\n\nclass A(torch.nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.fn = flash_attn_func\n\n"
           "    def forward(self, q, k, v):\n        return self.fn(q, k, v)\n")
    hits = [f for f in findings(src, family="attention") if f.code == "PRT100"]
    assert len(hits) == 1 and hits[0].line == 11 and hits[0].fix == Applicability.NONE
    assert "self.fn" in hits[0].message


V2_SRC = '''try:
    from flash_attn.flash_attn_interface import flash_attn_func, flash_attn_varlen_func
except ImportError:
    flash_attn_func = None


def attn(q, k, v):
    return flash_attn_func(q, k, v, 0.0, None, True)
'''


def test_v2_proven_from_varlen_sibling_import_and_numerically_exact() -> None:
    torch = pytest.importorskip("torch")
    from reference.attention_ref import fake_modules

    without = V2_SRC.replace(", flash_attn_varlen_func", "")
    assert [f.code for f in findings(without, family="attention")] == ["PRT105"]  # v1/v2 ambiguous
    (hit,) = [f for f in findings(V2_SRC, family="attention") if f.code == "PRT100"]
    assert hit.fix == Applicability.SAFE and "flash_attn_varlen_func" in hit.message and "v1 named it" in hit.message
    ported = fixed(V2_SRC, family="attention", facts=RepoFacts())
    assert "flash_attn" not in ported
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 4, 8, generator=g)
    k = torch.randn(2, 7, 4, 8, generator=g)
    v = torch.randn(2, 7, 4, 8, generator=g)
    mods = fake_modules("v2.1+")
    mods["flash_attn.flash_attn_interface"].flash_attn_varlen_func = object()  # type: ignore[attr-defined]
    saved = {n: sys.modules.get(n) for n in mods}
    try:
        sys.modules.update(mods)
        ns_old: dict = {}
        exec(compile(V2_SRC, "old.py", "exec"), ns_old)
        ref = ns_old["attn"](q, k, v)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    ns_new: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(ported, "new.py", "exec"), ns_new)
        out = ns_new["attn"](q, k, v)
    assert torch.allclose(out, ref, atol=2e-5)


def test_if_gate_with_a_placeholder_collapses_once_its_import_is_dead() -> None:
    src = ("from transformers.utils import is_flash_attn_2_available\n\nif is_flash_attn_2_available():\n"
           "    from flash_attn import flash_attn_func\nelse:\n    flash_attn_func = None\n\n\n"
           "def attn(q, k, v):\n    return flash_attn_func(q, k, v)\n")
    out = fixed(src, family="attention")
    assert "flash_attn_func" not in out and "if is_flash_attn_2_available" not in out
    compile(out, "t.py", "exec")


def test_if_gate_on_a_probe_flag_marks_imports_gated() -> None:
    src = ("import importlib.util\nHAS_FA = importlib.util.find_spec('flash_attn') is not None\n"
           "if HAS_FA:\n    from flash_attn import flash_attn_func\nelse:\n    from .naive import flash_attn_func\n")
    index = ImportIndex(cst.parse_module(src))
    assert index.bindings["flash_attn_func"][0].gated
    fb = index.fallback("flash_attn_func")
    assert fb is not None and fb.real


def test_apex_gate_goes_when_every_use_is_rewritten() -> None:
    src = ("import torch\n\ntry:\n    from apex.optimizers import FusedSGD\n    HAS_APEX = True\n"
           "except ImportError:\n    HAS_APEX = False\n\n\ndef make(params):\n"
           "    return FusedSGD(params, lr=0.1)\n")
    out = fixed(src, family="apex")
    assert "apex" not in out.replace("HAS_APEX", "") and "try:" not in out
    assert "HAS_APEX = True" in out and "torch.optim.SGD(params, lr=0.1" in out


def test_definition_before_the_gate_is_the_fallback() -> None:
    path = FIXTURES / "packages" / "fallback_defined_first.in.py"
    src = path.read_text()
    index = ImportIndex(cst.parse_module(src))
    fb = index.fallback("RMSNorm")
    assert fb is not None and fb.real and fb.kind == "earlier"
    gates = _by_line(findings(src, family="packages"), "PRT021")
    assert gates[19].fix == Applicability.SAFE and "fallback binding of RMSNorm" in gates[19].message
    # the v1/v2 re-import is no fallback: nothing runs without flash-attn, and it is not collapsed
    assert gates[33].fix == Applicability.NONE and "imports flash_attn_unpadded_func from flash-attn again" \
        in gates[33].message
    out = fixed(src, family="packages")
    assert "from apex" not in out and "class RMSNorm" in out and "flash_attn_unpadded_func\nexcept ImportError" in out
    compile(out, "t.py", "exec")


def test_apex_rewrite_blocked_for_a_name_defined_before_its_gate() -> None:
    src = (FIXTURES / "packages" / "fallback_defined_first.in.py").read_text()
    src += "\n\ndef make(d):\n    return RMSNorm(d, eps=1e-6)\n"
    assert "torch.nn.RMSNorm" not in fixed(src, family="apex")


def test_fallback_in_a_function_local_gate() -> None:
    src = ("def attention(q, k, v):\n    try:\n        from flash_attn import flash_attn_func\n"
           "    except ImportError:\n        flash_attn_func = naive_attention\n"
           "    return flash_attn_func(q, k, v)\n")
    fb = ImportIndex(cst.parse_module(src)).fallback("flash_attn_func")
    assert fb is not None and fb.real
    assert fixed(src, family="attention") == src


def test_type_checking_imports_are_not_removed() -> None:
    src = ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import bitsandbytes as bnb\n\n\n"
           "def f(layer: \"bnb.nn.Linear8bitLt\"):\n    return layer\n")
    assert fixed(src, family="packages") == src


PRIVATE_SRC = '''import torch
from flash_attn import flash_attn_func


class Private(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self._attn = flash_attn_func

    def forward(self, q, k, v):
        return self._attn(q, k, v, causal=True)


def attn(q, k, v):
    return Private()(q, k, v)
'''


def _run_with_references(src: str, *args, extra: dict | None = None):  # type: ignore[no-untyped-def]
    from reference.attention_ref import fake_modules

    mods = fake_modules("v2.1+")
    for name, attrs in (extra or {}).items():
        for key, val in attrs.items():
            setattr(mods[name], key, val)
    saved = {n: sys.modules.get(n) for n in mods}
    try:
        sys.modules.update(mods)
        ns: dict = {}
        exec(compile(src, "old.py", "exec"), ns)
        return ns["attn"](*args)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def test_private_attribute_binding_rewritten_and_numerically_exact() -> None:
    torch = pytest.importorskip("torch")
    ported = fixed(PRIVATE_SRC, family="attention")
    assert "flash_attn" not in ported and "self._attn" not in ported
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, 8, generator=g)
    k = torch.randn(2, 6, 4, 8, generator=g)
    v = torch.randn(2, 6, 4, 8, generator=g)
    ref = _run_with_references(PRIVATE_SRC, q, k, v)
    ns: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(ported, "new.py", "exec"), ns)
        out = ns["attn"](q, k, v)
    assert torch.allclose(out, ref, atol=2e-5)


def test_public_or_shared_attribute_binding_is_only_reported() -> None:
    public = PRIVATE_SRC.replace("self._attn", "self.attn_fn")
    assert fixed(public, family="attention") == public
    (hit,) = [f for f in findings(public, family="attention") if f.code == "PRT100"]
    assert "public" in hit.message and hit.fix == Applicability.NONE
    shared = PRIVATE_SRC + "\n\ndef swap(block):\n    block._attn = None\n"
    assert fixed(shared, family="attention") == shared


def test_folded_gate_takes_the_logging_import_it_alone_used() -> None:
    src = ("import logging\n\nimport torch\n\ntry:\n    import xformers.ops\nexcept ImportError:\n"
           "    logging.error('xformers not found')\n\n\ndef attn(q, k, v):\n"
           "    return xformers.ops.memory_efficient_attention(q, k, v)\n")
    out = fixed(src, family="attention")
    assert "logging" not in out and "xformers" not in out and "try:" not in out
    kept = src.replace("def attn", "log = logging.getLogger(__name__)\n\n\ndef attn")
    assert "import logging" in fixed(kept, family="attention")


def test_module_aliases_leave_unexported_names_alone() -> None:
    from porter.pyimports import canonical

    assert canonical("apex.normalization.fused_layer_norm.FusedRMSNorm") == "apex.normalization.FusedRMSNorm"
    kept = "apex.normalization.fused_layer_norm.FusedLayerNormAffineFunction.apply"
    assert canonical(kept) == kept
    assert canonical("bitsandbytes.optim.adam.Optimizer2State") == "bitsandbytes.optim.adam.Optimizer2State"


def test_pairwise_rebinding_after_placeholders_is_found_and_rewritten() -> None:
    torch = pytest.importorskip("torch")
    src = (FIXTURES / "attention" / "tuple_rebinding.in.py").read_text()
    index = ImportIndex(cst.parse_module(src))
    assert index.resolve_name("flash_attn_func") == "flash_attn.flash_attn_func"
    fb = index.fallback("flash_attn_func")
    assert fb is not None and not fb.real  # the `None` placeholder before the gate
    codes = {f.line: f.code for f in findings(src, family="attention")}
    assert codes == {16: "PRT100", 20: "PRT103"}
    snippet = src + "\n\ndef attn(q, k, v):\n    return dense(q, k, v, 0.0, 0.5)\n"
    ported = fixed(snippet, family="attention")
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 2, 8, generator=g) for _ in range(3))
    ref = _run_with_references(snippet, q, k, v,
                               extra={"flash_attn": {"flash_attn_varlen_func": object()}})
    ns: dict = {}
    exec(compile(ported, "new.py", "exec"), ns)
    assert torch.allclose(ns["attn"](q, k, v), ref, atol=2e-5)


def test_gate_overriding_an_earlier_class_with_a_partial_keeps_the_class() -> None:
    src = (FIXTURES / "packages" / "fallback_override.in.py").read_text()
    (gate,) = [f for f in findings(src, family="packages") if f.code == "PRT021"]
    assert gate.fix == Applicability.SAFE and "fallback binding of LlamaRMSNorm" in gate.message
    assert "partial" not in gate.message  # functools is no CUDA-only package
    out = fixed(src, family="packages")
    assert "from apex" not in out and "try:" not in out and "class LlamaRMSNorm" in out
    compile(out, "t.py", "exec")


def test_prt021_names_what_a_handler_defines_besides_the_gated_names() -> None:
    src = ("try:\n    from xformers.ops import cross_entropy\n\n    def loss(s, t):\n"
           "        return cross_entropy(s, t)\nexcept ImportError:\n\n    def loss(s, t):\n        return -(s * t).sum()\n")
    (gate,) = [f for f in findings(src, family="packages") if f.code == "PRT021"]
    assert "no fallback binding of cross_entropy" in gate.message and "defines loss" in gate.message


@pytest.mark.parametrize("family,src,call", [
    ("quantization",
     "import torch\n\ntry:\n    from bitsandbytes.optim import Adam8bit\nexcept ImportError:\n"
     "    from torch.optim import AdamW as Adam8bit\n\n\ndef make(m):\n    return Adam8bit(m.parameters(), lr=1e-3)\n",
     "Adam8bit(m.parameters(), lr=1e-3)"),
    ("telemetry",
     "try:\n    import pynvml\nexcept ImportError:\n    from . import nvml_shim as pynvml\n\n\n"
     "def count():\n    pynvml.nvmlInit()\n    return pynvml.nvmlDeviceGetCount()\n",
     "pynvml.nvmlDeviceGetCount()"),
])
def test_every_family_keeps_a_fallback_binding(family: str, src: str, call: str) -> None:
    # without the guard both families rewrite these calls (to torchao / torch.cuda), though on a machine
    # without the package the fallback is what the code runs
    assert call in fixed(src, family=family, unsafe=True)
    assert any("fallback binding" in f.message for f in findings(src, family=family))


def test_a_gate_flag_other_modules_import_is_not_folded(tmp_path) -> None:
    """A real repository's `XFORMERS_IS_AVAILABLE = True` (folded) made another module, which imports the
    flag, pick a code path that still needs xformers: a flag read elsewhere keeps its gate."""
    import subprocess
    import sys
    import textwrap

    gate = textwrap.dedent('''
        import torch

        try:
            import xformers.ops as xops

            XFORMERS_IS_AVAILABLE = True
        except ImportError:
            XFORMERS_IS_AVAILABLE = False


        def attend(q, k, v):
            return xops.memory_efficient_attention(q, k, v)
    ''').lstrip()
    for with_reader in (False, True):
        repo = tmp_path / f"repo{int(with_reader)}"
        repo.mkdir()
        (repo / "model.py").write_text(gate)
        if with_reader:
            (repo / "video.py").write_text("from model import XFORMERS_IS_AVAILABLE\n\n\n"
                                           "BLOCK = 'xformers' if XFORMERS_IS_AVAILABLE else 'vanilla'\n")
        proc = subprocess.run([sys.executable, "-m", "porter", "apply", "--no-cache", str(repo)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        out = (repo / "model.py").read_text()
        assert "scaled_dot_product_attention" in out
        if with_reader:
            # the gate keeps its import: the flag still says whether xformers is there
            assert "import xformers.ops as xops" in out and "except ImportError:" in out, out
            assert "XFORMERS_IS_AVAILABLE = False" in out, out
        else:
            assert "except ImportError" not in out, out
