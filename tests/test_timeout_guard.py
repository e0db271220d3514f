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
