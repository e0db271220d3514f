from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "porter-inductor"))

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _user_cache_outside_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """porter's audit cache lives in the user's cache folder: never the real home during tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
