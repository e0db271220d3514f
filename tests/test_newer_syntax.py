"""A file whose syntax is newer than the Python running porter: LibCST parses it, CPython's ast does
not, so only the LibCST rules can analyse it. porter says so instead of passing the file silently."""

from __future__ import annotations

import sys

import pytest

from porter.config import Settings
from porter.engine import analyze
from porter.registry import is_actionable

needs_older_python = pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs a Python that cannot parse PEP 695")

NEWER = "import torch\ntype Vec = list[float]\nx = torch.zeros(1).cuda()\n"


@needs_older_python
def test_the_partial_analysis_is_reported() -> None:
    found = analyze("m.py", NEWER, "python", Settings())
    (partial,) = [f for f in found if f.code == "PRT001"]
    assert partial.line == 2 and "cannot parse this file" in partial.message
    assert "only the rules that run on LibCST analysed it" in partial.message
    assert is_actionable(partial)  # `porter check` does not pass a file it could only half read


@needs_older_python
def test_libcst_rules_still_run_on_it() -> None:
    found = analyze("m.py", NEWER + "import pynvml\npynvml.nvmlInit()\n", "python", Settings())
    assert {"PRT001", "PRT730"} <= {f.code for f in found}


def test_a_file_this_python_parses_gets_no_such_finding() -> None:
    found = analyze("m.py", "import torch\nx = torch.zeros(1).cuda()\n", "python", Settings())
    assert "PRT001" not in {f.code for f in found} and "PRT040" in {f.code for f in found}


def test_a_file_libcst_cannot_parse_keeps_its_ast_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    import libcst as cst

    def refuse(text: str, *args: object, **kwargs: object) -> cst.Module:
        raise cst.ParserSyntaxError("grammar LibCST does not know", lines=text.splitlines(), raw_line=2,
                                    raw_column=0)

    monkeypatch.setattr(cst, "parse_module", refuse)
    text = "import torch\nx = torch.zeros(1).cuda()\nimport pynvml\npynvml.nvmlInit()\n"
    found = analyze("m.py", text, "python", Settings())
    codes = {f.code for f in found}
    assert "PRT040" in codes and "PRT016" in codes  # the ast tier's findings stand
    (partial,) = [f for f in found if f.code == "PRT001"]
    assert "LibCST cannot parse this file" in partial.message and is_actionable(partial)
