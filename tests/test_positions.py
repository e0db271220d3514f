"""porter's per-statement positions equal LibCST's full position pass, node for node."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import PositionProvider

from porter.config import Settings
from porter.framework import PyContext

FIXTURES = sorted(Path(__file__).parent.glob("fixtures/*/*.py"))

EXTRA = {
    "decorators": "import x\n\n# lead\n@dec\n\n# between\n@dec2(\n  1)\n\ndef f():\n    return x.y\n",
    "semicolons": "a = 1; b = 2\n\n\nif a:\n    pass\nelse:\n    b = 3\nclass C: pass\n",
    "crlf": "import torch\r\n\r\nx = torch.cuda.is_available()\r\n",
    "header": "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\n\"\"\"doc\"\"\"\n\nimport os\n",
    "no-newline": "import os\nx = os.path",
    "continuation": "x = 1 + \\\n    2\ny = [\n  1,\n]\n",
}


def _check(text: str) -> None:
    ctx = PyContext("t.py", text, "python", Settings())
    full = cst.MetadataWrapper(ctx.module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert ctx._statement_starts() is not None or not ctx.module.body
    for i in range(len(ctx.module.body)):
        ctx._position_statement(i)
    assert ctx._partial, "no positions computed"
    for node, rng in ctx._partial.items():
        assert full[node] == rng, (type(node).__name__, full[node], rng)
    # every statement and everything in it (the module's own header/footer comments aside)
    assert all(stmt in ctx._partial for stmt in ctx.module.body)
    header = sum(1 for _ in _walk(ctx.module.header)) + sum(1 for _ in _walk(ctx.module.footer))
    assert len(ctx._partial) == len(full) - 1 - header


def _walk(nodes):  # type: ignore[no-untyped-def]
    for node in nodes:
        yield node
        yield from _walk(node.children)


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}/{p.name}" for p in FIXTURES])
def test_fixture_positions(path: Path) -> None:
    _check(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_layout_positions(name: str) -> None:
    _check(EXTRA[name])
