"""Shared pieces of the security suite: scratch repositories and payloads that leave a marker file."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

# the console script, as users and pre-commit run it (no interpreter flag: `-P` would hide what a child
# interpreter inherits); `python -P -m porter` behaves the same where the script is not installed
_SCRIPT = Path(sys.executable).with_name("porter")
PORTER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-P", "-m", "porter"]

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

LEGACY_PY = "import torch\nmodel = torch.nn.Linear(4, 4).cuda()\nx = torch.randn(2, 4).cuda()\n"
APEX_PY = "from apex.normalization import FusedLayerNorm\nnorm = FusedLayerNorm(16)\n"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PORTER_DEBUG", "PYTEST_"))}
    env.update(extra)
    return env


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """The test's own git (the trusted side): fixed identity, no system/global config."""
    full = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
                     GIT_COMMITTER_EMAIL="t@example.invalid", GIT_CONFIG_NOSYSTEM="1",
                     GIT_CONFIG_GLOBAL=os.devnull)
    full.update(env or {})
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True, text=True, env=full).stdout


def porter(*args: str, cwd: Path, env: dict[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PORTER, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env or clean_env(), check=False)


def payload(path: Path, marker: Path) -> Path:
    """An executable that appends its argv to ``marker`` (and succeeds, passing stdin through)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\ncat\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    git("init", "-q", "-b", "main", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "base", cwd=root)
    return root


def marker_text(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""
