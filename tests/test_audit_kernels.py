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


# -- Python (stdlib-ast tier) ---------------------------------------------------------------------

def _spans(src: str, path: str = "k.py") -> list[tuple[str, int, int, int, str]]:
    return [(f.code, f.line, f.column, f.end_column, f.message) for f in findings(src, path, family="kernels")]


def test_python_tokens_leave_cpp_words_out() -> None:
    from codemods.kernels import FAMILY

    # C++ tokens in a Python file (a CUDA source string, a comment) do not start the Python rules
    src = 'SRC = "#include <cub/cub.cuh>\\n__global__ void k() { asm(\\"nop\\"); }"  # cuda\n'
    assert not FAMILY.matches(src, "python", "k.py")
    assert FAMILY.matches(src, "cuda", "k.cu")
    assert FAMILY.matches("import triton\n", "python", "k.py")


def test_kernel_names_are_reported_at_the_name() -> None:
    src = ("import triton\nimport numba.cuda\n\n@triton.jit\nasync   def   akern(): pass\n\n"
           "@numba.cuda.jit\ndef  \u00e9_k(): pass\n")
    assert [s[:4] for s in _spans(src)] == [("PRT864", 5, 15, 20), ("PRT868", 8, 6, 9)]


def test_load_reads_each_literal_of_a_concatenation() -> None:
    src = ('from torch.utils.cpp_extension import load\n'
           'ext = load("m" "x", ["a.cpp", "b.cu" "c.cuh", f"{\'d.cu\'}", f"e{1}.cu"])\n')
    (code, _line, _col, _end, message), = _spans(src)
    # literals right to left; "b.cu" "c.cuh" are two literals, f-string text is no literal
    assert code == "PRT861" and "'?' JIT-compiles d.cu, c.cuh, b.cu (" in message


def test_extension_name_must_be_one_literal() -> None:
    src = ('from torch.utils.cpp_extension import CUDAExtension as E\n'
           'a = E(u"nm", sources=["a.cu", "b.cpp"])\nb = E(b"nm", sources=s)\nc = E("n" "m", ["x.cu"])\n')
    assert [m.split(":")[0] for *_, m in _spans(src)] == [
        "CUDAExtension 'nm' (1 .cu source(s))", "CUDAExtension '?' (sources not listed literally)",
        "CUDAExtension '?' (1 .cu source(s))"]


def test_num_warps_one_finding_at_the_first_keyword() -> None:
    src = ("import triton\n\n@triton.autotune(configs=[triton.Config({}, num_warps=4), "
           "triton.Config({}, num_warps= 8)], key=[])\n@triton.jit\ndef k(x): pass\n\n"
           "k[(1,)](x, num_warps=2)\n")
    got = [s for s in _spans(src) if s[0] == "PRT866"]
    assert [s[:4] for s in got] == [("PRT866", 3, 45, 56)]
    assert got[0][4].startswith("3 num_warps setting(s) in this file (2, 4, 8)")


def test_extra_cuda_chain_reported_once() -> None:
    src = ("import triton.language as tl\nfrom triton.language.extra import cuda\n"
           "y = tl.extra.cuda.libdevice.pow(x, 2)\nz = cuda.libdevice.exp(x)\n")
    assert [s[:4] for s in _spans(src)] == [("PRT867", 2, 1, 39), ("PRT867", 3, 5, 32), ("PRT867", 4, 5, 23)]


def test_a_cuda_file_is_parsed_once_for_every_family(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from porter.codemods import _cuda_tree

    parser = _cuda_tree._parser()
    calls: list[int] = []

    class Counting:
        def parse(self, data: bytes) -> object:
            calls.append(len(data))
            return parser.parse(data)

    monkeypatch.setattr(_cuda_tree, "_parser", lambda: Counting())
    src = ("__global__ void k(float* x) {\n  float v = x[threadIdx.x];\n"
           "  v += __shfl_down_sync(0xffffffff, v, 16);\n  x[threadIdx.x] = v;\n}\n")
    got = findings(src, "csrc/k.cu")
    assert {"PRT870"} <= {f.code for f in got}  # the kernels family ran
    assert any(not f.code.startswith("PRT8") for f in got)  # and another C++ family
    assert len(calls) == 1
