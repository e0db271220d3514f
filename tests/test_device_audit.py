"""The device_audit family on the stdlib-ast tier: shapes where ``ast`` and LibCST see the source
differently (parentheses, implicit string concatenation, f-strings, names ``ast`` keeps as plain
strings, non-ASCII columns). Each expectation is what the LibCST implementation reported."""

from __future__ import annotations

import ast

import pytest

from porter.framework import RepoFacts
from porter.registry import family
from porter.testing import findings, fixed

PINNED = RepoFacts(pins={"torch": ">=2.4"})


def spans(src: str) -> list[str]:
    return [f"{f.line}:{f.column}-{f.end_line}:{f.end_column} {f.code}" for f in findings(src, family="device_audit")]


def test_runs_on_the_ast_tier_only() -> None:
    fam = family("device_audit")
    assert fam is not None and fam.python is None and fam.python_ast is not None


def test_amp_rewrite_keeps_the_parentheses_of_an_argument() -> None:
    # ast ranges exclude parentheses; `enabled=x := True` would not even parse
    src = "import torch\nwith torch.cuda.amp.autocast(enabled=(x := True)):\n    pass\n"
    out = fixed(src, family="device_audit", facts=PINNED)
    assert 'torch.amp.autocast("cuda", enabled=(x := True))' in out
    ast.parse(out)


def test_amp_rewrite_binds_parenthesised_positionals_without_their_comments() -> None:
    src = ("import torch\nwith torch.cuda.amp.autocast(\n    (True),  # on (\n    ( torch.bfloat16 ),\n):\n"
           "    pass\n")
    out = fixed(src, family="device_audit", facts=PINNED)
    assert 'with torch.amp.autocast("cuda", enabled=(True), dtype=( torch.bfloat16 )):' in out


def test_amp_rewrite_through_aliases() -> None:
    src = ("from torch.optim import AdamW as adamw\nimport torch.cuda as tc\nfrom torch import cuda as C\n"
           "opt = adamw(p)\ntc.synchronize()\nC.graph\nfrom torch.cuda.amp import autocast as ac\n"
           "with ac():\n    pass\n")
    assert spans(src) == ["4:7-4:12 PRT060", "5:1-5:15 PRT042", "6:1-6:8 PRT044", "8:6-8:10 PRT049"]
    out = fixed(src, family="device_audit", facts=PINNED)
    assert 'with torch.amp.autocast("cuda"):' in out and "import torch\n" in out


@pytest.mark.parametrize(("expr", "reported"), [
    ('f"cuda:{i}"', True),
    ('"cuda:" f"{i}"', False),  # a concatenation with an f-string is not read
    ('f"cuda{{x}}"', False),  # the text before the first field is `cuda{{x}}`
    ('"cuda:" + str(i)', True),
    ('"cu" "da:" + str(i)', False),  # only a single literal starts a `+` device string
    ('"cu" "da"', True),
    ('f"cuda"', True),
    ('f"cuda" ":0"', False),
])
def test_device_string_literal_shapes(expr: str, reported: bool) -> None:
    src = f"import torch  # cuda\nx = torch.zeros(1, device={expr})\n"  # the comment passes the pre-filter
    want = [f"2:27-2:{27 + len(expr)} PRT041"] if reported else []
    assert spans(src) == want


def test_names_ast_keeps_as_strings() -> None:
    src = ("from torch.utils.cpp_extension import CUDA_HOME\nfrom torch import cuda\n\ndef f():\n"
           "    global  x, CUDA_HOME\n    try:\n        pass\n    except (ValueError) as cuda:\n        pass\n")
    assert spans(src) == ["5:16-5:25 PRT047", "8:28-8:32 PRT042"]


def test_environment_keys() -> None:
    src = ('import os\na = os.environ["CUDA_VISIBLE_DEVICES",]\nb = os.environ[("CUDA_VISIBLE_DEVICES",)]\n'
           'os.environ.update(CUDA_HOME="/x", PATH="/y")\nenv = os.environ\nc = env["CUDA_HOME"]\n'
           'd = "CUDA_HOME" not in env\n')
    # the keyword is reported on its name only (ast's keyword spans `name=value`)
    assert spans(src) == ["2:16-2:38 PRT045", "4:19-4:28 PRT047", "6:9-6:20 PRT047", "7:5-7:16 PRT047"]


def test_columns_are_characters() -> None:
    src = 'import torch\ns = "é"; torch.cuda.synchronize(); t = "ü"; x = torch.ones(1, device="cuda")\n'
    assert spans(src) == ["2:10-2:32 PRT042", "2:70-2:76 PRT041"]


def test_parameter_defaults() -> None:
    src = ('f = lambda device="cuda": device\n\n'
           'def g(a, /, b="cuda", *, device="cuda:0", other_device="cuda" if 1 else "cpu"):\n    pass\n')
    assert spans(src) == ["1:19-1:25 PRT041", "3:33-3:41 PRT041", "3:56-3:62 PRT041"]


def test_python_prefilter_needs_the_identifier_optim() -> None:
    fam = family("device_audit")
    assert fam is not None
    assert not fam.matches("def optimize(optimizer):\n    return optimizer.step()\n", "python")
    for src in ("import torch\nopt = torch.optim.AdamW(p)\n", "from torch import optim\n",
                "from torch import (nn, optim)\n", "from torch.optim import AdamW\n", "import torch.optim as O\n"):
        assert fam.matches(src, "python"), src


def test_optim_at_the_end_of_a_file_without_newline() -> None:
    # the rebind is the file's last text: `optim` followed by no character at all
    src = "import torch\n\ndef make(p):\n    return O.AdamW(p)\n\nO = torch.optim"
    assert [f.code for f in findings(src, family="device_audit")] == ["PRT060"]


def test_shell_prefilter() -> None:
    fam = family("device_audit")
    assert fam is not None
    assert fam.matches("export CUDA_VISIBLE_DEVICES=0\n", "shell")
    assert not fam.matches("python train.py --optim adamw --device cuda\n", "shell")
