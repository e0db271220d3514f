"""Shared pieces of the HIPify adapters: the result type, scratch copies, change sets, findings."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from porter import languages
from porter import proc as _proc
from porter.findings import Finding
from porter.patchset import FileChange

# identifiers that mean "a CUDA API HIPify did not convert"
UNCONVERTED = re.compile(
    r"\b(?:cuda[A-Z]\w*|CUDA_R_\w+|cublas\w*|cublasLt\w*|curand\w*|cusparse\w*|cusolver\w*|cufft\w*|cudnn\w*|"
    r"nvrtc\w*|nvtx\w*|nvcuda::\w+)\b"
)
# names that are fine on ROCm although they look like CUDA (macros HIP keeps, torch helpers)
ALLOWED = re.compile(r"^(?:cudaStream_t)$")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


@dataclass
class HipifyResult:
    engine: str  # "hipify-perl", "hipify-clang", "torch" or "none"
    version: str
    changes: list[FileChange] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files left alone (CUDAExtension builds)


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: str


def run_tool(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run an engine with an argument list (never through a shell), outside the target (porter.proc)."""
    return _proc.run_tool(argv, cwd=cwd, timeout=timeout)


def find_tool(name: str, version_args: Sequence[str] = ("--version",)) -> Tool | None:
    """The executable ``name`` on PATH with its version string, or None."""
    path = _proc.which(name)
    if path is None:
        return None
    try:
        proc = run_tool([path, *version_args], timeout=60)
    except (OSError, subprocess.SubprocessError):
        return Tool(name, path, "unknown")
    text = (proc.stdout or "") + (proc.stderr or "")
    m = re.search(r"(\d+\.\d+(?:\.\d+)?(?:[-.]\w+)?)", text)
    return Tool(name, path, m.group(1) if m else "unknown")


def copy_sources(root: Path, dest: Path, files: Iterable[str]) -> list[str]:
    """Copy the C/C++/CUDA sources of ``root`` (plus ``files``) into ``dest``; return relpaths copied."""
    wanted = set(files)
    copied = []
    for path in sorted(root.rglob("*")):  # rglob does not descend into symlinked folders
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in rel.split("/")[:-1]):
            continue
        if rel in wanted or languages.detect(rel) == languages.CUDA:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            copied.append(rel)
    return copied


def strip_comments_and_strings(text: str) -> str:
    """Blank comments and string literals (keeping offsets and line numbers)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    return _STRING.sub(blank, _COMMENT.sub(blank, text))


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def unconverted_findings(orig_path: str, original: str, converted: str) -> list[Finding]:
    """PRT560 for each use, in the original file, of a CUDA identifier the output still contains."""
    left = {m.group(0) for m in UNCONVERTED.finditer(strip_comments_and_strings(converted))}
    left = {n for n in left if not ALLOWED.match(n)}
    out = []
    if not left:
        return out
    clean = strip_comments_and_strings(original)
    seen = set()
    for m in UNCONVERTED.finditer(clean):
        name = m.group(0)
        if name not in left:
            continue
        line = line_of(clean, m.start())
        if (name, line) in seen:
            continue
        seen.add((name, line))
        col = m.start() - (clean.rfind("\n", 0, m.start()) + 1) + 1
        out.append(Finding(code="PRT560", message=f"`{name}` is not converted by HIPify: port it by hand",
                           path=orig_path, line=line, column=col, end_line=line, end_column=col + len(name)))
    return out


def leftover_findings(orig_path: str, original: str, converted: str) -> list[Finding]:
    """PRT562 (32-bit warp masks kept) and PRT564 (inline PTX kept), located in the original file."""
    from porter.codemods.warp_size.engine import analyse

    out: list[Finding] = []
    try:
        sites = analyse(converted).sites
    except Exception:  # noqa: BLE001 - a parse problem must not stop the HIPify report
        sites = []
    conv_lines = converted.splitlines()
    orig_lines = original.splitlines()
    used: set[int] = set()
    for s in sites:
        if s.code not in ("PRT501", "PRT518"):
            continue
        cline = line_of(converted, s.start)
        content = conv_lines[cline - 1].strip() if cline - 1 < len(conv_lines) else ""
        oline = _find_line(orig_lines, content, cline, used)
        code = "PRT562" if s.code == "PRT501" else "PRT564"
        if code == "PRT564" and "asm" not in content:
            continue
        msg = ("HIPify kept a *_sync warp intrinsic with a 32-bit mask: fails on ROCm >= 6.3; apply the warp_size "
               "patch first" if code == "PRT562" else "inline PTX survives HIPify and does not assemble for AMD GPUs")
        out.append(Finding(code=code, message=msg, path=orig_path, line=oline, column=1, end_line=oline,
                           end_column=1))
    return out


def _find_line(orig_lines: list[str], content: str, near: int, used: set[int]) -> int:
    best = None
    for i, ln in enumerate(orig_lines, start=1):
        if ln.strip() == content and i not in used:
            if best is None or abs(i - near) < abs(best - near):
                best = i
    if best is None:
        best = min(max(near, 1), max(len(orig_lines), 1))
    used.add(best)
    return best


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def record_output(result: HipifyResult, root: Path, rel: str, converted: Path) -> None:
    """Compare an in-place engine's output with the source; record the change and its findings."""
    before = (root / rel).read_bytes()
    after = converted.read_bytes()
    if after == before:
        return
    result.changes.append(FileChange(rel, before, after))
    original = before.decode("utf-8", "surrogateescape")
    text_after = after.decode("utf-8", "surrogateescape")
    result.findings.extend(unconverted_findings(rel, original, text_after))
    result.findings.extend(leftover_findings(rel, original, text_after))
