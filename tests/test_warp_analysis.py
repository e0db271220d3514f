"""The warp pass analyses what each target compiles, resolves warp constants per target and
rewrites identifiers by scope (issue: preprocessor-, scope- and constant-aware analysis).

Each case is a shape seen in public CUDA code, written here from scratch.
"""

from __future__ import annotations

import pytest

from porter.codemods.warp_size.preproc import CUDA, HIP, mask, scan
from porter.engine import fix
from porter.findings import Applicability, Category, Severity
from porter.testing import findings, fixed, settings_for


def _codes(src: str, path: str = "k.cu") -> list[str]:
    return [f.code for f in findings(src, path, family="warp_size")]


def _actionable(src: str, path: str = "k.cu") -> list[str]:
    return [f.code for f in findings(src, path, family="warp_size") if f.severity != Severity.INFO]


# -- 1. a warp constant that is 64 on AMD never gets a logical-width pin ------------------------------
HIP_WARP_MACRO = """\
#ifdef MY_WITH_HIP
#define WARP_SIZE 64
#else
#define WARP_SIZE 32
#endif
#define FULL_MASK 0xffffffff
template <typename T>
__device__ T warp_sum(T val) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2)
    val += __shfl_down_sync(FULL_MASK, val, offset);
  return val;
}
"""


def test_loop_bound_64_on_hip_blocks_the_logical_pin() -> None:
    got = {f.code: f for f in findings(HIP_WARP_MACRO, "k.cu", family="warp_size")}
    assert set(got) == {"PRT501", "PRT504"}
    assert not got["PRT501"].edits and got["PRT501"].fix == Applicability.NONE
    assert "`WARP_SIZE`, which is 64 under HIP" in got["PRT501"].message
    assert got["PRT504"].severity != Severity.INFO  # not "correct under the logical warp" here
    assert fixed(HIP_WARP_MACRO, "k.cu", family="warp_size", unsafe=True) == HIP_WARP_MACRO


@pytest.mark.parametrize("decl", [
    "#ifdef USE_ROCM\nconstexpr int kWarpSize = 64;\n#else\nconstexpr int kWarpSize = 32;\n#endif\n",
    "#if defined(USE_ROCM)\n#define MY_HIP 1\n#endif\n#ifdef MY_HIP\n#define kWarpSize 64\n#else\n"
    "#define kWarpSize 32\n#endif\n",
    "#define kWarpSize C10_WARP_SIZE\n",
])
def test_per_target_constants_and_c10_warp_size_block_the_pin(decl: str) -> None:
    src = decl + ("__device__ float f(float v) {\n  for (int o = kWarpSize / 2; o > 0; o >>= 1) "
                  "v += __shfl_xor_sync(0xffffffff, v, o);\n  return v;\n}\n")
    got = findings(src, "k.cu", family="warp_size")
    assert sorted(f.code for f in got) == ["PRT501", "PRT504"] and not any(f.edits for f in got)


def test_c10_warp_size_in_device_code_blocks_the_pin() -> None:
    src = ("__device__ float f(float v) {\n  for (int o = C10_WARP_SIZE / 2; o > 0; o >>= 1) "
           "v += __shfl_down_sync(0xffffffff, v, o);\n  return v;\n}\n")
    got = findings(src, "k.cu", family="warp_size")
    assert sorted(f.code for f in got) == ["PRT501", "PRT504"] and not any(f.edits for f in got)


def test_a_constant_32_on_both_targets_is_still_pinned() -> None:
    src = HIP_WARP_MACRO.replace("#ifdef MY_WITH_HIP\n#define WARP_SIZE 64\n#else\n", "").replace(
        "#define WARP_SIZE 32\n#endif\n", "#define WARP_SIZE 32\n")
    assert "#ifdef" not in src
    out = fixed(src, "k.cu", family="warp_size")
    assert "porter_shfl_down(val, offset)" in out


PARTLY_PORTED = """\
#define FULL 0xffffffff
#define SHFL(a, b, c) __shfl_sync((a), (b), (c))
#if !defined(USE_ROCM)
__device__ float warp_sum(unsigned m, float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(m, v, o);
  return v;
}
#endif
"""


