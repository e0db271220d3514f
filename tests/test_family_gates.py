"""The exact LibCST triggers (``python_gate``) of the quantization and telemetry families.

A gate decides on the stdlib-``ast`` tier whether a family's LibCST visitor can report anything;
when it cannot, LibCST is not parsed at all. Each case here either passes the family's text
pre-filter and still gets its finding through the gate, or passes the pre-filter (the broad
tokens torch's own sources hit) and is never handed to LibCST.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst
import pytest

from porter import registry
from porter.framework import PyContext, load
from porter.testing import codes, findings, settings_for


@pytest.fixture
def cst_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every source LibCST parses during the test."""
    parsed: list[str] = []
    real: Callable[..., libcst.Module] = libcst.parse_module

    def counting(source: str, *args: object, **kwargs: object) -> libcst.Module:
        parsed.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", counting)
    return parsed


def gate(family: str, source: str) -> bool:
    fam = registry.family(family)
    assert fam is not None and fam.python_gate is not None
    assert fam.matches(source, "python", "t.py"), "the case must pass the text pre-filter"
    ctx = PyContext("t.py", source, "python", settings_for(family), ast_tree=ast.parse(source))
    return bool(load(fam.python_gate)(ctx))


# -- quantization ------------------------------------------------------------------------------

QUANT_ADMITTED = {
    "bnb optimizer": ("import bitsandbytes as bnb\nopt = bnb.optim.Adam8bit(model.parameters(), lr=1e-3)\n",
                      "PRT401"),
    "bnb class as a value": ("from bitsandbytes.nn import Linear8bitLt\nquantized = isinstance(m, Linear8bitLt)\n",
                             "PRT410"),
    "from_pretrained switch": ("model = AutoModel.from_pretrained(name, load_in_4bit=True)\n", "PRT420"),
    "kwargs dict key": ("kwargs = {\"load_in_8bit\": True}\n", "PRT424"),
    "trainer optimizer name": ("args = TrainingArguments(output_dir='out', optim='paged_adamw_32bit')\n", "PRT425"),
    # the words are escaped: only the literal's value names the optimizer (the comment passes the
    # text pre-filter, the backslash sends the gate to the Constants)
    "escaped optimizer name": ("# bitsandbytes-backed optimizers\nargs = TrainingArguments(optim='paged_adamw\\x5f8bit')\n",
                               "PRT425"),
    # implicit concatenations: the raw text never spells the word, literal() reads the whole
    "concatenated kwargs key": ("# bitsandbytes\ndef load():\n    kwargs = {}\n    kwargs['load_in_' '8bit'] = True\n"
                                "    return AutoModel.from_pretrained('x', **kwargs)\n", "PRT424"),
    "concatenated bnb prefix": ("# weight_only\nok = name.startswith('bn' 'b.')\n", "PRT426"),
    "class named by a string": ("OPTIMS = {'adam8': 'bitsandbytes.optim.Adam8bit'}  # weight_only\n", "PRT426"),
    "dispatch on a bnb prefix": ("# weight_only\nif name.startswith('bnb.'):\n    pass\n", "PRT426"),
    "peft preparation": ("from peft import prepare_model_for_kbit_training\nprepare_model_for_kbit_training(m)\n",
                         "PRT427"),
    "transformers config": ("from transformers import TorchAoConfig\ncfg = TorchAoConfig('int8_weight_only')\n",
                            "PRT422"),
    "removed torchao factory": ("from torchao.quantization import int8_weight_only\nq = int8_weight_only()\n",
                                "PRT423"),
    "low_bit_optim import in a function": ("def f():\n    from torchao.prototype.low_bit_optim import AdamW8bit\n",
                                           "PRT423"),
}

