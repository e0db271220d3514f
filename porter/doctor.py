"""``porter doctor``: can this machine run the ported code? The smoke test of a new machine as a command.

It reports the PyTorch build (CUDA, ROCm or CPU), the devices and their vendor, bf16 / fp8 /
TF32 capability (the same logic as the capability module porter adds to a repository,
``porter_device.py``), which scaled-dot-product-attention backends actually run, a small bf16
matmul on the device checked against an fp32 product, and installed CUDA-only packages that
would shadow the port. torch is imported lazily, inside the command; porter's other commands
never import it. Nothing here imports the CUDA-only packages: they are read from
``importlib.metadata``.

Exit status:

- **0**: the ported code can run here. Warnings (CPU-only machine, CUDA-only packages
  installed) do not change the exit status, unless ``--require-gpu`` is given and no GPU is
  usable.
- **1**: it cannot: torch is missing or fails to import; a GPU is present but unusable (the
  bf16 matmul raises or gives a wrong result, or the device cannot be queried); a CUDA build of
  PyTorch on a machine with an AMD GPU (``/dev/kfd`` present, ``torch.cuda`` unavailable);
  ``--require-gpu`` without a usable GPU.
- **2**: bad command-line usage (click's convention).

JSON output (``--format json``), one object:

- ``porter``: porter's version; ``python``: the interpreter version; ``platform``: ``sys.platform``.
- ``torch``: ``{"installed": bool, "version", "cuda", "hip", "build", "error"}``. ``cuda`` and
  ``hip`` are ``torch.version.cuda`` / ``torch.version.hip`` (null when unset); ``build`` is
  ``"cuda"``, ``"rocm"`` or ``"cpu"``; ``error`` is the import error's text, else null.
- ``vendor``: ``"nvidia"``, ``"amd"``, ``"apple"`` or ``"cpu"``: who makes the accelerator in use.
- ``device``: the device tested, e.g. ``"cuda:0"`` or ``"cpu"``.
- ``devices``: a list, one object per visible GPU: ``index``, ``name``, ``arch`` (``"gfx942"``,
  ``"sm_90"``), ``capability`` (``[major, minor]`` as torch reports it; AMD GPUs report one too,
  e.g. MI300X ``[9, 4]``), ``memory_bytes``, ``bf16``, ``fp8``, ``tf32`` (booleans).
- ``capability``: ``{"bf16", "fp8", "tf32"}`` for the tested device (all false on CPU).
- ``sdpa``: backend name (``"flash"``, ``"efficient"``, ``"cudnn"``, ``"math"``) →
  ``{"enabled": bool, "runs": bool, "error": str | null}``; ``runs`` is whether a small
  attention call forced onto that backend ran on the tested device.
- ``matmul``: ``{"status": "ok" | "failed" | "skipped", "size", "dtype", "rel_error",
  "seconds", "message"}``: an n×n bf16 matmul on the device compared with the fp32 product of
  the same inputs (relative Frobenius error must be below 1e-2).
- ``cuda_only_packages``: ``[{"name", "version", "advice"}]``: installed distributions that are
  CUDA-only (flash-attn, xformers, apex, bitsandbytes, transformer-engine, nvidia-ml-py, CUDA
  runtime wheels such as ``nvidia-cublas-cu12``, ``cupy-cuda12x``...).
- ``checks``: ``[{"name", "status": "ok" | "warning" | "error" | "skipped", "message"}]``, the
  verdicts the text output prints.
- ``status``: the worst check status (``"ok"``, ``"warning"`` or ``"error"``); ``exit_code``: the
  command's exit status.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any

import click

from . import __version__

_TOLERANCE = 1e-2

# distribution name (canonical) -> advice; patterns for families of CUDA wheels below
CUDA_ONLY = {
    "flash-attn": "use torch.nn.functional.scaled_dot_product_attention, or AMD's ROCm build of flash-attn",
    "xformers": "use scaled_dot_product_attention (xformers has ROCm builds only from its own index)",
    "apex": "use torch.optim.*(fused=True), torch.nn norms and torch.amp (or ROCm/apex)",
    "bitsandbytes": "use torchao quantization, or a ROCm-enabled bitsandbytes build",
    "transformer-engine": "use torchao.float8 on supported parts, else bf16",
    "transformer-engine-torch": "use torchao.float8 on supported parts, else bf16",
    "nvidia-ml-py": "use torch.cuda telemetry or amdsmi",
    "pynvml": "use torch.cuda telemetry or amdsmi",
    "nvidia-ml-py3": "use torch.cuda telemetry or amdsmi",
    "nvidia-dali-cuda120": "use torchvision/torchdata pipelines",
    "tensorrt": "no ROCm build; use torch.compile or MIGraphX",
    "nvtx": "use torch.cuda.nvtx (roctx on ROCm) or torch.profiler.record_function",
}
_CUDA_PATTERNS = (
    (re.compile(r"^nvidia-[a-z0-9-]+-cu\d+$"), "a CUDA runtime wheel: pulled in by a CUDA build of torch or a "
     "CUDA-only package; on a ROCm machine it only takes space, but it reveals a CUDA dependency"),
    (re.compile(r"^cupy-cuda\d+x?$"), "CuPy's CUDA wheel; use cupy-rocm-* on AMD"),
    (re.compile(r"^nvidia-dali-cuda\d+$"), "use torchvision/torchdata pipelines"),
    (re.compile(r"^(jax-cuda\d+-plugin|jax-cuda\d+-pjrt)$"), "JAX's CUDA plugin; use jax-rocm plugins on AMD"),
)

_STATUS_RANK = {"ok": 0, "skipped": 0, "warning": 1, "error": 2}


@dataclass
class Report:
    data: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, str]] = field(default_factory=list)

    def check(self, name: str, status: str, message: str) -> None:
        self.checks.append({"name": name, "status": status, "message": message})

    @property
    def status(self) -> str:
        worst = max((_STATUS_RANK[c["status"]] for c in self.checks), default=0)
        return {0: "ok", 1: "warning", 2: "error"}[worst]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def cuda_only_packages() -> list[dict[str, str]]:
    """Installed distributions that only work with NVIDIA's CUDA (read from metadata, never imported)."""
    found: dict[str, dict[str, str]] = {}
    for dist in metadata.distributions():
        raw = dist.metadata["Name"] if dist.metadata else None
        if not raw:
            continue
        name = _canonical(raw)
        advice = CUDA_ONLY.get(name)
        if advice is None:
            for pattern, text in _CUDA_PATTERNS:
                if pattern.match(name):
                    advice = text
                    break
        if advice is not None:
            found[name] = {"name": name, "version": dist.version or "", "advice": advice}
    return [found[k] for k in sorted(found)]


