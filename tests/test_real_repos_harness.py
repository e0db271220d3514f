"""benchmarks/real_repos.py: what a sub-folder run materialises."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "benchmarks" / "real_repos.py"


def _harness():
    spec = importlib.util.spec_from_file_location("real_repos_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while building the classes
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_sub_folder_run_keeps_the_root_requirements_folder(tmp_path: Path) -> None:
    """A repository whose pins live in ``requirements/requirements.txt`` (porter reads that folder as its
    parent's manifest): a run limited to one package folder must still carry them, or porter ports against
    no torch pin at all and the semantic gate admits APIs the repository's torch floor lacks."""
    mod = _harness()
    src = tmp_path / "src"
    (src / "requirements").mkdir(parents=True)
    (src / "requirements" / "requirements.txt").write_text("torch>=1.12\n")
    (src / "pkg").mkdir()
    (src / "pkg" / "a.py").write_text("import torch\n")
    (src / "other").mkdir()
    (src / "other" / "b.py").write_text("x = 1\n")
    (src / "setup.py").write_text("from setuptools import setup\n")
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "c"]):
        subprocess.run(["git", *args], cwd=src, env=env, check=True, capture_output=True)
    mirror = tmp_path / "mirror"
    (mirror / "o+r").mkdir(parents=True)
    shutil.move(str(src / ".git"), str(mirror / "o+r" / "repo"))
    dest = tmp_path / "out"
    mod.materialise(mod.Entry.parse("o/r@HEAD:pkg"), mirror, dest)
    assert (dest / "requirements" / "requirements.txt").read_text() == "torch>=1.12\n"
    assert (dest / "pkg" / "a.py").is_file() and (dest / "setup.py").is_file()
    assert not (dest / "other").exists()
