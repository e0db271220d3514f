"""Adapters around HIPify engines (installed as ``porter.hipify_wrappers``).

``run_hipify(root, files)`` converts CUDA API names to HIP with the chosen engine on a scratch
copy and returns the changes (for the lead's patch series, after the warp-size patch) and the
findings (PRT560-PRT566). ``engine="auto"`` picks hipify-perl, then hipify-clang when found on
PATH, else ``torch.utils.hipify``.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
from pathlib import Path

from . import clang, perl, torch_hipify
from .base import HipifyResult
from .build_refs import build_references
from .setup_scan import scan_setup

__all__ = ["HipifyResult", "run_hipify", "included_headers"]

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
ENGINES = ("auto", "hipify-perl", "perl", "hipify-clang", "clang", "torch")


def _contained(root: Path, rel: str) -> bool:
    """``rel`` names a regular file inside ``root`` (no absolute path, no ``..`` out, no symlink out)."""
    if not rel or posixpath.isabs(rel) or rel == ".." or rel.startswith("../"):
        return False
    root_real = os.path.realpath(root)
    real = os.path.realpath(os.path.join(root_real, rel))
    return real.startswith(root_real + os.sep) and not os.path.islink(os.path.join(root, rel))


def included_headers(root: Path, files: list[str]) -> list[str]:
    """Files plus the quoted headers they include (transitively) that exist under ``root``."""
    out: list[str] = []
    todo = list(files)
    seen: set[str] = set()
    while todo:
        rel = todo.pop(0)
        if rel in seen:
            continue
        seen.add(rel)
        out.append(rel)
        path = root / rel
        if not _contained(root, rel) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for inc in _INCLUDE.findall(text):
            cand = posixpath.normpath(posixpath.join(posixpath.dirname(rel), inc))
            if _contained(root, cand) and (root / cand).is_file() and posixpath.basename(cand) != "porter_warp.h":
                todo.append(cand)
    return out


_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox"}


def _setup_scripts(root: Path) -> list[str]:
    """Relative paths of every ``setup.py`` under ``root`` (symlinks not followed)."""
    out = []
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        if "setup.py" in filenames:
            rel = os.path.relpath(os.path.join(current, "setup.py"), root)
            out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def run_hipify(root: Path, files: list[str], engine: str = "auto", scratch: Path | None = None, *,
               force: bool = False) -> HipifyResult:
    """HIPify ``files`` (relative to ``root``) with ``engine`` on a scratch copy.

    Sources of ``CUDAExtension`` builds in any ``setup.py`` of the tree, and sources other build code names
    by file name (``cpp_extension.load``/``load_inline``, CMake, Makefiles: see :mod:`.build_refs`), are
    skipped (PRT563): torch hipifies them at build time on ROCm, and renaming them breaks the build file
    that names them. ``force=True`` converts them anyway.
    """
    root = Path(root)
    if engine not in ENGINES:
        raise ValueError(f"unknown HIPify engine {engine!r}; one of {', '.join(ENGINES)}")
    exts, setup_findings = [], []
    for setup_rel in _setup_scripts(root):  # every setup.py, not only the root's
        found_exts, found = scan_setup(root, setup_rel)
        exts += found_exts
        setup_findings += found
    skip: set[str] = set()
    if not force:
        for ext in exts:
            skip.update(ext.sources)
        named, build_findings = build_references(root, [f for f in files if f not in skip])
        skip.update(named)
        setup_findings += build_findings
        skip.update(included_headers(root, sorted(skip)))  # the build hipifies their headers too
    wanted = [f for f in files if f not in skip]
    todo = included_headers(root, wanted)
    todo = [f for f in todo if f not in skip]
    own = scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="porter-hipify-")) if scratch is None else Path(scratch)
    try:
        result = _dispatch(root, todo, engine, scratch)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    result.skipped = sorted(f for f in files if f in skip)
    result.findings = setup_findings + result.findings
    return result


class EngineNotFound(FileNotFoundError):
    """The HIPify engine asked for by name is not installed (porter's CLI exits 2 with the hint)."""

    def __init__(self, engine: str, install_hint: str) -> None:
        super().__init__(f"{engine} was requested (--hipify) but is not on PATH: {install_hint}")
        self.engine = engine
        self.install_hint = install_hint


_INSTALL = {
    "hipify-perl": "install ROCm's HIPIFY (the `hipify-perl` script ships with ROCm, e.g. the `hipify-clang` "
                   "package of AMD's ROCm apt/yum repositories, under /opt/rocm/bin) and put it on PATH, "
                   "or use `--hipify torch` (torch.utils.hipify, needs torch) or `--hipify auto`",
    "hipify-clang": "install ROCm's HIPIFY (`hipify-clang` from AMD's ROCm repositories, or built from "
                    "github.com/ROCm/HIPIFY) and put it on PATH, or use `--hipify torch` or `--hipify auto`",
}


def _dispatch(root: Path, files: list[str], engine: str, scratch: Path) -> HipifyResult:
    if engine in ("auto", "hipify-perl", "perl"):
        tool = perl.detect()
        if tool is not None:
            return perl.run(root, files, scratch, tool)
        if engine != "auto":
            raise EngineNotFound("hipify-perl", _INSTALL["hipify-perl"])
    if engine in ("auto", "hipify-clang", "clang"):
        tool = clang.detect()
        if tool is not None:
            return clang.run(root, files, scratch, tool)
        if engine != "auto":
            raise EngineNotFound("hipify-clang", _INSTALL["hipify-clang"])
    if not files:
        return HipifyResult(torch_hipify.ENGINE, torch_hipify.available() or "unavailable")
    return torch_hipify.run(root, files, scratch)
