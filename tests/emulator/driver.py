"""Build and run CUDA/HIP kernel sources on the wave_emu.h CPU wavefront emulator (see wave_emu.h).

One *variant* of a kernel source (original, porter-patched, HIPified...) is written into a scratch
folder, launches ``k<<<g, b, s, st>>>(args)`` are rewritten to ``::emu::kernel_call(k, g, b, s, st)(args)``
and ``extern __shared__ T x[];`` to a pointer into the launch's dynamic shared memory, then a harness
``.cpp`` (a host ``main`` that includes the kernel through ``EMU_KERNEL``, fills inputs from a seed and
prints outputs with ``emu::print``) is compiled with ``g++ -include wave_emu.h`` in one of the
:data:`MODES` and run. Builds and runs are cached under ``$TMPDIR/porter-wave-emu`` by content hash.

Command line (for a kernel and a harness of your own)::

    python tests/emulator/driver.py KERNEL.cu HARNESS.cpp [--seed N] [--porter] [--modes cuda32,hip64]

prints the outputs of every mode and whether they agree; ``--porter`` runs porter's warp patch and
HIPify first (original under cuda32, patched-then-HIPified under the HIP modes).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = HERE / "wave_emu.h"
INCLUDE = HERE / "include"
GXX = shutil.which("g++")
CACHE = Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "porter-wave-emu"
RUN_TIMEOUT = 60
CXXFLAGS = ("-std=c++17", "-O1", "-w", "-fno-threadsafe-statics")


@dataclass(frozen=True)
class Mode:
    name: str
    defines: tuple[str, ...]
    hip: bool
    wave: int
    doc: str


MODES = {
    m.name: m
    for m in (
        Mode("cuda32", (), False, 32, "CUDA: 32-lane warps, *_sync with 32-bit masks, default width 32"),
        Mode("hip64", ("EMU_HIP=1", "EMU_WAVE=64"), True, 64,
             "HIP on CDNA (wave64), ROCm >= 6.3: *_sync need 64-bit masks equal to the active lanes"),
        Mode("hip64-legacy", ("EMU_HIP=1", "EMU_WAVE=64", "EMU_HIP_SYNC=0"), True, 64,
             "HIP on CDNA (wave64) without *_sync builtins (ROCm <= 6.1)"),
        Mode("hip64-shim", ("EMU_HIP=1", "EMU_WAVE=64", "EMU_HIP_SYNC=2"), True, 64,
             "HIP on CDNA (wave64) with a mask-dropping *_sync shim: default width 64, masks ignored"),
        Mode("hip32", ("EMU_HIP=1", "EMU_WAVE=32"), True, 32, "HIP on RDNA (wave32), ROCm >= 6.3"),
    )
}


@dataclass
class Outcome:
    """What a build + run gave: kind is ok, compile-error, runtime-error or timeout."""

    kind: str
    outputs: dict[str, list[float]] = field(default_factory=dict)  # ints stay ints
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    def compared(self) -> dict[str, list[float]]:
        """The outputs compared across modes: names starting with ``wave_`` depend on the warp size by design."""
        return {k: v for k, v in self.outputs.items() if not k.startswith("wave_")}

    def same_as(self, other: Outcome, ignore: Iterable[str] = ()) -> bool:
        if not (self.ok and other.ok):
            return False
        skip = tuple(ignore)
        a = {k: v for k, v in self.compared().items() if k.split("@")[0] not in skip}
        b = {k: v for k, v in other.compared().items() if k.split("@")[0] not in skip}
        return a == b

    def differing(self, other: Outcome) -> set[str]:
        """Output names (without the seed) whose values differ between two successful runs."""
        a, b = self.compared(), other.compared()
        return {k.split("@")[0] for k in set(a) | set(b) if a.get(k) != b.get(k)}

    def summary(self) -> str:
        if self.ok:
            return "ok"
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.kind}: {first[:160]}"

    def diff(self, other: Outcome, limit: int = 4) -> str:
        """Where two runs disagree, in words (for assertion messages and the docs table)."""
        if not (self.ok and other.ok):
            return f"{self.summary()} vs {other.summary()}"
        out = []
        mine, theirs = self.compared(), other.compared()
        for name in sorted(set(mine) | set(theirs)):
            a, b = mine.get(name), theirs.get(name)
            if a == b:
                continue
            if a is None or b is None or len(a) != len(b):
                out.append(f"{name}: present/length differs")
                continue
            bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            shown = ", ".join(f"[{i}] {a[i]:g} vs {b[i]:g}" for i in bad[:limit])
            out.append(f"{name}: {len(bad)} of {len(a)} differ ({shown})")
        return "; ".join(out) or "equal"


def available() -> bool:
    return GXX is not None


# -- source preparation ------------------------------------------------------------------------------
_LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:\s*<[^<>;()]*(?:<[^<>;()]*>[^<>;()]*)*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([\w:<>\s\*]+?)\s*(\w+)\s*\[\s*\]\s*"
    r"(?:__align__\s*\(\s*\d+\s*\)\s*)?;")


def emulator_source(text: str) -> str:
    """CUDA launch syntax and dynamic shared memory in a form g++ compiles."""
    text = _LAUNCH.sub(lambda m: f"::emu::kernel_call({m.group(1)}, {m.group(2)})(", text)
    return _EXTERN_SHARED.sub(
        lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>(::emu::dynamic_shared());", text)


def porter_patch(text: str, rel: str, unsafe: bool = False, strategy: str = "logical") -> tuple[str, dict[str, str]]:
    """porter's warp-size patch of one file: (text, new files relative to its folder)."""
    from porter.engine import fix
    from porter.testing import settings_for

    out = fix(rel, text, "cuda", settings_for("warp_size", unsafe=unsafe, warp_size={"strategy": strategy}))
    here = os.path.dirname(rel)
    return out.text, {os.path.relpath(p, here or "."): body for p, body in out.new_files.items()}


