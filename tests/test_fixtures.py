"""Every fixture pair under tests/fixtures/<family>/ (see porter.testing for the layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.testing import check_fixture, fixture_cases

FIXTURES = Path(__file__).parent / "fixtures"
CASES = fixture_cases(FIXTURES)


@pytest.mark.parametrize(("family", "path"), CASES, ids=[f"{f}/{p.name}" for f, p in CASES])
def test_fixture(family: str, path: Path) -> None:
    check_fixture(family, path)


def test_every_family_has_fixtures() -> None:
    from porter import registry

    have = {family for family, _ in CASES}
    missing = [f.name for f in registry.families() if f.name not in have]
    assert not missing, f"families without fixtures: {missing}"
