"""Compiler verification of the warp-size patch (the warp_size family, PRT501-PRT520) on tests/kernels/.

(a) the original kernels compile with ``nvcc -arch=sm_80 -c``; (b) the warp-patched kernels still
compile with nvcc; (c) the patched-then-HIPified kernels (torch.utils.hipify) compile with
``HIP_PLATFORM=amd hipcc`` for gfx90a (wave64) and gfx1030 (wave32), and against a stub of the
ROCm >= 6.3 64-bit-mask ``*_sync`` builtins (the header's sync path). Also: unpatched-but-HIPified
code fails exactly where porter's report says (32-bit masks), torch hipify alone leaves those
hazards in place, and PTX (H18) is flagged, left alone, and rejected by the AMD toolchain.

Each compile is done once per module (about ten compiles in all); skipped without nvcc/hipcc.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from porter.codemods.warp_size.analysis import header_text
from porter.config import Settings
from porter.engine import fix
from porter.hipify_wrappers import run_hipify
from porter.testing import findings, settings_for

pytestmark = pytest.mark.slow

KERNELS = Path(__file__).parent / "kernels"
STUB = KERNELS / "hip63_sync_stub.h"
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
HIPCC = shutil.which("hipcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not installed")
needs_hipcc = pytest.mark.skipif(HIPCC is None, reason="hipcc not installed")


def _nvcc(src: Path, tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([NVCC, "-arch=sm_80", "-c", str(src), "-o", str(tmp / (src.stem + ".o"))],
                          capture_output=True, text=True, timeout=300, check=False)


def _hipcc(src: Path, tmp: Path, *extra: str, archs: tuple[str, ...] = ("gfx90a",)) -> subprocess.CompletedProcess:
    env = dict(os.environ, HIP_PLATFORM="amd", TMPDIR=str(tmp))
    argv = [HIPCC, *[f"--offload-arch={a}" for a in archs], "-ferror-limit=0", *extra, "-c", str(src),
            "-o", str(tmp / (src.stem + "-hip.o"))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)


def _patch(text: str, rel: str) -> tuple[str, dict[str, str]]:
    out = fix(rel, text, "cuda", settings_for("warp_size", unsafe=True))
    return out.text, out.new_files


def _hipify(root: Path, rel: str) -> Path:
    """torch.utils.hipify on root (in a subprocess); apply its changes; return the HIP source path."""
    res = run_hipify(root, [rel], engine="torch")
    assert res.engine == "torch"
    target = None
    for c in res.changes:
        p = root / c.path
        if c.after is None:
            p.unlink()
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(c.after)
            if p.suffix == ".hip":
                target = p
    assert target is not None, [c.path for c in res.changes]
    return target


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warpcc")


@pytest.fixture(scope="module")
def patched(work: Path) -> dict:
    src = (KERNELS / "warp_hazards.cu").read_text()
    text, new_files = _patch(src, "csrc/warp_hazards.cu")
    root = work / "patched"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "warp_hazards.cu").write_text(text)
    for path, body in new_files.items():
        (root / path).write_text(body)
    return {"orig": src, "text": text, "root": root, "new_files": new_files}


def test_patch_covers_every_hazard_class_in_the_kernels(patched: dict) -> None:
    got = {f.code for f in findings(patched["orig"], "warp_hazards.cu", family="warp_size")}
    want = {f"PRT5{n:02d}" for n in range(1, 20) if n != 18}  # H18 lives in ptx_warp.cu, H20 is Python
    assert want <= got, sorted(want - got)
    assert set(patched["new_files"]) == {"csrc/porter_warp.h"}
    assert '#include "porter_warp.h"' in patched["text"]
    assert not re.search(r"\b(?:__shfl\w*_sync\(|__ballot_sync|__any_sync|__all_sync|__activemask|__syncwarp)",
                         re.sub(r"//[^\n]*", "", patched["text"].split("#define SHFL_XOR")[1]))


@needs_nvcc
def test_nvcc_compiles_original_and_patched(work: Path, patched: dict) -> None:
    orig = _nvcc(KERNELS / "warp_hazards.cu", work)
    assert orig.returncode == 0, orig.stderr[-3000:]
    new = _nvcc(patched["root"] / "csrc" / "warp_hazards.cu", work)
    assert new.returncode == 0, new.stderr[-3000:]


@pytest.fixture(scope="module")
def hipified(work: Path, patched: dict) -> Path:
    root = work / "patched-hip"
    shutil.copytree(patched["root"], root)
    return _hipify(root, "csrc/warp_hazards.cu")


@needs_hipcc
def test_hipcc_compiles_patched_then_hipified_wave64_and_wave32(work: Path, hipified: Path) -> None:
    text = hipified.read_text()
    assert "porter_shfl_xor(" in text and '#include "porter_warp.h"' in text  # HIPify left porter names alone
    res = _hipcc(hipified, work, archs=("gfx90a", "gfx1030"))
    assert res.returncode == 0, res.stderr[-3000:]


@needs_hipcc
def test_hipcc_compiles_patched_against_rocm63_sync_builtins(work: Path, hipified: Path) -> None:
    res = _hipcc(hipified, work, "-DPORTER_HIP_SYNC_BUILTINS=1", "-include", str(STUB))
    assert res.returncode == 0, res.stderr[-3000:]


@needs_hipcc
def test_unpatched_hipified_fails_where_porter_predicts(work: Path) -> None:
    src = (KERNELS / "warp_hazards.cu").read_text()
    root = work / "unpatched"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "warp_hazards.cu").write_text(src)
    res_h = run_hipify(root, ["csrc/warp_hazards.cu"], engine="torch")
    # torch hipify alone leaves every 32-bit-mask hazard in place (PRT562 on the original lines)
    left = {f.line for f in res_h.findings if f.code == "PRT562"}
    flagged = {f.line for f in findings(src, "warp_hazards.cu", family="warp_size") if f.code == "PRT501"}
    assert left == flagged
    hip = _hipify(root, "csrc/warp_hazards.cu")
    htext = hip.read_text()
    assert "__shfl_xor_sync(0xffffffff, v, 16)" in htext and "__ballot_sync(0xffffffff" in htext
    res = _hipcc(hip, work, "-include", str(STUB))
    assert res.returncode != 0
    hlines = htext.splitlines()
    bad = set()
    for m in re.finditer(rf"{re.escape(hip.name)}:(\d+):\d+: (?:error|note: in instantiation)", res.stderr):
        bad.add(hlines[int(m.group(1)) - 1].strip())
    porter = findings(src, "warp_hazards.cu", family="warp_size")
    slines = src.splitlines()
    hits = [f for f in porter if f.code in ("PRT501", "PRT508", "PRT509", "PRT516")]
    predicted = {slines[f.line - 1].strip() for f in hits}
    # a flagged macro body or wrapper signature (H1's default-mask parameter) is predicted at its uses
    macros = {m.group(1) for f in hits for m in [re.match(r"\s*#define\s+(\w+)\(", slines[f.line - 1])] if m}
    macros |= {m.group(1) for f in hits for m in [re.search(r"__device__.*?\b(\w+)\(", slines[f.line - 1])] if m}
    predicted |= {ln.strip() for ln in slines if any(re.search(rf"\b{m}\(", ln) for m in macros)}
    # every line the compiler rejects is one porter flagged as a mask/vote/syncwarp hazard ...
    assert bad and bad <= predicted, sorted(bad - predicted)
    # ... and every 32-bit full-mask call porter flagged outside macro bodies is rejected
    calls = {slines[f.line - 1].strip() for f in porter if f.code == "PRT501"
             and not re.search(r"#define|mask = 0xffffffff", slines[f.line - 1])}
    assert calls <= bad, sorted(calls - bad)


@needs_nvcc
@needs_hipcc
def test_ptx_is_flagged_left_alone_and_rejected_by_hip(work: Path) -> None:
    src = (KERNELS / "ptx_warp.cu").read_text()
    assert _nvcc(KERNELS / "ptx_warp.cu", work).returncode == 0
    got = findings(src, "ptx_warp.cu", family="warp_size")
    assert [f.code for f in got] == ["PRT518", "PRT518"] and all(not f.edits for f in got)
    text, new_files = _patch(src, "ptx_warp.cu")
    assert text == src and not new_files
    root = work / "ptx"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "ptx_warp.cu").write_text(src)
    res = _hipcc(_hipify(root, "csrc/ptx_warp.cu"), work)
    assert res.returncode != 0 and "laneid" in res.stderr


def test_physical_strategy_falls_back_when_host_reads_warp_size() -> None:
    src = (KERNELS / "warp_hazards.cu").read_text()
    s = Settings(select=settings_for("warp_size").select, options=(("warp_size", (("strategy", "physical"),)),))
    got = findings(src, "warp_hazards.cu", settings=s)
    assert any(f.code == "PRT523" for f in got)


HALF_KERNEL = """\
#include <cuda_fp16.h>
// a half type like at::Half: converts to float and to __half, shuffled through a user overload
struct Half16 {
  unsigned short x;
  __device__ operator float() const { return __half2float(__ushort_as_half(x)); }
  __device__ operator __half() const { return __ushort_as_half(x); }
};
// USER_OVERLOAD
template <typename T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v = v + __shfl_down_sync(0xffffffff, v, o);
  return v;
}
__global__ void k(__half* h, float* f, Half16* q) {
  h[threadIdx.x] = __shfl_xor_sync(0xffffffff, h[threadIdx.x], 1);
  f[threadIdx.x] = warp_sum(f[threadIdx.x]);
  q[threadIdx.x] = __shfl_down_sync(0xffffffff, q[threadIdx.x], 1);
}
"""


USER_OVERLOAD = """\
__device__ Half16 __shfl_down_sync(const unsigned mask, const Half16 var, const unsigned delta) {
  Half16 r;
  r.x = __half_as_ushort(__shfl_down_sync(mask, var.operator __half(), delta));
  return r;
}
"""


def _nvcc_text(text: str, work: Path, stem: str) -> subprocess.CompletedProcess:
    src = work / f"{stem}.cu"
    src.write_text(text)
    return _nvcc(src, work)


@needs_nvcc
@needs_hipcc
def test_patched_half_shuffles_compile_on_both_targets(work: Path) -> None:
    """HIP's shuffles take arithmetic types only, and on CUDA a class type converting to float and
    __half is ambiguous once porter's call bypasses the user's overload: porter's helpers move class
    types as their bits (a shuffle is a data move)."""
    with_overload = HALF_KERNEL.replace("// USER_OVERLOAD\n", USER_OVERLOAD)
    assert _nvcc_text(with_overload, work, "half_orig").returncode == 0
    patched_overload, _ = _patch(with_overload, "half_ov.cu")
    assert "porter_shfl_down(q[threadIdx.x], 1)" in patched_overload
    (work / "porter_warp.h").write_text(header_text())
    res = _nvcc_text(patched_overload, work, "half_ov")  # the CUDA build must not break (it did: ambiguous)
    assert res.returncode == 0, res.stderr[-3000:]
    text, new_files = _patch(HALF_KERNEL, "csrc/half.cu")
    assert "porter_shfl_xor(h[threadIdx.x], 1)" in text and "porter_shfl_down(q[threadIdx.x], 1)" in text
    root = work / "half"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "half.cu").write_text(text)
    for path, body in new_files.items():
        (root / path).write_text(body)
    res = _nvcc(root / "csrc" / "half.cu", work)
    assert res.returncode == 0, res.stderr[-3000:]
    res = _hipcc(_hipify(root, "csrc/half.cu"), work)
    assert res.returncode == 0, res.stderr[-3000:]
