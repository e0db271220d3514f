"""HIPify results as findings (PRT560-PRT599).

This family has rules only: the findings come from ``porter.hipify_wrappers.run_hipify``, which
runs hipify-perl, hipify-clang or ``torch.utils.hipify`` on a scratch copy and reports what the
engine left unconverted or could not convert, and which files it skipped because a
``CUDAExtension`` build hipifies them by itself on ROCm.
"""

from __future__ import annotations

from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

NAME = "hipify"

RULES = (
    rule("PRT560", "hipify-unconverted-api", NAME,
         "A CUDA API identifier is still present after HIPify (no mapping in the engine's tables).",
         Category.REPLACE, severity=Severity.ERROR, fix=Applicability.NONE, effort_hours=1.0,
         explanation="HIPify renames what its tables know; anything else (`cuda*`, `cublas*`, `curand*`, "
         "`cusparse*`, `cudnn*`, `nvcuda::`) stays and fails to compile or link on ROCm. Port the call by hand "
         "or replace the library."),
    rule("PRT561", "hipify-unsupported-api", NAME,
         "The HIPify engine reported an API as unsupported, experimental or deprecated in HIP.",
         Category.REPLACE, severity=Severity.WARNING, fix=Applicability.NONE, effort_hours=1.0,
         explanation="hipify-perl and hipify-clang print a warning for identifiers they know but cannot map "
         "(for example `__shfl_xor_sync` before HIPIFY 6.2 tables). porter relays each warning at its line."),
    rule("PRT562", "hipify-warp-mask-left", NAME,
         "HIPify kept a `*_sync` warp intrinsic with a 32-bit mask (the warp-size patch was not applied).",
         Category.SHIM, severity=Severity.ERROR, fix=Applicability.NONE, effort_hours=0.25,
         explanation="No HIPify engine changes masks, widths or warp constants. On ROCm >= 6.3 the 32-bit mask "
         "fails the 64-bit static_assert; on older HIP the call is undeclared or, through a maskless shim, "
         "reduces 64 lanes where the code means 32. Apply porter's warp_size patch (PRT501) before HIPify."),
    rule("PRT563", "cuda-extension-double-hipify", NAME,
         "Sources of a `CUDAExtension` in setup.py: torch hipifies them itself when building on ROCm.",
         Category.BENIGN, severity=Severity.INFO, fix=Applicability.NONE, effort_hours=0.0,
         explanation="`torch.utils.cpp_extension.BuildExtension` runs `torch.utils.hipify` over CUDAExtension "
         "sources on ROCm builds of torch. Converting them in the repository as well would hipify twice "
         "(`hip*` names and `_hip` file names the build does not expect). porter skips these sources unless "
         "forced; its warp-size patch still applies to them, since HIPify never touches warp sizes."),
    rule("PRT564", "hipify-inline-ptx", NAME,
         "Inline PTX assembly survives HIPify unchanged.",
         Category.REPLACE, severity=Severity.ERROR, fix=Applicability.NONE, effort_hours=2.0,
         explanation="No HIPify engine translates `asm(\"...\")` PTX; it does not assemble for AMD GPUs."),
    rule("PRT565", "hipify-engine-failed", NAME,
         "The HIPify engine failed on a file or could not run.",
         Category.REPLACE, severity=Severity.ERROR, fix=Applicability.NONE, effort_hours=0.5,
         explanation="The engine's error is in the message. hipify-clang writes nothing when clang reports "
         "errors (missing CUDA headers or include paths)."),
    rule("PRT566", "cuda-extension-sources-unresolved", NAME,
         "A `CUDAExtension` whose sources porter cannot resolve statically.",
         Category.BENIGN, severity=Severity.INFO, fix=Applicability.NONE, effort_hours=0.25,
         explanation="porter never executes setup.py. When `sources=` is computed (a function call, a comprehension), "
         "porter cannot tell which files the build hipifies, and HIPifies them all; list the sources or pass "
         "them to porter's exclude to avoid a double conversion."),
)

FAMILY = Family(
    name=NAME,
    title="HIPify (CUDA API names to HIP)",
    order=95,
    rules=RULES,
    description="The HIPify engine's renames (hipify-perl, hipify-clang or torch.utils.hipify), run on a "
    "scratch copy after the warp-size patch. Renamed files appear as a deletion plus an addition.",
    verified="Adapters are unit-tested with fake engine executables; torch.utils.hipify runs for real in a "
    "subprocess; patched-then-HIPified test kernels compile with hipcc for gfx90a.",
    review="Unconverted and unsupported APIs (PRT560/PRT561) and files skipped for CUDAExtension builds (PRT563).",
)
