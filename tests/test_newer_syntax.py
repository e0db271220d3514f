"""A file whose syntax is newer than the Python running porter: LibCST parses it, CPython's ast does
not, so only the LibCST rules can analyse it. porter says so instead of passing the file silently."""

from __future__ import annotations

import sys

import pytest

from porter.config import Settings
from porter.engine import analyze
from porter.registry import is_actionable

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs a Python that cannot parse PEP 695")

NEWER = "import torch\ntype Vec = list[float]\nx = torch.zeros(1).cuda()\n"


def test_the_partial_analysis_is_reported() -> None:
    found = analyze("m.py", NEWER, "python", Settings())
    (partial,) = [f for f in found if f.code == "PRT001"]
    assert partial.line == 2 and "cannot parse this file" in partial.message
    assert "only the rules that run on LibCST analysed it" in partial.message
    assert is_actionable(partial)  # `porter check` does not pass a file it could only half read


def test_libcst_rules_still_run_on_it() -> None:
    found = analyze("m.py", NEWER + "import pynvml\npynvml.nvmlInit()\n", "python", Settings())
    assert {"PRT001", "PRT730"} <= {f.code for f in found}


def test_a_file_this_python_parses_gets_no_such_finding() -> None:
    found = analyze("m.py", "import torch\nx = torch.zeros(1).cuda()\n", "python", Settings())
    assert "PRT001" not in {f.code for f in found} and "PRT040" in {f.code for f in found}
