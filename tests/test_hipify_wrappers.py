"""HIPify adapters: fake hipify-perl/hipify-clang executables on PATH, torch.utils.hipify for real,
and the setup.py CUDAExtension double-conversion guard."""

from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from porter.hipify_wrappers import included_headers, run_hipify
from porter.hipify_wrappers.setup_scan import scan_setup

KERNEL = textwrap.dedent("""\
    #include <cuda_runtime.h>
    #include "util.cuh"
    __global__ void k(float* x, unsigned* b) {
      float v = x[threadIdx.x];
      v += __shfl_xor_sync(0xffffffff, v, 16);
      unsigned m = __ballot_sync(0xffffffff, v > 0.f) & __activemask();
      b[threadIdx.x / 32] = m;
      x[threadIdx.x] = v * warpSize;
    }
    void launch(float* x, unsigned* b) {
      k<<<1, 64>>>(x, b);
      cudaDeviceSynchronize();
      cudaFancyNewApi(x);
    }
""")
UTIL = "#pragma once\n#include <cuda_runtime.h>\ninline void sync_all() { cudaDeviceSynchronize(); }\n"


def _project(tmp: Path) -> Path:
    root = tmp / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text(KERNEL)
    (root / "csrc" / "util.cuh").write_text(UTIL)
    return root


FAKE_PERL = textwrap.dedent("""\
    #!{python}
    import re, sys
    args = sys.argv[1:]
    if "--version" in args:
        print("HIPIFY: hipify-perl version 6.2.41134 (fake)")
        sys.exit(0)
    out = [a[3:] for a in args if a.startswith("-o=")][0]
    src = [a for a in args if not a.startswith("-")][0]
    text = open(src).read()
    for i, line in enumerate(text.splitlines(), 1):
        if "__shfl_xor_sync" in line:
            sys.stderr.write(f'  warning: {{src}}:#{{i}} : unsupported device function "__shfl_xor_sync": {{line}}\\n')
    text = text.replace("cudaDeviceSynchronize", "hipDeviceSynchronize").replace("cuda_runtime.h", "hip/hip_runtime.h")
    open(out, "w").write(text)
""")

FAKE_CLANG = textwrap.dedent("""\
    #!{python}
    import sys
    args = sys.argv[1:]
    if "--version" in args:
        print("HIPIFY version 18.0.0 (fake), LLVM 18.1.8")
        sys.exit(0)
    src = args[0]
    out = args[args.index("-o") + 1]
    text = open(src).read()
    if "#error" in text:
        sys.stderr.write(f"{{src}}:1:2: error: boom\\n")
        sys.exit(1)
    for i, line in enumerate(text.splitlines(), 1):
        col = line.find("__shfl_xor_sync")
        if col >= 0:
            sys.stderr.write(f"{{src}}:{{i}}:{{col + 1}}: warning: '__shfl_xor_sync' is unsupported in 'HIP'.\\n")
    open(out, "w").write(text.replace("cudaDeviceSynchronize", "hipDeviceSynchronize"))
""")


