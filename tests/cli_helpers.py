"""Helpers shared by porter's CLI-level tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "porter-inductor"))


def run_porter(*args: str, cwd: Path | None = None, input: bytes | None = None,
               env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run the porter CLI in a subprocess (the real entry point, as a user would)."""
    full_env = dict(os.environ)
    full_env.pop("PORTER_DEBUG", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "porter", *args], cwd=cwd, input=input, capture_output=True,
        env=full_env, timeout=timeout, check=False,
    )


def git(*args: str, cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True, text=True,
                         env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                              "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"})
    return out.stdout


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
