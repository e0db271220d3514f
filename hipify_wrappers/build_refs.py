"""Sources that build code names by file name, outside setup.py's ``CUDAExtension``.

HIPify renames CUDA sources (``k_cuda.cu`` -> ``k_hip.hip`` with ``torch.utils.hipify``) and
rewrites them. A source named by

- ``torch.utils.cpp_extension.load(name=..., sources=[...])`` / ``load_inline`` / a
  ``CUDAExtension`` outside setup.py: torch hipifies JIT and extension sources itself at build
  time on ROCm, so converting them in the repository as well breaks the build (the file it names
  is gone) or converts twice;
- a ``CMakeLists.txt``, ``*.cmake``, ``Makefile`` or ``*.mk``: the build file names the old file;

is left to the build and reported (PRT563) at the line that names it. Nothing is executed: Python
is read with ``ast``, build files as text. A name is matched by its file name (``srcpath /
"k_cuda.cu"``, ``os.path.join(d, "k_cuda.cu")`` and ``"csrc/k_cuda.cu"`` all name ``k_cuda.cu``);
a wildcard (``glob("*.cu")``, ``file(GLOB ... *.cu)``, ``$(wildcard *.cu)``) matches every
file name it covers. Matching by file name may keep a same-named unrelated file out of HIPify:
that errs on the side of a build that still works.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable
from pathlib import Path

from porter.findings import Finding

_CALLS = {"load", "load_inline", "CUDAExtension", "CppExtension"}
_BUILD_FILES = {"cmakelists.txt", "makefile", "gnumakefile"}
_BUILD_EXT = {".cmake", ".mk"}
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox"}
_EXTS = "cu|cuh|hip|cpp|cc|cxx|c|h|hpp|hh|hxx|inl"
_BUILD_NAME = re.compile(r"[\w.*?\[\]/${}()@+-]*\.(?:" + _EXTS + r")\b", re.I)
_SRC_NAME = re.compile(r"\.(?:" + _EXTS + r")$", re.I)
_MAX_BYTES = 2 * 1024 * 1024


def _walk(root: Path) -> Iterable[str]:
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            full = os.path.join(current, name)
            if os.path.islink(full):
                continue
            yield os.path.relpath(full, root).replace(os.sep, "/")


def _read(root: Path, rel: str) -> str | None:
    path = root / rel
    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _callee(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _python_names(text: str) -> list[tuple[int, str, str]]:
    """(line, call name, file-name pattern) of every source a build call names in a Python file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    assigns: dict[str, list[ast.expr]] = {}
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    assigns.setdefault(target.id, []).append(stmt.value)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _callee(node.func) not in _CALLS:
            continue
        name = _callee(node.func)
        exprs: list[ast.expr] = list(node.args) + [kw.value for kw in node.keywords if kw.arg != "name"]
        seen_names: set[str] = set()
        todo = list(exprs)
        while todo:
            expr = todo.pop()
            for sub in ast.walk(expr):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    base = posixpath.basename(sub.value.replace("\\", "/").strip())
                    if _SRC_NAME.search(base):
                        out.append((node.lineno, name, base))
                elif isinstance(sub, ast.Name) and sub.id in assigns and sub.id not in seen_names:
                    seen_names.add(sub.id)
                    todo.extend(assigns[sub.id])
    return out


def _build_file_names(text: str) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        for m in _BUILD_NAME.finditer(code):
            base = posixpath.basename(m.group(0))
            if base and not base.startswith(("$", "(")):
                out.append((number, base))
    return out


def build_references(root: Path, files: Iterable[str]) -> tuple[set[str], list[Finding]]:
    """The ``files`` (root-relative) that build code names, and one PRT563 per naming site."""
    by_name: dict[str, list[str]] = {}
    for rel in files:
        by_name.setdefault(posixpath.basename(rel), []).append(rel)
    if not by_name:
        return set(), []
    referenced: set[str] = set()
    findings: list[Finding] = []

    def hit(pattern: str) -> list[str]:
        if any(c in pattern for c in "*?["):
            return sorted(r for name, rels in by_name.items() if fnmatch.fnmatchcase(name, pattern) for r in rels)
        return sorted(by_name.get(pattern, []))

    for rel in _walk(root):
        base = posixpath.basename(rel).lower()
        is_python = base.endswith(".py")
        is_build = base in _BUILD_FILES or posixpath.splitext(base)[1] in _BUILD_EXT
        if not (is_python or is_build):
            continue
        text = _read(root, rel)
        if text is None:
            continue
        if is_python:
            if posixpath.basename(rel) == "setup.py" or ("cpp_extension" not in text and "Extension(" not in text):
                continue  # setup.py's CUDAExtension sources are resolved by setup_scan
            sites = [(line, f"`{call}`", pattern) for line, call, pattern in _python_names(text)]
        else:
            sites = [(line, posixpath.basename(rel), pattern) for line, pattern in _build_file_names(text)]
        for line, what, pattern in sites:
            named = [r for r in hit(pattern) if r != rel]
            if not named:
                continue
            referenced.update(named)
            shown = ", ".join(f"`{r}`" for r in named[:4]) + (", …" if len(named) > 4 else "")
            findings.append(Finding(
                code="PRT563", path=rel, line=line, column=1, end_line=line, end_column=1,
                message=f"{what} names {shown} by file name: HIPify would rename or rewrite what this build "
                "expects, so porter leaves it to the build (torch hipifies extension and JIT sources itself "
                "on ROCm); the warp-size patch still applies to it",
            ))
    return referenced, findings
