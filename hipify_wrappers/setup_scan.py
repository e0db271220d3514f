"""Find the sources a ``setup.py`` builds as ``CUDAExtension`` (parsed with ``ast``, never executed).

torch's ``BuildExtension`` hipifies CUDAExtension sources itself on ROCm builds of torch, so
porter must not convert them a second time.
"""

from __future__ import annotations

import ast
import glob
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
            if name == "glob" and node.args:
                pats = self.strings(node.args[0], depth + 1)
                if pats is None:
                    return None
                out = []
                for p in pats:
                    out += sorted(
                        Path(g).relative_to(self.base).as_posix()
                        for g in glob.glob(str(self.base / p), recursive=True)
                    )
                return out
        return None


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
                rel = posixpath.normpath(posixpath.join(here, s.replace("\\", "/"))) if not posixpath.isabs(s) else s
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