# torch-like sources: they pass the quantization tokens (weight_only, _32bit, _8bit) but no
# rule of the family can report on them
QUANT_REJECTED = {
    "torch ao quant type": "import torch\nclass QuantType:\n    WEIGHT_ONLY = 2\n\ndef is_weight_only(q):\n"
                           "    return q == 'weight_only'\n",
    "inductor 32-bit indexing": "import re\nuse_32bit_indexing = True\nPATTERN = re.compile(r'\\d+')\n"
                                "s = 'int\\t_32bit'\n",
    "meta registration": "from torch import Tensor\ndef _8bit_mm(a: Tensor) -> Tensor:\n    return a\n",
    "transformers without a quantization config": "from transformers import AutoModel  # weight_only\n"
                                                  "m = AutoModel.from_pretrained('x')\n",
}


@pytest.mark.parametrize("case", sorted(QUANT_ADMITTED))
def test_quantization_gate_admits_and_the_finding_stays(case: str, cst_parses: list[str]) -> None:
    source, code = QUANT_ADMITTED[case]
    assert gate("quantization", source)
    assert code in codes(findings(source, family="quantization"))
    assert cst_parses, "the LibCST visitor ran"


@pytest.mark.parametrize("case", sorted(QUANT_REJECTED))
def test_quantization_gate_rejects_without_parsing_libcst(case: str, cst_parses: list[str]) -> None:
    source = QUANT_REJECTED[case]
    assert not gate("quantization", source)
    assert findings(source, family="quantization") == []
    assert cst_parses == [], "LibCST was parsed although no quantization rule can report"


# -- telemetry ---------------------------------------------------------------------------------

TELEMETRY_ADMITTED = {
    "pynvml import": ("import pynvml\npynvml.nvmlInit()\nn = pynvml.nvmlDeviceGetCount()\n", "PRT731"),
    "nvidia-smi in a subprocess": ("import subprocess\nsubprocess.run(['nvidia-smi', '-L'])\n", "PRT740"),
    # LibCST reads an f-string's text without its replacement fields: "nvidia-smi"
    "nvidia-smi split by an f-string field": ("import subprocess  # nvtx\nsubprocess.run(f'nvidia-{x}smi', shell=True)\n",
                                              "PRT740"),
    "nvidia-smi escaped": ("import os\nos.system('nvidia\\x2dsmi')  # nvtx\n", "PRT740"),
    # the import index does not look into `match` cases; the ast visitor notes the star import
    "pynvml star import in a match case": ("match x:\n    case 1:\n        from pynvml import *\n", "PRT739"),
}

TELEMETRY_REJECTED = {
    "nvtx markers only": ("import torch\nimport nvtx\ntorch.cuda.nvtx.range_push('f')\n"
                          "@nvtx.annotate('t')\ndef f():\n    pass\n", ["PRT745", "PRT746", "PRT746"]),
    "talks about the tools": ("import subprocess\n# see nvidia-smi and pynvml\nsubprocess.run(['ls'])\n"
                              "doc = 'run nvidia-smi'\n", []),
    "pynvml named in a string": ("MODULES = ['pynvml', 'torch.cuda.nvtx']\n", []),
}


@pytest.mark.parametrize("case", sorted(TELEMETRY_ADMITTED))
def test_telemetry_gate_admits_and_the_finding_stays(case: str, cst_parses: list[str]) -> None:
    source, code = TELEMETRY_ADMITTED[case]
    assert gate("telemetry", source)
    assert code in codes(findings(source, family="telemetry"))
    assert cst_parses, "the LibCST visitor ran"


@pytest.mark.parametrize("case", sorted(TELEMETRY_REJECTED))
def test_telemetry_gate_rejects_without_parsing_libcst(case: str, cst_parses: list[str]) -> None:
    source, expected = TELEMETRY_REJECTED[case]
    assert not gate("telemetry", source)
    # the NVTX rules report from the ast tier, so their findings need no LibCST parse
    assert sorted(codes(findings(source, family="telemetry"))) == expected
    assert cst_parses == [], "LibCST was parsed although no LibCST telemetry rule can report"
