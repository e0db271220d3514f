"""The committed migration of the legacy example (examples/legacy-gpt-migration).

- the committed series is what ``porter migrate`` writes today (byte for byte);
- applied in order with ``git apply`` to a copy of ``examples/legacy-gpt``, it gives a model that
  runs on plain torch (flash-attn, xformers, apex, bitsandbytes and pynvml cannot be imported)
  and matches the original, run on its pure-torch doubles, within fp32 tolerance;
- the warp-patched kernel compiles with nvcc for sm_80, and HIPified compiles with hipcc for gfx90a
  (wave64), while the unpatched kernel HIPified the same way does not (negative control).

The example's kernels are sources of a ``CUDAExtension`` in its setup.py, so porter leaves them to
torch's build-time HIPify (PRT563) and the series has no HIPify patch; the compile test therefore
HIPifies the patched kernels itself with ``porter.hipify_wrappers.run_hipify(engine="torch",
force=True)`` on a scratch copy. ``kernels/fused_softmax.cu`` includes only the CUDA runtime,
its own header and ``porter_warp.h`` (all under ``kernels/``), not torch, so it is compiled as one
translation unit with ``-I kernels``; the torch binding (``fused_softmax_binding.cpp``) is not
compiled here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import git, needs_git

pytestmark = needs_git

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "legacy-gpt"
COMMITTED = ROOT / "examples" / "legacy-gpt-migration"

# The command that produced examples/legacy-gpt-migration (run from the repository root).
MIGRATE_ARGS = ["migrate", "examples/legacy-gpt", "-o", "examples/legacy-gpt-migration",
                "--config", 'target-torch="2.5"', "--config", 'extend-exclude=["tests/"]']
REGENERATE = "porter " + " ".join(shlex.quote(a) for a in MIGRATE_ARGS)

KERNEL = "kernels/fused_softmax.cu"
COMPARED = ["full", "prefill", *[f"decode_{i}" for i in range(4)]]
NVCC = shutil.which("nvcc")
HIPCC = shutil.which("hipcc")

# files a fresh clone does not have (ignored by git) and that must not be copied
JUNK = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", ".ruff_cache", ".pytest_cache", ".benchmarks",
                              ".porter_cache", ".hypothesis", "build", "*.egg-info", "*.so", "*.o")


def committed_patches() -> list[Path]:
    return sorted(COMMITTED.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PORTER_DEBUG"))}
    env["TMPDIR"] = str(tmp)
    return env


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/legacy-gpt (in a new git repo) with the committed series applied in order."""
    patches = committed_patches()
    assert patches, f"{COMMITTED} holds no patch series; regenerate it with: {REGENERATE}"
    repo = tmp_path_factory.mktemp("example") / "legacy-gpt"
    shutil.copytree(EXAMPLE, repo, ignore=JUNK)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "legacy-gpt as committed", cwd=repo)
    for patch in patches:
        proc = subprocess.run(["git", "apply", str(patch)], cwd=repo, capture_output=True, text=True)
        assert proc.returncode == 0, f"{patch.name} does not apply in order: {proc.stderr}"
    return repo


# -- (a) the committed output is what porter writes ---------------------------------------------


def test_committed_migration_is_in_sync(tmp_path: Path) -> None:
    out = tmp_path / "legacy-gpt-migration"
    args = [a if a != "examples/legacy-gpt-migration" else str(out) for a in MIGRATE_ARGS]
    proc = subprocess.run([sys.executable, "-m", "porter", *args], cwd=ROOT, capture_output=True,
                          env=_env(tmp_path), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    fresh = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    committed = {p.name: p.read_bytes() for p in sorted(COMMITTED.iterdir())}
    hint = f"examples/legacy-gpt-migration is stale; regenerate it from the repository root with:\n  {REGENERATE}"
    assert sorted(fresh) == sorted(committed), hint
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale} differ. {hint}"


# -- (b) the migrated model runs on plain torch and matches the original ------------------------


@pytest.fixture(scope="module")
def original_outputs() -> dict[str, Any]:
    """The original example's logits, run on its pure-torch doubles (flash-attn branch)."""
    pytest.importorskip("torch")
    from test_example_repo import run_model_outputs

    return run_model_outputs(EXAMPLE, use_doubles=True)


def _compare(ported: dict[str, Any], original: dict[str, Any], label: str) -> None:
    import torch

    diffs = {key: (ported[key] - original[key]).abs().max().item() for key in COMPARED}
    print(f"{label}: max abs diff per key:", {k: f"{v:.2e}" for k, v in diffs.items()})
    for key in COMPARED:
        assert ported[key].shape == original[key].shape, key
        torch.testing.assert_close(ported[key], original[key], rtol=1e-5, atol=1e-5,
                                   msg=lambda m, k=key: f"{label} {k}: {m}")


def _imports(source: str) -> set[str]:
    return {line.split()[1].split(".")[0] for line in source.splitlines()
            if line.lstrip().startswith(("import ", "from ")) and len(line.split()) > 1}


def test_migrated_model_matches_original_on_plain_torch(migrated: Path, original_outputs: dict[str, Any]) -> None:
    from test_example_repo import run_model_outputs

    model = (migrated / "model.py").read_text(encoding="utf-8")
    assert not {"flash_attn", "apex"} & _imports(model), _imports(model)
    assert "F.scaled_dot_product_attention(" in model
    # blocked imports: a plain-torch run can only succeed on the SDPA branch (the model raises otherwise)
    _compare(run_model_outputs(migrated, use_doubles=False), original_outputs, "flash branch")


