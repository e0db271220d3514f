"""Issue 17, item 2 and its siblings: no Python child porter starts imports the target.

The target ships ``torch/``, ``porter/`` and ``multiprocessing/`` packages whose ``__init__`` writes
a marker. porter is run from inside the target (as pre-commit and most users do):

- the torch.utils.hipify engine runs in a child interpreter (it must start with ``-I``, an explicit
  ``sys.path`` and a cwd outside the target);
- with enough files and a thread running (the progress spinner), the worker pool starts its
  helper with ``python -c ...`` in the current directory (``forkserver``), which puts the cwd first
  on ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _helpers import LEGACY_PY, clean_env, marker_text, porter  # noqa: E402

pytest.importorskip("torch", reason="the torch.utils.hipify engine needs torch")

KERNEL = "#include <cuda_runtime.h>\nvoid sync_all() { cudaDeviceSynchronize(); }\n"


def _no_engines_path() -> str:
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not (shutil.which("hipify-perl", path=p) or shutil.which("hipify-clang", path=p))]
    return os.pathsep.join(keep)


@pytest.mark.slow
def test_children_never_import_the_target(tmp_path: Path) -> None:
    root = tmp_path / "target"
    marker = tmp_path / "MARKER"
    for package in ("torch", "porter", "multiprocessing", "json", "runpy"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({package!r} + ' ' + __file__ + '\\n')\n")
    for module in ("sitecustomize", "usercustomize"):  # imported at interpreter start-up from sys.path
        (root / f"{module}.py").write_text(f"open({str(marker)!r}, 'a').write({module!r} + '\\n')\n")
    (root / "csrc").mkdir()
    (root / "csrc" / "k.cu").write_text(KERNEL)
    for i in range(40):  # past the serial threshold: a worker pool starts
        (root / "pkg" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (root / "pkg" / f"m{i}.py").write_text(LEGACY_PY)
    env = clean_env(PATH=_no_engines_path())
    proc = porter("migrate", "--dry-run", "--hipify", "torch", "-j", "2", ".", cwd=root, env=env, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert not marker.exists(), marker_text(marker)
    # the engine did run (on the real torch): the CUDA source is converted in the diff
    assert "hipDeviceSynchronize" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.slow
def test_worker_pool_helper_never_imports_the_target(tmp_path: Path) -> None:
    """Sibling of item 2: multiprocessing's forkserver/spawn helper starts as ``python -c`` in the cwd."""
    root = tmp_path / "target"
    marker = tmp_path / "MARKER"
    (root / "multiprocessing").mkdir(parents=True)
    (root / "multiprocessing" / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\nraise ImportError('shadowed')\n")
    for i in range(40):
        (root / "pkg" / f"m{i}.py").parent.mkdir(exist_ok=True)
        (root / "pkg" / f"m{i}.py").write_text(LEGACY_PY)
    proc = porter("migrate", "--dry-run", "--hipify", "none", "-j", "2", ".", cwd=root, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert not marker.exists(), marker_text(marker)