def _fake(tmp: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(body.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def _no_engines_on_path(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    import shutil

    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if not (shutil.which("hipify-perl", path=p) or shutil.which("hipify-clang", path=p))]
    monkeypatch.setenv("PATH", os.pathsep.join(keep))


def test_included_headers_follows_quoted_includes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert included_headers(root, ["csrc/k.cu"]) == ["csrc/k.cu", "csrc/util.cuh"]


def test_perl_adapter_with_fake_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    _fake(tmp_path, "hipify-perl", FAKE_PERL, monkeypatch)
    res = run_hipify(root, ["csrc/k.cu"], engine="auto", scratch=tmp_path / "scratch")
    assert (res.engine, res.version) == ("hipify-perl", "6.2.41134")
    by_path = {c.path: c for c in res.changes}
    assert set(by_path) == {"csrc/k.cu", "csrc/util.cuh"}  # in place, no renames
    assert b"hipDeviceSynchronize" in by_path["csrc/k.cu"].after
    codes = sorted({(f.code, f.line) for f in res.findings if f.path == "csrc/k.cu"})
    assert ("PRT561", 5) in codes  # relayed warning at its line
    assert ("PRT560", 13) in codes  # cudaFancyNewApi left unconverted
    assert ("PRT562", 5) in codes and ("PRT562", 6) in codes  # masks HIPify never changes
    assert not any(f.code == "PRT560" and f.line == 12 for f in res.findings)  # converted call


def test_clang_adapter_diagnostics_and_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    (root / "csrc" / "bad.cu").write_text("#error nope\n")
    _no_engines_on_path(monkeypatch, tmp_path)
    _fake(tmp_path, "hipify-clang", FAKE_CLANG, monkeypatch)
    res = run_hipify(root, ["csrc/k.cu", "csrc/bad.cu"], engine="hipify-clang", scratch=tmp_path / "s")
    assert res.engine == "hipify-clang" and res.version == "18.0.0"
    assert any(f.code == "PRT561" and f.path == "csrc/k.cu" and (f.line, f.column) == (5, 8) for f in res.findings)
    assert any(f.code == "PRT565" and f.path == "csrc/bad.cu" for f in res.findings)
    assert "csrc/bad.cu" not in {c.path for c in res.changes}


def test_named_engine_missing_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_engines_on_path(monkeypatch, tmp_path)
    with pytest.raises(FileNotFoundError):
        run_hipify(_project(tmp_path), ["csrc/k.cu"], engine="hipify-perl")


def test_setup_scan_never_executes_and_resolves_sources(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "setup.py").write_text(textwrap.dedent("""\
        raise SystemExit("porter must never run this file")
        import glob, os
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
        SRCS = ["csrc/k.cu"]
        setup(name="x", ext_modules=[
            CUDAExtension("x._C", SRCS + [os.path.join("csrc", "other.cu")]),
            CUDAExtension(name="y._C", sources=make_sources()),
        ], cmdclass={"build_ext": BuildExtension})
    """))
    exts, findings = scan_setup(root)
    assert [e.sources for e in exts] == [["csrc/k.cu", "csrc/other.cu"], []]
    assert [(f.code, f.line) for f in findings] == [("PRT563", 7), ("PRT566", 8)]


def test_cuda_extension_sources_skipped_unless_forced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    (root / "setup.py").write_text(
        "from torch.utils.cpp_extension import CUDAExtension\nCUDAExtension('x', sources=['csrc/k.cu'])\n")
    _fake(tmp_path, "hipify-perl", FAKE_PERL, monkeypatch)
    res = run_hipify(root, ["csrc/k.cu"], engine="perl")
    assert res.skipped == ["csrc/k.cu"] and res.changes == []
    assert [f.code for f in res.findings] == ["PRT563"]
    forced = run_hipify(root, ["csrc/k.cu"], engine="perl", force=True)
    assert {c.path for c in forced.changes} == {"csrc/k.cu", "csrc/util.cuh"}


torch = pytest.importorskip("torch", reason="torch.utils.hipify needs torch")


def test_torch_hipify_renames_and_leaves_warp_code_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    _no_engines_on_path(monkeypatch, tmp_path)
    res = run_hipify(root, ["csrc/k.cu"], engine="auto")
    assert res.engine == "torch"
    kinds = {(c.kind, c.path) for c in res.changes}
    assert kinds == {("delete", "csrc/k.cu"), ("add", "csrc/k.hip"),
                     ("delete", "csrc/util.cuh"), ("add", "csrc/util_hip.cuh")}
    out = next(c.after for c in res.changes if c.path == "csrc/k.hip").decode()
    assert '#include "util_hip.cuh"' in out and "hipDeviceSynchronize" in out
    # torch hipify has no warp rewriting: intrinsics, masks and warpSize pass through unchanged
    for kept in ("__shfl_xor_sync(0xffffffff, v, 16)", "__ballot_sync(0xffffffff, v > 0.f)", "__activemask()",
                 "v * warpSize", "threadIdx.x / 32"):
        assert kept in out
    codes = sorted((f.code, f.line) for f in res.findings)
    assert ("PRT562", 5) in codes and ("PRT562", 6) in codes
    assert ("PRT560", 13) in codes
