"""`target-torch`: the torch version the ported code is written for (config and its effects)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from packaging.requirements import Requirement

from porter.config import ConfigError, Settings, from_table
from porter.framework import RepoFacts
from porter.runner import collect_facts
from porter.testing import findings, fixed, settings_for


def _settings(target: str = "2.5") -> Settings:
    return replace(settings_for("dependencies"), target_torch=target)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("torch==2.1.0+cu121  # pinned", "torch>=2.5  # pinned"),
        ('torch>=1.13,<2.2 ; python_version>"3.8"', 'torch>=2.5 ; python_version>"3.8"'),
        ("torch~=2.0.1", "torch>=2.5"),
    ],
)
def test_pins_below_the_target_are_raised(line: str, want: str) -> None:
    out = fixed(line + "\n", "requirements.txt", settings=_settings())
    if "+cu" in line:
        # the +cu label pinned a CUDA build and the file names no index: the ROCm index that
        # carries the *raised* torch is added (torch 2.5: rocm6.2), not refused for the old pin
        index, out = out.split("\n", 1)
        assert index == "--extra-index-url https://download.pytorch.org/whl/rocm6.2"
    assert out == want + "\n"
    req = Requirement(out.split("#")[0].strip())
    assert req.specifier.contains("2.5.0")


def test_the_index_moves_with_the_raised_pin() -> None:
    """The legacy shape: torch==2.1.2+cu121 from the cu121 index, torchvision to match."""
    src = ("--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.1.2+cu121\n"
           "torchvision==0.16.2+cu121\n")
    out = fixed(src, "requirements.txt", settings=_settings("2.9"))
    assert out == ("--extra-index-url https://download.pytorch.org/whl/rocm6.4\ntorch>=2.9\n"
                   "torchvision>=0.24\n")
    # without a target the old pin cannot move to a ROCm index that lacks torch 2.1: reported only
    kept = fixed(src, "requirements.txt", family="dependencies")
    assert "whl/cu121" in kept and "torch==2.1.2\n" in kept


@pytest.mark.parametrize("line", ["torch>=2.4", "torch", "torch==2.5.1", "numpy==1.26"])
def test_pins_that_admit_the_target_are_kept(line: str) -> None:
    assert fixed(line + "\n", "requirements.txt", settings=_settings()) == line + "\n"


def test_without_a_target_nothing_is_raised() -> None:
    src = "torch==2.1.0\n"
    assert fixed(src, "requirements.txt", family="dependencies") == src
    assert not [f for f in findings(src, "requirements.txt", family="dependencies") if f.code == "PRT811"]


def test_config_key_is_validated() -> None:
    assert from_table({"target-torch": "2.5"}).target_torch == "2.5"
    with pytest.raises(ConfigError):
        from_table({"target-torch": "latest"})


def test_target_overrides_the_repo_pin_in_facts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "requirements.txt").write_text("torch==2.1.0+cu121\nflash-attn==2.5.6\n")
    facts = collect_facts(tmp_path, [], replace(Settings(), target_torch="2.5"))
    assert facts.pins.get("torch") == "==2.5"
    assert facts.pins.get("flash-attn") == "==2.5.6"
    assert isinstance(collect_facts(tmp_path, []), RepoFacts)


def test_amp_deprecation_rewrites_need_a_guaranteed_torch() -> None:
    """torch.amp.custom_fwd needs torch 2.4 and torch.amp.GradScaler 2.3: the clean-up is applied only when the
    pins guarantee them (a repository that declared torch>=2 or pinned nothing broke at import time)."""
    from porter.findings import Applicability
    from porter.framework import RepoFacts
    from porter.testing import findings, fixed

    src = ("import torch\nfrom torch.cuda.amp import custom_fwd\n\n\nclass F(torch.autograd.Function):\n"
           "    @staticmethod\n    @custom_fwd\n    def forward(ctx, x):\n        return x\n\n\n"
           "scaler = torch.cuda.amp.GradScaler()\n")
    for pins in ({}, {"torch": ">=2"}, {"torch": "==2.1.2"}):
        facts = RepoFacts(pins=pins)
        assert fixed(src, family="device_audit", facts=facts) == src, pins
        got = [f for f in findings(src, family="device_audit", facts=facts) if f.code == "PRT049"]
        assert len(got) == 2 and all(f.fix == Applicability.NONE and "not rewritten" in f.message for f in got)
    out = fixed(src, family="device_audit", facts=RepoFacts(pins={"torch": ">=2.4"}))
    assert 'torch.amp.custom_fwd(device_type="cuda")' in out and 'torch.amp.GradScaler("cuda")' in out


def test_autocast_deprecation_rewrite_needs_a_torch_with_torch_amp() -> None:
    """``torch.amp.autocast`` first shipped in torch 1.12 (``torch.cuda.amp.autocast`` in 1.6): a repository whose
    pins admit an older torch (``torch>=1.7``) or pin nothing keeps the old spelling, reported; a pin that
    guarantees 1.12 gets the clean-up."""
    from porter.findings import Applicability
    from porter.framework import RepoFacts
    from porter.testing import findings, fixed

    src = ("import torch\n\n\ndef norm(x):\n    with torch.cuda.amp.autocast(enabled=False):\n        return x\n\n\n"
           "@torch.cuda.amp.autocast()\ndef fwd(x):\n    return x\n")
    for pins in ({}, {"torch": ">=1.7"}, {"torch": "==1.11.0"}):
        facts = RepoFacts(pins=pins)
        assert fixed(src, family="device_audit", facts=facts) == src, pins
        got = [f for f in findings(src, family="device_audit", facts=facts) if f.code == "PRT049"]
        assert len(got) == 2 and all(f.fix == Applicability.NONE and "torch>=1.12" in f.message for f in got), pins
    out = fixed(src, family="device_audit", facts=RepoFacts(pins={"torch": ">=1.13"}))
    assert 'torch.amp.autocast("cuda", enabled=False)' in out and '@torch.amp.autocast("cuda")' in out