def porter_findings(text: str, rel: str, strategy: str = "logical") -> list:
    from porter.testing import findings, settings_for

    return findings(text, rel, settings=settings_for("warp_size", warp_size={"strategy": strategy}))


@dataclass
class Source:
    """A kernel variant: the main file's name and text plus companion files (headers), by relative path."""

    name: str
    text: str
    extra: dict[str, str] = field(default_factory=dict)

    def files(self) -> dict[str, str]:
        return {**self.extra, self.name: self.text}


def hipify(sources: dict[str, Source]) -> dict[str, Source]:
    """torch.utils.hipify (through porter's adapter) on every source at once; same keys, HIP sources."""
    from porter.hipify_wrappers import run_hipify

    root = Path(tempfile.mkdtemp(prefix="wave-emu-hipify-"))
    try:
        rels = []
        for key, src in sources.items():
            for rel, body in src.files().items():
                p = root / key / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(body)
            rels.append(f"{key}/{src.name}")
        res = run_hipify(root, rels, engine="torch")
        for c in res.changes:
            p = root / c.path
            if c.after is None:
                p.unlink(missing_ok=True)
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(c.after)
        out = {}
        for key, src in sources.items():
            base = root / key
            main = base / src.name
            for renamed in (main.with_suffix(".hip"), main.with_name(f"{main.stem}_hip{main.suffix}")):
                if renamed.exists():  # torch hipify: a.cu -> a.hip, a.cuh -> a_hip.cuh
                    main = renamed
                    break
            files = {str(p.relative_to(base)): p.read_text() for p in base.rglob("*") if p.is_file()}
            name = str(main.relative_to(base))
            text = files.pop(name)
            out[key] = Source(name, text, files)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- build and run -----------------------------------------------------------------------------------------
