"""Find the sources a ``setup.py`` builds as ``CUDAExtension`` (parsed with ``ast``, never executed).

torch's ``BuildExtension`` hipifies CUDAExtension sources itself on ROCm builds of torch, so
porter must not convert them a second time.
"""

from __future__ import annotations

import ast
import fnmatch
import glob
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from porter.findings import Finding

_EXT_NAMES = {"CUDAExtension"}


@dataclass
class ExtensionSources:
    setup_path: str  # relative to the root
    line: int
    column: int
    name: str
    sources: list[str] = field(default_factory=list)  # relative to the root, '/'-separated
    resolved: bool = True


def _callee_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Resolver:
    def __init__(self, tree: ast.Module, base: Path, root: Path) -> None:
        self.base = base
        self.root = root
        self.assigns: dict[str, ast.expr] = {}
        for stmt in ast.walk(tree):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                self.assigns.setdefault(stmt.targets[0].id, stmt.value)

    def strings(self, node: ast.expr, depth: int = 0) -> list[str] | None:
        """The list of path strings ``node`` evaluates to, or None when not static."""
        if depth > 6:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.List, ast.Tuple)):
            out: list[str] = []
            for elt in node.elts:
                got = self.strings(elt, depth + 1)
                if got is None:
                    return None
                out += got
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.strings(node.left, depth + 1), self.strings(node.right, depth + 1)
            if a is None or b is None:
                return None
            if isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant):
                return [a[0] + b[0]]
            return a + b
        if isinstance(node, ast.Name) and node.id in self.assigns:
            return self.strings(self.assigns[node.id], depth + 1)
        if isinstance(node, ast.Call):
            name = _callee_name(node.func)
            if name == "join" and all(isinstance(a, (ast.Constant, ast.Name)) for a in node.args):
                parts = []
                for a in node.args:
                    got = self.strings(a, depth + 1)
                    if got is None or len(got) != 1:
                        return None
                    parts += got
                return [posixpath.join(*parts)]
            if name in ("glob", "iglob") and node.args:
                pats = self.strings(node.args[0], depth + 1)
                if pats is None:
                    return None
                recursive = any(kw.arg == "recursive" and isinstance(kw.value, ast.Constant) and kw.value.value is True
                                for kw in node.keywords)
                out = []
                base_rel = self.base.relative_to(self.root).as_posix() if self.base != self.root else ""
                for p in pats:
                    got = glob_in_root(self.root, base_rel, p, recursive=recursive)
                    if got is None:
                        return None  # the pattern leaves the root: porter does not look there
                    out += [posixpath.relpath(g, base_rel) if base_rel else g for g in got]
                return out
        return None


_MAX_GLOB_ENTRIES = 200_000


def _match(pattern: list[str], parts: list[str], recursive: bool) -> bool:
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**" and recursive:
        return any(_match(pattern[1:], parts[k:], recursive) for k in range(len(parts) + 1)
                   if not any(p.startswith(".") for p in parts[:k]))
    if not parts:
        return False
    if parts[0].startswith(".") and not head.startswith("."):
        return False  # like glob: wildcards do not match hidden names
    return fnmatch.fnmatchcase(parts[0], head) and _match(pattern[1:], parts[1:], recursive)


