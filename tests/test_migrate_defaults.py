"""`porter migrate` with default flags on a legacy CUDA repository (issue: migration defaults).

The fixture is the shape the issue describes: torch pinned to ``2.1.2+cu121`` from the cu121
wheel index, flash-attn (GQA, causal), an xformers fallback, apex's fused RMSNorm, a 32-bit
bitsandbytes AdamW and NVML start-up calls. With no flags at all, migrate must

- port against its default target torch (stated in MIGRATION.md) and raise the pin and the
  index to it in the dependencies patch;
- leave a tree that imports with none of the CUDA-only packages installed (a fresh ``-I``
  interpreter whose ``sys.path`` holds only the migrated tree and the environment's
  site-packages, with those packages blocked);
- compute what the original computes, the original running on the pure-torch test doubles of
  ``examples/legacy-gpt/tests/doubles``;
- keep no requirement of a CUDA-only package that the migrated code no longer imports.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_helpers import REPO, git, needs_git, run_porter
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from porter.apis import DEFAULT_TARGET_ROCM, DEFAULT_TARGET_TORCH

pytestmark = needs_git

CUDA_ONLY_MODULES = ("flash_attn", "xformers", "apex", "bitsandbytes", "pynvml")
DOUBLES = REPO / "examples" / "legacy-gpt" / "tests" / "doubles"

FILES = {
    "requirements.txt": """\
        # CUDA 12.1 cluster image
        --extra-index-url https://download.pytorch.org/whl/cu121
        torch==2.1.2+cu121
        flash-attn==2.5.6
        xformers==0.0.23.post1
        apex @ git+https://github.com/NVIDIA/apex.git
        bitsandbytes==0.41.1
        pynvml==11.5.0
        numpy
        """,
    "model.py": """\
        import torch
        import torch.nn as nn
        import xformers.ops as xops
        from apex.normalization import FusedRMSNorm
        from flash_attn import flash_attn_func


        class Block(nn.Module):
            def __init__(self, dim=64, n_head=4, n_kv_head=2):
                super().__init__()
                self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, dim // n_head
                self.norm = FusedRMSNorm(dim, eps=1e-5)
                self.wq = nn.Linear(dim, dim, bias=False)
                self.wkv = nn.Linear(dim, 2 * n_kv_head * self.head_dim, bias=False)
                self.wo = nn.Linear(dim, dim, bias=False)

            def forward(self, x, use_xformers=False):
                B, S, _ = x.shape
                h = self.norm(x)
                q = self.wq(h).view(B, S, self.n_head, self.head_dim)
                k, v = self.wkv(h).view(B, S, 2, self.n_kv_head, self.head_dim).unbind(2)
                if use_xformers:
                    rep = self.n_head // self.n_kv_head
                    k = k.repeat_interleave(rep, dim=2)
                    v = v.repeat_interleave(rep, dim=2)
                    y = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())
                else:
                    y = flash_attn_func(q, k, v, causal=True)
                return x + self.wo(y.reshape(B, S, -1))
        """,
    "optim.py": """\
        import bitsandbytes as bnb


        def build_optimizer(params, lr=1e-3):
            return bnb.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
        """,
    "telemetry.py": """\
        import pynvml


        def start():
            pynvml.nvmlInit()


        def stop():
            pynvml.nvmlShutdown()
        """,
}

# Runs in a fresh `python -I`: argv = tree, output file, extra path, blocked module names
DRIVER = """\
import importlib.abc
import sys

tree, out, extra, blocked = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
blocked = tuple(filter(None, blocked.split(",")))


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not installed on ROCm)")
        return None


sys.meta_path.insert(0, Block())
sys.path[:0] = [tree] + ([extra] if extra else [])
import torch  # noqa: E402

import model  # noqa: E402
import optim  # noqa: E402
import telemetry  # noqa: E402

assert not [m for m in sys.modules if m.split(".")[0] in blocked] or not blocked
torch.manual_seed(0)
block = model.Block()
x = torch.randn(2, 8, 64)
res = {"flash": block(x), "xformers": block(x, use_xformers=True)}
opt = optim.build_optimizer(block.parameters(), lr=1e-2)
for _ in range(3):
    opt.zero_grad()
    block(x).square().mean().backward()
    opt.step()
