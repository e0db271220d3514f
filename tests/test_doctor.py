"""`porter doctor` through click's CliRunner: on this CPU machine, and with mocked GPUs."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner

from porter import doctor as doctor_mod
from porter.doctor import doctor

torch = pytest.importorskip("torch")
NO_GPU = not torch.cuda.is_available()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(doctor, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def documented_json_keys() -> set[str]:
    doc = doctor_mod.__doc__ or ""
    section = doc.split("JSON output", 1)[1]
    return set(re.findall(r"^- ``(\w+)``", section, flags=re.M)) | set(re.findall(r"; ``(\w+)``:", section))


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only report")
def test_text_report_on_a_cpu_machine() -> None:
    code, out = invoke()
    assert code == 0
    assert "vendor       cpu" in out
    assert f"torch        {torch.__version__}" in out
    assert "matmul       skipped" in out
    assert "WARNING  devices: no CUDA or ROCm GPU" in out
    assert "result: warning" in out


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only report")
def test_json_report_is_documented_and_says_cpu() -> None:
    code, out = invoke("--format", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == documented_json_keys()
    assert data["vendor"] == "cpu" and data["device"] == "cpu" and data["devices"] == []
    assert data["torch"]["build"] == "cpu" and data["torch"]["version"] == torch.__version__
    assert data["capability"] == {"bf16": False, "fp8": False, "tf32": False}
    assert data["sdpa"]["math"]["runs"] is True
    assert data["matmul"]["status"] == "skipped"
    assert data["status"] == "warning" and data["exit_code"] == 0
    assert {c["name"] for c in data["checks"]} >= {"torch", "devices", "sdpa", "matmul", "packages"}


@pytest.mark.skipif(not NO_GPU, reason="checks the CPU-only report")
def test_require_gpu_fails_without_one() -> None:
    code, out = invoke("--require-gpu")
    assert code == 1
    assert "ERROR    devices: no usable GPU" in out


def test_missing_torch_is_an_error() -> None:
    with mock.patch.dict(sys.modules, {"torch": None}):
        code, out = invoke("--format", "json")
    data = json.loads(out)
    assert code == 1 and data["status"] == "error"
    assert data["torch"]["installed"] is False and "ModuleNotFoundError" in data["torch"]["error"]


def test_cuda_only_packages_are_read_from_metadata() -> None:
    def dist(name: str, version: str = "1.0") -> Any:
        return SimpleNamespace(metadata={"Name": name}, version=version)

    fake = [dist("flash_attn", "2.7.4"), dist("nvidia-cublas-cu12", "12.4.5.8"), dist("numpy"),
            dist("Cupy-Cuda12x"), dist("torch", "2.13.0")]
    with mock.patch.object(doctor_mod.metadata, "distributions", lambda: fake):
        names = [p["name"] for p in doctor_mod.cuda_only_packages()]
    assert names == ["cupy-cuda12x", "flash-attn", "nvidia-cublas-cu12"]
    assert "flash_attn" not in sys.modules  # never imported


def test_bf16_matmul_check_itself_runs_on_cpu() -> None:
    result = doctor_mod._matmul(torch, "cpu", 64)
    assert result["status"] == "ok" and result["rel_error"] < 1e-2


@contextlib.contextmanager
def fake_gpu(props: SimpleNamespace, hip: str | None, matmul: dict[str, Any] | None = None) -> Iterator[None]:
    ok = {"status": "ok", "size": 1024, "dtype": "bfloat16", "rel_error": 3e-3, "seconds": 0.01,
          "message": "1024x1024 bf16 matmul on cuda:0: relative error 3.00e-03 vs fp32"}
    sdpa = {"flash": {"enabled": True, "runs": True, "error": None},
            "cudnn": {"enabled": True, "runs": False, "error": "no cuDNN attention on ROCm"}}
    with contextlib.ExitStack() as stack:
        enter = stack.enter_context
        enter(mock.patch.object(torch.cuda, "is_available", lambda: True))
        enter(mock.patch.object(torch.cuda, "device_count", lambda: 1))
        enter(mock.patch.object(torch.cuda, "get_device_properties", lambda d=None: props))
        enter(mock.patch.object(torch.cuda, "get_device_capability", lambda d=None: (props.major, props.minor)))
        enter(mock.patch.object(torch.version, "hip", hip))
        enter(mock.patch.object(torch.version, "cuda", None if hip else "12.8"))
        enter(mock.patch.object(doctor_mod, "_sdpa", lambda *a: sdpa))
        enter(mock.patch.object(doctor_mod, "_matmul", lambda *a: matmul or ok))
        yield


MI300X = SimpleNamespace(name="AMD Instinct MI300X", major=9, minor=4, gcnArchName="gfx942:sramecc+:xnack-",
                         total_memory=192 * 2**30)
MI250X = SimpleNamespace(name="AMD Instinct MI250X/MI250", major=9, minor=0, gcnArchName="gfx90a:sramecc+:xnack-",
                         total_memory=64 * 2**30)
H100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * 2**30)


@pytest.mark.parametrize(("props", "hip", "vendor", "arch", "fp8", "tf32"), [
    (MI300X, "6.3.42131", "amd", "gfx942", True, True),
    (MI250X, "6.2.41133", "amd", "gfx90a", False, False),
    (H100, None, "nvidia", "sm_90", True, True),
])
def test_mocked_gpus_report_vendor_and_capabilities(props: SimpleNamespace, hip: str | None, vendor: str,
                                                    arch: str, fp8: bool, tf32: bool) -> None:
    with fake_gpu(props, hip):
        code, out = invoke("--format", "json", "--require-gpu")
    data = json.loads(out)
    assert code == 0, out
    assert data["vendor"] == vendor and data["device"] == "cuda:0"
    assert data["torch"]["build"] == ("rocm" if hip else "cuda")
    (dev,) = data["devices"]
    assert dev["arch"] == arch and dev["capability"] == [props.major, props.minor]
    assert (dev["bf16"], dev["fp8"], dev["tf32"]) == (True, fp8, tf32)
    assert data["matmul"]["status"] == "ok"
    with fake_gpu(props, hip):
        code, text = invoke()
    assert f"[0] {props.name}  arch={arch}" in text


def test_a_wrong_matmul_on_the_gpu_is_an_error() -> None:
    bad = {"status": "failed", "size": 1024, "dtype": "bfloat16", "rel_error": 0.9, "seconds": 0.01,
           "message": "1024x1024 bf16 matmul on cuda:0: relative error 9.00e-01 vs fp32 (limit 0.01)"}
    with fake_gpu(MI300X, "6.3.42131", matmul=bad):
        code, out = invoke()
    assert code == 1 and "ERROR    matmul" in out


def test_a_device_index_out_of_range_is_an_error() -> None:
    with fake_gpu(MI300X, "6.3.42131"):
        code, out = invoke("--device", "3")
    assert code == 1 and "only 1 GPU(s) visible" in out


@pytest.mark.skipif(not NO_GPU, reason="needs a machine without a GPU")
def test_cuda_build_on_an_amd_machine_is_an_error() -> None:
    real_exists = doctor_mod.os.path.exists
    with mock.patch.object(doctor_mod.os.path, "exists", lambda p: p == "/dev/kfd" or real_exists(p)), \
            mock.patch.object(torch.version, "cuda", "12.8"), mock.patch.object(torch.version, "hip", None):
        code, out = invoke()
    assert code == 1 and "install the ROCm build of PyTorch" in out


def test_importing_the_command_does_not_import_torch() -> None:
    probe = "import sys, porter.doctor; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
