"""GPU telemetry: pynvml calls, nvidia-smi parsing, NVTX markers.

pynvml (nvidia-ml-py) only talks to NVIDIA's driver. PyTorch's own telemetry helpers
(``torch.cuda.mem_get_info``, ``utilization``, ``memory_usage``, ``power_draw``,
``temperature``, ``clock_rate``, ``get_device_name``) use pynvml on NVIDIA and amdsmi on ROCm,
so they are the portable route. What differs:

- device indices: NVML's are physical, torch's follow ``CUDA_VISIBLE_DEVICES`` /
  ``HIP_VISIBLE_DEVICES``, so every rewrite that carries a handle's index, and
  ``nvmlDeviceGetCount``, is an *unsafe* fix;
- values on AMD are close relatives, not the same counters: utilization and memory activity
  are amdsmi activity counters, temperature is the junction (hotspot) sensor, used memory has
  MB granularity;
- ``torch.cuda.power_draw`` is mW on NVIDIA and **W** on ROCm: porter never emits it bare but
  calls ``porter_device.power_draw_mw`` from the capability module, which normalises to mW.

The rewrite is all-or-nothing per file: when one pynvml use has no equivalent (process
lists, ECC, ``except pynvml.NVMLError``, a handle that leaves the file's sight), no call in
that file is rewritten, because the remaining pynvml code would still need ``nvmlInit`` and
NVML handles. Each finding then says which use blocked it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

if TYPE_CHECKING:
    from porter.framework import PyContext

NAME = "telemetry"
SAFE, UNSAFE, NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE

_VIS = ("NVML indices are physical GPUs, torch indices are relative to CUDA_VISIBLE_DEVICES/"
        "HIP_VISIBLE_DEVICES: identical only when no visibility mask is set")

RULES = (
    rule("PRT730", "nvml-init-shutdown", NAME, "`pynvml.nvmlInit()` / `nvmlShutdown()`: not needed by torch.cuda telemetry.",
         Category.SHIM, severity=Severity.INFO, fix=SAFE, effort_hours=0.1,
         explanation="torch.cuda's telemetry helpers initialise NVML (NVIDIA) or amdsmi (ROCm) themselves. "
         "The statement is removed when every other pynvml use in the file is rewritten; its fix is as "
         "safe as the least safe of those rewrites."),
    rule("PRT731", "nvml-device-count", NAME, "`nvmlDeviceGetCount()` → `torch.cuda.device_count()`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation=f"Unsafe: {_VIS}."),
    rule("PRT732", "nvml-device-handle", NAME, "`nvmlDeviceGetHandleByIndex(i)`: the handle becomes the torch index `i`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation=f"Unsafe: {_VIS}. Rewritten only when the handle is a plain variable whose every use is "
         "a rewritten pynvml call in the same file."),
    rule("PRT733", "nvml-memory-info", NAME, "`nvmlDeviceGetMemoryInfo(h)` → `torch.cuda.mem_get_info` / `device_memory_used`.",
         Category.SHIM, fix=SAFE, effort_hours=0.25,
         explanation="`.free`/`.total` come from cudaMemGetInfo/hipMemGetInfo (bytes, exact). `.used` is "
         "`torch.cuda.device_memory_used` (NVML on NVIDIA; amdsmi `vram_used` in MiB on AMD: approximate, "
         "so unsafe). A stored result becomes `porter_device.memory_info(i)` (fields free, total, used). "
         "Note that `mem_get_info` initialises the GPU's CUDA/HIP context (some hundred MB on that device) "
         "where NVML did not: a monitor that queries other GPUs than the one it computes on pays that once."),
    rule("PRT734", "nvml-utilization", NAME, "`nvmlDeviceGetUtilizationRates(h)` → `torch.cuda.utilization` / `memory_usage`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation="Unsafe: on AMD these read amdsmi `gfx_activity` / `umc_activity`, activity counters "
         "that approximate NVML's percentages."),
    rule("PRT735", "nvml-power-usage", NAME, "`nvmlDeviceGetPowerUsage(h)` (mW) → `porter_device.power_draw_mw(i)`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation="Unit trap: `torch.cuda.power_draw` is mW on NVIDIA and W on ROCm (0 when amdsmi says "
         "N/A). The capability module's `power_draw_mw` multiplies by 1000 on ROCm. Unsafe: AMD reports "
         "socket power, averaged differently."),
    rule("PRT736", "nvml-temperature", NAME, "`nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)` → `torch.cuda.temperature(i)`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation="Unsafe: AMD reports the junction (hotspot) sensor, hotter than NVIDIA's die sensor."),
    rule("PRT737", "nvml-clock-info", NAME, "`nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)` → `torch.cuda.clock_rate(i)`.",
         Category.SHIM, fix=UNSAFE, effort_hours=0.25,
         explanation="Unsafe: AMD reports the GFX clock, 0 when unavailable. Other clock types are flagged."),
    rule("PRT738", "nvml-device-name", NAME, "`nvmlDeviceGetName(h)` → `torch.cuda.get_device_name(i)`.",
         Category.SHIM, fix=SAFE, effort_hours=0.1,
         explanation="Returns `str` (old pynvml returned bytes; a direct `.decode()` is dropped). On AMD the "
         "marketing name, e.g. \"AMD Instinct MI300X\"."),
    rule("PRT739", "nvml-unsupported", NAME, "A pynvml use with no torch.cuda equivalent.",
         Category.SHIM, fix=NONE, effort_hours=1.0,
         explanation="Process lists, ECC, NVLink, clocks and limits setters, MIG, driver versions, "
         "`pynvml.NVMLError` handlers: port by hand to amdsmi (`amdsmi_get_gpu_process_list`, "
         "`amdsmi_get_gpu_ecc_count`...) behind `porter_device.is_rocm()`, or drop the feature."),
    rule("PRT740", "nvidia-smi-subprocess", NAME, "`nvidia-smi` run in a subprocess (absent on AMD machines).",
         Category.SHIM, fix=NONE, effort_hours=1.0,
         explanation="The portable replacement for the queried fields is printed in the message "
         "(`torch.cuda.mem_get_info`, `utilization`, `temperature`, `porter_device.power_draw_mw`...). "
         "On AMD the command-line tool is `amd-smi` (or the older `rocm-smi`), with different flags and output."),
    rule("PRT745", "torch-nvtx", NAME, "`torch.cuda.nvtx` markers: kept, they work on ROCm.",
         Category.BENIGN, severity=Severity.INFO, fix=NONE, effort_hours=0.0,
         explanation="ROCm builds of PyTorch map NVTX ranges to roctx, so the markers reach rocprof. A build "
         "without the binding raises `RuntimeError`; `torch.profiler.record_function` is the "
         "vendor-neutral alternative when the markers are only for the PyTorch profiler."),
    rule("PRT746", "nvtx-package", NAME, "The standalone `nvtx` package: NVIDIA-only markers.",
         Category.SHIM, fix=NONE, effort_hours=0.25,
         explanation="`nvtx.annotate`/`push_range` reach Nsight only; on AMD they are no-ops. Use "
         "`torch.cuda.nvtx.range` (mapped to roctx on ROCm) or `torch.profiler.record_function`."),
)

SUBPROCESS = frozenset({
    "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
    "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput", "os.system", "os.popen",
})
GATE_FACTS = "telemetry.markers"  # ctx.cache key of the ast visitor that gathers the gate's facts


# -- the LibCST trigger ------------------------------------------------------------------------
# PRT745/PRT746 (NVTX markers) only report and live on the ast tier (``markers.TelemetryMarkers``).
# The LibCST visitor (``visitor.TelemetryVisitor``) keeps the pynvml rewrites and nvidia-smi calls;
# from each of its report sites:
#   - PRT730-PRT739 from calls/references: only while ``has_pynvml``, i.e. an import binding whose
#     target is ``pynvml`` or ``pynvml.*`` (the same ImportIndex records as ``ctx.ast_imports``);
#     ``from pynvml import *`` (PRT739) is such a binding too, and is also noted by the ast visitor
#     wherever it sits (the index does not look into `match` cases);
#   - PRT740: a call resolving to one of SUBPROCESS whose first argument's strings (literal parts,
#     f-string text without its replacement fields, list elements, nested call arguments) hold
#     "nvidia-smi" (both of its patterns need the word). A literal part lies inside one str Constant
#     of ``ast`` (which folds concatenated parts), an f-string's text is its JoinedStr's Constant
#     pieces joined, so "an argument of a SUBPROCESS call holds such a string" is necessary; the ast
#     visitor notes it while resolving the call (``markers._names_smi``).
# No other site reports, so the gate is exact: when it fails, the LibCST visitor reports nothing.
def python_gate(ctx: PyContext) -> bool:
    """Whether ``TelemetryVisitor`` can report anything on this file (see the derivation above)."""
    if any(b.target == "pynvml" or b.target.startswith("pynvml.") for b in ctx.ast_imports.statements):
        return True
    facts = ctx.cache.get(GATE_FACTS)
    if facts is None:  # the shared ast walk did not complete this family's visitor: run it alone
        from porter.codemods.telemetry.markers import TelemetryMarkers
        from porter.pyast import walk

        facts = TelemetryMarkers(ctx)
        try:
            walk(ctx.tree, [facts])
        except Exception:  # noqa: BLE001 - no facts: let the LibCST visitor decide
            return True
    return bool(facts.pynvml_star or facts.smi_call)


FAMILY = Family(
    name=NAME,
    title="GPU telemetry: pynvml → torch.cuda telemetry, nvidia-smi, NVTX",
    order=65,
    rules=RULES,
    tokens=("pynvml", "nvidia-smi", "nvtx"),
    python="porter.codemods.telemetry.visitor:TelemetryVisitor",
    python_ast="porter.codemods.telemetry.markers:TelemetryMarkers",
    python_gate="porter.codemods.telemetry:python_gate",
    description="Replaces pynvml calls with PyTorch's own telemetry helpers, which read NVML on NVIDIA and "
    "amdsmi on AMD, and removes `nvmlInit`/`nvmlShutdown` and the pynvml import once unused. Power goes "
    "through `porter_device.power_draw_mw` (torch reports W on ROCm, mW on NVIDIA).",
    verified="Fixture tests (tests/fixtures/telemetry) cover each call, the all-or-nothing rule, the "
    "unit trap and the visibility trap; tests/test_telemetry.py runs rewritten code against a fake "
    "pynvml and fake torch.cuda telemetry for both vendors.",
    review="Device indices: NVML's are physical, torch's follow CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES. "
    "On AMD, utilization, temperature (junction) and used memory are approximations of NVIDIA's counters.",
)