def _capability_module() -> types.ModuleType:
    """The capability module porter adds to repositories, loaded from its template."""
    from porter.codemods.devices import template_text

    module = types.ModuleType("porter_device")
    exec(compile(template_text(), "porter_device.py", "exec"), module.__dict__)
    return module


def _sdpa(torch: Any, device: str, dtype: Any) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:  # torch < 2.3
        return {"error": {"enabled": False, "runs": False, "error": str(exc)}}
    flags = {
        "flash": ("FLASH_ATTENTION", "flash_sdp_enabled"),
        "efficient": ("EFFICIENT_ATTENTION", "mem_efficient_sdp_enabled"),
        "cudnn": ("CUDNN_ATTENTION", "cudnn_sdp_enabled"),
        "math": ("MATH", "math_sdp_enabled"),
    }
    q = torch.randn(1, 2, 16, 64, device=device, dtype=dtype)
    for name, (member, flag) in flags.items():
        enabled_fn = getattr(torch.backends.cuda, flag, None)
        enabled = bool(enabled_fn()) if enabled_fn is not None else False
        backend = getattr(SDPBackend, member, None)
        entry: dict[str, Any] = {"enabled": enabled, "runs": False, "error": None}
        if backend is None:
            entry["error"] = "not in this torch version"
        else:
            try:
                with sdpa_kernel([backend]):
                    torch.nn.functional.scaled_dot_product_attention(q, q, q)
                entry["runs"] = True
            except Exception as exc:  # noqa: BLE001 - any failure means "does not run here"
                entry["error"] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        out[name] = entry
    return out


def _matmul(torch: Any, device: str, size: int) -> dict[str, Any]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(size, size, generator=gen).to(device=device, dtype=torch.bfloat16)
    start = time.perf_counter()
    y = x @ x
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    ref = x.float() @ x.float()
    err = ((y.float() - ref).norm() / ref.norm()).item()
    ok = bool(torch.isfinite(y).all().item()) and err < _TOLERANCE
    return {
        "status": "ok" if ok else "failed", "size": size, "dtype": "bfloat16", "rel_error": err,
        "seconds": round(seconds, 4),
        "message": f"{size}x{size} bf16 matmul on {device}: relative error {err:.2e} vs fp32"
        + ("" if ok else f" (limit {_TOLERANCE:g}, or non-finite values)"),
    }


