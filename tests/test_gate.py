"""The semantic gate: a fix that breaks the module (or its manifest's promises) is withheld.

A test family, registered only for these tests, emits deliberately broken fixes; each must be
withheld with its reason, and the finding must stay as a flag. Real families are then run on a
repository with sub-projects whose pins disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import libcst as cst
import pytest

from porter import registry
from porter.apis import DEFAULT_TARGET_ROCM, DEFAULT_TARGET_TORCH, pin_admits, requirements_for
from porter.config import Settings
from porter.discovery import SourceRef
from porter.findings import Applicability, Category
from porter.framework import Family, PyVisitor, RepoFacts, rule
from porter.gate import GateContext, check, unresolved_names
from porter.runner import collect_facts, run

# -- a family that emits broken fixes on purpose ------------------------------------------------

# legacy_op("<case>") is rewritten to the text below, with these imports added
CASES = {
    "ok": ("torch.add(x, 1)", ("import torch",)),
    "undefined": ("undefined_helper(x)", ()),
    "unlisted": ("fancylib.op(x)", ("import fancylib",)),
    "torchao": ("torchao.optim.AdamW8bit(x)", ("import torchao.optim",)),
    "needs_new_torch": ("torch.nn.RMSNorm(x)", ("import torch",)),
}


class _BrokenVisitor(PyVisitor):
    family = "gatetest"

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name) and func.value == "legacy_op" and node.args:
            arg = node.args[0].value
            case = arg.evaluated_value if isinstance(arg, cst.SimpleString) else ""
            if case in CASES:
                text, imports = CASES[case]
                self.report(node, "PRT990", f"legacy_op {case}", replacement=text, fix=Applicability.SAFE,
                            add_imports=imports)
        # flash_attn.flash_attn_func(q, k, v) -> SDPA, but the `import flash_attn` is left behind
        if (isinstance(func, cst.Attribute) and func.attr.value == "flash_attn_func"
                and self.qualname(func) == "flash_attn.flash_attn_func"):
            self.report(node, "PRT991", "flash call", replacement="torch.nn.functional.scaled_dot_product_attention"
                        "(q, k, v)", fix=Applicability.SAFE, add_imports=("import torch",))


TEST_FAMILY = Family(
    name="gatetest", title="gate test", order=5,
    rules=(rule("PRT990", "gate-test-op", "gatetest", "test", Category.REPLACE, fix=Applicability.SAFE),
           rule("PRT991", "gate-test-flash", "gatetest", "test", Category.REPLACE, fix=Applicability.SAFE)),
    tokens=("legacy_op", "flash_attn"), python=_BrokenVisitor,
)


@pytest.fixture
def with_test_family(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = registry.families()
    fams = tuple(sorted((*real, TEST_FAMILY), key=lambda f: (f.order, f.name)))
    registry.rules.cache_clear()
    monkeypatch.setattr(registry, "families", lambda: fams)
    yield
    registry.rules.cache_clear()


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return tmp_path


def _settings(**kw: object) -> Settings:
    return replace(Settings(select=("PRT990", "PRT991", "PRT8", "PRT00"), jobs=1, cache=False), **kw)


def _by_path(result, rel: str):  # type: ignore[no-untyped-def]
    return next(fr for fr in result.files if fr.relpath == rel)


def _withheld(fr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {f.message.split(" [")[0]: f.data["withheld"] for f in fr.findings if "withheld" in f.data}


def test_each_broken_fix_is_withheld_with_its_reason(tmp_path: Path, with_test_family: None) -> None:
    root = _repo(tmp_path, {
        "requirements.txt": "torch==2.1.1\nflash-attn==2.5.6\nnumpy\n",
        "m.py": "import flash_attn\nimport torch\n\n\ndef f(x, q, k, v):\n"
                "    a = legacy_op('ok')\n    b = legacy_op('undefined')\n    c = legacy_op('unlisted')\n"
                "    d = legacy_op('torchao')\n    e = legacy_op('needs_new_torch')\n"
                "    return flash_attn.flash_attn_func(q, k, v)\n",
    })
    result = run(root, [root], _settings(), "fix")
    fr = _by_path(result, "m.py")
    text = fr.final_text or ""
    assert "torch.add(x, 1)" in text  # the control goes through
    held = _withheld(fr)
    assert "`undefined_helper`" in held["legacy_op undefined"] and "neither defines nor imports" in \
        held["legacy_op undefined"]
    assert "`fancylib`" in held["legacy_op unlisted"] and "does not provide" in held["legacy_op unlisted"]
    assert "torch>=2.5" in held["legacy_op torchao"] and "torch==2.1.1" in held["legacy_op torchao"]
    assert "torch>=2.4" in held["legacy_op needs_new_torch"]
    assert "flash_attn" in held["flash call"] and "drops" in held["flash call"]
    for bad in ("undefined_helper", "fancylib", "torchao.optim", "RMSNorm", "scaled_dot_product_attention"):
        assert bad not in text, bad
    # withheld findings stay as flags, without a fix, so the report lists them
    flagged = [f for f in fr.findings if "withheld" in f.data]
    assert len(flagged) == 5 and all(f.fix == Applicability.NONE and not f.edits for f in flagged)
    # nothing the withheld fixes needed reaches the manifest
    reqs = _by_path(result, "requirements.txt")
    assert "torchao" not in (reqs.final_text or "")


def test_gate_passes_the_same_fixes_where_the_manifest_allows_them(tmp_path: Path,
                                                                   with_test_family: None) -> None:
    root = _repo(tmp_path, {
        "requirements.txt": "torch>=2.5\nfancylib==1.0\n",
        "m.py": "import torch\n\n\ndef f(x):\n    c = legacy_op('unlisted')\n    d = legacy_op('torchao')\n"
                "    return legacy_op('needs_new_torch')\n",
    })
    result = run(root, [root], _settings(), "fix")
    fr = _by_path(result, "m.py")
    assert not _withheld(fr)
    assert "torchao.optim.AdamW8bit(x)" in (fr.final_text or "")
    # the torchao requirement follows from the applied fix, with the site in the message
    reqs = _by_path(result, "requirements.txt")
    assert reqs.final_text == "torch>=2.5\ntorchao>=0.11\nfancylib==1.0\n"
    msg = next(f.message for f in reqs.fixed if f.code == "PRT805")
    assert "`m.py:" in msg and "PRT990" in msg


def test_pre_existing_unresolved_names_do_not_block(tmp_path: Path, with_test_family: None) -> None:
    root = _repo(tmp_path, {"m.py": "from helpers import *\n\n\ndef f(x):\n    y = injected_name\n"
                                    "    return legacy_op('ok')\n"})
    fr = _by_path(run(root, [root], _settings(), "fix"), "m.py")
    assert "torch.add(x, 1)" in (fr.final_text or "")


# -- real families, sub-projects with their own pins ---------------------------------------------

BNB_KW = ("from transformers import AutoModelForCausalLM\n\n"
          "m = AutoModelForCausalLM.from_pretrained('gpt2', load_in_8bit=True)\n")
BNB_CFG = ("from transformers import BitsAndBytesConfig\n\n"
           "cfg = BitsAndBytesConfig(load_in_8bit=True)\n")


def test_nearest_manifest_decides_per_sub_project(tmp_path: Path) -> None:
    root = _repo(tmp_path, {
        "requirements.txt": "torch>=2.5\ntransformers>=4.51\n",
        "top.py": BNB_KW,
        "old/requirements.txt": "transformers==4.27.4\n",  # torch inherited from the root
        "old/legacy.py": BNB_KW,
    })
    s = Settings(select=("PRT4", "PRT8", "PRT00"), jobs=1, cache=False)
    result = run(root, [root], s, "fix")
    assert "quantization_config=BitsAndBytesConfig(load_in_8bit=True)" in (_by_path(result, "top.py").final_text or "")
    legacy = _by_path(result, "old/legacy.py")
    assert not legacy.changed
    reason = next(f.data["withheld"] for f in legacy.findings if "withheld" in f.data)
    assert "transformers>=4.30" in reason and "transformers==4.27.4" in reason and "old/" in reason
    # a file named alone (pre-commit) gets the same pins: manifests above it are read
    facts = collect_facts(root, [SourceRef("old/legacy.py", "python")])
    assert facts.for_path("old/legacy.py").pins == {"torch": ">=2.5", "transformers": "==4.27.4"}
    assert facts.for_path("top.py").pins["transformers"] == ">=4.51"


def test_unsafe_raises_the_sub_project_pin_in_the_same_series(tmp_path: Path) -> None:
    """TorchAoConfig under transformers==4.37.2 (the reported case): withheld safe; with
    --unsafe-fixes the fix goes in and the sub-project's pin is raised (PRT812), torchao added."""
    root = _repo(tmp_path, {
        "requirements.txt": "torch==2.6.0\ntransformers>=4.51\n",
        "sub/requirements.txt": "torch==2.6.0\ntransformers==4.37.2\ntokenizers==0.15.1\n",
        "sub/q.py": BNB_CFG,
        "old/requirements.txt": "torch==2.1.1\ntransformers>=4.51\n",
        "old/q.py": BNB_CFG,
    })
    s = Settings(select=("PRT4", "PRT8", "PRT00"), jobs=1, cache=False, unsafe_fixes=True)
    result = run(root, [root], s, "fix")
    sub = _by_path(result, "sub/q.py")
    assert "TorchAoConfig(quant_type=Int8WeightOnlyConfig())" in (sub.final_text or "")
    sub_reqs = _by_path(result, "sub/requirements.txt").final_text or ""
    # transformers 4.51 needs tokenizers 0.21: the pinned tokenizers is raised with it, or pip could
    # not resolve the file
    assert sub_reqs == "torch==2.6.0\ntorchao>=0.11\ntransformers>=4.51\ntokenizers>=0.21\n"
    # torch 2.1.1 cannot install a torchao with these APIs: withheld even with --unsafe-fixes
    old = _by_path(result, "old/q.py")
    assert not old.changed
    assert any("torch>=2.5" in f.data.get("withheld", "") for f in old.findings)
    assert not _by_path(result, "old/requirements.txt").changed
    # the root's manifest is not touched by fixes made in sub-projects
    assert not _by_path(result, "requirements.txt").changed


