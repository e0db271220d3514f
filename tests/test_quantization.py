"""The quantization family: strategy option, decoupled decay, 4-bit defaults, transformers v5 kwargs, removed APIs, defaults written out, coverage.

Parity of the rewrites against pure-torch references of bitsandbytes is in
tests/test_quantization_parity.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from porter import registry
from porter.findings import Applicability
from porter.framework import RepoFacts
from porter.testing import codes, findings, fixed, settings_for

FIXTURES = Path(__file__).parent / "fixtures"
FAMILY = "quantization"


def rocm(unsafe: bool = True):  # type: ignore[no-untyped-def]
    return settings_for(FAMILY, unsafe=unsafe, quantization={"strategy": "bitsandbytes-rocm"})


def by_code(src: str, **kw: object) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in findings(src, family=FAMILY, **kw):  # type: ignore[arg-type]
        out.setdefault(f.code, []).append(f)
    return out


# -- coverage ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["quantization", "fp8"])
def test_every_rule_has_a_fixture_finding(family: str) -> None:
    fam = registry.family(family)
    assert fam is not None
    seen = set()
    for path in (FIXTURES / family).glob("*.findings"):
        seen.update(line.split()[1] for line in path.read_text().splitlines() if line.strip())
    missing = sorted(r.code for r in fam.rules if r.code not in seen)
    assert not missing, f"rules without a fixture finding: {missing}"


@pytest.mark.parametrize("family", ["quantization", "fp8"])
def test_every_fixing_rule_has_a_fixed_fixture(family: str) -> None:
    """Every rule that offers a fix changes at least one fixture output (safe or unsafe)."""
    fam = registry.family(family)
    assert fam is not None
    fixing = {r.code for r in fam.rules if r.fix != Applicability.NONE}
    applied: set[str] = set()
    from porter.engine import fix as run_fix

    for path in (FIXTURES / family).glob("*.in.py"):
        text = path.read_text()
        for unsafe in (False, True):
            out = run_fix(path.name, text, "python", settings_for(family, unsafe=unsafe))
            applied.update(f.code for f in out.fixed)
    assert fixing <= applied, f"fixing rules never applied by a fixture: {sorted(fixing - applied)}"


# -- strategy ------------------------------------------------------------------------------------
def test_strategy_bitsandbytes_rocm_keeps_the_code() -> None:
    for name in ("optimizers", "modules"):
        src = (FIXTURES / FAMILY / f"{name}.in.py").read_text()
        assert fixed(src, settings=rocm()) == src
        found = findings(src, settings=rocm())
        assert found and all(f.fix == Applicability.NONE for f in found)
        assert all("bitsandbytes>=0.50" in f.message for f in found)


def test_strategy_bitsandbytes_rocm_still_fixes_transformers_v5_kwargs() -> None:
    src = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("x", load_in_8bit=True)\n'
    out = fixed(src, settings=rocm())
    assert "quantization_config=BitsAndBytesConfig(load_in_8bit=True)" in out
    assert "TorchAoConfig" not in out  # the 8-bit config stays on bnb with this strategy


def test_strategy_reports_the_repo_pin() -> None:
    src = "import bitsandbytes as bnb\nopt = bnb.optim.Lion(params)\n"
    found = findings(src, family=FAMILY, facts=RepoFacts(pins={"bitsandbytes": "==0.41.1"}))
    assert "the repo pins bitsandbytes==0.41.1" in found[0].message


# -- hidden decoupled decay ---------------------------------------------------------------------
def test_trap5_bnb_adam_with_decay_becomes_adamw_never_coupled() -> None:
    src = "import bitsandbytes as bnb\nopt = bnb.optim.Adam(params, lr=1e-3, weight_decay=0.1)\n"
    out = fixed(src, family=FAMILY, unsafe=True)
    assert "torch.optim.AdamW(" in out and "weight_decay=0.1" in out
    assert not re.search(r"torch\.optim\.Adam\(", out)
    src8 = "import bitsandbytes as bnb\nopt = bnb.optim.Adam8bit(params, weight_decay=0.1)\n"
    out8 = fixed(src8, family=FAMILY, unsafe=True)
    assert "torchao.optim.AdamW8bit(" in out8 and "weight_decay=0.1" in out8
    assert "Adam8bit(" not in out8.replace("AdamW8bit(", "")


def test_trap5_decay_is_unsafe_and_zero_decay_is_safe() -> None:
    decayed = findings("import bitsandbytes as bnb\nopt = bnb.optim.AdamW(params)\n", family=FAMILY)
    assert decayed[0].fix == Applicability.UNSAFE and "lr*wd" in decayed[0].message
    plain = findings("import bitsandbytes as bnb\nopt = bnb.optim.Adam(params)\n", family=FAMILY)
    assert plain[0].fix == Applicability.SAFE


# -- 4-bit defaults --------------------------------------------------------------------------------
def test_trap21_default_4bit_quant_type_is_fp4() -> None:
    src = ("import bitsandbytes as bnb\nfrom transformers import BitsAndBytesConfig\n"
           "a = bnb.nn.Linear4bit(8, 8)\nb = BitsAndBytesConfig(load_in_4bit=True)\n")
    found = findings(src, family=FAMILY)
    assert [f.data.get("quant_type") for f in found] == ["fp4", "fp4"]
    naive = "nf4"  # the naive reading of "4-bit bnb" (QLoRA's type) is wrong for the defaults
    assert all(f.data.get("quant_type") != naive for f in found)
    assert all(f.fix == Applicability.NONE for f in found)
    assert "fp32 compute" in found[0].message and "means fp32 compute" in found[1].message


def test_trap21_no_4bit_config_is_ever_rewritten() -> None:
    src = ("from transformers import BitsAndBytesConfig\n"
           "c = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')\n")
    assert fixed(src, family=FAMILY, unsafe=True) == src


# -- transformers v5 kwargs ------------------------------------------------------------------------
_REMOVED = re.compile(r"\bload_in_(?:8|4)bit\s*=\s*True")


def removed_kwargs_left(text: str) -> list[str]:
    """load_in_8bit=/load_in_4bit=True passed straight to from_pretrained (v5 rejects them)."""
    left = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained":
            for kw in node.keywords:
                if kw.arg in ("load_in_8bit", "load_in_4bit") and isinstance(kw.value, ast.Constant) and kw.value.value:
                    left.append(kw.arg)
    return left


def test_trap22_load_in_kbit_is_rewritten() -> None:
    src = (FIXTURES / FAMILY / "hf.in.py").read_text()
    assert removed_kwargs_left(src)  # the check sees the naive (unchanged) code
    out = fixed(src, family=FAMILY)
    left = removed_kwargs_left(out)
    assert left == ["load_in_8bit"]  # only m5 (quantization_config also given) is left, and flagged
    assert "quantization_config=BitsAndBytesConfig(load_in_8bit=True)" in out


def test_trap22_false_is_never_reported() -> None:
    src = ("from transformers import AutoModel\nm = AutoModel.from_pretrained('x', load_in_8bit=False, "
           "load_in_4bit=False)\nkw = dict(load_in_8bit=False)\nd = {'load_in_4bit': False}\n")
    assert findings(src, family=FAMILY) == []


def test_trap22_torchao_string_quant_type_flagged() -> None:
    src = "from transformers import TorchAoConfig\nc = TorchAoConfig('int8_weight_only')\nok = TorchAoConfig(cfg)\n"
    assert codes(findings(src, family=FAMILY)) == ["PRT422"]


def test_hf_8bit_config_maps_skip_modules_and_drops_threshold_only_with_message() -> None:
    src = ("from transformers import BitsAndBytesConfig\n"
           "c = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=4.0, llm_int8_skip_modules=['head'])\n")
    f = findings(src, family=FAMILY)[0]
    assert f.fix == Applicability.UNSAFE and "llm_int8_threshold=4.0" in f.message
    out = fixed(src, family=FAMILY, unsafe=True)
    assert "TorchAoConfig(quant_type=Int8WeightOnlyConfig(), modules_to_not_convert=['head'])" in out
    assert "from torchao.quantization import Int8WeightOnlyConfig" in out
    assert "BitsAndBytesConfig" not in out  # the import became unused and was removed


# -- never emit removed APIs -------------------------------------------------------------------------
_REMOVED_APIS = re.compile(r"low_bit_optim|\bint8_weight_only\(|\bint4_weight_only\(|fp8_autocast")


def emitted_removed_apis(before: str, after: str) -> list[str]:
    """Removed API names present in ``after`` but not in ``before`` (what a rewrite introduced)."""
    old = set(_REMOVED_APIS.findall(before))
    return [m for m in _REMOVED_APIS.findall(after) if m not in old]


def test_trap30_no_rewrite_emits_removed_apis() -> None:
    assert emitted_removed_apis("x = 1\n", "from torchao.prototype.low_bit_optim import AdamW8bit\n")  # naive
    for family in ("quantization", "fp8"):
        for path in (FIXTURES / family).glob("*.in.py"):
            src = path.read_text()
            for unsafe in (False, True):
                out = fixed(src, family=family, unsafe=unsafe)
                assert not emitted_removed_apis(src, out), path.name


def test_trap30_low_bit_optim_moves_to_torchao_optim() -> None:
    src = (FIXTURES / FAMILY / "torchao_removed.in.py").read_text()
    out = fixed(src, family=FAMILY)
    assert "low_bit_optim" not in out and "from torchao.optim import AdamW8bit" in out


# -- no silent default changes -----------------------------------------------------------------------
def _calls(text: str, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Call)
            and (ast.unparse(n.func).endswith(name))]


def test_rewritten_optimizers_write_every_hyperparameter() -> None:
    src = (FIXTURES / FAMILY / "optimizers.in.py").read_text()
    out = fixed(src, family=FAMILY, unsafe=True)
    calls = [c for c in _calls(out, "Adam") + _calls(out, "AdamW") + _calls(out, "AdamW8bit")
             if ast.unparse(c.func).startswith(("torch.optim.", "torchao.optim."))]
    assert len(calls) >= 7
    for call in calls:
        kws = {k.arg for k in call.keywords}
        assert {"params", "lr", "betas", "eps", "weight_decay"} <= kws, ast.unparse(call)
        assert not call.args, "keywords only"


def test_rewritten_modules_write_bias_explicitly() -> None:
    src = (FIXTURES / FAMILY / "modules.in.py").read_text()
    out = fixed(src, family=FAMILY, unsafe=True)
    for call in _calls(out, "nn.Linear"):
        assert {"in_features", "out_features", "bias"} <= {k.arg for k in call.keywords}


def test_blockers_are_named() -> None:
    src = "import bitsandbytes as bnb\no = bnb.optim.AdamW8bit(p, block_wise=False, percentile_clipping=5)\n"
    (f,) = findings(src, family=FAMILY)
    assert f.code == "PRT403" and "block_wise" in f.message and "percentile_clipping" in f.message


def test_rewrites_parse_and_are_idempotent_on_all_fixtures() -> None:
    for path in (FIXTURES / FAMILY).glob("*.in.py"):
        src = path.read_text()
        out = fixed(src, family=FAMILY, unsafe=True)
        ast.parse(out)
        assert fixed(out, family=FAMILY, unsafe=True) == out
