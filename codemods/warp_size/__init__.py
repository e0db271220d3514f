"""Warp-size hazards in CUDA C++ (PRT501-PRT520 = hazards H1-H20).

The pass runs on CUDA/C++ sources before HIPify (tree-sitter CUDA grammar), and report-only on
CUDA source embedded in Python strings (``load_inline``, ``cupy.RawKernel``...) plus the
Python-side warp arithmetic of H20.

Fix strategy (``[tool.porter.warp_size] strategy``):

- ``"logical"`` (default): a warp stays 32 lanes everywhere. Raw shuffles, votes and
  ``__syncwarp`` become ``porter_*`` helpers from the added ``porter_warp.h`` that pass an
  explicit width of 32 and restrict votes to the caller's 32-lane half of a 64-lane wavefront.
  Device ``warpSize`` becomes ``PORTER_LOGICAL_WARP``. Lane arithmetic, reduction loops and
  shared arrays sized for 32 then stay correct and are left alone. Exact on CUDA (every helper
  is the same ``*_sync`` call with the full mask and width 32), so these fixes are SAFE.
- ``"physical"``: kernels become generic over ``PORTER_WARP_SIZE`` (the hardware wavefront).
  Offered only where no host code in the file computes geometry from the warp size (porter
  cannot prove host/device agreement otherwise; such files fall back to logical with PRT523).
  Every physical edit is UNSAFE.

Option ``header-dir``: where ``porter_warp.h`` is created (default: next to each patched file).
"""

from __future__ import annotations

from porter.config import Option
from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

NAME = "warp_size"

_W, _E, _I = Severity.WARNING, Severity.ERROR, Severity.INFO
_R, _S = Category.REPLACE, Category.SHIM
_SAFE, _UNSAFE, _NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE

# code, name, summary, category, severity, best fix, effort h, explanation
_CUDA_TOKENS = ("__shfl", "__ballot", "__any", "__all", "__activemask", "__syncwarp", "warpSize",
                "__AMDGCN_WAVEFRONT_SIZE", "WarpReduce", "WarpScan", "tiled_partition", "__match_", "__reduce_",
                "laneid", "lanemask", "C10_WARP_SIZE", "mma.sync", "wmma", "__fns", "volatile", "CUB_WARP_THREADS",
                "BlockReduce", "BlockScan", ".ballot(", "<<<", "WARP_SHFL")
_PY_TOKENS = ("31) // 32", "num_warps", "warps *")