def test_leftovers_of_a_hand_port_are_reported_not_rewritten() -> None:
    got = findings(PARTLY_PORTED, "commands.h", family="warp_size")
    assert [(f.code, f.line) for f in got] == [("PRT508", 2)] and not got[0].edits
    assert "already has hand-written HIP/CUDA branches" in got[0].message
    assert fixed(PARTLY_PORTED, "commands.h", family="warp_size") == PARTLY_PORTED
    # a wrong hand port (a mask passed to a maskless shuffle) is not taken as a finished one
    buggy = PARTLY_PORTED.replace("#endif\n", "#else\n#define SHFL_DOWN(v, o) __shfl_down(FULL, v, o)\n#endif\n")
    assert "porter_shfl_sync((a), (b), (c))" in fixed(buggy, "commands.h", family="warp_size")


def test_physical_strategy_still_rewrites_arch_dependent_code() -> None:
    s = settings_for("warp_size", unsafe=True, warp_size={"strategy": "physical"})
    out = fix("k.cu", HIP_WARP_MACRO, "cuda", s).text
    assert "porter_shfl_down(val, offset, PORTER_WARP_SIZE)" in out


def test_legacy_vote_in_a_rocm_branch_is_not_halved() -> None:
    src = ("__device__ bool f(int x) {\n#ifdef USE_ROCM\n  return __any(x);\n#else\n"
           "  return __any_sync(0xffffffff, x);\n#endif\n}\n")
    assert _codes(src) == []
    assert fixed(src, "k.cu", family="warp_size") == src


# -- 2 and 4. warpSize by scope, never by text ------------------------------------------------------
def test_declared_warpsize_in_a_macro_body_is_not_the_builtin() -> None:
    src = ("#define SETUP(dev) int warpSize = getWarpSizeCurrentDevice(); launch(warpSize, prop.warpSize)\n"
           "#define HALF_WARP (warpSize / 2)\n")
    out = fixed(src, "k.cu", family="warp_size")
    assert "int warpSize = getWarpSizeCurrentDevice(); launch(warpSize, prop.warpSize)" in out
    assert "int 32" not in out and "int PORTER_LOGICAL_WARP" not in out
    assert "#define HALF_WARP (PORTER_LOGICAL_WARP / 2)" in out


def test_host_locals_and_parameters_named_warpsize_are_not_reported() -> None:
    src = ("int blocks(int n, int warpSize) { return (n + warpSize - 1) / warpSize; }\n"
           "int threads(int n) { int warpSize = query(); int w = warpSize * 4; return w; }\n"
           "__device__ int lanes(int warpSize) { return threadIdx.x % warpSize; }\n")
    assert _codes(src) == []
    assert fixed(src, "k.cu", family="warp_size") == src


def test_device_builtin_warpsize_is_still_rewritten_next_to_a_shadowing_function() -> None:
    src = ("__device__ int a(int warpSize) { return warpSize; }\n"
           "__device__ int b() { return warpSize; }\n")
    out = fixed(src, "k.cu", family="warp_size")
    assert "int a(int warpSize) { return warpSize; }" in out and "int b() { return PORTER_LOGICAL_WARP; }" in out


# -- 3. unevaluated #if branches ------------------------------------------------------------------------
PORTED = """\
#pragma once
#if defined(USE_ROCM) || defined(__HIP_PLATFORM_AMD__)
#define PROJ_HIP 1
#endif
#ifndef PROJ_HIP
template <typename T>
__device__ inline T shuffle_xor(T val, int offset) { return __shfl_xor_sync(uint32_t(-1), val, offset); }
#define WARP_THREADS 32
#else
template <typename T>
__device__ inline T shuffle_xor(T val, int offset) { return __shfl_xor(val, offset); }
#define WARP_THREADS 64
#endif
template <typename T>
__device__ T block_sum(T v, T* shared) {
  for (int o = WARP_THREADS / 2; o > 0; o /= 2) v += shuffle_xor(v, o);
  int lane = threadIdx.x % WARP_THREADS;
  int wid = threadIdx.x / WARP_THREADS;
  if (lane == 0) shared[wid] = v;
  __syncthreads();
#if defined(__HIPCC__)
  if (__any(v != 0)) v = shared[0];
#else
  if (__any_sync(0xffffffff, v != 0)) v = shared[0];
#endif
  return v;
}
"""


