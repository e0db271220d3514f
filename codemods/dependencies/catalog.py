"""What porter knows about CUDA-bound Python distributions (shared by dependencies/build).

Kept apart from the rule modules so the knowledge can be reviewed on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from porter.codemods.dependencies import DEFAULT_ROCM_VERSION, DEFAULT_TORCHAO  # noqa: F401 - re-exported

TORCH_DISTS = frozenset({"torch", "torchvision", "torchaudio"})

# download.pytorch.org/whl/cu121, .../whl/nightly/cu124, .../whl/cu118/torch_stable.html
CUDA_TORCH_INDEX = re.compile(
    r"https?://download\.pytorch\.org/whl/(?P<nightly>nightly/)?cu\d+(?P<stable>/torch_stable\.html)?/?"
    r"(?=$|[\s\"'#;])"
)
CUDA_LOCAL = re.compile(r"\+cu\d+")
ROCM_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
EXACT_TORCH = re.compile(r"(?<![\w.-])(torch|torchvision|torchaudio)===?([0-9][\w.]*?)(?:\+[\w.]+)?(?![\w.*])")


# torch minor -> the ROCm wheel indexes of download.pytorch.org that carry it (PyTorch's "previous
# versions" install matrix). A pinned torch is moved to a ROCm index only when the pair is listed.
TORCH_ROCM_INDEXES: dict[tuple[int, int], tuple[str, ...]] = {
    (2, 0): ("5.4.2",),
    (2, 1): ("5.5", "5.6"),
    (2, 2): ("5.6", "5.7"),
    (2, 3): ("5.7", "6.0"),
    (2, 4): ("6.0", "6.1"),
    (2, 5): ("6.1", "6.2"),
    (2, 6): ("6.1", "6.2.4"),
    (2, 7): ("6.2.4", "6.3"),
    (2, 8): ("6.3", "6.4"),
    (2, 9): ("6.3", "6.4"),
    (2, 10): ("7.0", "7.1"),
}


def torch_minor(dist: str, version: str) -> tuple[int, int] | None:
    """The torch minor a pinned torch/torchvision/torchaudio version belongs to."""
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    rel = v.release + (0,) * (2 - len(v.release))
    if dist == "torchvision" and rel[0] == 0 and rel[1] >= 15:
        return (2, rel[1] - 15)
    if dist in ("torch", "torchaudio") and rel[0] == 2:
        return (2, rel[1])
    return None


def rocm_index_problem(pins: list[tuple[str, str]], rocm: str) -> str | None:
    """Why the ROCm ``rocm`` index cannot serve these exact (dist, version) pins, or None."""
    for dist, version in pins:
        minor = torch_minor(dist, version)
        if minor is None:
            return f"porter cannot tell which ROCm index carries {dist}=={version}"
        known = TORCH_ROCM_INDEXES.get(minor)
        if known is None:
            return f"porter does not know which ROCm index carries {dist}=={version}"
        if rocm not in known:
            return (f"{dist}=={version} is not published on the rocm{rocm} index (it is on "
                    f"{', '.join('rocm' + k for k in known)}): set [tool.porter.dependencies] rocm-version "
                    "or raise the pin")
    return None


def rocm_for_torch(target: str) -> str | None:
    """The newest ROCm index that carries torch ``target`` (None when porter does not know)."""
    if not target:
        return None
    known = TORCH_ROCM_INDEXES.get(torch_minor("torch", target) or (0, 0))
    return known[-1] if known else None


def companion_version(dist: str, torch_version: str) -> str | None:
    """The torchvision/torchaudio release that goes with torch ``torch_version`` (minor level)."""
    minor = torch_minor("torch", torch_version)
    if minor is None:
        return None
    if dist == "torch":
        return torch_version
    if dist == "torchvision":
        return f"0.{minor[1] + 15}"
    if dist == "torchaudio":
        return f"2.{minor[1]}"
    return None


def rocm_index(version: str, nightly: bool = False) -> str:
    return f"https://download.pytorch.org/whl/{'nightly/' if nightly else ''}rocm{version}"


@dataclass(frozen=True)
class CudaOnly:
    """A CUDA-only package that porter's Python families can remove from the code."""

    dists: tuple[str, ...]  # canonical names (or prefixes ending with "-*")
    modules: tuple[str, ...]  # top-level import names that still need it
    advice: str  # what to do when the code still imports it
    # libraries that load the package without the repo importing it: (module, how)
    indirect: tuple[tuple[str, str], ...] = ()


