"""The packages family on the stdlib-``ast`` tier: detection without LibCST, and its text fixes."""

from __future__ import annotations

from porter import registry
from porter.engine import make_context, python_guard, raw_findings
from porter.findings import Applicability
from porter.testing import findings, fixed, settings_for


def _raw(src: str, relpath: str = "t.py") -> tuple[list, object]:
    _, tree = python_guard(relpath, src)
    fam = registry.family("packages")
    assert fam is not None
    ctx = make_context(relpath, src, "python", settings_for("packages"), None, tree)
    return raw_findings(ctx, [fam]), ctx


def test_detection_never_parses_libcst() -> None:
    src = ("import apex\nfrom flash_attn import flash_attn_func\n"
           "try:\n    import xformers.ops as xops\nexcept ImportError:\n    xops = None\n\n"
           "def f(q, k, v, use_flash_attn=True):\n    global xops\n"
           "    return apex.amp.scale_loss(q), flash_attn_func(q, k, v), xops\n"
           "ok = __import__('importlib').util.find_spec('cupy')\n")
    found, ctx = _raw(src)
    codes = sorted(f.code for f in found)
    assert codes == ["PRT011", "PRT012", "PRT013", "PRT020", "PRT020", "PRT020", "PRT020", "PRT021",
                     "PRT023", "PRT032"]
    assert not ctx.cst_parsed  # type: ignore[attr-defined]
    # `global xops` names the gated import: reported at the name, as an expression would be
    (glob,) = [f for f in found if f.code == "PRT020" and f.line == 9]
    assert (glob.column, glob.end_column) == (12, 16)


def test_from_import_reports_the_module_name_whatever_the_spacing() -> None:
    (imp,) = [f for f in findings("from  apex . normalization  import  FusedLayerNorm\n", family="packages")
              if f.code == "PRT013"]
    assert (imp.line, imp.column, imp.end_column) == (1, 7, 27)


def test_legacy_switch_before_other_arguments_keeps_one_comma() -> None:
    src = ('from transformers import AutoModel\n'
           'm = AutoModel.from_pretrained("x", use_flash_attention_2=True, torch_dtype="auto")\n'
           'n = AutoModel.from_pretrained("x", use_flash_attention_2 = (True) , revision="main")\n')
    out = fixed(src, family="packages")
    assert out == ('from transformers import AutoModel\n'
                   'm = AutoModel.from_pretrained("x", attn_implementation="sdpa", torch_dtype="auto")\n'
                   'n = AutoModel.from_pretrained("x", attn_implementation = "sdpa" , revision="main")\n')
    compile(out, "t.py", "exec")


def test_dead_import_before_a_semicolon_keeps_one_semicolon() -> None:
    src = "import os, pycuda; x = 1\nprint(os, x)\n"
    (dead,) = [f for f in findings(src, family="packages") if f.code == "PRT024"]
    assert dead.fix == Applicability.SAFE
    assert fixed(src, family="packages") == "import os; x = 1\nprint(os, x)\n"


def test_dead_names_go_from_a_parenthesised_import() -> None:
    src = "from nvidia import (\n    dali,  # pipelines\n    other,\n)\nprint(other)\n"
    assert fixed(src, family="packages") == "from nvidia import (\n    other)\nprint(other)\n"


def test_kept_fallback_keeps_a_trailing_comment_once() -> None:
    src = ("try:\n    from apex.normalization import FusedLayerNorm as LayerNorm\nexcept ImportError:\n"
           "    from torch.nn import LayerNorm  # portable\n")
    assert fixed(src, family="packages") == "from torch.nn import LayerNorm  # portable\n"


def test_kept_fallback_moves_nested_blocks_with_their_continuation_lines() -> None:
    src = ("try:\n    from apex.normalization import FusedRMSNorm as RMSNorm\nexcept ImportError:\n"
           "    # the portable norm\n    class RMSNorm:\n        def __init__(self, eps=1e-6):\n"
           "            self.eps = (eps,\n                  2)\n    pass\n\n\nprint(RMSNorm)\n")
    out = fixed(src, family="packages")
    assert out == ("# the portable norm\nclass RMSNorm:\n    def __init__(self, eps=1e-6):\n"
                   "        self.eps = (eps,\n              2)\n\n\nprint(RMSNorm)\n")


def test_prefilter_tokens_cover_every_name_a_rule_needs() -> None:
    from porter.codemods import packages as p
    from porter.codemods.packages import visitor

    fam = registry.family("packages")
    assert fam is not None
    for module in p._ALL_MODULES:  # imports, uses, gates, re-exports, by-name imports
        assert fam.matches(f"import {module}\n", "python"), module
    for key in visitor._HELPER_PACKAGES:  # transformers-style helpers
        assert fam.matches(f"from transformers.utils import is_{key}_available\n", "python"), key
    # broad words that no rule needs no longer select a file
    assert not fam.matches("x = torch._lib.load()\nif is_torch_available():\n    pass\n", "python")


def test_probe_and_switch_spellings_the_old_prefilter_missed() -> None:
    # a distribution name is matched case-insensitively: the probe's module is what the text must hold
    probe = "import importlib.metadata\nv = importlib.metadata.version('Flash-Attn')\n"
    assert [f.code for f in findings(probe, family="packages")] == ["PRT023"]
    switch = "build_model(use_flash_attention=True)\n"
    assert [f.code for f in findings(switch, family="packages")] == ["PRT032"]