def test_scan_evaluates_both_targets_and_derived_project_macros() -> None:
    sc = scan(PORTED)
    lines = PORTED.splitlines()
    cuda_line = next(i for i, ln in enumerate(lines) if "uint32_t(-1)" in ln)
    hip_line = next(i for i, ln in enumerate(lines) if "__shfl_xor(val" in ln)
    both = next(i for i, ln in enumerate(lines) if "int lane" in ln)
    assert sc.status[cuda_line] == {CUDA: 1, HIP: 0}
    assert sc.status[hip_line] == {CUDA: 0, HIP: 1}
    assert sc.status[both] == {CUDA: 1, HIP: 1}
    assert sc.view(HIP)["WARP_THREADS"] == "64" and sc.view(CUDA)["WARP_THREADS"] == "32"
    masked, _ = mask(PORTED)
    assert len(masked) == len(PORTED) and "__shfl_xor" not in masked and "int lane" in masked


def test_already_ported_tree_is_clean_and_its_hip_code_unchanged() -> None:
    assert _actionable(PORTED, "common.cuh") == []
    assert fixed(PORTED, "common.cuh", family="warp_size", unsafe=True) == PORTED


def test_unknown_conditions_keep_both_branches() -> None:
    src = ("#ifndef GUARD_H\n#define GUARD_H\n#if SOME_FLAG\n__device__ float f(float v) "
           "{ return __shfl_xor_sync(0xffffffff, v, 1); }\n#endif\n#endif\n")
    assert _codes(src) == ["PRT501"]


def test_cuda_arch_only_code_is_not_a_hip_hazard_but_cudacc_code_is() -> None:
    src = ("__device__ float f(float v) {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
           "  return __shfl_xor_sync(0xffffffff, v, 1);\n#else\n  return v;\n#endif\n}\n"
           "#ifdef __CUDACC__\n__device__ float g(float v) { return __shfl_sync(0xffffffff, v, 0); }\n#endif\n")
    got = findings(src, "k.cu", family="warp_size")
    assert [(f.code, f.line) for f in got] == [("PRT501", 9)]  # HIPify renames __CUDACC__ to __HIPCC__


def test_hip_branch_mistakes_that_are_wrong_at_any_width_are_still_reported() -> None:
    src = ("#ifdef __HIP_PLATFORM_AMD__\n#define SHFL_DOWN(v, o) __shfl_down(0xffffffff, v, o)\n"
           "#define WS warpSize\n#else\n#define SHFL_DOWN(v, o) __shfl_down_sync(0xffffffff, v, o)\n#define WS 32\n"
           "#endif\n")
    got = findings(src, "k.cu", family="warp_size")
    assert sorted((f.code, f.line) for f in got) == [("PRT511", 3), ("PRT515", 2)]
    assert all(not f.edits for f in got)


# -- 5. shuffle classification ----------------------------------------------------------------------------
def test_legacy_shuffle_with_explicit_width_is_not_width_less() -> None:
    src = ("__device__ float f(float v, int w) {\n  v += __shfl(v, 0, 16);\n  v += __shfl_down(v, 1, w);\n"
           "  v += __shfl_up(v, 1, 32);\n  return v;\n}\n")
    assert _codes(src) == []


def test_legacy_shuffle_with_a_wavefront_width_is_flagged_not_pinned() -> None:
    src = "__device__ float f(float v) { return __shfl(v, 0, 64); }\n"
    got = findings(src, "k.cu", family="warp_size")
    assert [f.code for f in got] == ["PRT508"] and not got[0].edits


@pytest.mark.parametrize("body", [
    "s |= __shfl_xor(s, 1); s |= __shfl_xor(s, 2);",
    "for (int i = 1; i < 32; i <<= 1) s += __shfl_xor(s, i);",
    "for (int i = 16; i > 0; i >>= 1) s += __shfl_xor(s, i);",
    "for (int i = 0; i < 5; ++i) s += __shfl_xor(s, 1 << i);",
])
def test_small_xor_butterflies_never_cross_a_logical_warp(body: str) -> None:
    src = f"__device__ unsigned f(unsigned s) {{\n  {body}\n  return s;\n}}\n"
    assert _actionable(src) == []