res["after_steps"] = block(x)
telemetry.start()
telemetry.stop()
res = {k: v.detach() for k, v in res.items()}
res["modules"] = sorted({m.split(".")[0] for m in sys.modules})
torch.save(res, out)
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def _run(tree: Path, tmp: Path, *, extra: Path | None, blocked: tuple[str, ...], tag: str) -> dict:
    import torch

    driver = tmp / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    out = tmp / f"{tag}.pt"
    proc = subprocess.run([sys.executable, "-I", str(driver), str(tree), str(out), str(extra or ""),
                           ",".join(blocked)], cwd=str(tmp), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{tag}: {proc.stderr[-3000:]}"
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def migration(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(original repo, migrated copy, output folder) of one default `porter migrate`."""
    base = tmp_path_factory.mktemp("defaults")
    repo = base / "legacy"
    _write(repo, FILES)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "legacy", cwd=repo)
    out = base / "out"
    proc = run_porter("migrate", "legacy", "-o", str(out), cwd=base, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    migrated = base / "migrated"
    shutil.copytree(repo, migrated)
    for patch in sorted(out.glob("[0-9][0-9][0-9][0-9]-*.patch")):
        applied = subprocess.run(["git", "apply", str(patch)], cwd=migrated, capture_output=True, text=True)
        assert applied.returncode == 0, f"{patch.name}: {applied.stderr}"
    return repo, migrated, out


def _imports(tree: Path) -> set[str]:
    found: set[str] = set()
    for path in tree.rglob("*.py"):
        if ".git" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_default_target_is_stated_and_the_pin_and_index_are_raised(migration: tuple[Path, Path, Path]) -> None:
    _, migrated, out = migration
    report = (out / "MIGRATION.md").read_text(encoding="utf-8")
    assert f"**Target:** torch >= {DEFAULT_TARGET_TORCH} from the ROCm {DEFAULT_TARGET_ROCM} wheel index" in report
    assert "--target-torch" in report
    reqs = (migrated / "requirements.txt").read_text(encoding="utf-8")
    assert f"--extra-index-url https://download.pytorch.org/whl/rocm{DEFAULT_TARGET_ROCM}\n" in reqs
    assert f"torch>={DEFAULT_TARGET_TORCH}\n" in reqs
    assert "cu121" not in reqs
    # the raise and the index move are in the dependencies patch, in one patch
    deps = [p.name for p in out.glob("*-dependencies*.patch")]
    assert len(deps) == 1, deps


def test_requirements_name_no_cuda_only_package_the_code_no_longer_imports(
        migration: tuple[Path, Path, Path]) -> None:
    from porter.codemods.dependencies.catalog import cuda_only_for, import_roots

    _, migrated, _ = migration
    imported = _imports(migrated)
    assert not set(CUDA_ONLY_MODULES) & imported, imported
    for line in (migrated / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        entry = cuda_only_for(canonicalize_name(Requirement(line.split("#")[0]).name))
        assert entry is None or import_roots(entry.modules) & imported, line


def test_migrated_tree_imports_without_cuda_packages_and_matches_the_original(
        migration: tuple[Path, Path, Path], tmp_path: Path) -> None:
    import torch

    repo, migrated, _ = migration
    # the doubles, plus a 32-bit AdamW: bnb's AdamW with 32-bit state is the double's algorithm
    # (it keeps every state in fp32, decoupled decay; here weight_decay=0)
    doubles = tmp_path / "doubles"
    shutil.copytree(DOUBLES, doubles)
    with open(doubles / "bitsandbytes" / "optim" / "__init__.py", "a", encoding="utf-8") as fh:
        fh.write("\nAdamW = AdamW8bit  # 32-bit state; the double keeps fp32 state for every tensor\n")
    original = _run(repo, tmp_path, extra=doubles, blocked=(), tag="original")
    assert {"flash_attn", "xformers", "apex", "bitsandbytes", "pynvml"} <= set(original["modules"])
    ported = _run(migrated, tmp_path, extra=None, blocked=CUDA_ONLY_MODULES, tag="ported")
    assert not set(CUDA_ONLY_MODULES) & set(ported["modules"])
    for key in ("flash", "xformers", "after_steps"):
        torch.testing.assert_close(ported[key], original[key], rtol=1e-5, atol=1e-5, msg=lambda m, k=key: f"{k}: {m}")


def test_apply_without_a_target_keeps_todays_behaviour(tmp_path: Path) -> None:
    """`porter apply` has no default target: the repo's torch 2.1 pin blocks the GQA rewrite."""
    repo = tmp_path / "legacy"
    _write(repo, FILES)
    proc = run_porter("apply", ".", cwd=repo)
    assert proc.returncode in (0, 1), proc.stderr.decode(errors="replace")
    model = (repo / "model.py").read_text(encoding="utf-8")
    assert "flash_attn_func(q, k, v, causal=True)" in model
    assert "torch==2.1.2\n" in (repo / "requirements.txt").read_text(encoding="utf-8")


def test_target_option_and_config_override_the_default() -> None:
    import click

    from porter.config import Settings
    from porter.migrate import migration_target

    s, note = migration_target(Settings(), None)
    assert s.target_torch == DEFAULT_TARGET_TORCH and "porter's default" in note
    s, note = migration_target(Settings(target_torch="2.6"), None)
    assert s.target_torch == "2.6" and "rocm6.2" in note and "configuration" in note
    s, note = migration_target(Settings(target_torch="2.6"), "2.8")
    assert s.target_torch == "2.8" and "rocm6.4" in note and "--target-torch" in note
    with pytest.raises(click.UsageError):
        migration_target(Settings(), "latest")