def test_migrated_xformers_fallback_matches_original(migrated: Path, original_outputs: dict[str, Any]) -> None:
    from test_example_repo import run_model_outputs

    if "xformers" in _imports((migrated / "model.py").read_text(encoding="utf-8")):
        pytest.skip("the xformers fallback was not rewritten (flagged PRT200), so it cannot run on plain torch")
    # the original's flash and xformers branches agree (tests/test_example_repo.py), so one reference serves both
    _compare(run_model_outputs(migrated, use_doubles=False, use_flash=False), original_outputs, "xformers branch")


def test_migrating_the_migrated_example_is_a_noop(migrated: Path, tmp_path: Path) -> None:
    git("add", "-A", cwd=migrated)
    git("commit", "-q", "-m", "migrated", cwd=migrated)
    out = tmp_path / "again"
    args = [a if a != "examples/legacy-gpt-migration" else str(out) for a in MIGRATE_ARGS]
    args[1] = migrated.name
    proc = subprocess.run([sys.executable, "-m", "porter", *args], cwd=migrated.parent, capture_output=True,
                          env=_env(tmp_path), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    assert "nothing to migrate" in proc.stderr.decode(errors="replace")


def test_migrated_requirements_admit_the_target_torch(migrated: Path) -> None:
    # the ported code needs torch >= 2.5 (SDPA's enable_gqa, torch.nn.RMSNorm): the pin must allow it
    from packaging.requirements import Requirement

    reqs = [Requirement(line.split("#")[0].strip()) for line in
            (migrated / "requirements.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith(("#", "-"))]
    torch_reqs = [r for r in reqs if r.name == "torch"]
    assert torch_reqs, reqs
    assert all(r.specifier.contains("2.5.0") for r in torch_reqs), [str(r) for r in torch_reqs]


# -- (c) the migrated kernels compile -----------------------------------------------------------


def _compile(argv: list[str], cwd: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
                          env={**_env(tmp), **env})


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_patched_kernel_compiles_with_nvcc(migrated: Path, tmp_path: Path) -> None:
    source = (migrated / KERNEL).read_text(encoding="utf-8")
    assert '#include "porter_warp.h"' in source and "__shfl_sync(0xffffffff" not in source
    obj = tmp_path / "fused_softmax.o"
    proc = _compile([str(NVCC), "-arch=sm_80", "-I", "kernels", "-c", KERNEL, "-o", str(obj)], migrated, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert obj.stat().st_size > 0


@pytest.fixture(scope="module")
def hipified(migrated: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Scratch root with the patched kernels (``kernels/``) and the original ones (``orig/kernels/``),
    both HIPified by torch.utils.hipify in one run; returns (root, codes of the patched kernels' findings)."""
    pytest.importorskip("torch")
    from porter.hipify_wrappers import run_hipify

    root = tmp_path_factory.mktemp("hipify")
    shutil.copytree(migrated / "kernels", root / "kernels", ignore=JUNK)
    shutil.copytree(EXAMPLE / "kernels", root / "orig" / "kernels", ignore=JUNK)
    result = run_hipify(root, [KERNEL, f"orig/{KERNEL}"], engine="torch", force=True)
    assert result.engine == "torch", result
    for change in result.changes:
        path = root / change.path
        if change.after is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(change.after)
    codes = sorted(f.code for f in result.findings if f.path.startswith("kernels/"))
    return root, codes


@pytest.mark.skipif(HIPCC is None, reason="hipcc is not installed")
def test_patched_hipified_kernel_compiles_with_hipcc(hipified: tuple[Path, list[str]], tmp_path: Path) -> None:
    root, codes = hipified
    assert not {"PRT560", "PRT561", "PRT562"} & set(codes), codes  # nothing left unconverted
    source = root / "kernels" / "fused_softmax.hip"
    assert source.is_file(), sorted(p.name for p in (root / "kernels").iterdir())
    text = source.read_text(encoding="utf-8")
    assert "hip/hip_runtime.h" in text and "cuda_runtime" not in text and "torch/" not in text
    obj = tmp_path / "fused_softmax-hip.o"
    proc = _compile([str(HIPCC), "--offload-arch=gfx90a", "-I", "kernels", "-c", "kernels/fused_softmax.hip",
                     "-o", str(obj)], root, tmp_path, HIP_PLATFORM="amd")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert b"gfx90a" in obj.read_bytes()  # the offload bundle holds the wave64 code object


@pytest.mark.skipif(HIPCC is None, reason="hipcc is not installed")
def test_unpatched_hipified_kernel_does_not_compile(hipified: tuple[Path, list[str]], tmp_path: Path) -> None:
    # negative control: without the warp-size patch the 32-bit-mask *_sync intrinsics do not build for HIP
    root, _ = hipified
    kernels = root / "orig" / "kernels"
    proc = _compile([str(HIPCC), "--offload-arch=gfx90a", "-I", ".", "-c", "fused_softmax.hip",
                     "-o", str(tmp_path / "orig.o")], kernels, tmp_path, HIP_PLATFORM="amd")
    assert proc.returncode != 0
    assert "_sync" in proc.stderr, proc.stderr[-2000:]