def test_xor_with_a_computed_mask_only_needs_the_mask_converted() -> None:
    src = "__device__ unsigned f(unsigned s, unsigned m) { return s | __shfl_xor_sync(m, s, 2); }\n"
    got = findings(src, "k.cu", family="warp_size")
    assert [f.code for f in got] == ["PRT508"] and "crosses" not in got[0].message
    assert "porter_shfl_xor_sync(m, s, 2)" in fixed(src, "k.cu", family="warp_size")


def test_a_wide_xor_or_a_broadcast_is_still_reported() -> None:
    src = "__device__ float f(float v) { return __shfl_xor(v, 32) + __shfl(v, 0); }\n"
    assert _codes(src) == ["PRT508", "PRT508"]


def test_informational_findings_are_benign_info_without_effort() -> None:
    src = ("__global__ void k(float* x) {\n  int lane = threadIdx.x % 32;\n  float v = x[threadIdx.x];\n"
           "  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);\n  x[lane] = v;\n}\n")
    got = {f.code: f for f in findings(src, "k.cu", family="warp_size")}
    for code in ("PRT504", "PRT505"):
        assert got[code].category == Category.BENIGN and got[code].severity == Severity.INFO, code
        assert got[code].effort_hours == 0.0
    assert got["PRT501"].category is None  # the rule's own class: work to do


# -- 6. misses ---------------------------------------------------------------------------------------------
def test_float_warp_divisor_and_shift_loops_are_found() -> None:
    src = ("__global__ void k(float* x) {\n  float v = x[threadIdx.x];\n"
           "  for (int i = 0; i < 5; ++i) v += __shfl_down_sync(0xffffffff, v, 1 << i);\n"
           "  int nw = (int)ceilf(blockDim.x / 32.f);\n  x[0] = v * nw;\n}\n")
    got = [(f.code, f.line) for f in findings(src, "k.cu", family="warp_size")]
    assert ("PRT504", 3) in got and ("PRT506", 4) in got


# -- 7. hazards no logical strategy removes -----------------------------------------------------------------
@pytest.mark.parametrize("check", [
    "TORCH_CHECK(prop.warpSize == 32, \"needs 32-lane warps\");",
    "assert(warpSize == 32);",
    "if (props->warpSize != 32) return;",
])
def test_host_checks_pinning_the_warp_size_are_flagged(check: str) -> None:
    src = (f"void setup(int dev) {{\n  cudaDeviceProp prop; cudaDeviceProp* props = &prop; int warpSize = "
           f"prop.warpSize;\n  {check}\n}}\n")
    got = findings(src, "launch.cu", family="warp_size")
    assert [(f.code, f.line) for f in got] == [("PRT510", 3)] and not got[0].edits


def test_host_comparison_of_unrelated_names_is_not_a_warp_check() -> None:
    src = "void setup(int n) { int ws = n; if (ws == 32) run(); }\n"
    assert _codes(src) == []


def test_user_overload_named_like_an_intrinsic_is_flagged_and_its_body_left_alone() -> None:
    src = ("__device__ __half __shfl_up_sync(const unsigned mask, const __half var, const unsigned delta) {\n"
           "  return __shfl_up_sync(mask, (float)var, delta);\n}\n"
           "__device__ at::Half __shfl_down_sync(const warp_mask_t mask, const at::Half var, unsigned d) {\n"
           "  return __shfl_down_sync(mask, var.operator __half(), d);\n}\n")
    got = findings(src, "k.cu", family="warp_size")
    assert [(f.code, f.line) for f in got] == [("PRT524", 1)]
    assert fixed(src, "k.cu", family="warp_size") == src


def test_cub_physical_width_is_flagged() -> None:
    src = ("#include <cub/cub.cuh>\n__global__ void k(float* x) {\n"
           "  typedef cub::BlockReduce<float, 32> BR;\n  __shared__ typename BR::TempStorage t;\n"
           "  if (CUB_WARP_THREADS(0) == 32) x[0] = BR(t).Sum(x[threadIdx.x]);\n}\n")
    got = [(f.code, f.line) for f in findings(src, "k.cu", family="warp_size")]
    assert ("PRT525", 3) in got and ("PRT525", 5) in got
    ok = src.replace("<float, 32>", "<float, 256>").replace("CUB_WARP_THREADS(0) == 32", "true")
    assert "PRT525" not in _codes(ok)


