from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "porter-inductor"))


@pytest.fixture(autouse=True)
def _user_cache_outside_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """porter's audit cache lives in the user's cache folder: never the real home during tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(autouse=True)
def _inputs_settle_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs vouch for files written a moment ago (tests write their trees and audit them
    at once); tests/test_express.py checks the settling rule itself, in subprocesses."""
    from porter import express

    monkeypatch.setattr(express, "SETTLE_NS", 0)


# The slow tier: whole modules that take tens of seconds to minutes on two cores (numerical parity
# suites driven by hypothesis, generated-code properties, crash/timeout injection, the end-to-end
# example with its compilers, the benchmark). The README's test command deselects them with
# `-m "not slow"`; CI (.ci/run) runs them too. Tests can also be marked one by one with
# @pytest.mark.slow.
SLOW_MODULES = frozenset({
    "test_apex_parity",
    "test_attention_parity",
    "test_quantization_parity",
    "test_properties",
    "test_robustness",
    "test_fault_injection",
    "test_migrate_example",
    "test_benchmark_smoke",
    "test_precommit",
    "test_warp_compilers",
    "test_hostile",
    "test_dependencies_roundtrip",
    "test_migrate",
    "test_parity_emit",
    "test_warp_emulator",
})

# single slow tests in otherwise quick modules (the example repository's own model runs)
SLOW_TESTS = frozenset({
    "test_example_repo.py::test_original_runs_with_doubles",
    "test_example_repo.py::test_model_outputs_with_doubles_are_self_consistent",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES or f"{item.path.name}::{item.name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
