"""apex family: rule coverage, formatting preservation, explicit defaults, options, no removed upstream API emitted."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porter import registry
from porter.engine import fix
from porter.findings import Applicability
from porter.testing import findings, fixed, settings_for

FIXTURES = Path(__file__).parent / "fixtures" / "apex"
CASES = sorted(FIXTURES.glob("*.in.py"))
FAST = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def test_every_rule_is_exercised_by_a_fixture() -> None:
    fam = registry.family("apex")
    assert fam is not None
    seen = set()
    for path in FIXTURES.glob("*.findings"):
        seen.update(line.split()[1] for line in path.read_text().splitlines() if line.strip())
    missing = sorted(r.code for r in fam.rules if r.code not in seen)
    assert not missing, f"rules without a fixture finding: {missing}"
    assert all(r.code.startswith("PRT3") for r in fam.rules)


def test_rewrites_never_emit_apex_names() -> None:
    """Removed upstream APIs (apex amp/parallel) are never emitted; no rewrite names apex."""
    for path in CASES:
        text = path.read_text()
        for f in findings(text, "t.py", settings=settings_for("apex", unsafe=True)):
            for e in f.edits:
                assert "apex" not in e.text, (path.name, f.code, e.text)


def _import_line(line: str) -> bool:
    s = line.strip()
    return s.startswith(("import ", "from ")) or s in {")", ""} or (s.endswith(",") and " " not in s.rstrip(","))\
        or s.endswith(")") and "(" not in s and " " not in s.rstrip(")")


def test_only_edited_calls_and_imports_change() -> None:
    """Lines outside the rewritten calls stay byte-for-byte; only import lines are added or removed."""
    for path in CASES:
        text = path.read_text()
        for unsafe in (False, True):
            outcome = fix("t.py", text, "python", settings_for("apex", unsafe=unsafe))
            edited = {ln for f in outcome.fixed for ln in range(f.line, f.end_line + 1)}
            a, b = text.splitlines(), outcome.text.splitlines()
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
                if tag == "equal":
                    continue
                for i in range(i1, i2):
                    assert (i + 1) in edited or _import_line(a[i]), (path.name, i + 1, a[i])
                if tag == "insert":
                    assert all(_import_line(line) for line in b[j1:j2]), (path.name, b[j1:j2])


def test_fixed_findings_are_exactly_the_safe_ones() -> None:
    for path in CASES:
        text = path.read_text()
        found = findings(text, "t.py", family="apex")
        outcome = fix("t.py", text, "python", settings_for("apex"))
        fixed_keys = {(f.line, f.column, f.code) for f in outcome.fixed}
        safe_keys = {(f.line, f.column, f.code) for f in found if f.fix == Applicability.SAFE}
        assert fixed_keys == safe_keys, path.name
        for f in found:
            if f.fix == Applicability.NONE:
                assert "not rewritten" in f.message or "no " in f.message or "hand" in f.message, f.message


def test_options_fused_off_and_assume_fp32() -> None:
    src = "from apex.optimizers import FusedAdam, FusedSGD\na = FusedAdam(p, lr=1e-3)\nb = FusedSGD(p, lr=0.1)\n"
    out = fixed(src, settings=settings_for("apex", apex={"fused": False, "assume-fp32-params": True}))
    assert out == ("import torch\na = torch.optim.AdamW(p, lr=1e-3, weight_decay=0.0)\n"
                   "b = torch.optim.SGD(p, lr=0.1)\n")


def test_existing_aliases_are_reused_and_import_kept_when_still_used() -> None:
    src = ("import torch.nn as nn\nimport torch.nn.functional as F\nfrom apex.normalization import FusedRMSNorm\n"
           "from apex.normalization.fused_layer_norm import fused_rms_norm\n"
           "a = FusedRMSNorm(8)\nb = fused_rms_norm(x, (8,))\nkinds = [FusedRMSNorm]\n")
    out = fixed(src, family="apex")
    assert "a = nn.RMSNorm(8, eps=1e-5)" in out and "b = F.rms_norm(x, normalized_shape=(8,), eps=1e-6)" in out
    assert "from apex.normalization import FusedRMSNorm\n" in out  # still referenced (and flagged)
    assert "fused_rms_norm\n" not in out.split("a =")[0]  # the unused functional import is gone
    assert "import torch\n" not in out


def test_shadowed_and_unrelated_names_are_not_reported() -> None:
    src = ("def FusedAdam(*a, **k):\n    return None\n\n\nopt = FusedAdam(p)\n"
           "class apex:\n    pass\n\n\nx = apex()\n")
    assert findings(src, family="apex") == []


# -- no rewrite changes a default silently -------------------------------------------------------

# (apex signature with defaults, torch defaults, apex name -> torch keyword)
_SIGS: dict[str, tuple[list[tuple[str, Any]], dict[str, Any], dict[str, str]]] = {
    "FusedAdam": (
        [("lr", 1e-3), ("bias_correction", True), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("adam_w_mode", True),
         ("weight_decay", 0.0)],
        {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": None},  # AdamW 0.01 / Adam 0
        {"lr": "lr", "betas": "betas", "eps": "eps", "weight_decay": "weight_decay"},
    ),
    "FusedSGD": (
        [("lr", None), ("momentum", 0), ("dampening", 0), ("weight_decay", 0), ("nesterov", False)],
        {"lr": 1e-3, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False},
        {"lr": "lr", "momentum": "momentum", "dampening": "dampening", "weight_decay": "weight_decay",
         "nesterov": "nesterov"},
    ),
    "FusedAdagrad": (
        [("lr", 1e-2), ("eps", 1e-10), ("weight_decay", 0.0)],
        {"lr": 1e-2, "eps": 1e-10, "weight_decay": 0, "lr_decay": 0},
        {"lr": "lr", "eps": "eps", "weight_decay": "weight_decay"},
    ),
    "FusedRMSNorm": (
        [("eps", 1e-5), ("elementwise_affine", True)],
        {"eps": None, "elementwise_affine": True},
        {"eps": "eps", "elementwise_affine": "elementwise_affine"},
    ),
    "FusedLayerNorm": (
        [("eps", 1e-5), ("elementwise_affine", True)],
        {"eps": 1e-5, "elementwise_affine": True},
        {"eps": "eps", "elementwise_affine": "elementwise_affine"},
    ),
    "fused_rms_norm": ([("normalized_shape", (8,)), ("eps", 1e-6)], {"eps": None},
                       {"normalized_shape": "normalized_shape", "eps": "eps"}),
    "fused_layer_norm": ([("normalized_shape", (8,)), ("eps", 1e-6)], {"eps": 1e-5},
                         {"normalized_shape": "normalized_shape", "eps": "eps"}),
}
_VALUES = {
    "lr": [0.5, 2e-4], "bias_correction": [True], "betas": [(0.8, 0.9)], "eps": [1e-3, 1e-7],
    "adam_w_mode": [True, False], "weight_decay": [0.0, 0.1], "momentum": [0.0, 0.9], "dampening": [0.0],
    "nesterov": [False], "elementwise_affine": [True, False], "normalized_shape": [(8,)],
}
_MODULE = {"FusedAdam": "apex.optimizers", "FusedSGD": "apex.optimizers", "FusedAdagrad": "apex.optimizers",
           "FusedRMSNorm": "apex.normalization", "FusedLayerNorm": "apex.normalization",
           "fused_rms_norm": "apex.normalization", "fused_layer_norm": "apex.normalization"}


@st.composite
def _apex_call(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(_SIGS)))
    sig = _SIGS[name][0]
    chosen: dict[str, Any] = {}
    n_pos = draw(st.integers(0, len(sig)))
    parts = ["x"]
    for i, (param, default) in enumerate(sig):
        required = default is None or param == "normalized_shape"
        if not required and not draw(st.booleans()):
            if i < n_pos:
                n_pos = i  # positional run stops at the first omitted argument
            continue
        value = draw(st.sampled_from(_VALUES[param]))
        chosen[param] = value
        parts.append(repr(value) if i < n_pos else f"{param}={value!r}")
    return name, f"{name}({', '.join(parts)})", chosen


@FAST
@given(_apex_call())
def test_no_rewrite_changes_a_default_silently(case: tuple[str, str, dict[str, Any]]) -> None:
    """The torch call's effective settings equal apex's effective settings, defaults included."""
    name, call, chosen = case
    src = f"from {_MODULE[name]} import {name}\ny = {call}\n"
    out = fixed(src, settings=settings_for("apex", apex={"assume-fp32-params": True}))
    assert out != src, call
    tree = ast.parse(out).body[-1]
    assert isinstance(tree, ast.Assign) and isinstance(tree.value, ast.Call)
    kw = {k.arg: ast.literal_eval(k.value) for k in tree.value.keywords if k.arg not in (None,)}
    sig, torch_defaults, rename = _SIGS[name]
    apex_eff = {p: chosen.get(p, d) for p, d in sig}
    for apex_name, torch_name in rename.items():
        if apex_name not in apex_eff:
            continue
        torch_value = kw.get(torch_name, torch_defaults.get(torch_name))
        assert torch_value == apex_eff[apex_name], (call, out, apex_name)
    assert len(tree.value.args) <= 1, f"only the first argument may stay positional: {out}"
    if name == "FusedAdam":
        cls = ast.unparse(tree.value.func)
        assert cls.endswith("AdamW" if apex_eff["adam_w_mode"] else "Adam"), out


def test_from_torch_import_module_aliases_are_reused() -> None:
    src = ("from torch import optim as optim\nfrom torch import nn\nfrom apex.optimizers import FusedSGD\n"
           "from apex.normalization import FusedLayerNorm\nx = FusedSGD(p, lr=1)\ny = FusedLayerNorm(3)\n")
    assert fixed(src, family="apex") == ("from torch import optim as optim\nfrom torch import nn\n"
                                         "x = optim.SGD(p, lr=1, fused=True)\ny = nn.LayerNorm(3)\n")


# -- robustness: arbitrary argument lists never crash, break the file or loop -------------------

_CALLEES = [
    ("apex.optimizers", "FusedAdam"), ("apex.optimizers", "FusedSGD"), ("apex.optimizers", "FusedAdagrad"),
    ("apex.normalization", "FusedLayerNorm"), ("apex.normalization", "FusedRMSNorm"),
    ("apex.normalization", "MixedFusedRMSNorm"), ("apex.normalization.fused_layer_norm", "fused_rms_norm_affine"),
    ("apex.normalization.fused_layer_norm", "mixed_dtype_fused_layer_norm_affine"),
    ("apex.parallel", "DistributedDataParallel"), ("apex.parallel", "SyncBatchNorm"),
    ("apex.parallel", "convert_syncbn_model"), ("apex.contrib.clip_grad", "clip_grad_norm_"),
    ("apex.contrib.group_norm", "GroupNorm"), ("apex.contrib.layer_norm", "FastLayerNorm"),
    ("apex.amp", "master_params"),
]
_KEYS = ["lr", "eps", "betas", "weight_decay", "adam_w_mode", "bias_correction", "momentum", "nesterov",
         "elementwise_affine", "memory_efficient", "gradient_average", "process_group", "channel_last", "act",
         "set_grad_none", "module", "params", "weight", "normalized_shape", "bogus"]
_VALS = ["1e-3", "True", "False", "None", "x", "cfg.lr", "f()", "(0.9, 0.99)", "-1", "'silu'", "[a, b]",
         "x if y else z", "(\n        1e-5  # comment\n    )", "lambda: 0"]


@st.composite
def _weird_call(draw: st.DrawFn) -> str:
    module, name = draw(st.sampled_from(_CALLEES))
    n = draw(st.integers(0, 6))
    args = []
    for i in range(n):
        kind = draw(st.sampled_from(["pos", "kw", "kw", "star"] if i else ["pos", "kw"]))
        val = draw(st.sampled_from(_VALS))
        if kind == "pos":
            args.append(val)
        elif kind == "kw":
            args.append(f"{draw(st.sampled_from(_KEYS))}={val}")
        else:
            args.append(draw(st.sampled_from(["*xs", "**kw"])))
    sep = draw(st.sampled_from([", ", ",\n        "]))
    call = f"{name}({sep.join(args)}{draw(st.sampled_from(['', ',']))})"
    alias = "amp" if module == "apex.amp" else name
    head = "from apex import amp\n" if module == "apex.amp" else f"from {module} import {name}\n"
    call = call.replace(name, alias, 1) if module != "apex.amp" else "amp." + call
    return f"import torch\n{head}\n\ndef g(x, y, z, a, b, cfg, xs, kw, f):\n    out = {call}\n    return out\n"


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_weird_call(), st.booleans())
def test_arbitrary_calls_never_break_the_file(src: str, unsafe: bool) -> None:
    try:
        ast.parse(src)
    except SyntaxError:  # e.g. a positional after a keyword: not Python, nothing to test
        return
    outcome = fix("t.py", src, "python", settings_for("apex", unsafe=unsafe))
    assert not [f for f in outcome.remaining if f.code == "PRT007"], (src, outcome.remaining)
    ast.parse(outcome.text)
    again = fix("t.py", outcome.text, "python", settings_for("apex", unsafe=unsafe)).text
    assert again == outcome.text, src
    found = findings(src, "t.py", family="apex")
    assert found, f"an apex call without a finding:\n{src}"


def test_ddp_rewrite_uses_a_keyword_every_torch_accepts() -> None:
    """apex DDP never syncs buffers (neither at construction nor in forward). ``broadcast_buffers=False`` says
    exactly that on every torch release; ``forward_sync_buffers`` first shipped in torch 2.13 (a TypeError on
    older releases, porter's default migration target among them) and still syncs buffers at construction."""
    import inspect

    import torch.nn.parallel

    from porter.apis import requirements_for

    src = ("from apex.parallel import DistributedDataParallel as DDP\n\n\n"
           "def wrap(model):\n    return DDP(model, delay_allreduce=True)\n")
    out = fixed(src, family="apex")
    assert "DistributedDataParallel(model, broadcast_buffers=False)" in out
    assert "forward_sync_buffers" not in out
    assert "broadcast_buffers" in inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters
    # the newer keyword is gated, should any fix emit it
    need = requirements_for(["torch.nn.parallel.DistributedDataParallel(forward_sync_buffers)"])
    assert str(need["torch"][0]) == "torch>=2.13"


def test_emitted_keywords_are_gated_by_their_first_torch_release() -> None:
    """Keywords a rewrite emits have first releases too: ``Adam(decoupled_weight_decay=)`` (torch 2.7),
    ``Adam(fused=)`` (1.13), ``F.cross_entropy(label_smoothing=)`` (1.10). Under pins that admit an older torch
    the fix is withheld (a TypeError there), never applied."""
    from porter.framework import RepoFacts
    from porter.testing import settings_for

    unsafe = settings_for("apex", unsafe=True)
    adam = ("from apex.optimizers import FusedAdam\n\n\ndef make(model, args):\n"
            "    return FusedAdam(model.parameters(), lr=1e-3, adam_w_mode=args.adamw)\n")
    assert fixed(adam, family="apex", settings=unsafe, facts=RepoFacts(pins={"torch": ">=2.0"})) == adam
    out = fixed(adam, family="apex", settings=unsafe, facts=RepoFacts(pins={"torch": ">=2.7"}))
    assert "decoupled_weight_decay=args.adamw" in out
    plain = ("from apex.optimizers import FusedAdam\n\n\ndef make(model):\n"
             "    return FusedAdam(model.parameters(), lr=1e-3, adam_w_mode=False)\n")
    # fused= only picks a kernel: under an older torch floor the rewrite goes without it
    old_torch = fixed(plain, family="apex", settings=unsafe, facts=RepoFacts(pins={"torch": ">=1.7"}))
    assert "torch.optim.Adam(" in old_torch and "fused" not in old_torch
    assert "fused=True" in fixed(plain, family="apex", settings=unsafe, facts=RepoFacts(pins={"torch": ">=1.13"}))
    from porter.apis import requirements_for

    assert str(requirements_for(["torch.optim.Adam(fused)"])["torch"][0]) == "torch>=1.13"
    smooth = ("import torch\nfrom apex.contrib import xentropy\n\n\ndef f(logits, target, s):\n"
              "    return xentropy.SoftmaxCrossEntropyLoss.apply(logits, target, s, -100, False)\n")
    assert fixed(smooth, family="apex", facts=RepoFacts(pins={"torch": ">=1.7"})) == smooth
    assert "label_smoothing=s" in fixed(smooth, family="apex", facts=RepoFacts(pins={"torch": ">=1.10"}))


def test_xentropy_without_smoothing_emits_no_label_smoothing() -> None:
    """A literal zero smoothing is torch's default: the keyword (torch >= 1.10) is left out, so the rewrite
    runs on every torch release the pins admit."""
    from porter.framework import RepoFacts

    src = ("import torch\nfrom apex.contrib import xentropy\n\n\ndef f(logits, target, pad, h2f):\n"
           "    return xentropy.SoftmaxCrossEntropyLoss.apply(logits, target, 0.0, pad, False)\n")
    out = fixed(src, family="apex", facts=RepoFacts(pins={"torch": ">=1.7"}))
    assert "torch.nn.functional.cross_entropy(logits, target, ignore_index=pad, reduction=\"none\")" in out


def test_fused_is_left_out_where_the_pins_do_not_guarantee_it() -> None:
    """``fused=True`` only picks a kernel (torch's foreach default is the same algorithm), but it has first
    releases (SGD 2.3, AdamW 2.0, Adagrad 2.12): under pins that admit an older torch the exact rewrite is
    applied without it, instead of being withheld whole."""
    from porter.framework import RepoFacts

    src = ("from apex.optimizers import FusedSGD\n\n\ndef make(groups, args):\n"
           "    return FusedSGD(groups, lr=args.lr, weight_decay=args.wd, momentum=args.m)\n")
    old = fixed(src, family="apex", facts=RepoFacts(pins={"torch": ">=1.7"}))
    assert "torch.optim.SGD(groups, lr=args.lr, weight_decay=args.wd, momentum=args.m)" in old
    assert "fused" not in old
    new = fixed(src, family="apex", facts=RepoFacts(pins={"torch": ">=2.3"}))
    assert "momentum=args.m, fused=True)" in new
    assert "fused=True" in fixed(src, family="apex")  # no pins known: the gate decides, as before