def test_inline_ptx_lane_ids_are_flagged_not_patched() -> None:
    src = ("__device__ unsigned lane() { unsigned r; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(r)); "
           "return r; }\n__device__ unsigned lt() { unsigned r; asm(\"mov.u32 %0, %%lanemask_lt;\" : \"=r\"(r)); "
           "return r; }\n")
    got = findings(src, "k.cu", family="warp_size")
    assert [f.code for f in got] == ["PRT518", "PRT518"] and all(not f.edits for f in got)


# -- repository-wide facts: a vendor header's HIP shims and platform-only macros ---------------------------
def test_repo_facts_find_hip_shims_and_platform_macros(tmp_path) -> None:
    from porter.codemods.warp_size.analysis import PLATFORM_FACT, SHIMS_FACT, repo_facts

    (tmp_path / "vendors").mkdir()
    (tmp_path / "vendors" / "hip.h").write_text(
        "#define __shfl_xor_sync(mask, var, m, width) __shfl_xor(var, m, width)\n"
        "#define __any_sync(mask, var) __any(var)\n")
    (tmp_path / "common.cuh").write_text(
        "#if defined(PROJ_USE_HIP)\n#include \"vendors/hip.h\"\n#endif\n"
        "#if !defined(PROJ_USE_HIP) && __CUDA_ARCH__ >= 750\n#define NV_MMA_OK\n#endif\n")
    (tmp_path / "k.cu").write_text("#define __shfl_sync(m, v, l) no\n")  # not a header: not read
    facts = repo_facts(tmp_path, ["vendors/hip.h", "common.cuh", "k.cu"])
    assert facts[SHIMS_FACT] == ("__any_sync", "__shfl_xor_sync")
    assert ("NV_MMA_OK", "cuda") in facts[PLATFORM_FACT]


def test_an_already_ported_tree_through_a_vendor_header_comes_out_clean(tmp_path) -> None:
    from porter.config import Settings
    from porter.runner import run

    (tmp_path / "vendors").mkdir()
    (tmp_path / "vendors" / "hip.h").write_text(
        "#define __shfl_xor_sync(mask, var, m, width) __shfl_xor(var, m, width)\n"
        "#define __all_sync(mask, var) __all(var)\n")
    (tmp_path / "common.cuh").write_text(
        "#pragma once\n#if defined(PROJ_USE_HIP)\n#include \"vendors/hip.h\"\n#endif\n#define WARP_SIZE 32\n"
        "#if !defined(PROJ_USE_HIP) && __CUDA_ARCH__ >= 800\n#define NV_MMA_OK\n#endif\n"
        "static constexpr __device__ int physical_warp_size() {\n#if defined(PROJ_USE_HIP) && defined(__GFX9__)\n"
        "  return 64;\n#else\n  return 32;\n#endif\n}\n"
        "template <int width = WARP_SIZE>\n__device__ float warp_sum(float x) {\n"
        "  for (int o = width / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o, width);\n"
        "  return x;\n}\n"
        "template <int width>\n__device__ bool warp_all(bool x) {\n"
        "  if (width == physical_warp_size()) return __all_sync(0xffffffff, x);\n"
        "  for (int o = width / 2; o > 0; o >>= 1) x = __shfl_xor_sync(0xffffffff, x, o, width) && x;\n"
        "  return x;\n}\n"
        "__device__ void tile_mma(int* d) {\n#ifdef NV_MMA_OK\n"
        "  asm(\"mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0}, {%1}, {%2}, {%0};\" : \"+r\"(d[0]) "
        ": \"r\"(d[1]), \"r\"(d[2]));\n#endif\n}\n")
    settings = Settings(select=("PRT5",))
    res = run(tmp_path, [tmp_path], settings, "audit", jobs=1, use_cache=False)
    got = [f for r in res.files for f in r.findings]
    assert [f.code for f in got if f.severity != Severity.INFO] == []
    # without the repository facts the same file would be patched (and the vote halved)
    alone = findings((tmp_path / "common.cuh").read_text(), "common.cuh", family="warp_size")
    assert "PRT501" in [f.code for f in alone]
    vote = next(f for f in alone if "__all_sync" in f.message)
    assert not vote.edits  # physical_warp_size() returns 64 on a HIP path: never pinned to 32 lanes