CUDA_ONLY: tuple[CudaOnly, ...] = (
    CudaOnly(("flash-attn",), ("flash_attn", "flash_attn_2_cuda"),
             "port the calls to torch.nn.functional.scaled_dot_product_attention (attention family), or "
             "build flash-attn for ROCm (its CK/Triton backend, or AMD's ROCm/flash-attention fork); there is "
             "no ROCm wheel on PyPI",
             (("transformers", "attn_implementation=\"flash_attention_2\""),)),
    CudaOnly(("xformers",), ("xformers",),
             "port to scaled_dot_product_attention, or install xformers' experimental ROCm wheel from the "
             "PyTorch ROCm index",
             (("diffusers", "enable_xformers_memory_efficient_attention()"),)),
    CudaOnly(("apex",), ("apex",),
             "port to torch.optim (fused=True), torch.nn norms, torch.amp and torch DDP, or build ROCm/apex "
             "from source"),
    CudaOnly(("bitsandbytes",), ("bitsandbytes",),
             "bitsandbytes 0.50 and later support ROCm: pin bitsandbytes>=0.50, or finish the torchao port",
             (("transformers", "BitsAndBytesConfig / load_in_4bit"), ("peft", "QLoRA helpers"),
              ("accelerate", "BnbQuantizationConfig"), ("optimum", "bnb quantization"))),
    CudaOnly(("transformer-engine", "transformer-engine-*"), ("transformer_engine",),
             "port to torch.nn modules with torchao.float8, or build ROCm/TransformerEngine from source",
             (("accelerate", "mixed_precision=\"fp8\""),)),
    CudaOnly(("nvidia-dali-*",), ("nvidia",),
             "replace the DALI pipeline with torchdata / torch DataLoader; DALI has no ROCm build"),
    CudaOnly(("nvidia-ml-py", "nvidia-ml-py3", "pynvml"), ("pynvml",),
             "port NVML calls to torch.cuda telemetry or amdsmi (telemetry family)"),
)


def cuda_only_for(dist: str) -> CudaOnly | None:
    for entry in CUDA_ONLY:
        for pat in entry.dists:
            if dist == pat or (pat.endswith("-*") and dist.startswith(pat[:-1])):
                return entry
    return None


# Distributions built for CUDA that have no ROCm build under that name.
CUDA_BUILDS: dict[str, str] = {
    "onnxruntime-gpu": "onnxruntime-gpu is the CUDA/TensorRT build; AMD publishes onnxruntime-rocm / MIGraphX "
    "builds outside PyPI",
    "tensorflow-gpu": "tensorflow-gpu is a retired CUDA build; tensorflow-rocm is the ROCm build",
    "tensorrt": "TensorRT is NVIDIA-only; MIGraphX is AMD's inference compiler",
    "torch-tensorrt": "Torch-TensorRT is NVIDIA-only; use torch.compile (Inductor) or MIGraphX",
    "nvidia-tensorrt": "TensorRT is NVIDIA-only; MIGraphX is AMD's inference compiler",
    "pycuda": "PyCUDA drives the CUDA driver API directly; port to torch or HIP Python (hip-python)",
    "cuda-python": "cuda-python binds the CUDA driver/runtime; AMD's counterpart is hip-python",
    "cuda-bindings": "cuda-bindings binds the CUDA driver/runtime; AMD's counterpart is hip-python",
    "paddlepaddle-gpu": "paddlepaddle-gpu is the CUDA build of Paddle",
    "nvidia-pyindex": "nvidia-pyindex only configures NVIDIA's package index",
}

CUDA_EXTRAS = {
    "tensorflow": ("and-cuda",),
    "jax": ("cuda", "cuda11", "cuda12", "cuda11_pip", "cuda12_pip", "cuda12_local", "cuda11_local", "cuda13"),
}

_CU_SUFFIX = re.compile(r"-(cu|cuda)\d+x?$|-cu\d+-|^nvidia-.*-cu\d+$")
CUPY = re.compile(r"^cupy-cuda\d+x?$")
CUPY_ROCM = {"4.3": "cupy-rocm-4-3", "5.0": "cupy-rocm-5-0"}


def cuda_build_reason(req: Requirement) -> str | None:
    """Why ``req`` names a CUDA-only build, or None."""
    dist = canonicalize_name(req.name)
    if dist in CUDA_BUILDS:
        return CUDA_BUILDS[dist]
    extras = CUDA_EXTRAS.get(dist, ())
    bad = sorted(e for e in req.extras if e in extras or e.startswith("cuda"))
    if bad:
        return f"the extra [{', '.join(bad)}] selects {dist}'s CUDA build"
    if dist.startswith("nvidia-") and re.search(r"-cu\d+$", dist):
        return (f"{dist} ships NVIDIA CUDA runtime libraries; the ROCm build of torch brings its own ROCm "
                "libraries, so it is only needed by code that loads it directly")
    if _CU_SUFFIX.search(dist):
        return f"{dist} is a build for one CUDA version; there is no ROCm build under this name"
    return None


def import_roots(modules: tuple[str, ...]) -> frozenset[str]:
    return frozenset(m.split(".")[0] for m in modules)
