"""dependencies family: cross-file facts, round-trips and negative cases."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from porter.findings import Applicability
from porter.framework import RepoFacts
from porter.manifests import requirement_lines
from porter.testing import codes, findings, fixed, settings_for

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).parent / "fixtures" / "dependencies"
FAM = "dependencies"
IMPORTS = frozenset({"torch", "numpy", "einops"})


TORCHAO_CODES = ("PRT401", "PRT420", "PRT601")  # fixes of these rules emit torchao APIs


def facts(imports=IMPORTS, applied=(), needs=None) -> RepoFacts:
    """Phase-2 facts; ``needs`` (what the applied fixes emit) defaults to torchao for the rules above."""
    if needs is None:
        needs = {"torchao": (">=0.11", tuple(f"`m.py:1` {c}" for c in applied))} if set(applied) & set(
            TORCHAO_CODES) else {}
    return RepoFacts(imports=frozenset(imports), applied=frozenset(applied), extra={"needs": needs})


REQS = """# stack
--extra-index-url https://download.pytorch.org/whl/cu121
torch==2.8.0+cu121   # pinned
flash-attn==2.5.8
xformers>=0.0.22
numpy>=1.24  # keep
"""


def _changed_lines(before: str, after: str) -> set[int]:
    """1-based line numbers of ``before`` that the diff touches."""
    touched: set[int] = set()
    sm = difflib.SequenceMatcher(a=before.splitlines(keepends=True), b=after.splitlines(keepends=True))
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag != "equal":
            touched.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return touched


def test_flash_attn_dropped_only_when_no_longer_imported() -> None:
    out = fixed(REQS, "requirements.txt", family=FAM, facts=facts())
    assert "flash-attn" not in out
    kept = fixed(REQS, "requirements.txt", family=FAM, facts=facts(IMPORTS | {"flash_attn"}))
    assert "flash-attn==2.5.8\n" in kept
    found = findings(REQS, "requirements.txt", family=FAM, facts=facts(IMPORTS | {"flash_attn"}))
    msg = next(f.message for f in found if f.code == "PRT802" and "flash" in f.message)
    assert "still imports flash_attn" in msg


def test_no_facts_keeps_cuda_only_packages() -> None:
    out = fixed(REQS, "requirements.txt", family=FAM)
    assert "flash-attn==2.5.8" in out and "xformers" in out


def test_indirect_loaders_keep_the_package() -> None:
    hf = IMPORTS | {"transformers"}
    # transformers can load flash-attn (attn_implementation="flash_attention_2"): kept unless the run
    # says no PRT030/PRT031 finding remains
    assert "flash-attn" in fixed(REQS, "requirements.txt", family=FAM, facts=facts(hf))
    f = RepoFacts(imports=hf, extra={"remaining": ("PRT030",)})
    assert "flash-attn" in fixed(REQS, "requirements.txt", family=FAM, facts=f)
    f = RepoFacts(imports=hf, extra={"remaining": ()})
    assert "flash-attn" not in fixed(REQS, "requirements.txt", family=FAM, facts=f)
    # diffusers can enable xformers
    xf = "xformers==0.0.23\n"
    assert fixed(xf, "requirements.txt", family=FAM, facts=facts(IMPORTS | {"diffusers"})) == xf
    assert fixed(xf, "requirements.txt", family=FAM, facts=facts()) == ""


def test_bitsandbytes_dropped_only_after_a_quantization_port() -> None:
    text = "bitsandbytes\nnumpy\n"
    # no port applied: KEEP, and (unsafe: 0.50 needs torch >= 2.4) pin bitsandbytes >= 0.50 for ROCm
    assert fixed(text, "requirements.txt", family=FAM, facts=facts()) == text
    assert fixed(text, "requirements.txt", family=FAM, facts=facts(), unsafe=True) == "bitsandbytes>=0.50\nnumpy\n"
    assert fixed(text, "requirements.txt", family=FAM, facts=facts(applied=("PRT401",))) == "numpy\n"
    # transformers' BitsAndBytesConfig loads it without an import in the repo
    hf = facts(IMPORTS | {"transformers"}, applied=("PRT401",))
    assert fixed(text, "requirements.txt", family=FAM, facts=hf, unsafe=True) == "bitsandbytes>=0.50\nnumpy\n"


def test_torchao_added_only_after_torchao_rewrite() -> None:
    plain = fixed(REQS, "requirements.txt", family=FAM, facts=facts())
    assert "torchao" not in plain
    for applied in (("PRT401",), ("PRT601",)):
        out = fixed(REQS, "requirements.txt", family=FAM, facts=facts(applied=applied))
        assert "torch==2.8.0   # pinned\ntorchao>=0.11\n" in out
    # code that imported torchao before porter ran adds nothing: no applied fix needs it
    via_import = fixed(REQS, "requirements.txt", family=FAM, facts=facts(IMPORTS | {"torchao"}))
    assert "torchao" not in via_import
    # a quantization fix that emits no torchao (bnb 32-bit Adam -> torch.optim) adds nothing either
    assert "torchao" not in fixed(REQS, "requirements.txt", family=FAM, facts=facts(applied=("PRT400",), needs={}))
    # other families' fixes do not add it
    assert "torchao" not in fixed(REQS, "requirements.txt", family=FAM, facts=facts(applied=("PRT101", "PRT301")))
    # already required: not added twice
    twice = fixed(REQS + "torchao==0.18.0\n", "requirements.txt", family=FAM, facts=facts(applied=("PRT401",)))
    assert twice.count("torchao") == 1


def test_torchao_requirement_option() -> None:
    s = settings_for(FAM, dependencies={"torchao-requirement": "torchao==0.18.0"})
    out = fixed(REQS, "requirements.txt", settings=s, facts=facts(applied=("PRT401",)))
    assert "torchao==0.18.0\n" in out


def test_rocm_version_option() -> None:
    s = settings_for(FAM, dependencies={"rocm-version": "6.4"})
    out = fixed(REQS, "requirements.txt", settings=s, facts=facts())
    assert "--extra-index-url https://download.pytorch.org/whl/rocm6.4\n" in out
    bad = settings_for(FAM, dependencies={"rocm-version": "latest; rm -rf /"})
    assert "rocm6.3" in fixed(REQS, "requirements.txt", settings=bad, facts=facts())


def test_cupy_mapped_only_where_a_rocm_wheel_exists() -> None:
    text = "cupy-cuda12x>=13.0  # arrays\n"
    assert fixed(text, "requirements.txt", family=FAM) == text
    s = settings_for(FAM, dependencies={"rocm-version": "5.0"})
    assert fixed(text, "requirements.txt", settings=s) == "cupy-rocm-5-0>=13.0  # arrays\n"


def test_bitsandbytes_pins() -> None:
    # the floor is an unsafe fix: bitsandbytes 0.50 needs torch >= 2.4 and Python >= 3.10, which a repository
    # pinning torch==2.1 cannot install (a real repository's environment became unresolvable)
    assert fixed("bitsandbytes\n", "requirements.txt", family=FAM) == "bitsandbytes\n"
    (f,) = findings("bitsandbytes\n", "requirements.txt", family=FAM)
    assert f.fix == Applicability.UNSAFE and "torch >= 2.4" in f.message
    assert fixed("bitsandbytes\n", "requirements.txt", family=FAM, unsafe=True) == "bitsandbytes>=0.50\n"
    assert fixed("bitsandbytes[test]\n", "requirements.txt", family=FAM, unsafe=True) == "bitsandbytes[test]>=0.50\n"
    old = "bitsandbytes==0.41.1\n"
    assert fixed(old, "requirements.txt", family=FAM) == old
    assert "excludes 0.50" in findings(old, "requirements.txt", family=FAM)[0].message
    assert findings("bitsandbytes>=0.50\n", "requirements.txt", family=FAM) == []


def test_nvidia_runtime_wheels_are_unsafe_drops() -> None:
    text = "nvidia-cudnn-cu12==9.1.0.70\nnumpy\n"
    assert fixed(text, "requirements.txt", family=FAM, facts=facts()) == text
    assert fixed(text, "requirements.txt", family=FAM, facts=facts(), unsafe=True) == "numpy\n"
    # the code imports nvidia.*: only reported
    assert fixed(text, "requirements.txt", family=FAM, facts=facts(IMPORTS | {"nvidia"}), unsafe=True) == text


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("requirements*.in.txt")), ids=lambda p: p.name)
def test_rewritten_requirements_parse_and_keep_other_lines(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for f_ in (facts(), facts(applied=("PRT401",)), None):
        out = fixed(text, "requirements.txt", family=FAM, facts=f_, unsafe=True)
        for line in requirement_lines(out):
            if line.text and not line.option:
                assert line.requirement is not None, line.text
                Requirement(out[line.req_start : line.req_end].replace("\\\n", ""))
        reported = {f.line for f in findings(text, "requirements.txt", family=FAM, facts=f_)}
        assert _changed_lines(text, out) <= reported | {max(reported, default=0) + 1}, path.name


def test_pyproject_still_loads_and_untouched_lines_identical() -> None:
    text = (FIXTURES / "pyproject.in.toml").read_text(encoding="utf-8")
    for f_ in (facts(), facts(applied=("PRT601",)), None):
        out = fixed(text, "pyproject.toml", family=FAM, facts=f_)
        data = tomllib.loads(out)
        for dep in data["project"]["dependencies"]:
            Requirement(dep)
        reported = {f.line for f in findings(text, "pyproject.toml", family=FAM, facts=f_)}
        assert _changed_lines(text, out) <= reported | {r + 1 for r in reported}
    out = fixed(text, "pyproject.toml", family=FAM, facts=facts(applied=("PRT601",)))
    deps = tomllib.loads(out)["project"]["dependencies"]
    assert deps == ["torch==2.7.1", "torchao>=0.11", "numpy"]
    assert tomllib.loads(out)["project"]["optional-dependencies"]["gpu"] == ["cupy-cuda12x"]
    assert "apex" not in tomllib.loads(out)["tool"]["poetry"]["dependencies"]


@pytest.mark.parametrize("array", ['dependencies = ["torch", "flash-attn"]\n',
                                   'dependencies = [\n  "torch",\n  "flash-attn"\n]\n',
                                   'dependencies = [\n  "flash-attn",  # fa\n  "torch"\n]\n'])
def test_pyproject_array_shapes(array: str) -> None:
    text = '[project]\nname = "x"\n' + array
    out = fixed(text, "pyproject.toml", family=FAM, facts=facts(applied=("PRT401",)))
    assert tomllib.loads(out)["project"]["dependencies"] == (
        ["torch", "torchao>=0.11"])


def test_setup_py_only_setup_lists() -> None:
    text = (FIXTURES / "setup.in.py").read_text(encoding="utf-8")
    out = fixed(text, "setup.py", family=FAM, facts=facts(applied=("PRT401",)))
    compile(out, "setup.py", "exec")
    assert 'NOTES = ["flash-attn==2.5.8"]' in out
    assert '"flash-attn==2.5.8",  # fast' not in out
    assert '"torchao>=0.11",' in out
    # a setup.py elsewhere than the file name setup.py is not a manifest
    assert findings(text, "pkg/build_setup.py", family=FAM, facts=facts()) == []


def test_conda_pip_section() -> None:
    text = (FIXTURES / "environment.in.yml").read_text(encoding="utf-8")
    import yaml

    out = fixed(text, "environment.yml", family=FAM, facts=facts())
    pip = next(d for d in yaml.safe_load(out)["dependencies"] if isinstance(d, dict))["pip"]
    assert pip == ["--extra-index-url https://download.pytorch.org/whl/rocm6.3", "torch==2.7.0", "einops"]


def test_torch_from_pypi_is_info_only() -> None:
    found = findings("torch>=2.3\n", "requirements.txt", family=FAM)
    assert codes(found) == ["PRT808"]
    assert fixed("torch>=2.3\n", "requirements.txt", family=FAM) == "torch>=2.3\n"


def test_crlf_and_no_final_newline() -> None:
    text = "--extra-index-url https://download.pytorch.org/whl/cu118\r\ntorch==2.7.0+cu118"
    out = fixed(text, "requirements.txt", family=FAM)
    assert out == "--extra-index-url https://download.pytorch.org/whl/rocm6.3\r\ntorch==2.7.0"


def test_suppression_comment() -> None:
    text = "flash-attn==2.5.8  # porter: ignore[PRT802]\n"
    assert findings(text, "requirements.txt", family=FAM, facts=facts()) == []


def test_index_kept_when_the_rocm_index_lacks_the_pinned_torch() -> None:
    text = "--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.1.0+cu121\n"
    out = fixed(text, "requirements.txt", family=FAM)
    assert out == "--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.1.0\n"
    msg = next(f.message for f in findings(text, "requirements.txt", family=FAM) if f.code == "PRT800")
    assert "not published on the rocm6.3 index" in msg and "rocm5.6" in msg
    s = settings_for(FAM, dependencies={"rocm-version": "5.6"})
    assert "whl/rocm5.6\n" in fixed(text, "requirements.txt", settings=s)
    # unpinned torch: the newest build on the ROCm index is taken
    assert "rocm6.3" in fixed("--index-url https://download.pytorch.org/whl/cu121\ntorch>=2.1\n",
                              "requirements.txt", family=FAM)


def test_setup_cfg_single_line_values() -> None:
    text = "[options]\ninstall_requires = torch==2.7.1+cu126  # gpu\n"
    assert fixed(text, "setup.cfg", family=FAM) == "[options]\ninstall_requires = torch==2.7.1  # gpu\n"


def test_dependency_group_includes_are_not_requirements() -> None:
    text = '[dependency-groups]\ndev = [{include-group = "apex"}, "pytest"]\n'
    assert findings(text, "pyproject.toml", family=FAM, facts=facts()) == []