_TABLE = (
    ("PRT501", "warp-full-mask-32", "32-bit full mask (`0xffffffff`, `~0u`, `FULL_MASK`...) passed to a `*_sync` "
     "warp intrinsic (H1).", _S, _E, _SAFE, 0.25,
     "Compile error on ROCm >= 6.3 (the mask must be a 64-bit integer); widening it by zero-extension excludes "
     "lanes 32..63 and trips HIP's runtime mask check. Severity ERROR (C). Fix (SAFE, logical strategy): the "
     "maskless `porter_shfl*` / `porter_ballot32` helpers, identical to the original on CUDA."),
    ("PRT502", "warp-lanemask-32bit-storage", "Ballot/activemask result stored in a 32-bit type (H2).", _S, _E,
     _UNSAFE, 0.5, "HIP ballots are 64-bit on wave64; a 32-bit variable drops lanes 32..63 (W). Under the "
     "logical strategy the rewritten ballot returns the caller's 32-bit half, so no edit is needed; the physical "
     "strategy widens the type to `porter_lanemask_t` (UNSAFE: buffers and host sizing must follow, see H20)."),
    ("PRT503", "warp-mask-bit-op-32", "`__popc`/`__ffs`/`__clz`/`__brev` on a lane mask (H3).", _S, _E, _UNSAFE,
     0.25, "32-bit bit operations on a 64-bit wavefront mask count half the lanes (W). Logical strategy: correct "
     "once the ballot is `porter_ballot32`. Physical: `porter_popc`/`porter_ffs`/`porter_clz` overloads (UNSAFE)."),
    ("PRT504", "warp-loop-32-lanes", "Reduction/scan loop sized for 32 lanes (offset 16 halving, `< 32` "
     "doubling) around shuffles (H4).", _R, _W, _UNSAFE, 0.5,
     "With HIP's wavefront-wide default width such loops reduce each 32-lane half separately (W in mixed code, P "
     "otherwise). Correct under porter's logical warp once the shuffles carry width 32; the physical strategy "
     "starts at `PORTER_WARP_SIZE / 2` (UNSAFE)."),
    ("PRT505", "warp-lane-arithmetic-32", "Lane/warp index arithmetic with warp constants (`% 32`, `& 31`, "
     "`/ 32`, `>> 5`) on thread-index values in warp-collective code (H5).", _R, _W, _UNSAFE, 0.25,
     "Lane ids computed modulo 32 disagree with wavefront-wide shuffles (W). Consistent with the logical "
     "strategy (no edit); rewritten over `PORTER_WARP_SIZE` by the physical strategy (UNSAFE)."),
    ("PRT506", "warp-block-geometry-32", "Warps-per-block counts and block rounding in 32-lane warps, device or "
     "host (H6).", _R, _W, _NONE, 0.5,
     "Host and device must agree on the warp size (W if they disagree). Consistent under the logical strategy; "
     "host sites block the physical strategy (see PRT523)."),
    ("PRT507", "warp-shared-array-32", "`__shared__` array sized or indexed by the warp constant in "
     "warp-collective code (H7).", _R, _W, _UNSAFE, 0.5,
     "Lane-indexed arrays of 32 overflow on wave64 with physical warps; warp-indexed arrays are merely larger. "
     "Correct under the logical strategy. Bank padding (`[32][33]`) and data tiles are never reported."),
    ("PRT508", "warp-shuffle-width", "Shuffle without porter's explicit width, or with a computed mask (H8).",
     _S, _E, _SAFE, 0.25,
     "On HIP the default width is the wavefront (64 on CDNA): broadcasts, up/down scans and computed lanes cross "
     "into the other logical warp (W); 32-bit mask variables also fail ROCm 6.3's 64-bit mask check (C). Fix "
     "(SAFE): `porter_shfl*_sync(mask, ...)`, width 32, exact on CUDA."),
    ("PRT509", "warp-vote-logical", "Vote/ballot/activemask aggregating the whole 64-lane wavefront (H9).", _S, _E,
     _SAFE, 0.25,
     "`__any_sync`, `__all_sync`, `__ballot_sync`, `__activemask` see 64 lanes on wave64 (W). Fix (SAFE): the "
     "logical 32-lane variants `porter_ballot32`, `porter_any32`, `porter_all32`, `porter_activemask32`."),
    ("PRT510", "warp-size-in-host-code", "Host code that uses a device warp constant or the device's warp size "
     "for kernels with 32-lane warps (H10).", _R, _E, _NONE, 1.0,
     "`warpSize` is not usable in host code on CUDA or ROCm 7; the HIP host pass sees 64 for every device; host "
     "geometry from the queried warp size disagrees with logical-warp kernels (C/W). Manual: "
     "`porter::host_warp_size()` with `PORTER_DISPATCH_WARP`, or `PORTER_LOGICAL_WARP`."),
    ("PRT511", "warpsize-constant-expression", "`warpSize` in a constant expression (array bound, template "
     "argument, static_assert, constexpr, `__launch_bounds__`, case label) or a macro defined as `warpSize` (H11).",
     _S, _E, _SAFE, 0.25,
     "Not a constant on CUDA and not constexpr from ROCm 7.0 (C). Fix (SAFE under logical): `PORTER_LOGICAL_WARP`."),
    ("PRT512", "amdgcn-wavefront-size-macro", "Deprecated `__AMDGCN_WAVEFRONT_SIZE(__)` macro (H12).", _R, _E,
     _NONE, 0.5,
     "Deprecated and removed in recent LLVM (an `#if` on it becomes silently false); 64 in the host pass even "
     "for wave32 devices (W/C). Manual: `PORTER_WARP_SIZE` (device) / `porter::host_warp_size()` (host)."),
    ("PRT513", "warp-library-template-width", "`cub::WarpReduce<T>`/`WarpScan<T>` without a width, or "
     "`tiled_partition<32>` (H13).", _S, _W, _SAFE, 0.25,
     "HIPify maps cub to hipcub, whose default logical width is the wavefront (64) (W). Fix (SAFE): explicit "
     "width 32, exactly CUDA's default. `tiled_partition<32>` is reported for review only."),
    ("PRT514", "warp-synchronous-unrolled", "Warp-synchronous `volatile` shared-memory tree or hand-unrolled "
     "32-lane steps (H14).", _R, _W, _NONE, 1.0,
     "Fixed 32-lane step counts need one more step on wave64, and implicit warp synchrony is undefined on "
     "Volta+ anyway (W). Manual: a loop of porter_shfl_down."),
    ("PRT515", "legacy-shuffle-with-mask", "Legacy maskless `__shfl*` called with a mask argument (H15).", _R, _E,
     _UNSAFE, 0.25,
     "It shuffles the mask constant with the value as delta (W, compiles silently on HIP). Fix (UNSAFE: it "
     "changes what the code does): the arguments moved into place."),
    ("PRT516", "syncwarp", "`__syncwarp` (H16).", _S, _W, _SAFE, 0.1,
     "Missing from HIP headers before ROCm 6.x and its 32-bit mask fails the 64-bit check (C). Fix (SAFE): "
     "`porter_syncwarp()`, a wavefront barrier on HIP and `__syncwarp` on CUDA."),
    ("PRT517", "warp-collective-divergent", "Warp collective under a lane-dependent branch (H17).", _R, _W, _NONE,
     1.0, "Inactive lanes do not take part; HIP's *_sync runtime check fails and shuffles read undefined "
     "values (W/R). Manual: every lane executes the collective, inactive lanes contribute the identity."),
    ("PRT518", "ptx-warp-primitive", "Inline PTX warp primitive or NVIDIA-only warp intrinsic (`__reduce_*_sync`, "
     "`__match_*_sync`, `__fns`) (H18).", _R, _E, _NONE, 2.0,
     "HIPify cannot translate PTX; these intrinsics have no portable HIP equivalent (C). Manual rewrite with "
     "porter helpers."),
    ("PRT519", "warp-launch-bounds", "`__launch_bounds__` scaled by a warp constant (H19).", _R, _I, _NONE, 0.25,
     "Launch bounds and dispatch ladders keyed on warp multiples must agree between host and device (P/W)."),
    ("PRT520", "python-warp-arithmetic", "Python-side warp arithmetic that sizes tensors or grids for kernels "
     "(`(n + 31) // 32`, `num_warps * 32`) (H20).", _R, _I, _NONE, 0.5,
     "Host Python that sizes ballot buffers or grids in 32-lane warps must follow the kernels' warp size "
     "(W if they disagree). Report only."),
    ("PRT521", "warpsize-device-runtime", "Device `warpSize` (64 on CDNA) in code porter moves to logical "
     "32-lane warps.", _S, _W, _SAFE, 0.1,
     "Under the logical strategy every warp is 32 lanes; a device `warpSize` of 64 would start reductions at 32 "
     "with width-32 shuffles. Fix (SAFE, exact on CUDA where warpSize is 32): `PORTER_LOGICAL_WARP`."),
    ("PRT522", "mma-fragment-lane-map", "MMA/WMMA fragment code with NVIDIA lane maps.", _R, _W, _NONE, 8.0,
     "Fragment layouts are not portable as code: needs a rocWMMA/Composable Kernel rewrite. porter leaves warp "
     "sizes in such functions unpatched."),
    ("PRT523", "warp-physical-strategy-unavailable", "The physical strategy was requested but host code in the "
     "file computes geometry from the warp size; porter used the logical strategy.", _R, _I, _NONE, 0.0,
     "porter offers the physical (wavefront-generic) strategy only where host and device provably agree."),
    ("PRT524", "warp-intrinsic-overload", "User function named like a warp intrinsic (`__shfl_up_sync` overload "
     "for a half type...).", _R, _E, _NONE, 0.5,
     "After HIPify the user function overloads or redefines HIP's declaration (64-bit mask, wavefront default "
     "width); overload resolution and meaning change on AMD (C/W). Manual: rename it; porter leaves calls to "
     "it and its body unpatched."),
    ("PRT525", "warp-library-physical-width", "cub/hipcub code whose width is the hardware warp "
     "(`CUB_WARP_THREADS` comparisons, block primitives on blocks that are not a multiple of 64).", _R, _W, _NONE,
     0.5, "hipcub's warp constant is 64 on CDNA and its block primitives assume whole wavefronts; a logical "
     "32-lane warp cannot change a library's width (W). Manual review."),
)