def collect(device_index: int = 0, matmul_size: int = 1024, require_gpu: bool = False,
            run_matmul: bool = True) -> Report:
    """Gather the doctor's report (imports torch)."""
    r = Report()
    r.data.update(porter=__version__, python=sys.version.split()[0], platform=sys.platform)
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError from a broken build...
        r.data["torch"] = {"installed": False, "version": None, "cuda": None, "hip": None, "build": None,
                           "error": f"{type(exc).__name__}: {exc}"}
        r.data.update(vendor="cpu", device="cpu", devices=[], capability={}, sdpa={},
                      matmul={"status": "skipped", "message": "torch is not importable"})
        r.check("torch", "error", f"torch cannot be imported ({type(exc).__name__}: {exc}); install the "
                "ROCm build: pip install torch --index-url https://download.pytorch.org/whl/rocm<version>")
        r.data["cuda_only_packages"] = cuda_only_packages()
        return r
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    build = "rocm" if hip else "cuda" if cuda else "cpu"
    r.data["torch"] = {"installed": True, "version": torch.__version__, "cuda": cuda, "hip": hip,
                       "build": build, "error": None}
    r.check("torch", "ok", f"torch {torch.__version__} ({build} build"
            + (f", HIP {hip}" if hip else f", CUDA {cuda}" if cuda else "") + ")")
    pd = _capability_module()
    vendor = pd.vendor()
    r.data["vendor"] = vendor
    devices: list[dict[str, Any]] = []
    gpu = torch.cuda.is_available()
    if gpu:
        try:
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                devices.append({
                    "index": i, "name": props.name, "arch": pd.gpu_arch(i),
                    "capability": [int(props.major), int(props.minor)],
                    "memory_bytes": int(props.total_memory),
                    "bf16": pd.supports_bf16(i), "fp8": pd.supports_fp8(i), "tf32": pd.supports_tf32(i),
                })
        except Exception as exc:  # noqa: BLE001
            r.check("devices", "error", f"a GPU is reported but cannot be queried: {exc}")
            gpu = False
    r.data["devices"] = devices
    if gpu and not 0 <= device_index < len(devices):
        r.check("device", "error", f"--device {device_index}: only {len(devices)} GPU(s) visible")
        gpu = False
    device = f"cuda:{device_index}" if gpu else "mps" if vendor == "apple" else "cpu"
    r.data["device"] = device
    if gpu:
        d = devices[device_index]
        r.data["capability"] = {k: d[k] for k in ("bf16", "fp8", "tf32")}
        names = ", ".join(f"{x['index']}: {x['name']} ({x['arch']})" for x in devices)
        r.check("devices", "ok", f"{len(devices)} {vendor.upper() if vendor == 'amd' else vendor} GPU(s): {names}")
    else:
        r.data["capability"] = {"bf16": False, "fp8": False, "tf32": False}
        kfd = os.path.exists("/dev/kfd")
        if kfd and not hip:
            r.check("devices", "error", "an AMD GPU driver is present (/dev/kfd) but this is a "
                    f"{build.upper()} build of torch: install the ROCm build of PyTorch")
        elif require_gpu:
            r.check("devices", "error", f"no usable GPU ({vendor}) and --require-gpu was given")
        else:
            r.check("devices", "warning", f"no CUDA or ROCm GPU: the ported code runs on {device} "
                    "(if a GPU is installed: driver loaded? CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES empty?)")
    sdpa_dtype = torch.bfloat16 if gpu else torch.float32
    r.data["sdpa"] = _sdpa(torch, device, sdpa_dtype)
    running = [k for k, v in r.data["sdpa"].items() if v.get("runs")]
    r.check("sdpa", "ok" if running else "error",
            f"SDPA backends that run on {device}: {', '.join(running) if running else 'none'}")
    if not gpu:
        r.data["matmul"] = {"status": "skipped", "size": matmul_size, "dtype": "bfloat16", "rel_error": None,
                            "seconds": None, "message": "no CUDA or ROCm GPU on this machine"}
        r.check("matmul", "skipped", "bf16 matmul skipped: no CUDA or ROCm GPU on this machine")
    elif not run_matmul:
        r.data["matmul"] = {"status": "skipped", "size": matmul_size, "dtype": "bfloat16", "rel_error": None,
                            "seconds": None, "message": "skipped (--no-matmul)"}
        r.check("matmul", "skipped", "bf16 matmul skipped (--no-matmul)")
    else:
        try:
            result = _matmul(torch, device, matmul_size)
        except Exception as exc:  # noqa: BLE001
            result = {"status": "failed", "size": matmul_size, "dtype": "bfloat16", "rel_error": None,
                      "seconds": None, "message": f"bf16 matmul raised {type(exc).__name__}: {exc}"}
        r.data["matmul"] = result
        r.check("matmul", "ok" if result["status"] == "ok" else "error", result["message"])
    pkgs = cuda_only_packages()
    r.data["cuda_only_packages"] = pkgs
    if pkgs:
        r.check("packages", "warning", "CUDA-only packages installed: "
                + "; ".join(f"{p['name']} {p['version']} ({p['advice']})" for p in pkgs))
    else:
        r.check("packages", "ok", "no CUDA-only packages installed")
    return r


