#!/usr/bin/env python3
"""NVIDIA-GPU side-by-side check of porter's warp-size patch (run by hand on a GPU machine).

Compiles the original and the warp-patched version of each test-kernel file in tests/kernels/
(with tests/gpu/parity_harness.cu) using nvcc, runs both on the same deterministic input, compares
every output element and prints a table. Exit status: 0 when all cases match, 1 on a mismatch,
2 when something could not be built or run. Finishes in well under 3 minutes (two nvcc builds per
kernel file, 5 cases of 8192 threads each).

    python tests/gpu/run_warp_parity.py [--arch sm_80] [--unsafe] [--keep DIR]

Needs: an NVIDIA GPU, nvcc on PATH (or $NVCC), porter importable (pip install -e .).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "kernels"
CASE_FILES = ("warp_hazards.cu",)
N = 128 * 64


def patch(src: str, rel: str, unsafe: bool) -> tuple[str, dict[str, str]]:
    from porter.engine import fix
    from porter.testing import settings_for

    out = fix(rel, src, "cuda", settings_for("warp_size", unsafe=unsafe))
    return out.text, out.new_files


def build(nvcc: str, arch: str, kernel: Path, exe: Path) -> None:
    argv = [nvcc, "-O2", f"-arch={arch}", "-o", str(exe), str(HERE / "parity_harness.cu"), str(kernel)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=150, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed for {kernel}:\n{proc.stderr[-4000:]}")


def run(exe: Path, out: Path) -> dict[int, list[float]]:
    proc = subprocess.run([str(exe), str(out)], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe.name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    data = out.read_bytes()
    res: dict[int, list[float]] = {}
    step = 4 + 4 * N
    for off in range(0, len(data), step):
        (cid,) = struct.unpack_from("<i", data, off)
        res[cid] = list(struct.unpack_from(f"<{N}f", data, off + 4))
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=os.environ.get("PORTER_PARITY_ARCH", "native"),
                    help="nvcc -arch value (default: native)")
    ap.add_argument("--unsafe", action="store_true", help="also apply UNSAFE warp fixes (default: safe only)")
    ap.add_argument("--keep", type=Path, help="keep the build directory here")
    args = ap.parse_args(argv)
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
    if not nvcc:
        print("nvcc not found", file=sys.stderr)
        return 2
    try:
        import porter  # noqa: F401
    except ImportError:  # not installed: use the checkout this script lives in
        sys.path.insert(0, str(HERE.parent.parent))
    work = Path(args.keep or tempfile.mkdtemp(prefix="porter-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows = []
    failed = False
    try:
        for name in CASE_FILES:
            src = (KERNELS / name).read_text()
            text, new_files = patch(src, name, args.unsafe)
            if text == src:
                print(f"{name}: porter changed nothing", file=sys.stderr)
                return 2
            (work / "orig").mkdir(exist_ok=True)
            (work / "patched").mkdir(exist_ok=True)
            (work / "orig" / name).write_text(src)
            (work / "patched" / name).write_text(text)
            for path, body in new_files.items():
                (work / "patched" / path).write_text(body)
            outs = {}
            for variant in ("orig", "patched"):
                exe = work / variant / (Path(name).stem + ".exe")
                build(nvcc, args.arch, work / variant / name, exe)
                outs[variant] = run(exe, work / variant / "out.bin")
            names = re.findall(r'"(\w+)"', src.split("names[] =")[1].split(";")[0])
            for cid in sorted(outs["orig"]):
                a, b = outs["orig"][cid], outs["patched"].get(cid)
                if b is None:
                    rows.append((name, names[cid], N, "missing", float("nan")))
                    failed = True
                    continue
                bad = sum(1 for x, y in zip(a, b, strict=True) if not (x == y or (x != x and y != y)))
                diff = max((abs(x - y) for x, y in zip(a, b, strict=True) if x == x and y == y), default=0.0)
                rows.append((name, names[cid] if cid < len(names) else str(cid), N, bad, diff))
                failed |= bad != 0
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'file':<18} {'case':<12} {'elements':>8} {'mismatches':>10} {'max |diff|':>11}")
    for f, c, n, bad, diff in rows:
        print(f"{f:<18} {c:<12} {n:>8} {bad!s:>10} {diff:>11.3g}")
    print(f"{'FAIL' if failed else 'OK'}: original vs warp-patched kernels on this NVIDIA GPU "
          f"({time.time() - t0:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
