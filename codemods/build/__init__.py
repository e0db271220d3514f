"""Build flags and containers: nvcc flags in CUDAExtension builds, Dockerfiles, launch scripts.

- ``CUDAExtension(..., extra_compile_args={"nvcc": [...]})``: on a ROCm build of torch,
  ``torch.utils.cpp_extension`` hipifies the sources itself and hands the ``"nvcc"`` list
  to hipcc (only ``-D...CUDA...`` flags are renamed). hipcc (clang) rejects nvcc-only
  flags such as ``-gencode``, ``-arch=sm_80``, ``--use_fast_math`` or ``-Xptxas``. porter
  gates the list on ``torch.version.hip``: the CUDA branch keeps the original list byte
  for byte, the ROCm branch drops the flags that only steer nvcc/ptxas. The ROCm target
  comes from ``PYTORCH_ROCM_ARCH`` (torch's counterpart of ``TORCH_CUDA_ARCH_LIST``).
- Dockerfiles: NVIDIA base images, NVIDIA container-runtime variables.
- Shell scripts and CI/launch YAML: ``docker run --gpus``, ``nvidia-smi``, pip commands
  that use the CUDA wheel index or ``+cuNNN`` torch pins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.config import Option
from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "build"
SAFE, UNSAFE, NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE
DEFAULT_IMAGE = "rocm/pytorch:latest"
DEVICE_FLAGS = ("--device=/dev/kfd --device=/dev/dri --group-add video --ipc=host "
                "--security-opt seccomp=unconfined --shm-size=16G")

_WITH_ARG = {"-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-Xptxas",
             "--ptxas-options", "-maxrregcount", "--maxrregcount", "-t", "--threads", "-Xfatbin",
             "--fatbin-options", "-Xnvlink", "--nvlink-options"}
_PREFIXES = tuple(f + "=" for f in _WITH_ARG) + ("-arch=", "-gencode=")
_EXACT = {"--use_fast_math", "-use_fast_math", "--expt-relaxed-constexpr", "-expt-relaxed-constexpr",
          "--expt-extended-lambda", "-expt-extended-lambda", "--extended-lambda", "-extended-lambda",
          "-lineinfo", "--generate-line-info", "--resource-usage", "-res-usage", "-allow-unsupported-compiler",
          "--allow-unsupported-compiler", "--ftz=true", "--ftz=false", "-ftz=true", "-ftz=false",
          "--prec-div=true", "--prec-div=false", "-prec-div=true", "-prec-div=false", "--prec-sqrt=true",
          "--prec-sqrt=false", "-prec-sqrt=true", "-prec-sqrt=false", "--fmad=true", "--fmad=false",
          "-fmad=true", "-fmad=false", "--keep", "-keep", "--source-in-ptx"}
_TRANSLATE = {"-Xcompiler": "pass the host flags directly", "--compiler-options": "pass the host flags directly",
              "-ccbin": "hipcc picks its own host compiler", "--compiler-bindir": "hipcc picks its own host compiler",
              "-rdc=true": "use -fgpu-rdc", "--relocatable-device-code=true": "use -fgpu-rdc",
              "-dc": "use -fgpu-rdc", "--device-c": "use -fgpu-rdc", "-G": "device debug info differs on hipcc",
              "-dlto": "use -foffload-lto"}


def nvcc_only(flag: str) -> bool:
    """True for a flag that only nvcc/ptxas understands and that hipcc can simply drop."""
    return flag in _EXACT or flag in _WITH_ARG or flag.startswith(_PREFIXES)


# -- the exact gate of the LibCST visitor (BuildVisitor) ---------------------------------------------
# Python pre-filter: the visitor reports nothing unless the text holds one of these (its `active` test).
PYTHON_TOKENS = ("cpp_extension", "CUDAExtension", "nvcc", "extra_cuda_cflags")
# Every report site of BuildVisitor, and what it needs in the file:
# - PRT840 (an nvcc flag list, rewritten or flagged): a `"nvcc"` dict key or an `nvcc=` /
#   `extra_cuda_cflags=` keyword argument; names and lists reach `_nvcc_list` only from there.
# - PRT841 (a flag string outside such a list): one string literal whose value is an nvcc-only flag
#   other than -t/-code/-keep, or a translated flag other than -G/-dc (`visit_SimpleString`).
# - PRT842: one string literal whose value is "TORCH_CUDA_ARCH_LIST".
# - PRT843: a name `CUDA_HOME` that resolves to torch.utils.cpp_extension.CUDA_HOME: the identifier
#   is written in the text and an import of `torch...` binds the name or a prefix of it.
# String literals are LibCST's: each piece of an implicit concatenation on its own.
_REPORTED_FLAGS = ((_EXACT | _WITH_ARG | set(_TRANSLATE)) - {"-t", "-code", "-keep", "-G", "-dc"})
# a string whose value holds none of these as a substring has no literal piece the visitor reports
# (compiled in ``gate.py``, which loads only for a file the family's tokens admit)
NEEDLES = tuple(sorted(_REPORTED_FLAGS | set(_PREFIXES) | {"TORCH_CUDA_ARCH_LIST"}))


def _reported_literal(value: str) -> bool:
    if value == "TORCH_CUDA_ARCH_LIST":
        return True
    if nvcc_only(value):
        return value not in ("-t", "-code", "-keep")
    return value in _TRANSLATE and value not in ("-G", "-dc")


GATE_FACTS = "build.gate"  # ctx.cache key of the ast visitor that gathers the gate's facts (``gate.py``)


def python_gate(ctx: PyContext) -> bool:
    """Can BuildVisitor report on this file? (exact: see the derivation above)

    The keyword, dict-key and literal facts come from ``gate.BuildGateFacts``, which runs in the
    shared ast walk; without a complete walk's facts the tree is scanned here (``scan``), with the
    same answer.
    """
    from porter.codemods._py_gates import imports_module

    if "CUDA_HOME" in ctx.text and imports_module(ctx, lambda m: m.split(".")[0] == "torch"):
        return True
    facts = ctx.cache.get(GATE_FACTS)
    if facts is None or facts.failed:
        return scan(ctx)
    return bool(facts.hit)


def scan(ctx: PyContext) -> bool:
    """The keyword, dict-key and literal part of the gate, over the whole tree on its own."""
    import ast

    from porter.codemods._py_gates import literal_values
    from porter.codemods.build.gate import _needle

    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.keyword):
            if node.arg in ("nvcc", "extra_cuda_cflags"):
                return True
        elif isinstance(node, ast.Dict):
            if any(isinstance(k, ast.Constant) and k.value == "nvcc" for k in node.keys):
                return True
        elif isinstance(node, (ast.Constant, ast.JoinedStr)):
            if any(_reported_literal(v) for v in literal_values(ctx, node, _needle)):
                return True
    return False


RULES = (
    rule("PRT840", "nvcc-flags-for-hipcc", NAME,
         "nvcc-only flags in a CUDAExtension's `\"nvcc\"` list, which hipcc rejects on ROCm.",
         Category.SHIM, severity=Severity.ERROR, fix=SAFE, effort_hours=0.5,
         explanation="On ROCm, torch.utils.cpp_extension hipifies the extension's sources itself and "
         "passes the `\"nvcc\"` flags to hipcc. Flags that only steer nvcc or ptxas (`-gencode`, "
         "`-arch=sm_XX`, `-code`, `-Xptxas`, `-maxrregcount`, `--threads`, `-lineinfo`, "
         "`--expt-relaxed-constexpr`, `--expt-extended-lambda`, `--use_fast_math` and its parts) make "
         "hipcc fail. porter rewrites the list to `[<portable flags>] if torch.version.hip else "
         "[<original list>]`.\n\nWhy SAFE: the CUDA build gets the original list unchanged. On ROCm the "
         "dropped flags have no meaning (the GPU target comes from `PYTORCH_ROCM_ARCH`; relaxed "
         "constexpr and extended lambdas are clang's default for HIP). `--use_fast_math` has no exact "
         "hipcc equivalent (clang's `-ffast-math` also assumes no NaN/Inf, which breaks masking "
         "code), so the ROCm build uses IEEE math: slower at worst, never less accurate. Lists that "
         "are not all literal strings, or that hold flags needing a translation (`-Xcompiler`, "
         "`-rdc=true`, `-ccbin`), are reported instead.",
         example='```python\nextra_compile_args={"nvcc": ["-O3", "-gencode", "arch=compute_80,code=sm_80"]}\n'
         '# becomes\nextra_compile_args={"nvcc": ["-O3"] if torch.version.hip else ["-O3", "-gencode", '
         '"arch=compute_80,code=sm_80"]}\n```'),
    rule("PRT841", "nvcc-flag-dynamic", NAME,
         "An nvcc-only flag built outside a literal `\"nvcc\"` list, or one that needs a ROCm translation.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.5,
         explanation="porter cannot see where this flag ends up (it is appended to a list, computed, or "
         "needs translating: `-Xcompiler X` → `X`, `-rdc=true` → `-fgpu-rdc`). Gate it on "
         "`torch.version.hip` by hand."),
    rule("PRT842", "torch-cuda-arch-list", NAME,
         "`TORCH_CUDA_ARCH_LIST` selects NVIDIA targets; ROCm builds read `PYTORCH_ROCM_ARCH`.",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.1,
         explanation="Set `PYTORCH_ROCM_ARCH` (e.g. `gfx90a;gfx942`) for extension builds on ROCm; "
         "without it torch compiles for the GPUs visible at build time."),
    rule("PRT843", "cuda-home-check", NAME,
         "`torch.utils.cpp_extension.CUDA_HOME` is None on ROCm builds.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.25,
         explanation="A setup.py that requires `CUDA_HOME` (or builds paths from it) fails on ROCm. "
         "Accept `ROCM_HOME` as well, or branch on `IS_HIP_EXTENSION` "
         "(both in torch.utils.cpp_extension)."),
    rule("PRT844", "nvidia-base-image", NAME,
         "A Dockerfile starts from an NVIDIA image (`nvidia/cuda`, `nvcr.io/nvidia/...`).",
         Category.REPLACE, severity=Severity.WARNING, fix=UNSAFE, effort_hours=1.0,
         explanation="Start from AMD's PyTorch container, which pins a matched ROCm/PyTorch pair: "
         "`rocm/pytorch` (or a `rocm/dev-*` image without torch). The NGC PyTorch image is swapped for "
         "`[tool.porter.build] rocm-image` (default `rocm/pytorch:latest`) as an UNSAFE fix: Python "
         "version, preinstalled packages and paths differ. Run the container with "
         f"`{DEVICE_FLAGS}`."),
    rule("PRT845", "docker-gpus-flag", NAME,
         "`docker run --gpus` / the nvidia runtime expose NVIDIA GPUs only.",
         Category.SHIM, severity=Severity.WARNING, fix=UNSAFE, effort_hours=0.25,
         explanation=f"ROCm containers get the GPUs through device files: `{DEVICE_FLAGS}`. "
         "`--gpus all` becomes `--device=/dev/kfd --device=/dev/dri --group-add video` as an UNSAFE "
         "fix (the image must be a ROCm image too; add `--ipc=host`, `--shm-size` and the seccomp "
         "option `--security-opt seccomp=unconfined`). Compose `runtime: nvidia` / `driver: nvidia` and Kubernetes "
         "`nvidia.com/gpu` are reported (AMD's device plugin resource is `amd.com/gpu`)."),
    rule("PRT846", "nvidia-smi-script", NAME,
         "`nvidia-smi` in a shell script, Dockerfile or CI config.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.25,
         explanation="AMD's tools are `amd-smi` (and the older `rocm-smi`); their options and output "
         "differ, so parsing code needs porting."),
    rule("PRT847", "nvidia-container-env", NAME,
         "NVIDIA container-runtime variables (`NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`...).",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.1,
         explanation="Only the NVIDIA container runtime reads them. On ROCm pass the device files and "
         "select GPUs with `HIP_VISIBLE_DEVICES`/`ROCR_VISIBLE_DEVICES`."),
    rule("PRT848", "pip-cuda-index-script", NAME,
         "A pip command in a script or Dockerfile uses the CUDA PyTorch index or `+cuNNN` torch pins.",
         Category.REPLACE, severity=Severity.WARNING, fix=SAFE, effort_hours=0.1,
         explanation="The index URL becomes the ROCm index of `[tool.porter.dependencies] rocm-version` "
         "(default 6.3) and `+cuNNN` labels on torch, torchvision and torchaudio are dropped (PEP 440 "
         "`==X` then matches the ROCm build `X+rocmY`). CUDA `torch_stable.html` pages are reported."),
)


FAMILY = Family(
    name=NAME,
    title="Build flags and containers: hipcc-safe nvcc flags, ROCm images and device flags",
    order=85,
    rules=RULES,
    tokens=("nvcc", "CUDAExtension", "cpp_extension", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "nvidia", "nvcr.io",
            "--gpus", "NVIDIA_", "download.pytorch.org", "+cu"),
    python_tokens=PYTHON_TOKENS,
    python="porter.codemods.build.visitor:BuildVisitor",
    python_ast="porter.codemods.build.gate:BuildGateFacts",  # reports nothing: the gate's facts
    python_gate="porter.codemods.build:python_gate",
    checkers={"shell": "porter.codemods.build.visitor:check_shell", "yaml": "porter.codemods.build.visitor:check_yaml", "dockerfile": "porter.codemods.build.visitor:check_dockerfile"},
    description="Gates nvcc-only flags of CUDAExtension builds on `torch.version.hip`, points pip commands in "
    "scripts at the ROCm wheel index, and (with --unsafe-fixes) swaps NGC PyTorch base images and `--gpus all` "
    "for their ROCm counterparts.",
    verified="Fixture tests (tests/fixtures/build): the CUDA branch of every gated flag list is the original "
    "list; the rewritten setup.py parses; flags already under a hip/ROCm gate are left alone.",
    review="Set PYTORCH_ROCM_ARCH for the target GPUs; re-check fast-math-sensitive kernels; rebuild the "
    "container from the ROCm image and run it with the device flags.",
    options=(
        Option("rocm-image", "string", DEFAULT_IMAGE, "The container image that replaces NVIDIA's PyTorch "
               "image."),
    ),
)
