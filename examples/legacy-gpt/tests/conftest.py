"""Test setup: make the repo importable and, on machines without the CUDA-only packages,
put the pure-torch test doubles in tests/doubles on sys.path.

Set LEGACY_GPT_DOUBLES=0 to run against whatever is installed (e.g. on the GPU cluster).
"""

import os
import sys

import pytest
import torch
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOUBLES = os.path.join(HERE, "doubles")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if os.environ.get("LEGACY_GPT_DOUBLES", "1") != "0" and DOUBLES not in sys.path:
    sys.path.insert(0, DOUBLES)


def tiny_config(**overrides):
    from model import GPTConfig

    with open(os.path.join(ROOT, "configs", "tiny_debug.yaml")) as f:
        cfg = yaml.safe_load(f)["model"]
    cfg.update(overrides)
    return GPTConfig(**cfg)


def tiny_model(seed=0, **overrides):
    from model import GPT

    torch.manual_seed(seed)
    return GPT(tiny_config(**overrides))


@pytest.fixture
def config():
    return tiny_config()


@pytest.fixture
def model():
    return tiny_model().eval()
