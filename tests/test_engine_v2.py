"""Engine v2: lazy cross-file facts, the warm-run record, per-file cache entries keyed on the
facts they read, the ast tier, lazy loading of the LibCST tier and of the families' heavy parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from porter import express, registry, runner
from porter.config import Settings
from porter.findings import Applicability

SWITCH = ('from transformers import AutoModelForCausalLM\n'
          'm = AutoModelForCausalLM.from_pretrained("x", attn_implementation="flash_attention_2")\n')
TABLE = "ATTN = {'eager': Eager, 'flash_attention_2': Flash}\n"


@pytest.fixture()
def cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    # outside the audited tree: a cache folder created inside it would change the root folder's times
    home = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def _audit(root: Path, paths: list[Path] | None = None, **kw: object) -> runner.RunResult:
    return runner.run(root, paths or [root], Settings(**kw), "audit", jobs=1)


def test_checking_a_file_without_a_switch_never_reads_the_tree(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\nx = torch.cuda.is_available()\n")
    (tmp_path / "b.py").write_text(SWITCH)

    def boom(*args: object, **kwargs: object) -> object:
        raise AssertionError("the whole tree was read for a file that needs no cross-file fact")

    monkeypatch.setattr(runner, "_attention_facts", boom)
    result = _audit(tmp_path, [tmp_path / "a.py"], cache=False)
    assert [f.code for f in result.findings] == ["PRT042"]


def test_a_cached_result_that_read_facts_follows_them(tmp_path: Path, cache_home: Path) -> None:
    # train.py's switch is safe until another file keys code on the string; its cache entry must not
    # outlive that change even though train.py itself did not change
    (tmp_path / "train.py").write_text(SWITCH)
    (tmp_path / "model.py").write_text("x = 1\n")

    def switch() -> Applicability:
        result = _audit(tmp_path, select=("PRT03",))
        [f] = [f for f in result.findings if f.code == "PRT030"]
        return f.fix

    assert switch() is Applicability.SAFE
    assert switch() is Applicability.SAFE  # warm
    (tmp_path / "model.py").write_text(TABLE)
    assert switch() is Applicability.NONE
    (tmp_path / "model.py").write_text("x = 2\n")
    assert switch() is Applicability.SAFE


def test_warm_rerun_loads_no_family(tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import torch\nx = torch.cuda.is_available()\n")
    first = _audit(tmp_path)

    def no_families() -> None:
        raise AssertionError("a warm run with nothing changed loaded the rule families")

    monkeypatch.setattr(registry, "check_loaded", no_families)
    second = _audit(tmp_path)
    assert [f.to_dict() for f in second.findings] == [f.to_dict() for f in first.findings]


def test_warm_record_sees_edits_new_and_deleted_files(tmp_path: Path, cache_home: Path) -> None:
    a = tmp_path / "a.py"
    a.write_text("import torch\nx = torch.cuda.is_available()\n")
    assert [f.code for f in _audit(tmp_path).findings] == ["PRT042"]
    # same size, same modification time: the change time still tells
    st = a.stat()
    a.write_text("import torch\nx = torch.cuda.get_arch_list()\n"[: st.st_size])
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [f.code for f in _audit(tmp_path).findings] != ["PRT042"]
    (tmp_path / "b.py").write_text("import torch\ny = torch.cuda.device_count()\n")
    assert {f.path for f in _audit(tmp_path).findings} == {"a.py", "b.py"}
    (tmp_path / "b.py").unlink()
    assert {f.path for f in _audit(tmp_path).findings} == {"a.py"}


def test_warm_record_depends_on_the_settings(tmp_path: Path, cache_home: Path) -> None:
    (tmp_path / "a.py").write_text("import torch\nx = torch.cuda.is_available()\n")
    assert [f.code for f in _audit(tmp_path).findings] == ["PRT042"]
    assert _audit(tmp_path, ignore=("PRT042",)).findings == []


def test_inventory_families_never_load_libcst(tmp_path: Path) -> None:
    # device_audit, packages, devices, kernels and distributed detect on the ast tier: a tree they
    # alone report on is audited without importing LibCST at all (a fresh interpreter tells)
    (tmp_path / "a.py").write_text(
        "import os\nimport torch\nimport cupy\n"
        "x = torch.cuda.is_available()\nif torch.cuda.get_device_capability()[0] >= 8:\n    pass\n"
        "os.environ['NCCL_P2P_DISABLE'] = '1'\n"
        "import triton\n@triton.jit\ndef kernel(x):\n    pass\n")
    code = ("import sys\nfrom pathlib import Path\nfrom porter import runner\nfrom porter.config import Settings\n"
            f"r = runner.run(Path({str(tmp_path)!r}), [Path({str(tmp_path)!r})], Settings(cache=False), 'audit', jobs=1)\n"
            "print(sorted({f.code[:5] for f in r.findings}))\n"
            "print('libcst' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[1] == "False", out
    assert {"PRT01", "PRT04", "PRT70", "PRT76", "PRT86"} <= set(eval(out[0]))  # noqa: S307 - our own output


def test_a_family_declaration_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom porter import registry\nregistry.families()\nregistry.rules()\n"
            "print(sorted(m for m in ('libcst', 'tree_sitter', 'packaging.requirements') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_a_python_file_no_family_can_match_is_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ast

    calls: list[str] = []
    real = ast.parse

    def counting(source: object, *args: object, **kwargs: object) -> object:
        calls.append("x")
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast, "parse", counting)
    (tmp_path / "plain.py").write_text("def f(x):\n    return x + 1\n")
    assert _audit(tmp_path, cache=False).findings == []
    assert calls == []


def test_finding_messages_cite_nothing_outside_the_repository() -> None:
    # messages once pointed at numbered traps of a document the repository does not contain
    import re

    fixtures = Path(__file__).parent / "fixtures"
    result = runner.run(fixtures, [fixtures], Settings(cache=False), "audit", jobs=1)
    cited = [f"{f.path}:{f.line} {f.message}" for f in result.findings if re.search(r"\btrap \d|§|" + "spec" + "/", f.message)]
    assert not cited, cited


def test_the_code_stamp_covers_the_rule_families(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a development install keeps codemods/ outside porter/: editing a rule must still retire the record
    import importlib.machinery
    import importlib.util

    families = tmp_path / "codemods"
    families.mkdir()
    (families / "rule.py").write_text("x = 1\n")
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        if name == "porter.codemods":
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(families)]
            return spec
        return real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    express.clear_code_stamp()
    try:
        before = express.code_stamp()
        (families / "rule.py").write_text("x = 22\n")
        express.clear_code_stamp()
        assert express.code_stamp() != before
    finally:
        express.clear_code_stamp()


def test_a_warm_report_is_the_same_bytes_without_rendering(tmp_path: Path, cache_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from porter import reporters
    from porter.cli import main

    (tmp_path / "a.py").write_text("import torch\nx = torch.cuda.is_available()\n")
    first = CliRunner().invoke(main, ["audit", "--format", "json", "-q", str(tmp_path)])
    assert first.exit_code == 0 and '"PRT042"' in first.output

    def no_render(*args: object, **kwargs: object) -> str:
        raise AssertionError("rendered again although the record vouches for the result")

    monkeypatch.setattr(reporters, "render_json", no_render)
    second = CliRunner().invoke(main, ["audit", "--format", "json", "-q", str(tmp_path)])
    assert second.exit_code == 0 and second.output == first.output
    # a change is rendered afresh
    (tmp_path / "b.py").write_text("import torch\ny = torch.cuda.device_count()\n")
    third = CliRunner().invoke(main, ["audit", "--format", "json", "-q", str(tmp_path)])
    assert third.exit_code == 2  # it rendered (and hit the trap above): nothing stale was printed


def test_warm_record_follows_the_lock_files_pins_come_from(tmp_path: Path, cache_home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # pins are read from lock files and Pipfiles, which discovery does not list: adding or editing one
    # must retire the record (a new file in a folder changes the folder's times)
    (tmp_path / "a.py").write_text("import torch\nx = torch.cuda.is_available()\n")
    _audit(tmp_path)
    loads: list[int] = []
    real = registry.check_loaded
    monkeypatch.setattr(registry, "check_loaded", lambda: (loads.append(1), real())[1])
    _audit(tmp_path)
    assert loads == []  # nothing changed: answered from the record
    (tmp_path / "Pipfile").write_text('[packages]\ntorch = "==2.1.0"\n')
    _audit(tmp_path)
    assert loads == [1]
    _audit(tmp_path)
    assert loads == [1]
    (tmp_path / "Pipfile").write_text('[packages]\ntorch = "==2.4.0"\n')
    _audit(tmp_path)
    assert loads == [1, 1]


def test_the_per_file_cache_follows_the_code_stamp(tmp_path: Path, cache_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # two builds of porter with the same version (an edited checkout, a reinstall) must not share
    # cached results: the per-file cache, like the warm record, is keyed on the code stamp
    (tmp_path / "m.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    analysed: list[str] = []
    real = runner.analyze

    def counting(relpath: str, *args: object, **kwargs: object) -> object:
        analysed.append(relpath)
        return real(relpath, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "analyze", counting)
    settings = Settings(jobs=1)
    express.clear_code_stamp()
    try:
        runner.run(tmp_path, [tmp_path / "m.py"], settings)
        runner.run(tmp_path, [tmp_path / "m.py"], settings)
        assert analysed == ["m.py"]  # the second run came from the cache
        monkeypatch.setattr(express, "_STAMP", ["another build"])
        runner.run(tmp_path, [tmp_path / "m.py"], settings)
        assert analysed == ["m.py", "m.py"]
    finally:
        express.clear_code_stamp()