def _emulator_digest() -> str:
    h = hashlib.sha256()
    for p in sorted([HEADER, HERE / "emu_runtime.h", *INCLUDE.rglob("*.h")]):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def build(src: Source, harness: Path | str, mode: Mode | str, defines: Iterable[str] = ()) -> tuple[Path | None, str]:
    """Compile a variant with its harness in a mode: (executable or None, compiler messages)."""
    if GXX is None:
        raise RuntimeError("g++ is not installed")
    mode = MODES[mode] if isinstance(mode, str) else mode
    harness = Path(harness)
    h = hashlib.sha256((_emulator_digest() + repr(CXXFLAGS)).encode())
    for rel, body in sorted(src.files().items()):
        h.update(rel.encode() + b"\0" + body.encode() + b"\0")
    h.update(harness.read_bytes())
    h.update(repr((mode.defines, tuple(defines), src.name)).encode())
    key = h.hexdigest()[:24]
    out = CACHE / key
    exe, err = out / "run", out / "compile-error.txt"
    if exe.exists():
        return exe, ""
    if err.exists():
        return None, err.read_text()
    work = Path(tempfile.mkdtemp(prefix=f"build-{key}-", dir=_cache_root()))
    for rel, body in src.files().items():
        p = work / "src" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(emulator_source(body) if p.suffix in (".cu", ".cuh", ".h", ".hpp", ".hip", ".cpp") else body)
    main = work / "src" / src.name
    hcpp = work / "harness.cpp"
    hcpp.write_text(emulator_source(harness.read_text()))
    argv = [GXX, *CXXFLAGS, f"-I{INCLUDE}", f"-I{main.parent}",
            "-include", str(HEADER), *[f"-D{d}" for d in (*mode.defines, *defines)],
            f'-DEMU_KERNEL="{main}"', str(hcpp), "-o", str(work / "run")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        msg = _first_errors(proc.stderr)
        work_err = work / "compile-error.txt"
        work_err.write_text(msg)
        _publish(work, out)
        return None, msg
    _publish(work, out)
    return out / "run", ""


def _cache_root() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    return CACHE


def _publish(work: Path, out: Path) -> None:
    try:
        os.rename(work, out)
    except OSError:  # a concurrent build won the race
        shutil.rmtree(work, ignore_errors=True)


def _first_errors(stderr: str, limit: int = 6) -> str:
    lines = [ln for ln in stderr.splitlines()
             if " error: " in ln or "error:" in ln[:12] or ln.rstrip().endswith("required from here")]
    return "\n".join(lines[:limit]) or stderr[-2000:]


def run(exe: Path, seed: int = 1, timeout: int = RUN_TIMEOUT) -> Outcome:
    """Run a built variant with an input seed (cached: runs are deterministic)."""
    memo = exe.parent / f"seed-{seed}.out"
    if memo.exists():
        kind, _, rest = memo.read_text().partition("\n")
        return _parse(kind, rest)
    try:
        proc = subprocess.run([str(exe), str(seed)], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Outcome("timeout", message=f"killed after {timeout} s")
    if proc.returncode == 0:
        kind, body = "ok", proc.stdout
    else:
        kind = "runtime-error"
        errs = [ln for ln in proc.stderr.splitlines() if ln.startswith("EMU-ERROR")]
        body = "\n".join(errs) or f"exit status {proc.returncode}: {proc.stderr[-1000:]}"
    tmp = memo.with_name(f"{memo.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(f"{kind}\n{body}")
    os.replace(tmp, memo)
    return _parse(kind, body)


def _parse(kind: str, body: str) -> Outcome:
    if kind != "ok":
        return Outcome(kind, message=body)
    outputs: dict[str, list[float]] = {}
    for line in body.splitlines():
        parts = line.split()
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        outputs[parts[0]] = [_number(x) for x in parts[2:]]
    return Outcome("ok", outputs)


def _number(x: str) -> float | str:
    try:
        return int(x)  # 64-bit masks stay exact
    except ValueError:
        v = float(x)
        return "nan" if v != v else v  # NaN compares equal to NaN here


def build_and_run(src: Source, harness: Path | str, mode: Mode | str, seeds: Iterable[int] = (1,),
                  defines: Iterable[str] = ()) -> Outcome:
    """Build once and run every seed; the outputs of all seeds are merged as ``name@seed``."""
    exe, msg = build(src, harness, mode, defines)
    if exe is None:
        return Outcome("compile-error", message=msg)
    merged: dict[str, list[float]] = {}
    for s in seeds:
        got = run(exe, s)
        if not got.ok:
            return got
        merged.update({f"{k}@{s}": v for k, v in got.outputs.items()})
    return Outcome("ok", merged)


def run_all(jobs: dict[str, tuple], workers: int = 2) -> dict[str, Outcome]:
    """jobs: key -> build_and_run arguments; run on a small thread pool (g++ does the work)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {k: pool.submit(build_and_run, *args) for k, args in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", type=Path)
    ap.add_argument("harness", type=Path)
    ap.add_argument("--seed", type=int, action="append")
    ap.add_argument("--porter", action="store_true", help="patch with porter and HIPify for the HIP modes")
    ap.add_argument("--modes", default="cuda32,hip64,hip64-shim,hip32")
    args = ap.parse_args(argv)
    seeds = args.seed or [1, 2, 3]
    orig = Source(args.kernel.name, args.kernel.read_text())
    results = {}
    hip_src = None
    for name in args.modes.split(","):
        mode = MODES[name]
        src = orig
        if mode.hip and args.porter:
            if hip_src is None:
                text, new = porter_patch(orig.text, orig.name)
                hip_src = hipify({"k": Source(orig.name, text, new)})["k"]
            src = hip_src
        results[name] = build_and_run(src, args.harness, mode, seeds)
    ref = results.get("cuda32")
    for name, got in results.items():
        verdict = "" if ref is None or name == "cuda32" else (" == cuda32" if got.same_as(ref) else
                                                              f" DIFFERS: {got.diff(ref)}")
        print(f"{name:14s} {got.summary()}{verdict}")
    return 0 if ref is None or all(g.same_as(ref) for g in results.values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))
    sys.exit(main())