# -- unit level ----------------------------------------------------------------------------------


def _g(**kw: object) -> GateContext:
    base = {"pins": {"torch": "==2.6.0"}, "has_manifest": True}
    base.update(kw)
    return GateContext(**base)  # type: ignore[arg-type]


def test_unresolved_names_scopes() -> None:
    import ast

    src = ("import os\nclass C:\n    k = 1\n    def m(self):\n        return k\n"
           "def f(a, *r, **kw):\n    g = [i for i in r if i]\n    return lambda z: z + a + g + missing\n"
           "def h():\n    global late\n    late = 1\nprint(late, os, __file__)\n")
    assert unresolved_names(ast.parse(src)) == {"k", "missing"}


def test_check_reports_each_condition() -> None:
    before = "import torch\n\ndef f(x):\n    return x\n"
    assert check(before, "import torch\n\ndef f(x):\n    return torch.add(x, 1)\n", _g()).ok
    v = check(before, "import torch\n\ndef f(x):\n    return torch.nn.RMSNorm(x)\n", _g(pins={"torch": "==2.3.1"}))
    assert not v.ok and "torch>=2.4" in v.reason
    sdpa = "import torch\n\ndef f(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q, k, v{})\n"
    assert check(before, sdpa.format(", enable_gqa=True"), _g(pins={"torch": "==2.4.1"})).reason.startswith(
        "`torch.nn.functional.scaled_dot_product_attention(enable_gqa)` needs torch>=2.5")
    assert check(before, sdpa.format(""), _g(pins={"torch": "==2.4.1"})).ok
    # a fix's own declared requirement counts too
    assert not check(before, before.replace("x\n", "x + 1\n"), _g(), requires=("torch>=2.7",)).ok
    # no manifest: imports are not judged, versions against no pins pass
    assert check(before, "import fancylib\n" + before, _g(pins={}, has_manifest=False)).ok
    assert not check(before, "import fancylib\n" + before, _g()).ok
    # a module the fix creates is provided
    assert check(before, "import porter_device\n" + before, _g(), created=["porter_device.py"]).ok
    assert not check(before, "def broken(:\n", _g()).ok