RULES = tuple(
    rule(code, name, NAME, summary, cat, severity=sev, fix=fix, effort_hours=eff, explanation=expl)
    for code, name, summary, cat, sev, fix, eff, expl in _TABLE
)


FAMILY = Family(
    name=NAME,
    title="Warp-size hazards in CUDA C++ (32-lane warps vs 64-lane wavefronts)",
    order=90,
    rules=RULES,
    tokens=_CUDA_TOKENS + _PY_TOKENS,
    # on Python files: the Python rules, and CUDA source embedded in strings (`__global__` kernels)
    python_tokens=_PY_TOKENS + ("__global__", "__device__"),
    python_ast="porter.codemods.warp_size.python:WarpPyVisitor",
    checkers={"cuda": "porter.codemods.warp_size.analysis:check_cuda"},
    repo_facts="porter.codemods.warp_size.analysis:repo_facts",
    description="Routes raw warp shuffles, votes and `__syncwarp` through `porter_warp.h` (added next to the "
    "patched file) so that a warp stays 32 lanes on every target: explicit width 32 on shuffles, votes "
    "restricted to the caller's 32-lane half of a 64-lane wavefront, 64-bit masks where HIP needs them. On CUDA "
    "every helper is the original `*_sync` call with the full mask.",
    verified="Fixture pairs for hazards H1-H20 and the false-positive traps; idempotence; compiler checks "
    "(nvcc sm_80 on original and patched kernels, hipcc gfx90a on patched-then-HIPified kernels, plus a ROCm "
    "6.3-style 64-bit-mask stub).",
    review="Findings without a fix (host geometry, PTX, MMA fragments, divergent collectives, deprecated "
    "wavefront macros) need manual work. Kernels run at half wavefront occupancy per logical warp on CDNA: "
    "consider the physical strategy for hot kernels.",
    options=(
        Option("strategy", "string", "logical", "`logical`: a warp stays 32 lanes (SAFE fixes); `physical`: "
               "kernels become generic over the hardware wavefront (UNSAFE).", choices=("logical", "physical")),
        Option("header-dir", "string", "", "Where porter_warp.h is created (default: next to each patched "
               "file).", path=True),
    ),
)