def render_text(r: Report) -> str:
    d = r.data
    t = d.get("torch", {})
    lines = [f"porter doctor (porter {d.get('porter')}, Python {d.get('python')}, {d.get('platform')})"]
    if t.get("installed"):
        lines.append(f"  torch        {t['version']}  build={t['build']}  torch.version.cuda={t['cuda']}  "
                     f"torch.version.hip={t['hip']}")
    else:
        lines.append(f"  torch        not importable: {t.get('error')}")
    lines.append(f"  vendor       {d.get('vendor')}  (device tested: {d.get('device')})")
    devs = d.get("devices", [])
    lines.append(f"  devices      {len(devs)}")
    for x in devs:
        caps = ", ".join(f"{k} {'yes' if x[k] else 'no'}" for k in ("bf16", "fp8", "tf32"))
        lines.append(f"    [{x['index']}] {x['name']}  arch={x['arch']}  capability={x['capability'][0]}."
                     f"{x['capability'][1]}  memory={x['memory_bytes'] / 2**30:.1f} GiB  {caps}")
    cap = d.get("capability") or {}
    if cap:
        lines.append("  capability   " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in cap.items()))
    sdpa = d.get("sdpa") or {}
    if sdpa:
        parts = [f"{k} ({'runs' if v.get('runs') else 'does not run'}, "
                 f"{'enabled' if v.get('enabled') else 'disabled'})" for k, v in sdpa.items()]
        lines.append("  sdpa         " + ", ".join(parts))
    mm = d.get("matmul") or {}
    lines.append(f"  matmul       {mm.get('status')}: {mm.get('message')}")
    pkgs = d.get("cuda_only_packages") or []
    lines.append("  cuda-only    " + (", ".join(f"{p['name']} {p['version']}" for p in pkgs) if pkgs else "none"))
    lines.append("")
    for c in r.checks:
        if c["status"] != "ok":
            lines.append(f"{c['status'].upper():8} {c['name']}: {c['message']}")
    lines.append(f"result: {r.status}")
    return "\n".join(lines)


def exit_code(r: Report) -> int:
    return 1 if r.status == "error" else 0


@click.command("doctor")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format; the JSON fields are documented in `porter.doctor`.")
@click.option("--device", "device_index", type=click.IntRange(min=0), default=0, show_default=True,
              help="Index of the GPU to test (torch numbering, after CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES).")
@click.option("--require-gpu", is_flag=True, help="Exit 1 when no GPU is usable (default: a warning).")
@click.option("--matmul-size", type=click.IntRange(min=16, max=16384), default=1024, show_default=True,
              help="n for the n×n bf16 matmul check.")
@click.option("--no-matmul", is_flag=True, help="Skip the bf16 matmul check.")
def doctor(fmt: str, device_index: int, require_gpu: bool, matmul_size: int, no_matmul: bool) -> None:
    """Check that this machine can run the ported code (PyTorch build, GPUs, capabilities, SDPA, bf16)."""
    report = collect(device_index=device_index, matmul_size=matmul_size, require_gpu=require_gpu,
                     run_matmul=not no_matmul)
    code = exit_code(report)
    if fmt == "json":
        payload = dict(report.data, checks=report.checks, status=report.status, exit_code=code)
        click.echo(json.dumps(payload, indent=2, sort_keys=False, default=str))
    else:
        click.echo(render_text(report))
    if code:
        click.get_current_context().exit(code)