def test_catalogue_and_pins() -> None:
    need = requirements_for(["torchao.optim.AdamW8bit"])
    assert str(need["torchao"][0]) == "torchao>=0.11" and str(need["torch"][0]) == "torch>=2.5"
    assert str(requirements_for(["transformers.TorchAoConfig"])["transformers"][0]) == "transformers>=4.51"
    from packaging.version import Version

    assert pin_admits("==2.5.1", Version("2.5")) and not pin_admits("==2.1.1+cu121", Version("2.5"))
    assert pin_admits(">=2.0", Version("2.5")) and not pin_admits("<2.3", Version("2.5"))
    assert pin_admits("", Version("9.0")) and pin_admits("~=2.4", Version("2.5"))


def test_migration_target_is_on_a_known_rocm_index() -> None:
    from porter.codemods.dependencies.catalog import rocm_for_torch

    assert rocm_for_torch(DEFAULT_TARGET_TORCH) == DEFAULT_TARGET_ROCM


def test_repo_without_manifests_keeps_repo_wide_pins() -> None:
    facts = RepoFacts(pins={"torch": "==2.1"})
    assert facts.for_path("a/b.py") is facts


def test_string_settings_need_their_release() -> None:
    """`attn_implementation="sdpa"` needs transformers 4.36, in every spelling of the setting."""
    for shape in ('m = AutoModel.from_pretrained(p, attn_implementation="{}")\n',
                  'kwargs["attn_implementation"] = "{}"\n', 'config._attn_implementation = "{}"\n',
                  'kw = {{"attn_implementation": "{}"}}\n'):
        before = "from transformers import AutoModel\n" + shape.format("flash_attention_2")
        after = "from transformers import AutoModel\n" + shape.format("sdpa")
        v = check(before, after, _g(pins={"torch": "==2.1.2", "transformers": "==4.34.0"}))
        assert not v.ok and "transformers>=4.36" in v.reason and "transformers==4.34.0" in v.reason, shape
        assert check(before, after, _g(pins={"torch": "==2.1.2", "transformers": "==4.37.2"})).ok, shape


