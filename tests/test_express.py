"""The express lane (porter.express): an unchanged tree's audit answered before click, the settings
or discovery load; any change to what the report rests on goes back to the full run.

The runs are real processes (``python -X importtime -m porter``): whether the lane answered is
read from the import log (the full command line imports click). Inputs must have settled before
porter vouches for them (``SETTLE_NS``, one second), so the tests wait that long after writing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from porter import express, runner
from porter.config import Settings

SETTLE = express.SETTLE_NS / 1e9 + 0.2
ARGS = ("audit", "--format", "json", ".")


def _porter(tree: Path, cache: Path, *args: str) -> tuple[int, str, bool, str]:
    """(exit code, stdout, whether the express lane answered, stderr without the import log)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "porter", *args], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=300)
    log = [line for line in p.stderr.splitlines() if line.startswith("import time:")]
    rest = "\n".join(line for line in p.stderr.splitlines() if not line.startswith("import time:"))
    full = any(re.search(r"\|\s+click$", line) for line in log)
    return p.returncode, p.stdout, not full, rest


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    (tree / "pkg").mkdir(parents=True)
    (tree / "docs").mkdir()
    (tree / "docs" / "notes.txt").write_text("no source here\n")
    (tree / "model.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    (tree / "pkg" / "util.py").write_text("import torch\nok = torch.cuda.is_available()\n")
    (tree / "pkg" / ".gitignore").write_text("*.tmp\n")
    return tree


def _established(tmp_path: Path) -> tuple[Path, Path, str]:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    time.sleep(SETTLE)
    code, first, answered, err = _porter(tree, cache, *ARGS)
    assert (code, answered, err) == (0, False, "")
    code, second, answered, _ = _porter(tree, cache, *ARGS)
    assert (code, answered) == (0, True)
    assert second == first and '"PRT' in first
    return tree, cache, first


def _fresh_report(tree: Path, cache: Path) -> str:
    code, out, answered, _ = _porter(tree, cache, "audit", "--format", "json", "--no-cache", ".")
    assert code == 0 and not answered
    return out


def test_an_unchanged_tree_is_answered_without_the_command_line(tmp_path: Path) -> None:
    tree, cache, first = _established(tmp_path)
    records = list((cache / "porter" / "express").iterdir())
    assert len(records) == 1 and records[0].stat().st_mode & 0o077 == 0
    # another invocation (format, arguments) has its own record
    code, sarif, answered, _ = _porter(tree, cache, "audit", "--format", "sarif", ".")
    assert code == 0 and not answered and '"runs"' in sarif


def _edit_same_size(tree: Path) -> None:
    path = tree / "model.py"
    before = path.stat().st_size
    path.write_text("import torch\nx = torch.zeros(1).cpu() \n")
    assert path.stat().st_size == before


MUTATIONS = {
    "an edit that keeps the size": _edit_same_size,
    "a new file in a folder without sources": lambda t: (t / "docs" / "new.py").write_text(
        "import torch\ny = torch.ones(2).cuda()\n"),
    "a new .gitignore": lambda t: (t / ".gitignore").write_text("model.py\n"),
    "an edited .gitignore": lambda t: (t / "pkg" / ".gitignore").write_text("*.tmp\nutil.py\n"),
    "a deleted file": lambda t: (t / "pkg" / "util.py").unlink(),
    "the target's config": lambda t: (t / "pyproject.toml").write_text('[tool.porter]\nignore = ["PRT1"]\n'),
    "a lock file the pins come from": lambda t: (t / "pkg" / "poetry.lock").write_text(
        '[[package]]\nname = "torch"\nversion = "2.1.0"\n'),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutate", list(MUTATIONS), ids=list(MUTATIONS))
def test_a_change_goes_back_to_the_full_run(tmp_path: Path, mutate: str) -> None:
    tree, cache, first = _established(tmp_path)
    MUTATIONS[mutate](tree)
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered
    assert out == _fresh_report(tree, cache)
    if mutate != "a lock file the pins come from":  # the pins change no finding of this tree
        assert out != first
    # once the change has settled the lane answers again, with the new report
    time.sleep(SETTLE)
    assert _porter(tree, cache, *ARGS)[2] is False
    code, again, answered, _ = _porter(tree, cache, *ARGS)
    assert (code, again, answered) == (0, out, True)


@pytest.mark.slow
def test_a_git_tree_is_listed_again(tmp_path: Path) -> None:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a", "-c", "core.hooksPath=/dev/null"]
    subprocess.run([*git, "init", "-q"], cwd=tree, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tree, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=tree, check=True)
    time.sleep(SETTLE)
    first = _porter(tree, cache, *ARGS)
    assert first[0] == 0 and not first[2]
    second = _porter(tree, cache, *ARGS)
    assert second[2] and second[1] == first[1]
    # an untracked file in a folder git lists: git's listing changes, the lane falls through
    (tree / "docs" / "new.py").write_text("import torch\ny = torch.ones(2).cuda()\n")
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert not answered and "docs/new.py" in out and out == _fresh_report(tree, cache)
    # ... and ignoring it through .git/info/exclude (no folder of the tree changes)
    time.sleep(SETTLE)
    _porter(tree, cache, *ARGS)
    assert _porter(tree, cache, *ARGS)[2]
    (tree / ".git" / "info").mkdir(exist_ok=True)
    (tree / ".git" / "info" / "exclude").write_text("docs/new.py\n")
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert not answered and "docs/new.py" not in out


def test_no_record_when_a_symlink_is_in_the_tree(tmp_path: Path) -> None:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    (tree / "alias.py").symlink_to(tree / "model.py")
    time.sleep(SETTLE)
    _porter(tree, cache, *ARGS)
    assert _porter(tree, cache, *ARGS)[2] is False
    assert not list(cache.glob("porter/express/*.rec"))


def test_no_record_for_inputs_written_a_moment_ago(tmp_path: Path) -> None:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    _porter(tree, cache, *ARGS)
    code, _, answered, _ = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered


def test_no_record_when_the_run_warned(tmp_path: Path) -> None:
    tree, cache = tmp_path / "empty", tmp_path / "cache"
    tree.mkdir()
    (tree / "README.md").write_text("nothing to port\n")
    time.sleep(SETTLE)
    first = _porter(tree, cache, *ARGS)
    assert first[0] == 0 and "nothing was checked" in first[3] and "internal error" not in first[3]
    second = _porter(tree, cache, *ARGS)
    assert second[0] == 0 and not second[2] and "nothing was checked" in second[3]


def test_a_forged_record_is_ignored(tmp_path: Path) -> None:
    tree, cache, first = _established(tmp_path)
    (record,) = (cache / "porter" / "express").iterdir()
    data = record.read_bytes()
    record.write_bytes(data.replace(b'"PRT', b'"XRT'))
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert (code, out, answered) == (0, first, False)


def test_a_whole_tree_check_is_answered_with_its_summary_and_exit_code(tmp_path: Path) -> None:
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    (tree / "telemetry.py").write_text("import pynvml\npynvml.nvmlInit()\n")
    time.sleep(SETTLE)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    runs = [subprocess.run([sys.executable, "-X", "importtime", "-m", "porter", "check", "."], cwd=tree, env=env,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    first, second = runs
    assert first.returncode == second.returncode == 1 and first.stdout == second.stdout and "telemetry.py" in first.stdout
    strip = [[line for line in r.stderr.splitlines() if not line.startswith("import time:")] for r in runs]
    assert strip[0] == strip[1] and strip[0][-1].startswith("porter: ") and "finding(s)" in strip[0][-1]
    assert "click" in first.stderr and not re.search(r"\|\s+click$", second.stderr, re.M)


def test_progress_lines_are_not_output() -> None:
    assert express._only_progress("porter: 12/80 files (15%), 41.2 files/s, 3 s\nporter: 80/80 files (100%), "
                                   "40.0 files/s, 2 s\n")
    assert not express._only_progress("porter: warning: no files to analyse\n")
    assert not express._only_progress("porter: 1/2 files (50%), 1.0 files/s, 0 s\nsomething else\n")
    assert express._only_progress("porter: 1/2 files (50%), 1.0 files/s, 0 s\nporter: 3 finding(s)\n",
                                  "porter: 3 finding(s)\n")
    assert not express._only_progress("porter: warning: x\nporter: 3 finding(s)\n", "porter: 3 finding(s)\n")


def test_the_warm_record_waits_for_inputs_to_settle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _tree(tmp_path)
    settings = Settings()
    monkeypatch.setattr(express, "SETTLE_NS", 3600 * 10**9)  # everything was written "a moment ago"
    assert runner.run(tree, [tree], settings).record is None
    assert runner.run(tree, [tree], settings).record is None
    monkeypatch.setattr(express, "SETTLE_NS", 0)
    runner.run(tree, [tree], settings)
    assert runner.run(tree, [tree], settings).record is not None


# -- attacks on the lane (each one a sequence that used to print a stale or wrong report) --------


def _porter_env(tree: Path, env: dict[str, str], *args: str, cwd: Path | None = None) -> tuple[int, str, bool, str]:
    """Like _porter, with the environment given whole (HOME, PYTHONPATH, ...)."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "porter", *args], cwd=cwd or tree, env=env,
                       capture_output=True, text=True, timeout=300)
    log = [line for line in p.stderr.splitlines() if line.startswith("import time:")]
    rest = "\n".join(line for line in p.stderr.splitlines() if not line.startswith("import time:"))
    full = any(re.search(r"\|\s+click$", line) for line in log)
    return p.returncode, p.stdout, not full, rest


def _git_init(tree: Path) -> None:
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=a", "-c", "core.hooksPath=/dev/null"]
    subprocess.run([*git, "init", "-q"], cwd=tree, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tree, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=tree, check=True)


def _answers(tree: Path, cache: Path, *args: str) -> str:
    """Run twice (the first writes the record): the second must be answered by the lane."""
    code, first, answered, err = _porter(tree, cache, *args)
    assert (code, answered) == (0, False), err
    code, second, answered, _ = _porter(tree, cache, *args)
    assert (code, answered, second) == (0, True, first)
    return first


BNB = "import bitsandbytes as bnb\nimport torch\nopt = bnb.optim.LAMB8bit([torch.zeros(1)])\n"


@pytest.mark.parametrize("git", [False, True], ids=["walked", "git"])
def test_an_ignored_requirements_file_the_pins_come_from(tmp_path: Path, git: bool) -> None:
    # the pins are read from every manifest in a folder that holds a source, listed or not: an
    # ignored requirements file edited in place changed no signature the lane or the warm record kept
    tree, cache = tmp_path / "repo", tmp_path / "cache"
    tree.mkdir()
    (tree / "model.py").write_text(BNB)
    (tree / "requirements.txt").write_text("bitsandbytes==0.41.0\n")
    (tree / ".gitignore").write_text("requirements.txt\n")
    if git:
        _git_init(tree)
    time.sleep(SETTLE)
    assert "bitsandbytes==0.41.0" in _answers(tree, cache, *ARGS)
    (tree / "requirements.txt").write_text("bitsandbytes==0.43.0\n")
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered
    assert "bitsandbytes==0.43.0" in out and out == _fresh_report(tree, cache)


def test_a_lock_file_in_a_folder_above_the_sources(tmp_path: Path) -> None:
    # src/ holds no source of its own (only src/pkg/ does), yet its lock file scopes src/pkg/model.py;
    # git ignores it, so neither git's listing nor any folder the records signed changed
    tree, cache = tmp_path / "repo", tmp_path / "cache"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "src" / "pkg" / "model.py").write_text(BNB)
    (tree / ".gitignore").write_text("*.lock\n")
    _git_init(tree)
    time.sleep(SETTLE)
    first = _answers(tree, cache, *ARGS)
    (tree / "src" / "poetry.lock").write_text('[[package]]\nname = "bitsandbytes"\nversion = "0.43.0"\n')
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered
    assert "bitsandbytes==0.43.0" in out and out != first and out == _fresh_report(tree, cache)


OVERLOAD = ("#ifndef OW\n#define OW\n__device__ inline float2 __shfl_down_sync(unsigned mask, float2 v, unsigned delta, "
            "int width = warpSize) {\n  float2 r; r.x = __shfl_down_sync(mask, v.x, delta, width); return r;\n}\n"
            "#endif\n")


def test_a_build_note_the_warp_pass_reads(tmp_path: Path) -> None:
    # the warp-size pass looks for a project macro in every build, CI and documentation file of the
    # tree (files discovery never lists): an edit there turns a PRT524 note into an error
    tree, cache = tmp_path / "repo", tmp_path / "cache"
    (tree / "csrc").mkdir(parents=True)
    (tree / "docs").mkdir()
    (tree / "csrc" / "other_warp.cuh").write_text(OVERLOAD)
    (tree / "csrc" / "kernel.cuh").write_text('#pragma once\n#ifdef LIB_USE_OTHERFW\n#include "other_warp.cuh"\n'
                                              "#endif\n__global__ void k(float* x) { x[0] = 1.f; }\n")
    (tree / "csrc" / "k.cu").write_text('#include "kernel.cuh"\nvoid launch(float* x) { k<<<1, 64>>>(x); }\n')
    (tree / "docs" / "build.md").write_text("Build with CFLAGS=-DLIB_USE_OTHERXX.\n")
    time.sleep(SETTLE)
    _porter(tree, cache, *ARGS)
    (tree / "docs" / "build.md").write_text("Build with CFLAGS=-DLIB_USE_OTHERFW.\n")
    code, out, answered, _ = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered
    assert out == _fresh_report(tree, cache) and "Not actionable in this tree" not in out
    # ... and no warm record vouches for such a run either (the lane never answers with -o)
    report = tmp_path / "report.json"
    _porter(tree, cache, "audit", "--format", "json", "-o", str(report), ".")
    (tree / "docs" / "build.md").write_text("Build with CFLAGS=-DLIB_USE_OTHERXX.\n")
    _porter(tree, cache, "audit", "--format", "json", "-o", str(report), ".")
    assert "Not actionable in this tree" in report.read_text()


def test_a_warning_does_not_break_the_run(tmp_path: Path) -> None:
    # click asks whether stderr takes bytes (write(b"")): the watch must not keep them
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    (tree / "pyproject.toml").write_text("[project\nname = 'x'\n")
    time.sleep(SETTLE)
    for _ in range(2):
        code, out, answered, err = _porter(tree, cache, *ARGS)
        assert (code, answered) == (0, False)
        assert "not valid TOML" in err and "internal error" not in err
        assert out == _fresh_report(tree, cache)


def test_a_warning_written_around_the_watch(tmp_path: Path) -> None:
    # with an ASCII stderr click writes to its binary buffer, past the text stream the lane watches
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    (tree / "pyproject.toml").write_text("[project\nname = 'x'\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONIOENCODING": "ascii"}
    time.sleep(SETTLE)
    for _ in range(2):
        code, _, answered, err = _porter_env(tree, env, *ARGS)
        assert code == 0 and not answered and "not valid TOML" in err


def test_a_root_named_through_a_symlink(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    (two / "model.py").write_text("import torch\nfast = torch.backends.cudnn.benchmark\n")
    (work / "repo").symlink_to(one)
    cache = tmp_path / "cache"
    time.sleep(SETTLE)
    _porter(work, cache, "audit", "--format", "json", "repo")
    (work / "repo").unlink()
    (work / "repo").symlink_to(two)
    code, out, answered, _ = _porter(work, cache, "audit", "--format", "json", "repo")
    assert code == 0 and not answered
    assert str(two) in out and out == _fresh_report_of(work, cache, "repo")


def _fresh_report_of(cwd: Path, cache: Path, *paths: str) -> str:
    code, out, answered, _ = _porter(cwd, cache, "audit", "--format", "json", "--no-cache", *paths)
    assert code == 0 and not answered
    return out


def test_a_config_named_through_a_symlinked_folder(tmp_path: Path) -> None:
    # `--config link/../porter.toml` reads the porter.toml next to the link's target, not the one
    # next to the link
    _tree(tmp_path)
    cache = tmp_path / "cache"
    (tmp_path / "conf" / "sub").mkdir(parents=True)
    (tmp_path / "conf" / "porter.toml").write_text('ignore = ["PRT042"]\n')
    (tmp_path / "link").symlink_to(tmp_path / "conf" / "sub")
    args = ("audit", "--format", "json", "--config", "link/../porter.toml", "repo")
    time.sleep(SETTLE)
    _porter(tmp_path, cache, *args)
    (tmp_path / "conf" / "porter.toml").write_text('ignore = ["PRT040"]\n')
    code, out, answered, _ = _porter(tmp_path, cache, *args)
    assert code == 0 and not answered
    fresh = _porter(tmp_path, cache, "audit", "--no-cache", *args[1:])[1]
    assert out == fresh and '"PRT040"' not in out and '"PRT042"' in out


def _forge(cache_base: Path, text: bytes) -> None:
    """What a target that ships the cache folder can do: rewrite a record under the secret it ships."""
    secret = (cache_base / "secret").read_bytes().strip()
    (record,) = (cache_base / "express").iterdir()
    data = record.read_bytes()
    _, _, body = data.partition(b"\n")
    size, _, rest = body.partition(b"\n")
    import json

    meta = json.loads(rest[: int(size)])
    meta["inputs"], meta["git"] = [], []
    head = json.dumps(meta, separators=(",", ":")).encode()
    key = record.name[: -len(".rec")]
    body = str(len(head)).encode() + b"\n" + head + text
    record.write_bytes(express._mac(secret, key, body) + b"\n" + body)


@pytest.mark.slow
def test_a_cache_folder_inside_the_target(tmp_path: Path) -> None:
    # HOME is the target (a container whose work folder is home): the secret and the records are the
    # target's files, so the target can write a record that verifies
    tree = _tree(tmp_path)
    (tree / ".gitignore").write_text(".cache/\n")
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env["HOME"] = str(tree)
    _porter_env(tree, env, *ARGS)  # the secret, in the tree
    time.sleep(SETTLE)
    _porter_env(tree, env, *ARGS)
    time.sleep(SETTLE)
    _porter_env(tree, env, *ARGS)
    base = tree / ".cache" / "porter"
    if (base / "express").is_dir() and list((base / "express").iterdir()):
        # (the fixed lane keeps no record there: nothing to forge)
        _forge(base, b'{"forged": true}\n')
    code, out, answered, _ = _porter_env(tree, env, *ARGS)
    assert code == 0 and not answered and "forged" not in out


def test_a_closed_pipe_is_reported_as_the_full_run_does(tmp_path: Path) -> None:
    tree, cache, _ = _established(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    results = []
    for extra in ((), ("--no-cache",)):
        p = subprocess.Popen([sys.executable, "-m", "porter", "audit", *extra, "--format", "json", "."], cwd=tree,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        err = p.stderr.read().decode()
        results.append((p.wait(), "Traceback" in err))
    assert results[0] == results[1] and not results[0][1]


def test_a_missing_working_folder_goes_to_the_full_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    assert express.answer(list(ARGS)) is None


def test_the_interpreter_setup_is_part_of_the_invocation(tmp_path: Path) -> None:
    # PYTHONPATH puts other modules ahead of the ones porter imports (here the TOML parser)
    tree, cache, first = _established(tmp_path)
    (tree / "pyproject.toml").write_text("[tool.porter]\n")
    time.sleep(SETTLE)
    first = _answers(tree, cache, *ARGS)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "tomllib.py").write_text(
        "class TOMLDecodeError(ValueError):\n    pass\n\n\n"
        "def loads(s, **kw):\n    return {'tool': {'porter': {'ignore': ['PRT040']}}}\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(shadow)}
    code, out, answered, _ = _porter_env(tree, env, *ARGS)
    assert code == 0 and not answered and out != first and '"PRT040"' not in out


def test_the_code_stamp_sees_a_file_replaced_with_the_same_size_and_time(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import porter

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    mod = pkg / "mod.py"
    mod.write_text("VERSION = '1.0'\n")
    st = mod.stat()
    monkeypatch.setattr(porter, "__path__", [str(pkg)])
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    express.clear_code_stamp()
    try:
        before = express.code_stamp()
        express.clear_code_stamp()
        replacement = pkg / "mod.py.new"
        replacement.write_text("VERSION = '2.0'\n")
        os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(replacement, mod)  # an upgrade that keeps sizes and (reproducible-build) times
        assert express.code_stamp() != before
    finally:
        express.clear_code_stamp()


def _reach_tree(tree: Path, note: str) -> None:
    (tree / "csrc").mkdir(parents=True)
    (tree / "docs").mkdir()
    (tree / "csrc" / "other_warp.cuh").write_text(OVERLOAD)
    (tree / "csrc" / "kernel.cuh").write_text('#pragma once\n#ifdef LIB_USE_OTHERFW\n#include "other_warp.cuh"\n'
                                              "#endif\n__global__ void k(float* x) { x[0] = 1.f; }\n")
    (tree / "csrc" / "k.cu").write_text('#include "kernel.cuh"\nvoid launch(float* x) { k<<<1, 64>>>(x); }\n')
    (tree / "docs" / "build.md").write_text(note)


@pytest.mark.parametrize("jobs", [1, 2])
def test_no_warm_record_for_a_run_that_walked_the_tree(tmp_path: Path, jobs: int) -> None:
    # the walk may happen in a worker process (the facts are gathered where a rule first asks)
    tree = tmp_path / "repo"
    _reach_tree(tree, "Build with CFLAGS=-DLIB_USE_OTHERXX.\n")
    for n in range(runner.SERIAL_THRESHOLD + 4):
        (tree / f"m{n}.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    settings = Settings(jobs=jobs)
    assert runner.run(tree, [tree], settings).record is None
    # a tree whose own sources define the macro needs no walk: the record is kept
    (tree / "csrc" / "config.h").write_text("#pragma once\n#define LIB_USE_OTHERFW 1\n")
    assert runner.run(tree, [tree], settings).record is not None


def test_the_code_stamp_follows_an_upgraded_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `pip install -U pathspec` changes how ignore files match, which the lane's answer rests on
    import importlib.machinery
    import importlib.util

    entry = tmp_path / "pathspec" / "__init__.py"
    entry.parent.mkdir()
    entry.write_text("__version__ = '0.11.0'\n")
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == "pathspec":
            return importlib.machinery.ModuleSpec(name, None, origin=str(entry))
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    express.clear_code_stamp()
    try:
        before = express.code_stamp()
        express.clear_code_stamp()
        assert express.code_stamp() == before  # nothing moved: the same stamp
        express.clear_code_stamp()
        entry.unlink()
        entry.write_text("__version__ = '0.12.1'\n")
        assert express.code_stamp() != before
    finally:
        express.clear_code_stamp()


def test_a_closed_stderr(tmp_path: Path) -> None:
    # `2>&-`: the full run prints its report (its warnings go nowhere); tracing must not break it,
    # and no record may be kept that would answer a later run, whose stderr is open, without them
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    (tree / "pyproject.toml").write_text("[project\nname = 'x'\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    time.sleep(SETTLE)
    for extra in ((), (), ("--no-cache",)):
        p = subprocess.run(["bash", "-c", 'exec 2>&-; exec "$@"', "porter", sys.executable, "-m", "porter",
                            "audit", *extra, "--format", "json", "."], cwd=tree, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0 and '"PRT040"' in p.stdout
    code, _, answered, err = _porter(tree, cache, *ARGS)
    assert code == 0 and not answered and "not valid TOML" in err


def test_no_warm_record_for_a_run_whose_worker_wrote_to_stderr(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a worker's stderr is not the parent's watched one: a warning printed there must still keep
    # the records away (the next run, answered from one, would not print it)
    tree = tmp_path / "repo"
    tree.mkdir()
    for n in range(runner.SERIAL_THRESHOLD + 4):
        (tree / f"m{n}.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    real = runner.analyze

    def analyze(relpath: str, *args: object, **kwargs: object) -> object:
        if relpath == "m3.py":
            sys.stderr.write("somelib: warning: something about m3.py\n")
        return real(relpath, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "analyze", analyze)
    # the workers must see the patched analyze: fork them (other tests may have started threads,
    # which makes porter pick forkserver, whose workers import runner afresh)
    import multiprocessing

    monkeypatch.setattr(runner, "_pool_context", lambda: multiprocessing.get_context("fork"))
    settings = Settings(jobs=2)
    assert runner.run(tree, [tree], settings).record is None
    monkeypatch.setattr(runner, "analyze", real)
    assert runner.run(tree, [tree], settings).record is not None


def test_the_record_folder_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "express"
    folder.mkdir()
    for n in range(express.MAX_RECORDS + 5):
        record = folder / f"{n:04d}.rec"
        record.write_bytes(b"x")
        os.utime(record, ns=(n * 10**9, n * 10**9))
    (folder / "unrelated.txt").write_text("kept")
    keep = str(folder / "0000.rec")  # the one just written, whatever its time says
    express._prune(str(folder), keep=keep)
    left = sorted(p.name for p in folder.iterdir())
    assert "unrelated.txt" in left and "0000.rec" in left
    # the five least recently written go, except the one being kept
    assert not {"0001.rec", "0002.rec", "0003.rec", "0004.rec"} & set(left) and "0005.rec" in left
    assert len([n for n in left if n.endswith(".rec")]) == express.MAX_RECORDS + 1


# -- second attack (check, encodings, ...) -------------------------------------------------------


def test_an_ascii_stdout_with_another_error_handler(tmp_path: Path) -> None:
    # click treats an ASCII stdout as misconfigured and writes UTF-8 (errors="replace") to its
    # buffer; the record kept the text encoded as the stream would have (ascii:backslashreplace)
    tree, cache = tmp_path / "repo", tmp_path / "cache"
    tree.mkdir()
    (tree / "modèle.py").write_text("import pynvml\npynvml.nvmlInit()\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONIOENCODING": "ascii:backslashreplace"}
    time.sleep(SETTLE)
    runs = [_porter_env(tree, env, *ARGS) for _ in range(2)]
    fresh = _porter_env(tree, env, "audit", "--format", "json", "--no-cache", ".")
    assert fresh[0] == 0 and "mod" in fresh[1]
    assert runs[0][:2] == runs[1][:2] == fresh[:2]


def test_a_folder_above_the_root_turned_into_a_symlink(tmp_path: Path) -> None:
    # every signed input keeps its signature through the new link (same inodes), but the full run
    # resolves the root through it: its report names another root
    work, cache = tmp_path / "work", tmp_path / "cache"
    _tree(work / "outer")
    args = ("audit", "--format", "json", "outer/repo")
    time.sleep(SETTLE)
    _porter(work, cache, *args)
    assert _porter(work, cache, *args)[2]
    (work / "outer").rename(work / "moved")
    (work / "outer").symlink_to(work / "moved")
    code, out, answered, _ = _porter(work, cache, *args)
    assert code == 0 and not answered
    assert str(work / "moved" / "repo") in out and out == _fresh_report_of(work, cache, "outer/repo")


def test_click_shell_completion_is_not_answered(tmp_path: Path) -> None:
    # with click's completion variable set the full command line prints the completion script
    # whatever the arguments are; the lane printed the report
    tree, cache = _tree(tmp_path), tmp_path / "cache"
    # what the `porter` console script runs (click names the completion variable after argv[0])
    script = [sys.executable, "-c",
              "import sys; sys.argv[0] = 'porter'; from porter.express import main; sys.exit(main())"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    time.sleep(SETTLE)
    for _ in range(2):
        subprocess.run([*script, *ARGS], cwd=tree, env=env, capture_output=True, timeout=300)
    p = subprocess.run([*script, *ARGS], cwd=tree, env={**env, "_PORTER_COMPLETE": "bash_source"},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "_porter_completion" in p.stdout and '"PRT' not in p.stdout


def test_a_path_setting_turned_into_a_link_to_outside(tmp_path: Path) -> None:
    # a path-valued setting must stay in the root once links are resolved (a config error otherwise);
    # a link made in an ignored folder changes no signature the lane kept
    tree, cache, outside = tmp_path / "repo", tmp_path / "cache", tmp_path / "outside"
    (tree / "build").mkdir(parents=True)
    outside.mkdir()
    (tree / "m.py").write_text("import pynvml\npynvml.nvmlInit()\n")
    (tree / ".gitignore").write_text("build/\n")
    (tree / "build" / "junk.txt").write_text("x\n")
    (tree / "pyproject.toml").write_text('[tool.porter.warp_size]\nheader-dir = "build/include"\n')
    time.sleep(SETTLE)
    _porter(tree, cache, "check", ".")
    assert _porter(tree, cache, "check", ".")[:3:2] == (1, True)
    (tree / "build" / "include").symlink_to(outside)
    code, _, answered, err = _porter(tree, cache, "check", ".")
    assert (code, answered) == (2, False) and "outside the root" in err


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_an_output_encoding_with_a_byte_order_mark(tmp_path: Path, encoding: str) -> None:
    # the stream writes its BOM once, and not at all on a file it appends to (nor for an empty check);
    # the record kept text.encode(), BOM included
    tree, cache = tmp_path / "repo", tmp_path / "cache"
    tree.mkdir()
    (tree / "model.py").write_text("import torch\nx = torch.zeros(1, device='cuda')\nimport pynvml\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONIOENCODING": encoding}
    time.sleep(SETTLE)
    outputs = []
    for extra in ((), (), (), ("--no-cache",)):
        for args in (("check", *extra, "--exit-zero", "."), ("check", *extra, "--ignore", "PRT0,PRT1", ".")):
            log = tmp_path / "log.txt"
            log.write_bytes(b"earlier output\n")
            with open(log, "ab") as fh:
                p = subprocess.run([sys.executable, "-m", "porter", *args], cwd=tree, env=env, stdout=fh,
                                   stderr=subprocess.PIPE, timeout=300)
            outputs.append((p.returncode, log.read_bytes()))
    fresh = outputs[-2:]
    assert fresh[0][1].startswith(b"earlier output\n") and len(fresh[0][1]) > 40
    assert outputs[:2] == outputs[2:4] == outputs[4:6] == fresh
