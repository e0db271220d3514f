"""Adapter for hipify-perl (used when found on PATH).

hipify-perl is a regex renamer with no CUDA dependency. porter runs it per file on a scratch
copy (``hipify-perl -o=<out> <src>``); files keep their names (in-place conversion), and its
``warning: <file>:<line>: ...`` lines on stderr become PRT561 findings.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from porter.findings import Finding

from .base import HipifyResult, Tool, find_tool, record_output, run_tool

ENGINE = "hipify-perl"
_WARN = re.compile(r"warning:\s*(?P<file>[^\s:][^:]*?):#?(?P<line>\d+)(?::\d+)?\s*:?\s*(?P<msg>.*)")


def detect() -> Tool | None:
    return find_tool(ENGINE, ("--version",))


def parse_warnings(stderr: str, rel: str) -> list[Finding]:
    out = []
    for ln in stderr.splitlines():
        m = _WARN.search(ln)
        if not m:
            continue
        line = int(m.group("line"))
        msg = m.group("msg").strip().rstrip(".")
        out.append(Finding(code="PRT561", message=f"{ENGINE}: {msg}", path=rel, line=line, column=1,
                           end_line=line, end_column=1))
    return out


def run(root: Path, files: list[str], scratch: Path, tool: Tool, *, timeout: float = 600) -> HipifyResult:
    result = HipifyResult(ENGINE, tool.version)
    for rel in files:
        src = scratch / "src" / rel
        dst = scratch / "out" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, src)
        proc = run_tool([tool.path, f"-o={dst}", str(src)], cwd=scratch, timeout=timeout)
        result.findings.extend(parse_warnings((proc.stderr or "").replace(str(src), rel), rel))
        if proc.returncode != 0 or not dst.exists():
            tail = ((proc.stderr or "").strip().splitlines() or ["no output"])[-1]
            result.findings.append(Finding(code="PRT565", message=f"{ENGINE} failed: {tail}", path=rel))
            continue
        record_output(result, root, rel, dst)
    return result
