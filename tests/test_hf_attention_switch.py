"""The Hugging Face attention switch is rewritten only when no file of the repository says otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter import runner
from porter.codemods.packages.hf_attention import scan
from porter.config import Settings
from porter.findings import Applicability

SWITCH = 'from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained("x", attn_implementation="flash_attention_2")\n'


def _switch_fix(root: Path, paths: list[Path]) -> Applicability:
    result = runner.run(root, paths, Settings(cache=False, select=("PRT03",)), "audit", jobs=1, use_cache=False)
    found = [f for f in result.findings if f.code == "PRT030" and f.path == "train.py"]
    assert len(found) == 1
    return found[0].fix


@pytest.mark.parametrize("other", [
    # a packed-sequence patch replacing the flash entry of the upstream table
    "from transformers.models.llama import modeling_llama\n"
    "modeling_llama.LLAMA_ATTENTION_CLASSES['flash_attention_2'] = PackedFlashAttention\n",
    # the repository's own model maps only eager and flash_attention_2
    "ATTN = {'eager': Eager, 'flash_attention_2': Flash}\n",
    # other code keyed on the string
    "def collate(cfg, b):\n    if cfg._attn_implementation == 'flash_attention_2':\n        return pack(b)\n",
    # a repository model that declares flash-attn support but not SDPA
    "class MyModel(PreTrainedModel):\n    _supports_flash_attn_2 = True\n",
])
def test_a_fact_in_another_file_blocks_the_fix(tmp_path: Path, other: str) -> None:
    (tmp_path / "train.py").write_text(SWITCH)
    (tmp_path / "model.py").write_text(other)
    assert _switch_fix(tmp_path, [tmp_path]) is Applicability.NONE
    # the same answer when the switch's file is checked alone (pre-commit)
    assert _switch_fix(tmp_path, [tmp_path / "train.py"]) is Applicability.NONE


def test_clean_repository_keeps_the_safe_fix(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SWITCH)
    (tmp_path / "model.py").write_text(
        "class MyModel(PreTrainedModel):\n    _supports_flash_attn_2 = True\n    _supports_sdpa = True\n"
        "# 'flash_attention_2': a comment is not a table\n")
    assert _switch_fix(tmp_path, [tmp_path]) is Applicability.SAFE


def test_remote_code_elsewhere_blocks_only_flowing_values(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        SWITCH + "cfg = load()\ncfg.attn_implementation = 'flash_attention_2'\n")
    (tmp_path / "load.py").write_text("def load(p):\n    return AutoConfig.from_pretrained(p, trust_remote_code=True)\n")
    result = runner.run(tmp_path, [tmp_path], Settings(cache=False, select=("PRT03",)), "audit", jobs=1,
                        use_cache=False)
    fixes = {f.line: f.fix for f in result.findings if f.code == "PRT030"}
    assert fixes == {2: Applicability.SAFE, 4: Applicability.NONE}


def test_scan_reads_no_false_remote_code() -> None:
    facts = scan("m.py", "def f(trust_remote_code=False):\n    trust_remote_code: bool = False\n"
                 "    x = load(trust_remote_code=None)\n    if trust_remote_code == True:\n        pass\n")
    assert facts.remote == ()
    facts = scan("m.py", "kw = {'trust_remote_code': True}\n    trust_remote_code: bool = field(default=True)\n")
    assert [s.line for s in facts.remote] == [1, 2]


@pytest.mark.parametrize(("pin", "ok"), [
    (None, True), ("", True), ("==4.35.2", False), ("==4.36.0", True), (">=4.30,<4.36", False),
    (">=4.31", True), ("~=4.33.0", False), ("==4.*", True), ("<=4.34", False),
])
def test_transformers_pin_gate(pin: str | None, ok: bool) -> None:
    from porter.codemods.packages.hf_attention import transformers_admits_sdpa

    assert transformers_admits_sdpa(pin) is ok


@pytest.mark.parametrize(("line", "kind"), [
    ('if impl in ("sdpa", "flash_attention_2"):', "keyed"),
    ('ok = "flash_attention_2" in impls', "keyed"),
    ('if cfg._attn_implementation == "flash_attention_2":', "keyed"),
    ('FA = "flash_attention_2"', "keyed"),
    ('T = {"eager": E, "flash_attention_2": F}', "tables"),
    ('T = dict(eager=E, flash_attention_2=F)', "tables"),
    ("LLAMA_ATTENTION_CLASSES['flash_attention_2'] = Packed", "tables"),
    ('m = f(attn_implementation="flash_attention_2")', None),
    ('m = f(attn_implementation="flash_attention_2" if a in (1, 2) else "eager")', None),
    ('attn_impl = "flash_attention_2"', None),
    ('# if impl == "flash_attention_2":', None),
])
def test_scan_classifies_lines(line: str, kind: str | None) -> None:
    facts = scan("m.py", line + "\n")
    got = "tables" if facts.tables else "keyed" if facts.keyed else None
    assert got == kind


def test_scan_is_bounded_on_hostile_lines() -> None:
    import time

    text = ("x = dict(" * 100 + "'flash_attention_2' in (a, b)\n") * 2000 + "y = [" + "dict(" * 300000 + "]\n"
    start = time.perf_counter()
    scan("m.py", text)
    assert time.perf_counter() - start < 5