def glob_in_root(root: Path, base_rel: str, pattern: str, *, recursive: bool = False) -> list[str] | None:
    """Root-relative files matching a setup.py glob ``pattern`` (relative to ``base_rel``).

    Unlike ``glob.glob``, this never looks outside ``root``: an absolute pattern, ``~`` or one whose
    ``..`` climbs out of the root gives None; the walk follows no symlink and stops after a bounded
    number of entries (None too). Only regular files match.
    """
    pattern = pattern.replace("\\", "/")
    if not pattern or posixpath.isabs(pattern) or pattern.startswith("~"):
        return None
    full = posixpath.normpath(posixpath.join(base_rel, pattern))
    if full == ".." or full.startswith("../") or posixpath.isabs(full):
        return None
    parts = [] if full == "." else full.split("/")
    literal = 0
    while literal < len(parts) and not glob.has_magic(parts[literal]):
        literal += 1
    root_real = os.path.realpath(root)
    start = os.path.join(root_real, *parts[:literal])
    start_real = os.path.realpath(start)
    if start_real != root_real and not start_real.startswith(root_real + os.sep):
        return None
    if literal == len(parts):
        ok = os.path.isfile(start) and not os.path.islink(start)
        return [full] if ok else []
    rest = parts[literal:]
    prefix = "/".join(parts[:literal])
    out: list[str] = []
    seen = 0
    for current, dirnames, filenames in os.walk(start, followlinks=False):
        seen += len(dirnames) + len(filenames)
        if seen > _MAX_GLOB_ENTRIES:
            return None
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(current, d)))
        rel_dir = os.path.relpath(current, start).replace(os.sep, "/")
        sub = [] if rel_dir == "." else rel_dir.split("/")
        if len(sub) >= len(rest) - 1 and not ("**" in rest and recursive):
            dirnames[:] = []
        for name in sorted(filenames):
            path = os.path.join(current, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if _match(rest, [*sub, name], recursive):
                out.append("/".join([*([prefix] if prefix else []), *sub, name]))
    return sorted(out)


def scan_setup(root: Path, setup_rel: str = "setup.py") -> tuple[list[ExtensionSources], list[Finding]]:
    """CUDAExtension sources of ``root/setup_rel`` and the PRT563/PRT566 findings that explain the skip."""
    path = root / setup_rel
    if not path.is_file():
        return [], []
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=setup_rel)
    except (SyntaxError, ValueError):
        return [], []
    base = path.parent
    here = posixpath.dirname(setup_rel)
    res = _Resolver(tree, base, root)
    exts: list[ExtensionSources] = []
    findings: list[Finding] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _callee_name(node.func) not in _EXT_NAMES:
            continue
        src_node = None
        name = ""
        for kw in node.keywords:
            if kw.arg == "sources":
                src_node = kw.value
            elif kw.arg == "name" and isinstance(kw.value, ast.Constant):
                name = str(kw.value.value)
        if src_node is None and len(node.args) >= 2:
            src_node = node.args[1]
        if not name and node.args and isinstance(node.args[0], ast.Constant):
            name = str(node.args[0].value)
        got = res.strings(src_node) if src_node is not None else None
        ext = ExtensionSources(setup_rel, node.lineno, node.col_offset + 1, name, [], got is not None)
        if got is not None:
            for s in got:
                s = s.replace("\\", "/")
                rel = posixpath.normpath(posixpath.join(here, s))
                if posixpath.isabs(s) or rel == ".." or rel.startswith("../"):
                    continue  # outside the root: not a file porter would convert anyway
                ext.sources.append(rel)
        exts.append(ext)
        if ext.resolved:
            findings.append(Finding(
                code="PRT563", path=setup_rel, line=node.lineno, column=node.col_offset + 1,
                end_line=getattr(node, "end_lineno", node.lineno) or node.lineno,
                end_column=(getattr(node, "end_col_offset", node.col_offset) or node.col_offset) + 1,
                message=f"CUDAExtension {name or '(unnamed)'}: torch hipifies its {len(ext.sources)} source(s) at "
                "build time on ROCm, so porter leaves them (and the headers they include) to the build; force "
                "the conversion to override. The warp-size patch still applies to them.",
            ))
        else:
            findings.append(Finding(
                code="PRT566", path=setup_rel, line=node.lineno, column=node.col_offset + 1,
                end_line=node.lineno, end_column=node.col_offset + 1,
                message=f"CUDAExtension {name or '(unnamed)'}: sources are computed; porter cannot tell which files "
                "the build hipifies and converts them all",
            ))
    return exts, findings