def test_a_gate_failure_withholds_instead_of_crashing(tmp_path: Path, with_test_family: None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import porter.gate

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(porter.gate, "check", broken)
    root = _repo(tmp_path, {"m.py": "import torch\n\n\ndef f(x):\n    return legacy_op('ok')\n"})
    fr = _by_path(run(root, [root], _settings(), "fix"), "m.py")
    assert not fr.changed
    assert "could not check the fix (KeyError)" in _withheld(fr)["legacy_op ok"]


def test_needs_keep_the_strictest_floor_with_its_own_sites() -> None:
    from porter.engine import merge_need

    needs: dict[str, tuple[str, tuple[str, ...]]] = {}
    merge_need(needs, "transformers", ">=4.36", ("`a.py:1` PRT030",))
    merge_need(needs, "transformers", ">=4.51", ("`b.py:2` PRT421",))
    merge_need(needs, "transformers", ">=4.30", ("`c.py:3` PRT420",))
    merge_need(needs, "transformers", ">=4.51", ("`d.py:4` PRT421", "`b.py:2` PRT421"))
    assert needs == {"transformers": (">=4.51", ("`b.py:2` PRT421", "`d.py:4` PRT421"))}


def test_a_torch_floor_below_the_api_withholds_the_fix() -> None:
    """`torch>=2` admits torch 2.0-2.4, which lack SDPA's enable_gqa: the flash-attn rewrite is withheld
    (a real repository declared torch>=2 and its ported model no longer imported on the documented install)."""
    from porter.engine import fix
    from porter.framework import RepoFacts
    from porter.testing import fixed, settings_for

    src = ("import torch\nfrom flash_attn import flash_attn_func\n\n\ndef attend(q, k, v):\n"
           "    return flash_attn_func(q, k, v, causal=True)\n")
    floor_low = RepoFacts(pins={"torch": ">=2", "flash-attn": "==2.5.6"}, scope="")
    assert "flash_attn_func(q, k, v" in fixed(src, family="attention", facts=floor_low)
    outcome = fix("t.py", src, "python", settings_for("attention"), floor_low)
    withheld = [f for f in outcome.remaining if "withheld" in f.data]
    assert withheld and "also admits older releases" in withheld[0].data["withheld"]
    floor_ok = RepoFacts(pins={"torch": ">=2.5", "flash-attn": "==2.5.6"}, scope="")
    assert "scaled_dot_product_attention" in fixed(src, family="attention", facts=floor_ok)
