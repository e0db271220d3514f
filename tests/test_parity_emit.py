"""Per-site parity tests emitted into the ported repository (issue: every migration ships its evidence).

The emitted module is run the way a user runs it (``pytest`` in the ported tree, in a subprocess):
it must pass against porter's references and against pure-torch stand-ins of the originals, and it
must fail when the rewritten code is broken afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import REPO, run_porter

from porter.config import from_table
from porter.migrate import plan, render_report

EXAMPLE = REPO / "examples" / "legacy-gpt"
DOUBLES = EXAMPLE / "tests" / "doubles"
EXAMPLE_CONFIG = ("--config", 'target-torch="2.5"', "--config", 'extend-exclude=["tests/"]')
PARITY = "tests/porter_parity/test_porter_parity.py"


def run_parity(tree: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PORTER_PARITY")}
    full.pop("PYTHONPATH", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs", PARITY],
        cwd=tree, capture_output=True, text=True, env=full, timeout=300, check=False,
    )


@pytest.fixture(scope="module")
def ported_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("parity") / "legacy-gpt"
    shutil.copytree(EXAMPLE, tree)
    proc = run_porter("apply", str(tree), *EXAMPLE_CONFIG, "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tree / PARITY).is_file()
    return tree


def fresh_copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "tree"
    shutil.copytree(src, dst)
    return dst


def test_emitted_module_passes_against_references(ported_example: Path) -> None:
    proc = run_parity(ported_example)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout


def test_emitted_module_passes_against_doubles_and_uses_them(ported_example: Path, tmp_path: Path) -> None:
    # LEGACY_GPT_DOUBLES=0: the example's own conftest leaves sys.path alone, PYTHONPATH decides
    env = {"PYTHONPATH": str(DOUBLES), "PORTER_PARITY_USE_INSTALLED": "1", "LEGACY_GPT_DOUBLES": "0"}
    proc = run_parity(ported_example, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout
    # the doubles really are the original side: a double that scales its output breaks the flash site
    tampered = tmp_path / "doubles"
    shutil.copytree(DOUBLES, tampered)
    init = tampered / "flash_attn" / "__init__.py"
    init.write_text(init.read_text() + textwrap.dedent("""
        _orig = flash_attn_func
        def flash_attn_func(*args, **kwargs):
            return _orig(*args, **kwargs) * 1.5
    """))
    proc = run_parity(ported_example, {**env, "PYTHONPATH": str(tampered)})
    assert proc.returncode == 1
    assert "1 failed, 4 passed" in proc.stdout, proc.stdout


@pytest.mark.parametrize(("old", "new", "site"), [
    ("v.transpose(1, -2),\n", "v.transpose(1, -2).flip(1),\n", "model.py:CausalSelfAttention.forward:PRT200:2"),  # a changed operand
    (".transpose(1, 2).contiguous()", ".contiguous()", "model.py:CausalSelfAttention.forward:PRT100:1"),  # a dropped transpose
    ("scale=self.softmax_scale,\n                enable_gqa", "enable_gqa", "model.py:CausalSelfAttention.forward:PRT100:1"),  # lost scale
    ("nn.RMSNorm(config.n_embd, eps=1e-5)", "nn.RMSNorm(config.n_embd)", "model.py:Block.__init__:PRT311:1"),  # default eps
])
def test_broken_rewrite_fails_its_test(ported_example: Path, tmp_path: Path, old: str, new: str, site: str) -> None:
    tree = fresh_copy(ported_example, tmp_path)
    model = tree / "model.py"
    text = model.read_text()
    assert old in text
    model.write_text(text.replace(old, new, 1))
    proc = run_parity(tree)
    assert proc.returncode == 1, proc.stdout
    assert f"FAILED {PARITY}::test_porter_parity[{site}]" in proc.stdout, proc.stdout
    assert "4 passed" in proc.stdout, proc.stdout


def test_site_that_moved_fails_with_its_reason(ported_example: Path, tmp_path: Path) -> None:
    tree = fresh_copy(ported_example, tmp_path)
    model = tree / "model.py"
    model.write_text(model.read_text().replace("class Block(", "class Layer(", 1).replace("Block(config)",
                                                                                          "Layer(config)"))
    proc = run_parity(tree)
    assert proc.returncode == 1
    assert "cannot be found any more" in proc.stdout
    assert proc.stdout.count("FAILED") == 2  # the two RMSNorm sites of Block.__init__


def test_migrate_series_contains_the_parity_patch() -> None:
    settings = from_table({"target-torch": "2.5", "extend-exclude": ["tests/"]})
    p = plan(EXAMPLE, settings, hipify="none", jobs=1)
    names = [patch.name for patch in p.series.nonempty()]
    assert "parity-tests" in names
    patch = next(x for x in p.series.nonempty() if x.name == "parity-tests")
    assert [c.path for c in patch.changes] == [PARITY]
    assert "5 rewritten site(s)" in patch.title
    report = render_report(p)
    assert "## Parity tests" in report and "pytest tests/porter_parity" in report


SYNTHETIC = {
    "train.py": '''
        import torch
        from apex.optimizers import FusedAdam, FusedSGD
        from flash_attn import flash_attn_qkvpacked_func


        def attend(qkv):
            return flash_attn_qkvpacked_func(qkv, 0.0, causal=True)


        def make(model, args):
            opt = FusedAdam(model.parameters(), lr=args.lr, betas=(args.beta1, args.beta2), weight_decay=args.wd)
            sgd = FusedSGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
            return opt, sgd
    ''',
    "requirements.txt": "torch>=2.5\nflash-attn==2.5.6\napex\n",
    "pyproject.toml": "[tool.porter.apex]\nassume-fp32-params = true\n",
}


def test_optimizer_and_packed_attention_sites(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    tree.mkdir()
    for name, text in SYNTHETIC.items():
        (tree / name).write_text(textwrap.dedent(text).lstrip())
    proc = run_porter("apply", str(tree), "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 0, proc.stderr.decode()
    text = (tree / "train.py").read_text()
    assert "FusedAdam" not in text and "flash_attn_qkvpacked_func" not in text, text
    result = run_parity(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout, result.stdout
    # lr written wrong after the migration: the optimizer site's test fails
    (tree / "train.py").write_text(text.replace("lr=args.lr", "lr=args.lr * 2", 1))
    result = run_parity(tree)
    assert "1 failed, 2 passed" in result.stdout, result.stdout


@pytest.mark.parametrize("target", ["../outside", "/tmp/abs"])
def test_emit_parity_stays_inside_the_root(tmp_path: Path, target: str) -> None:
    tree = fresh_copy(EXAMPLE, tmp_path)
    proc = run_porter("apply", str(tree), *EXAMPLE_CONFIG, "--emit-parity", target)
    assert proc.returncode == 2
    assert b"inside the root" in proc.stderr
    assert not (tmp_path / "outside").exists()


def test_emit_parity_refuses_a_symlinked_folder(tmp_path: Path) -> None:
    tree = fresh_copy(EXAMPLE, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tree / "tests" / "porter_parity").symlink_to(elsewhere)
    proc = run_porter("apply", str(tree), *EXAMPLE_CONFIG, "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 2
    assert not any(elsewhere.iterdir())


def test_emit_parity_replaces_an_existing_module(tmp_path: Path) -> None:
    """Sources reverted and ported again: the module left from the first run is replaced, not an error."""
    tree = fresh_copy(EXAMPLE, tmp_path)
    module = tree / PARITY
    module.parent.mkdir(parents=True)
    module.write_text("# an older parity module\n")
    proc = run_porter("apply", str(tree), *EXAMPLE_CONFIG, "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 0, proc.stderr.decode()
    assert "an older parity module" not in module.read_text()
    assert "def test_porter_parity" in module.read_text()


@pytest.mark.parametrize("newline", ["\r", "\r\n"], ids=["cr-only", "crlf"])
def test_sites_in_files_with_other_line_ends(tmp_path: Path, newline: str) -> None:
    """Line numbers count a lone CR as a line end, as Python does (this crashed migrate once)."""
    tree = tmp_path / "repo"
    tree.mkdir()
    lines = ["from apex.normalization import FusedLayerNorm", "", "", "def build(width):",
             "    return FusedLayerNorm(width, eps=1e-6)", ""]
    (tree / "norm.py").write_bytes(newline.join(lines).encode())
    proc = run_porter("apply", str(tree), "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 0, proc.stderr.decode()
    result = run_parity(tree)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr


def test_every_rewritten_site_gets_a_test_even_without_a_model(tmp_path: Path) -> None:
    """A rewrite porter has no parity model for is a skipped test with its reason, never silently absent."""
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "ddp.py").write_text(textwrap.dedent('''
        from apex.parallel import DistributedDataParallel as DDP


        def wrap(model):
            return DDP(model)
    ''').lstrip())
    proc = run_porter("apply", str(tree), "--emit-parity", "tests/porter_parity")
    assert proc.returncode == 0, proc.stderr.decode()
    assert "apex" not in (tree / "ddp.py").read_text()
    result = run_parity(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout and "no parity model for PRT340" in result.stdout, result.stdout
