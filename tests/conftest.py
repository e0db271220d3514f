from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "porter-inductor"))

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
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
