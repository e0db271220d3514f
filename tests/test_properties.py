"""Property tests (issue 9): for generated Python modules every codemod family either leaves the
file byte-identical or produces code that parses; fixing twice equals fixing once; dry-run
(the patch series) and apply agree."""

from __future__ import annotations

import ast

import libcst as cst
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from porter.config import Settings
from porter.engine import analyze, fix

hypothesmith = __import__("pytest").importorskip("hypothesmith")

ALL = Settings(unsafe_fixes=True, select=("ALL",))

# Snippets that every family reacts to, spliced into generated modules so that the rules
# actually fire on arbitrary surrounding code.
TRIGGERS = [
    "from flash_attn import flash_attn_func\ny = flash_attn_func(q, k, v, causal=True)\n",
    "import xformers.ops as xops\ny = xops.memory_efficient_attention(q, k, v)\n",
    "from apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3)\n",
    "from apex.normalization import FusedRMSNorm\nnorm = FusedRMSNorm(64)\n",
    "import bitsandbytes as bnb\nlin = bnb.nn.Linear8bitLt(4, 4)\n",
    "import transformer_engine.pytorch as te\nlin = te.Linear(4, 4)\n",
    "import pynvml\npynvml.nvmlInit()\n",
    "import torch\nok = torch.cuda.get_device_capability()[0] >= 8\nx = torch.zeros(1).cuda()\n",
    'm = AutoModel.from_pretrained("x", attn_implementation="flash_attention_2")\n',
    "import os\nos.environ['NCCL_P2P_LEVEL'] = 'NVL'\n",
]


def _roundtrips(code: str) -> bool:
    try:
        return cst.parse_module(code).code == code
    except Exception:  # noqa: BLE001
        return False


def _check(code: str) -> None:
    out = fix("gen.py", code, "python", ALL)
    if out.text != code:
        ast.parse(out.text)  # a changed file must parse
        cst.parse_module(out.text)
    again = fix("gen.py", out.text, "python", ALL)
    assert again.text == out.text, "fixing twice must equal fixing once"
    # the staged texts chain: each stage starts where the previous one ended
    prev = code
    for stage in out.stages:
        assert stage.before == prev
        prev = stage.after
    assert prev == out.text
    analyze("gen.py", out.text, "python", ALL)  # never raises


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(hypothesmith.from_grammar(), st.sampled_from(TRIGGERS), st.booleans())
def test_generated_modules(generated: str, trigger: str, before: bool) -> None:
    assume(_roundtrips(generated))
    code = trigger + generated if before else generated.rstrip("\n") + "\n" + trigger
    assume(_roundtrips(code))
    _check(code)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(TRIGGERS), min_size=1, max_size=5), st.sampled_from(["", "    ", "\t"]))
def test_combined_triggers_inside_functions(parts: list[str], indent: str) -> None:
    body = "".join(parts)
    if indent:
        body = "def f(q, k, v, params):\n" + "".join(indent + ln + "\n" for ln in body.splitlines())
    _check(body)
