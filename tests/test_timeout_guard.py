"""A file's CPU-time limit holds wherever the timer fires: inside the engine's per-family guards
(`except Exception`: one crashing family must not hide the others) the timeout must not be taken
for a family's crash and the families re-run with no limit left (which took minutes on a 30,000-line
file and reported it as analysed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter import pyast, runner
from porter.config import Settings
from porter.discovery import SourceRef
from porter.framework import RepoFacts

KERNEL = "__global__ void k(float v) { v += __shfl_down_sync(0xffffffff, v, 16); }\n"
PYTHON = "import torch\nx = torch.zeros(1).cuda()\n"


def _fires(*_args: object, **_kwargs: object) -> None:
    raise runner._Timeout  # what the SIGPROF handler raises, here at a chosen point


def _codes(tmp_path: Path, name: str, text: str, language: str) -> list[str]:
    (tmp_path / name).write_text(text, encoding="utf-8")
    result = runner.process_file(SourceRef(name, language), str(tmp_path), Settings(), RepoFacts(), "audit")
    return [f.code for f in result.findings]


def test_the_limit_firing_in_the_shared_ast_walk_is_a_timeout(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    before = _codes(tmp_path, "a.py", PYTHON, "python")
    assert before and "PRT008" not in before
    monkeypatch.setattr(pyast, "walk", _fires)
    assert _codes(tmp_path, "a.py", PYTHON, "python") == ["PRT008"]


def test_the_limit_firing_in_a_checker_is_a_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.codemods.warp_size import engine

    assert "PRT501" in _codes(tmp_path, "k.cu", KERNEL, "cuda")
    monkeypatch.setattr(engine.Analyser, "run", _fires)
    assert _codes(tmp_path, "k.cu", KERNEL, "cuda") == ["PRT008"]


def _burn(seconds: float) -> None:
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_limit_coming_back_wrapped_is_a_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Python wraps an exception raised in __set_name__ (a class body run by a lazy import) in a
    # RuntimeError: when the timer fires there, the run ended with "internal error: RuntimeError"
    def wrapped(*_args: object, **_kwargs: object) -> list[object]:
        try:
            _burn(5.0)
        except BaseException as exc:  # noqa: BLE001 - what type.__new__ does with __set_name__ errors
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc
        return []

    (tmp_path / "a.py").write_text(PYTHON, encoding="utf-8")
    monkeypatch.setattr(runner, "analyze", wrapped)
    result = runner.process_file(SourceRef("a.py", "python"), str(tmp_path), Settings(timeout=0.3), RepoFacts(),
                                 "audit")
    assert [f.code for f in result.findings] == ["PRT008"]


def test_a_swallowed_limit_still_ends_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # code that catches everything and goes on (a library's broad except) must not run on unlimited
    # and then be reported as analysed: the signal fires again, and the file is a timeout
    calls = {"caught": 0}

    def swallowing(*_args: object, **_kwargs: object) -> list[object]:
        import time

        end = time.process_time() + 3.0
        while time.process_time() < end:
            try:
                _burn(end - time.process_time())
            except BaseException:  # noqa: BLE001
                calls["caught"] += 1
                if calls["caught"] >= 3:
                    return []
        return []

    (tmp_path / "a.py").write_text(PYTHON, encoding="utf-8")
    monkeypatch.setattr(runner, "analyze", swallowing)
    result = runner.process_file(SourceRef("a.py", "python"), str(tmp_path), Settings(timeout=0.3), RepoFacts(),
                                 "audit")
    assert [f.code for f in result.findings] == ["PRT008"]
    assert calls["caught"] >= 3  # the signal came back after being swallowed
