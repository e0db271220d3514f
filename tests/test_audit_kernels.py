"""The kernels family next to the other C++ families: one shared parse, no duplicated sites."""

from __future__ import annotations

from pathlib import Path

from porter.testing import findings

KERNEL = (Path(__file__).parent / "fixtures" / "kernels" / "kernels.in.cu").read_text(encoding="utf-8")


def test_all_families_on_a_cuda_file() -> None:
    every = findings(KERNEL, "csrc/kernels.cu")  # every family, one shared tree-sitter parse
    alone = findings(KERNEL, "csrc/kernels.cu", family="kernels")
    codes = [f.code for f in every]
    assert codes.count("PRT870") == 1
    assert codes.count("PRT871") == 2
    # the kernels family's findings survive unchanged next to the others, except its generic
    # inline-PTX finding, which a more specific finding on the same asm statement may replace
    kept = [(f.line, f.code) for f in every if f.code.startswith("PRT8")]
    assert kept == [(f.line, f.code) for f in alone if f.code != "PRT875" or (f.line, f.code) in kept]
    assert sum(1 for f in every if f.line == 21) >= 1  # the asm statement is reported by someone


def test_header_without_kernels_is_still_a_cuda_file() -> None:
    got = findings("#pragma once\nstruct Params { int n; };\n", "include/params.cuh", family="kernels")
    assert [f.code for f in got] == ["PRT870"]
    assert "0 __global__ kernel(s)" in got[0].message


def test_cpp_file_is_not_a_cuda_file() -> None:
    got = findings("#include <cuda_runtime.h>\nint f() { return 0; }\n", "csrc/host.cpp", family="kernels")
    assert got == []
