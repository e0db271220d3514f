"""The telemetry family: pynvml → torch.cuda telemetry, run against fakes of both vendors.

A fake pynvml (NVML semantics: physical indices, mW) and fake torch.cuda telemetry helpers
(NVIDIA: the same NVML numbers; ROCm: amdsmi semantics, power in W) let the original and the
rewritten fixture code run side by side on CPU.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from porter.codemods import telemetry
from porter.codemods.devices import template_text
from porter.findings import Applicability
from porter.testing import findings, fixed, settings_for

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"

# one GPU, physical index 0: what NVML (NVIDIA) and amdsmi (AMD) would report
GPU = dict(name="NVIDIA H100 80GB HBM3", total=80 * 2**30, free=60 * 2**30, used=20 * 2**30, gpu=87, memory=41,
           power_mw=312_000, temp=64, sm_clock=1980, count=1)


def fake_pynvml(legacy_names: bool = False) -> types.ModuleType:
    """``legacy_names``: old pynvml releases returned names as bytes."""
    m = types.ModuleType("pynvml")
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: GPU["count"]
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=GPU["total"], free=GPU["free"], used=GPU["used"])
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=GPU["gpu"], memory=GPU["memory"])
    m.nvmlDeviceGetPowerUsage = lambda h: GPU["power_mw"]
    m.nvmlDeviceGetTemperature = lambda h, sensor: GPU["temp"] if sensor == 0 else -1
    m.nvmlDeviceGetClockInfo = lambda h, kind: GPU["sm_clock"] if kind == 1 else -1
    m.nvmlDeviceGetName = lambda h: GPU["name"].encode() if legacy_names else GPU["name"]
    return m


@contextlib.contextmanager
def torch_telemetry(rocm: bool) -> Iterator[types.ModuleType]:
    """torch.cuda's helpers as they behave on NVIDIA (NVML, mW) or ROCm (amdsmi, W)."""
    device_module = types.ModuleType("porter_device")
    fakes = {
        "mem_get_info": lambda d=None: (GPU["free"], GPU["total"]),
        "device_memory_used": lambda d=None: GPU["used"],
        "utilization": lambda d=None: GPU["gpu"],
        "memory_usage": lambda d=None: GPU["memory"],
        "power_draw": (lambda d=None: GPU["power_mw"] // 1000) if rocm else (lambda d=None: GPU["power_mw"]),
        "temperature": lambda d=None: GPU["temp"],
        "clock_rate": lambda d=None: GPU["sm_clock"],
        "get_device_name": lambda d=None: GPU["name"],
        "device_count": lambda: GPU["count"],
        "is_available": lambda: True,
    }
    with contextlib.ExitStack() as stack:
        for name, fn in fakes.items():
            stack.enter_context(mock.patch.object(torch.cuda, name, fn))
        stack.enter_context(mock.patch.object(torch.version, "hip", "6.3.42131" if rocm else None))
        exec(compile(template_text(), "porter_device.py", "exec"), device_module.__dict__)
        stack.enter_context(mock.patch.dict(sys.modules, {"porter_device": device_module}))
        yield device_module


def run(source: str, fn: str, *args: object, legacy_names: bool = False) -> object:
    ns: dict[str, object] = {}
    with mock.patch.dict(sys.modules, {"pynvml": fake_pynvml(legacy_names)}):
        exec(compile(source, "t.py", "exec"), ns)
        return ns[fn](*args)  # type: ignore[operator]


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_rewritten_stats_equal_nvml_on_nvidia_and_units_hold_on_rocm() -> None:
    source = read("pynvml_rewrite.in.py")
    rewritten = fixed(source, family="telemetry", unsafe=True)
    assert "pynvml" not in rewritten
    original = run(source, "gpu_stats", 0)
    with torch_telemetry(rocm=False):
        assert run(rewritten, "gpu_stats", 0) == original
    with torch_telemetry(rocm=True):
        on_rocm = run(rewritten, "gpu_stats", 0)
    assert on_rocm == original  # same fake numbers: in particular watts, despite W from amdsmi


def test_trap_23_power_is_never_emitted_bare() -> None:
    """A naive rewrite to torch.cuda.power_draw is 1000x off on ROCm; porter routes it through mW."""
    source = read("pynvml_rewrite.in.py")
    rewritten = fixed(source, family="telemetry", unsafe=True)
    assert "torch.cuda.power_draw(" not in rewritten
    assert "porter_device.power_draw_mw(handle) / 1000.0" in rewritten
    naive = rewritten.replace("porter_device.power_draw_mw(handle)", "torch.cuda.power_draw(handle)")
    with torch_telemetry(rocm=True):
        assert run(naive, "gpu_stats", 0)["watts"] == GPU["power_mw"] / 1000 / 1000  # type: ignore[index]


def test_trap_23_approximate_counters_are_unsafe() -> None:
    by_code = {f.code: f for f in findings(read("pynvml_rewrite.in.py"), family="telemetry")}
    for code in ("PRT734", "PRT735", "PRT736", "PRT737"):
        assert by_code[code].fix == Applicability.UNSAFE, code
    assert "junction" in by_code["PRT736"].message
    assert "W on ROCm" in by_code["PRT735"].message


def test_trap_24_indices_and_counts_are_unsafe_and_explained() -> None:
    found = findings(read("pynvml_rewrite.in.py"), family="telemetry")
    for f in found:
        assert f.fix == Applicability.UNSAFE  # the handle chain makes every rewrite unsafe
    count = next(f for f in found if f.code == "PRT731")
    assert "CUDA_VISIBLE_DEVICES" in count.message
    assert fixed(read("pynvml_rewrite.in.py"), family="telemetry") == read("pynvml_rewrite.in.py")


def test_trap_24_a_file_that_sets_a_visibility_mask_keeps_pynvml() -> None:
    """NVML index 1 is torch's cuda:0 once CUDA_VISIBLE_DEVICES=1: carrying the index would be wrong."""
    source = read("pynvml_visibility_mask.in.py")
    assert fixed(source, family="telemetry", unsafe=True) == source
    handle = next(f for f in findings(source, family="telemetry") if f.line == 8)
    assert handle.code == "PRT739" and "visibility mask (line 5)" in handle.message


def test_trap_24_a_nested_handle_is_an_index_change_too() -> None:
    source = read("pynvml_empty_block.in.py")
    memory = next(f for f in findings(source, family="telemetry") if f.code == "PRT733")
    assert memory.fix == Applicability.UNSAFE and "CUDA_VISIBLE_DEVICES" in memory.message
    assert fixed(source, family="telemetry") == source
    out = fixed(source, family="telemetry", unsafe=True)
    assert "def setup():\n    pass\n" in out  # a block of removed statements keeps a `pass`


def test_stored_results_keep_their_fields() -> None:
    source = read("pynvml_stored.in.py")
    rewritten = fixed(source, family="telemetry", unsafe=True)
    assert ".decode(" not in rewritten
    original = run(source, "memory_report", 0, legacy_names=True)
    for rocm in (False, True):
        with torch_telemetry(rocm=rocm):
            assert run(rewritten, "memory_report", 0) == original
            assert run(rewritten, "first_name") == GPU["name"]


def test_init_and_shutdown_alone_are_safe_to_drop() -> None:
    source = read("pynvml_init_only.in.py")
    out = fixed(source, family="telemetry")
    assert "pynvml" not in out and "if torch.cuda.is_available(): pass" in out


def test_one_unsupported_use_blocks_the_whole_file() -> None:
    source = read("pynvml_blocked.in.py")
    assert fixed(source, family="telemetry", unsafe=True) == source
    found = findings(source, family="telemetry")
    assert all(f.fix == Applicability.NONE for f in found)
    blocked = next(f for f in found if f.code == "PRT733")
    assert "nvmlDeviceGetComputeRunningProcesses" in blocked.message or "NVMLError" in blocked.message
    unsupported = [f.message for f in found if f.code == "PRT739"]
    assert any("amdsmi_get_gpu_process_list" in m for m in unsupported)


def test_handles_from_callers_and_other_sensors_are_not_rewritten() -> None:
    source = read("pynvml_escaping_handle.in.py")
    assert fixed(source, family="telemetry", unsafe=True) == source
    messages = " ".join(f.message for f in findings(source, family="telemetry"))
    assert "does not come from nvmlDeviceGetHandleByIndex" in messages
    assert "other than NVML_TEMPERATURE_GPU" in messages


def test_specific_findings_supersede_the_generic_pynvml_use() -> None:
    found = findings(read("pynvml_rewrite.in.py"), settings=settings_for(None))
    assert "PRT016" in {f.code for f in found}  # the import is still reported by packages
    assert "PRT020" not in {f.code for f in found}


def test_pynvml_from_a_different_module_is_ignored() -> None:
    source = "import mylib.pynvml_shim as pynvml\n\npynvml.nvmlInit()\n"
    assert findings(source, family="telemetry") == []


def test_family_metadata() -> None:
    codes = [r.code for r in telemetry.FAMILY.rules]
    assert all("PRT730" <= c <= "PRT759" for c in codes)
    assert telemetry.FAMILY.order == 65
