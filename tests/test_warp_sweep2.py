"""Warp pass on shapes found in a second sweep of public CUDA trees (docs/verification/warp-codebases-2.md).

Each fixture is a shape written for this file, not code from those trees:

- a header of the tree defines the warp constant per platform (32 for CUDA, 64 under a project HIP macro)
  and a kernel in another file sizes its warps with it next to a width-less cub ``WarpReduce``: the
  ``WarpReduce<T, 32>`` pin would reduce half of each 64-lane warp on CDNA;
- a shuffle helper takes a 32-bit default mask and calls the ``*_sync`` builtin only under
  ``#if CUDA_VERSION >= 9000``, whose ``#else`` (the legacy shuffle with an explicit width) is what the AMD
  HIP headers compile, because they do not define the CUDA toolkit's version macros;
- a SYCL translation of a CUDA header (it includes the SYCL runtime) still carries an uninstantiated
  CUDA shuffle: neither nvcc nor hipcc compiles that file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.codemods.warp_size.preproc import CUDA, HIP, scan
from porter.config import Settings
from porter.findings import Applicability, Severity
from porter.runner import run
from porter.testing import findings, fixed

PLATFORM_HEADER = """\
#pragma once
#if defined(__HIP_PLATFORM_AMD__)
#define PROJ_ON_HIP 1
#else
#define PROJ_ON_HIP 0
#endif
#define PROJ_WIDE_WAVE (defined(__gfx90a__) || defined(__gfx942__))
#if PROJ_ON_HIP
#if PROJ_WIDE_WAVE
#define PROJ_LANES 64
#else
#define PROJ_LANES 32
#endif
#else
#define PROJ_LANES 32
#endif
"""

ROW_SUM_KERNEL = """\
#include "platform.cuh"
#include <cub/cub.cuh>
template <int BLOCK>
__global__ void row_sums(const float* in, float* out) {
  typedef cub::WarpReduce<float> Reducer;
  __shared__ typename Reducer::TempStorage scratch[BLOCK / PROJ_LANES];
  const int group = threadIdx.x / PROJ_LANES;
  float total = Reducer(scratch[group]).Sum(in[blockIdx.x * BLOCK + threadIdx.x]);
  if (threadIdx.x % PROJ_LANES == 0) out[blockIdx.x * (BLOCK / PROJ_LANES) + group] = total;
}
template <typename T, int N>
__global__ void tile_copy(const T* in, T* out) {
  constexpr int THREADS = N / 4;
  typedef cub::BlockLoad<T, THREADS, 4> Loader;
  (void)sizeof(Loader);
}
__global__ void lane_table(float* out) {
  constexpr int THREADS = PROJ_LANES;
  out[threadIdx.x % THREADS] = 0.f;
}
"""


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _audit(root: Path) -> list:
    res = run(root, [root], Settings(select=("PRT5",)), "audit", jobs=1, use_cache=False)
    return [f for r in res.files for f in r.findings]


def test_header_warp_constant_wide_on_hip_blocks_the_library_width_pin(tmp_path: Path) -> None:
    _tree(tmp_path, {"csrc/platform.cuh": PLATFORM_HEADER, "csrc/row_sums.cu": ROW_SUM_KERNEL})
    got = [f for f in _audit(tmp_path) if f.path == "csrc/row_sums.cu"]
    pins = [f for f in got if f.code == "PRT513"]
    assert len(pins) == 1
    assert pins[0].fix == Applicability.NONE and "PROJ_LANES" in pins[0].message
    # `THREADS` is declared twice with other values: no block size is read from the file-wide table
    assert not [f for f in got if f.code == "PRT525"]


def test_header_warp_constant_of_one_value_keeps_the_pin(tmp_path: Path) -> None:
    same = PLATFORM_HEADER.replace("#define PROJ_LANES 64", "#define PROJ_LANES 32")
    _tree(tmp_path, {"csrc/platform.cuh": same, "csrc/row_sums.cu": ROW_SUM_KERNEL})
    pins = [f for f in _audit(tmp_path) if f.code == "PRT513"]
    assert len(pins) == 1 and pins[0].fix == Applicability.SAFE


SYNC_OR_LEGACY = """\
template <typename T>
__device__ __forceinline__ T swap_lanes(T v, int lane_mask, int width = warpSize, unsigned int mask = 0xffffffff) {
#if CUDA_VERSION >= 9000
  return __shfl_xor_sync(mask, v, lane_mask, width);
#else
  return __shfl_xor(v, lane_mask, width);
#endif
}
template <int W>
__device__ float butterfly(float v) {
  for (int step = W / 2; step > 0; step /= 2) v += swap_lanes(v, step, W);
  return v;
}
"""


def test_toolkit_version_branch_is_cuda_only() -> None:
    sc = scan(SYNC_OR_LEGACY)
    sync_line = next(i for i, line in enumerate(sc.lines) if "__shfl_xor_sync" in line)
    legacy_line = next(i for i, line in enumerate(sc.lines) if "__shfl_xor(" in line)
    assert sc.status[sync_line][HIP] == 0 and sc.status[legacy_line][HIP] != 0
    assert sc.status[sync_line][CUDA] != 0


def test_mask_only_read_under_the_toolkit_version_branch_is_not_reported() -> None:
    got = findings(SYNC_OR_LEGACY, "a.cuh", family="warp_size")
    assert not [f for f in got if f.code in ("PRT501", "PRT508")]
    assert fixed(SYNC_OR_LEGACY, "a.cuh", family="warp_size") == SYNC_OR_LEGACY


def test_mask_that_reaches_a_hip_compiled_sync_call_is_still_reported() -> None:
    both = SYNC_OR_LEGACY.replace("return __shfl_xor(v, lane_mask, width);",
                                  "return __shfl_xor_sync(mask, v, lane_mask, width);")
    codes = [f.code for f in findings(both, "a.cuh", family="warp_size")]
    assert "PRT501" in codes and "PRT508" in codes


SYCL_HEADER = """\
#include <sycl/sycl.hpp>
#include <ATen/ATen.h>
template <typename T>
T gather_lanes(T* x, T val, int lanes = 1) {
  int tid = 0;
  T acc = val;
  if (tid < 32) {
    for (int i = 16; i >= lanes; i >>= 1) acc = acc + __shfl_down_sync(0xffffffff, acc, i);
  }
  return acc;
}
"""


@pytest.mark.parametrize("include", ["<sycl/sycl.hpp>", "<CL/sycl.hpp>"])
def test_sycl_translation_is_not_a_cuda_file(include: str) -> None:
    src = SYCL_HEADER.replace("<sycl/sycl.hpp>", include)
    assert findings(src, "xpu/shim.h", family="warp_size") == []
    assert fixed(src, "xpu/shim.h", family="warp_size") == src


def test_sycl_include_under_a_platform_branch_does_not_hide_the_file() -> None:
    src = SYCL_HEADER.replace("#include <sycl/sycl.hpp>\n", "#ifdef PROJ_BUILD_XPU\n#include <sycl/sycl.hpp>\n#endif\n")
    assert [f.code for f in findings(src, "shim.h", family="warp_size") if f.code == "PRT501"] == ["PRT501"]


TORCH_HELPER_ROWS = """\
#include <ATen/cuda/DeviceUtils.cuh>
template <typename U>
__device__ void row_stats(U& mean, U& var) {
  // one 32-lane row per threadIdx.y: pairwise merge inside the row
  for (int s = 0; s <= 4; ++s) {
    int other = (threadIdx.x + (1 << s)) & 31;
    U m2 = WARP_SHFL(mean, other);
    U v2 = WARP_SHFL(var, other);
    mean = (mean + m2) / 2;
    var = (var + v2) / 2;
  }
  if (blockDim.y == 1) mean = WARP_SHFL(mean, 0);
}
"""


def test_torch_shuffle_helper_without_width_on_a_masked_lane_is_reported() -> None:
    got = [f for f in findings(TORCH_HELPER_ROWS, "ln.cu", family="warp_size") if f.code == "PRT508"]
    assert [(f.line, f.fix) for f in got] == [(7, Applicability.NONE), (8, Applicability.NONE)]
    assert "warpSize" in got[0].message and "32" in got[0].message
    assert fixed(TORCH_HELPER_ROWS, "ln.cu", family="warp_size") == TORCH_HELPER_ROWS


@pytest.mark.parametrize("change", [
    ("WARP_SHFL(mean, other)", "WARP_SHFL(mean, other, 32)"),  # explicit width
    ("#include <ATen/cuda/DeviceUtils.cuh>\n", "#include <ATen/cuda/DeviceUtils.cuh>\n"
     "#define WARP_SHFL(v, l) __shfl_sync(0xffffffffu, v, l, 32)\n"),  # the file's own helper
    ("#include <ATen/cuda/DeviceUtils.cuh>\n", "#include \"my_utils.cuh\"\n"),  # not PyTorch's
])
def test_torch_shuffle_helper_cases_that_are_not_reported(change: tuple[str, str]) -> None:
    src = TORCH_HELPER_ROWS.replace(*change)
    lines = [f.line for f in findings(src, "ln.cu", family="warp_size")
             if f.code == "PRT508" and "PyTorch" in f.message]
    assert 7 not in lines


def test_torch_shuffle_helper_in_a_branch_hip_never_takes_is_not_reported() -> None:
    body = ("    U m2 = WARP_SHFL(mean, other);\n")
    src = TORCH_HELPER_ROWS.replace(body, "    U m2;\n    if (USE_ROCM) {\n      m2 = WARP_SHFL_DOWN(mean, 1);\n"
                                    "    } else {\n      m2 = WARP_SHFL(mean, other);\n    }\n")
    got = [f.line for f in findings(src, "ln.cu", family="warp_size") if f.code == "PRT508"]
    assert got == [13]  # only the unguarded `WARP_SHFL(var, other)`


TILE_KERNEL = """\
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void tile_max(const float* x, float* out) {
  cg::thread_block b = cg::this_thread_block();
  cg::thread_block_tile<32> t = cg::tiled_partition<32>(b);
  __shared__ float part[32];
  int row = threadIdx.x >> 5;
  int lane = threadIdx.x & 31;
  float m = x[threadIdx.x];
  for (int i = 1; i < 32; i <<= 1) m = fmaxf(m, t.shfl_xor(m, i));
  if (lane == 0) part[row] = m;
  b.sync();
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""


def test_tile_of_32_indexed_with_32_lane_arithmetic_is_a_note() -> None:
    got = [f for f in findings(TILE_KERNEL, "t.cu", family="warp_size") if f.code == "PRT513"]
    assert got and all(f.severity == Severity.INFO for f in got)


@pytest.mark.parametrize("change", [("int row = threadIdx.x >> 5;", "int row = t.meta_group_rank();"),
                                    ("int lane = threadIdx.x & 31;", "int lane = threadIdx.x % warpSize;")])
def test_tile_of_32_next_to_another_warp_width_stays_a_warning(change: tuple[str, str]) -> None:
    got = [f for f in findings(TILE_KERNEL.replace(*change), "t.cu", family="warp_size")
           if f.code == "PRT513" and "tiled_partition" in f.message]
    assert got and all(f.severity != Severity.INFO for f in got)  # (None: the rule's own warning)


WAVE_PORT = """\
template <typename T>
__device__ T block_tail_sum(T* x, T v) {
  int t = threadIdx.x;
  if (t < warpSize) {
    v = x[t] + x[t + warpSize];
    for (int i = warpSize / 2; i > 0; i >>= 1) {
#ifdef USE_ROCM
      v = v + __shfl_down(v, i);
#else
      v = v + __shfl_down_sync(0xffffffff, v, i);
#endif
    }
  }
  return v;
}
"""


def test_warpsize_next_to_a_wavefront_wide_hip_branch_is_that_ports_warp() -> None:
    got = findings(WAVE_PORT, "shim.h", family="warp_size")
    assert not [f for f in got if f.code == "PRT521"]
    assert fixed(WAVE_PORT, "shim.h", family="warp_size") == WAVE_PORT


def test_warpsize_next_to_a_32_lane_hip_branch_is_still_reported() -> None:
    src = WAVE_PORT.replace("__shfl_down(v, i);", "__shfl_down(v, i, 32);")
    assert [f for f in findings(src, "shim.h", family="warp_size") if f.code == "PRT521"]


def test_tile_sized_by_a_header_warp_constant_of_32_on_both_platforms_is_a_note(tmp_path: Path) -> None:
    kernel = TILE_KERNEL.replace("#include <cooperative_groups.h>", "#include <cooperative_groups.h>\n#include \"sizes.h\"")
    kernel = kernel.replace("thread_block_tile<32> t = cg::tiled_partition<32>(b)",
                            "thread_block_tile<WARP_SIZE> t = cg::tiled_partition<WARP_SIZE>(b)")
    _tree(tmp_path, {"csrc/sizes.h": "#pragma once\n#define WARP_SIZE 32\n", "csrc/tile.cu": kernel})
    got = [f for f in _audit(tmp_path) if f.code == "PRT513"]
    assert got and all(f.severity == Severity.INFO for f in got)
    # another header of the tree gives the name another value: porter cannot tell which one the file sees
    _tree(tmp_path, {"csrc/other/sizes_hip.h": "#pragma once\n#ifdef USE_ROCM\n#define WARP_SIZE 64\n#else\n"
                                               "#define WARP_SIZE 32\n#endif\n"})
    got = [f for f in _audit(tmp_path) if f.code == "PRT513"]
    assert got and all(f.severity != Severity.INFO for f in got)