def test_coalesced_group_ballot_in_32_bits_is_flagged() -> None:
    src = ("namespace cg = cooperative_groups;\n__global__ void k(int* n, bool done) {\n"
           "  cg::coalesced_group warp = cg::coalesced_threads();\n  uint bits = warp.ballot(done);\n"
           "  if (warp.thread_rank() == 0) atomicAdd(n, __popc(bits));\n}\n")
    got = findings(src, "k.cu", family="warp_size")
    assert [(f.code, f.line) for f in got] == [("PRT502", 4)] and not got[0].edits
    assert got[0].severity != Severity.INFO  # work to do, not a note
    assert _codes(src.replace("uint bits", "unsigned long long bits")) == []


def test_commented_out_warp_code_does_not_make_a_file_warp_collective() -> None:
    src = ("const int THREADS_X = 32;\n__global__ void k(float* x) {\n"
           "  // acc += __shfl_down_sync(0xffffffff, acc, offset);\n  x[threadIdx.x] = 0.f;\n}\n"
           "void launch(float* x, int dim) { dim3 t(THREADS_X, 8, 1); k<<<(dim + THREADS_X - 1) / THREADS_X, t>>>(x); }\n")
    assert _codes(src) == []


def test_warpsize_next_to_a_repository_shim_is_not_pinned() -> None:
    from porter.framework import RepoFacts

    src = ("#include \"compat.cuh\"\n__global__ void k(float* x) {\n  float s = x[threadIdx.x];\n"
           "  for (int o = warpSize / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);\n  x[0] = s;\n}\n")
    facts = RepoFacts(extra={"warp_hip_shims": ("__shfl_xor_sync",)})
    got = findings(src, "k.cu", family="warp_size", facts=facts)
    assert got == []  # the shim's wavefront-wide shuffles and device warpSize agree: nothing to port
    assert fixed(src, "k.cu", family="warp_size", facts=facts) == src
    assert "PORTER_LOGICAL_WARP" in fixed(src, "k.cu", family="warp_size")  # without the shim: pinned
    # a ROCm-7 warpSize macro in the HIP branch does not make a port "broken": nothing is rewritten
    ported = "#if defined(USE_ROCM)\n#define NUM_WARPS (1024 / warpSize)\n#else\n#define NUM_WARPS 32\n#endif\n" + src
    got = findings(ported, "k.cu", family="warp_size", facts=facts)
    assert [f.code for f in got] == ["PRT511"] and not got[0].edits


def test_launcher_whose_kernels_live_in_a_header_gets_host_geometry() -> None:
    from porter.framework import RepoFacts

    src = ("#include \"kernels/reduce.cuh\"\nvoid launch(float* x, int n, int n_threads) {\n"
           "  dim3 threads = {32u, 8, 1};\n  dim3 block(32, 4);\n  block.x = 32 * ((block.x + 31) / 32);\n"
           "  if (n_threads % 32) return;\n  reduce<<<n, threads>>>(x);\n}\n")
    facts = RepoFacts(extra={"warp_collective_headers": ("reduce.cuh",)})
    got = findings(src, "launch.cu", family="warp_size", facts=facts)
    assert [(f.code, f.line) for f in got] == [("PRT506", 3), ("PRT506", 4), ("PRT506", 5), ("PRT506", 6)]
    assert all(f.severity == Severity.INFO for f in got)  # consistent with the logical warp: notes
    assert findings(src, "launch.cu", family="warp_size") == []  # a header without warp collectives: a data tile


