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
