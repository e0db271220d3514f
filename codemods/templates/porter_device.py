"""Vendor-neutral device helpers: branch on capability, not on vendor.

This module was added by porter (https://github.com/porter-rocm/porter) when it rewrote
vendor-specific checks in this repository. It is ordinary project code now: read it, edit it,
test it. It depends on PyTorch only and works on NVIDIA (CUDA builds), AMD (ROCm builds,
where ``torch.cuda`` is the HIP backend), Apple (MPS) and CPU-only machines.

Why capability checks and not compute capability numbers: AMD GPUs report a compute
capability too, and it does not mean what it means on NVIDIA. MI250X (gfx90a) reports 9.0
and MI300X (gfx942) reports 9.4, so ``major >= 9`` ("Hopper or newer") is true on both,
although MI250X has no FP8 and neither has Hopper's features. On ROCm the architecture name
(``gcnArchName``, e.g. ``gfx942:sramecc+:xnack-``) is the reliable key.
"""

from __future__ import annotations

from typing import NamedTuple, Union

import torch

DeviceLike = Union[torch.device, int, str, None]

# AMD architectures (gcnArchName prefixes) with the matrix-core formats in question.
_ROCM_TF32_ARCHS = ("gfx94", "gfx95")  # MI300/MI325 (CDNA3), MI350/MI355 (CDNA4): XF32
_ROCM_FP8_ARCHS = ("gfx94", "gfx95")  # FP8 on CDNA3 (fnuz formats) and CDNA4 (OCP formats)
_ROCM_FP8_FNUZ_ARCHS = ("gfx94",)  # CDNA3 uses float8_e4m3fnuz / float8_e5m2fnuz


# -- device selection ----------------------------------------------------------------------
def get_device() -> torch.device:
    """The best available device: ``cuda`` (NVIDIA or AMD), else ``mps``, else ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")  # true on both CUDA and ROCm builds
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def is_rocm() -> bool:
    """True on a ROCm (HIP) build of PyTorch, whether or not a GPU is present."""
    return getattr(torch.version, "hip", None) is not None


def vendor() -> str:
    """``"nvidia"``, ``"amd"``, ``"apple"`` or ``"cpu"``: who makes the accelerator in use."""
    if torch.cuda.is_available():
        return "amd" if is_rocm() else "nvidia"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "apple"
    return "cpu"


def is_nvidia() -> bool:
    """True when an NVIDIA GPU is usable through ``torch.cuda``."""
    return vendor() == "nvidia"


def is_amd() -> bool:
    """True when an AMD GPU is usable through ``torch.cuda`` (ROCm/HIP)."""
    return vendor() == "amd"


# -- architecture ----------------------------------------------------------------------------
def gpu_arch(device: DeviceLike = None) -> str:
    """The GPU architecture: ``"gfx942"`` on AMD, ``"sm_90"`` on NVIDIA, ``""`` without a GPU."""
    if not torch.cuda.is_available():
        return ""
    if is_rocm():
        props = torch.cuda.get_device_properties(device)
        return str(getattr(props, "gcnArchName", "")).split(":", 1)[0]
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def cuda_capability(device: DeviceLike = None) -> tuple[int, int] | None:
    """NVIDIA compute capability ``(major, minor)``; None on AMD and without a GPU.

    Use this only for NVIDIA-specific code paths; for feature checks use the
    ``supports_*`` functions, which are right on both vendors.
    """
    if not torch.cuda.is_available() or is_rocm():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return int(major), int(minor)


def _rocm_arch_in(prefixes: tuple[str, ...], device: DeviceLike) -> bool:
    return gpu_arch(device).startswith(prefixes)


# -- capabilities ------------------------------------------------------------------------------
def supports_bf16(device: DeviceLike = None) -> bool:
    """Native bfloat16: NVIDIA compute capability 8.0+ (Ampere and newer); every ROCm GPU
    PyTorch supports (as ``torch.cuda.is_bf16_supported`` says on ROCm)."""
    if not torch.cuda.is_available():
        return False
    if is_rocm():
        return True
    return torch.cuda.get_device_capability(device)[0] >= 8


def supports_tf32(device: DeviceLike = None) -> bool:
    """TensorFloat-32 matmuls: NVIDIA 8.0+; AMD CDNA3/CDNA4 (gfx94x, gfx95x) only."""
    if not torch.cuda.is_available():
        return False
    if is_rocm():
        return _rocm_arch_in(_ROCM_TF32_ARCHS, device)
    return torch.cuda.get_device_capability(device)[0] >= 8


def supports_fp8(device: DeviceLike = None) -> bool:
    """FP8 matmuls: NVIDIA 8.9+ (Ada, Hopper, Blackwell); AMD MI300/MI325/MI350/MI355."""
    if not torch.cuda.is_available():
        return False
    if is_rocm():
        return _rocm_arch_in(_ROCM_FP8_ARCHS, device)
    return tuple(torch.cuda.get_device_capability(device)) >= (8, 9)


def float8_e4m3_dtype(device: DeviceLike = None) -> torch.dtype:
    """The e4m3 FP8 dtype the device computes in: ``float8_e4m3fnuz`` on MI300-class
    (gfx94x), ``float8_e4m3fn`` elsewhere."""
    if torch.cuda.is_available() and is_rocm() and _rocm_arch_in(_ROCM_FP8_FNUZ_ARCHS, device):
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def attention_backend() -> str:
    """The attention implementation to use: PyTorch's SDPA, which dispatches to
    vendor-specific kernels (FlashAttention/cuDNN on NVIDIA, AOTriton/CK on AMD)."""
    return "sdpa"


# -- telemetry (replacements for pynvml) ---------------------------------------------------------
# torch.cuda's telemetry helpers use pynvml (nvidia-ml-py) on NVIDIA and amdsmi on ROCm,
# and take torch device indices (relative to CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES).


class MemoryInfo(NamedTuple):
    """Device memory in bytes, like pynvml's ``nvmlDeviceGetMemoryInfo`` result."""

    free: int
    total: int
    used: int


class UtilizationRates(NamedTuple):
    """Percent of time busy, like pynvml's ``nvmlDeviceGetUtilizationRates`` result.

    On AMD these are amdsmi activity counters (``gfx_activity``, ``umc_activity``).
    """

    gpu: int
    memory: int


def memory_info(device: DeviceLike = None) -> MemoryInfo:
    """Free and total memory from the runtime; used memory as the driver reports it.

    ``torch.cuda.mem_get_info`` creates the device's CUDA/HIP context if it does not exist yet.
    """
    free, total = torch.cuda.mem_get_info(device)
    return MemoryInfo(free=free, total=total, used=torch.cuda.device_memory_used(device))


def utilization_rates(device: DeviceLike = None) -> UtilizationRates:
    return UtilizationRates(gpu=torch.cuda.utilization(device), memory=torch.cuda.memory_usage(device))


def power_draw_mw(device: DeviceLike = None) -> int:
    """Power draw in milliwatts on both vendors.

    ``torch.cuda.power_draw`` returns mW on NVIDIA but W on ROCm (amdsmi socket power,
    0 when the driver reports "N/A").
    """
    value = torch.cuda.power_draw(device)
    return int(value) * 1000 if is_rocm() else int(value)