def test_jit_kernel_in_a_cpp_raw_string_is_reported_not_patched() -> None:
    src = ('const char* kSrc = R"cuda(\n__global__ void k(float* x) {\n'
           '  x[0] = __shfl_xor_sync(0xffffffff, x[0], 16);\n}\n)cuda";\n')
    got = findings(src, "jit.cpp", family="warp_size")
    assert [(f.code, f.line, f.column) for f in got] == [("PRT501", 3, 10)]
    assert not got[0].edits and "string literal" in got[0].message
    assert fixed(src, "jit.cpp", family="warp_size") == src


@pytest.mark.parametrize(("cond", "cuda", "hip"), [
    ("#ifdef USE_ROCM", 0, 1),
    ("#if !defined(__HIP_PLATFORM_AMD__)", 1, 0),
    ("#if defined(__HIPCC__) || defined(__HIP__)", 0, 1),
    ("#if defined(__HIP_PLATFORM_NVIDIA__)", 0, 0),
    ("#if HIP_VERSION >= 60300000", 0, None),
    ("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800", None, 0),
    ("#ifdef __CUDACC__", 1, 1),  # HIPify renames it to __HIPCC__
    ("#if 0", 0, 0),
    ("#if SOME_BUILD_FLAG", None, None),
    ("#if defined(USE_ROCM) && SOME_FLAG", 0, None),
])
def test_conditions_are_evaluated_per_target(cond: str, cuda, hip) -> None:
    sc = scan(f"{cond}\nint x;\n#endif\n")
    assert sc.status[1] == {CUDA: cuda, HIP: hip}


def test_elif_else_and_nesting() -> None:
    src = ("#if defined(USE_ROCM)\na\n#elif defined(__CUDA_ARCH__)\nb\n#else\nc\n#ifndef USE_ROCM\nd\n#endif\n"
           "#endif\ne\n")
    st = scan(src).status
    assert st[1] == {CUDA: 0, HIP: 1} and st[3] == {CUDA: None, HIP: 0} and st[5] == {CUDA: None, HIP: 0}
    assert st[7] == {CUDA: None, HIP: 0} and st[10] == {CUDA: 1, HIP: 1}


# -- PRT514: an unrolled tree whose every step is followed by an explicit barrier -------------------------
_SYNCED_TREE = ("template <typename T>\n__device__ void tree_min(T* d, long* ix, const size_t tid) {\n"
                + "".join(f"  if (d[tid] > d[tid + {k}]) {{\n    ix[tid] = ix[tid + {k}];\n    d[tid] = d[tid + {k}];\n"
                          "  }\n  __syncwarp();\n" for k in (32, 16, 8, 4, 2, 1))
                + "}\n")


@pytest.mark.parametrize("qual", ["", "volatile "])
def test_unrolled_tree_separated_by_syncwarp_gets_no_prt514(qual: str) -> None:
    src = _SYNCED_TREE.replace("T* d", f"{qual}T* d")
    codes = _codes(src)
    assert "PRT514" not in codes and codes.count("PRT516") == 6  # the barriers themselves are still ported


@pytest.mark.parametrize("drop", [
    "  __syncwarp();\n",  # every barrier gone: relies on implicit lockstep
    None,  # one barrier gone (between the 8 and 4 steps)
])
def test_unrolled_tree_with_a_missing_barrier_keeps_prt514(drop: str | None) -> None:
    if drop is None:
        parts = _SYNCED_TREE.split("  __syncwarp();\n")
        src = "  __syncwarp();\n".join(parts[:3]) + "".join(parts[3:4]) + "  __syncwarp();\n".join([""] + parts[4:])
    else:
        src = _SYNCED_TREE.replace(drop, "")
    src = src.replace("T* d", "volatile T* d")
    assert src.count("__syncwarp") in (0, 5)
    assert "PRT514" in _codes(src)


@pytest.mark.parametrize(("guard", "reported"), [
    ("#if !defined(USE_ROCM)", False),  # a human port: CUDA keeps the barriers, a wavefront runs in lockstep
    ("#ifdef USE_ROCM", True),  # barriers on HIP only: the CUDA tree relies on implicit lockstep
])
def test_barriers_under_a_platform_branch(guard: str, reported: bool) -> None:
    src = _SYNCED_TREE.replace("T* d", "volatile T* d").replace("  __syncwarp();\n",
                                                                f"{guard}\n  __syncwarp();\n#endif\n")
    assert ("PRT514" in _codes(src)) is reported
