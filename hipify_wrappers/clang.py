"""Adapter for hipify-clang (used when found on PATH).

hipify-clang parses each file with Clang, so it needs the CUDA headers (``--cuda-path``) and the
project's include paths; it writes nothing for a file Clang reports errors on (PRT565). Its
diagnostics (``file:line:col: warning: 'X' is unsupported in 'HIP'.``) become PRT561 findings.
Files keep their names.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from porter.findings import Finding

from .base import HipifyResult, Tool, find_tool, record_output, run_tool

ENGINE = "hipify-clang"
_DIAG = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+):\s*(?P<kind>warning|error):\s*(?P<msg>.*)$")


def detect() -> Tool | None:
    return find_tool(ENGINE, ("--version",))


def parse_diagnostics(stderr: str, src: str, rel: str) -> list[Finding]:
    out = []
    for ln in stderr.splitlines():
        m = _DIAG.match(ln.strip())
        if not m or not (m.group("file") == src or m.group("file").endswith(rel)):
            continue
        line, col = int(m.group("line")), int(m.group("col"))
        code = "PRT565" if m.group("kind") == "error" else "PRT561"
        out.append(Finding(code=code, message=f"{ENGINE}: {m.group('msg').strip()}", path=rel, line=line,
                           column=col, end_line=line, end_column=col))
    return out


def run(root: Path, files: list[str], scratch: Path, tool: Tool, *, include_dirs: Sequence[str] = (),
        cuda_path: str | None = None, timeout: float = 600) -> HipifyResult:
    result = HipifyResult(ENGINE, tool.version)
    cuda_path = cuda_path or os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME")
    for rel in files:
        src = scratch / "src" / rel
        dst = scratch / "out" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, src)
        argv = [tool.path, str(src), "-o", str(dst)]
        if cuda_path:
            argv.append(f"--cuda-path={cuda_path}")
        argv += ["--", f"-I{src.parent}", *[f"-I{root / d}" for d in include_dirs]]
        proc = run_tool(argv, cwd=scratch, timeout=timeout)
        result.findings.extend(parse_diagnostics(proc.stderr or "", str(src), rel))
        if proc.returncode != 0 or not dst.exists():
            if not any(f.code == "PRT565" and f.path == rel for f in result.findings):
                tail = ((proc.stderr or "").strip().splitlines() or ["no output"])[-1]
                result.findings.append(Finding(code="PRT565", message=f"{ENGINE} failed: {tail}", path=rel))
            continue
        record_output(result, root, rel, dst)
    return result
