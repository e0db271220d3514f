"""PRT524 (warp-intrinsic overloads) against include reachability from the HIP build of the tree.

Fixtures are shapes only: a library with a second framework backend whose helper header carries
32-bit-mask shuffle overloads, selected by a macro nothing in the tree defines, next to a normal
CUDA/HIP extension whose own overload header its kernels include.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.codemods.warp_size.reach import Reach, project_macro
from porter.config import Settings
from porter.findings import Category, Severity
from porter.runner import run

OTHER_WARP = (
    "#ifndef OTHER_WARP_CUH\n#define OTHER_WARP_CUH\n"
    "#ifdef OTHERFW_USE_HALF\n"
    "__device__ inline half16 __shfl_down_sync(unsigned mask, half16 v, unsigned delta, int width = warpSize) {\n"
    "  half16 r; r.x = __shfl_down_sync(mask, v.x, delta, width); return r;\n}\n"
    "#endif\n#endif\n")
OTHER_HELPER = ("#ifndef OTHER_CUDA_HELPER\n#define OTHER_CUDA_HELPER\n#include <otherfw/core.hpp>\n"
                "#include \"other_warp.cuh\"\n#endif\n")
TORCH_HELPER = "#pragma once\n#include <ATen/ATen.h>\n#define CUDA_1D_LOOP(i, n) for (int i = 0; i < (n); ++i)\n"
KERNEL_HEADER = ("#ifndef ROLL_KERNEL_CUH\n#define ROLL_KERNEL_CUH\n#ifdef LIB_USE_OTHERFW\n"
                 "#include \"other_cuda_helper.hpp\"\n#else  // LIB_USE_OTHERFW\n#include \"torch_cuda_helper.hpp\"\n"
                 "#endif  // LIB_USE_OTHERFW\n"
                 "__global__ void roll(float* x, int n) { CUDA_1D_LOOP(i, n) x[i] += 1.f; }\n#endif\n")
KERNEL_TU = "#include \"roll_kernel.cuh\"\nvoid roll_launch(float* x, int n) { roll<<<1, 64>>>(x, n); }\n"
SETUP_PY = ("from setuptools import setup\n"
            "if BACKEND == 'otherfw':\n"
            "    # the new backend no longer uses LIB_USE_OTHERFW\n"
            "    # define_macros = [('LIB_USE_OTHERFW', None)]\n"
            "    define_macros = []\n"
            "else:\n    define_macros = [('LIB_WITH_HIP', None)]\n")


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _backend_tree(root: Path, **overrides: str) -> None:
    files = {"setup.py": SETUP_PY, "csrc/common/other_warp.cuh": OTHER_WARP,
             "csrc/common/other_cuda_helper.hpp": OTHER_HELPER, "csrc/common/torch_cuda_helper.hpp": TORCH_HELPER,
             "csrc/common/roll_kernel.cuh": KERNEL_HEADER, "csrc/cuda/roll_cuda.cu": KERNEL_TU}
    files.update(overrides)
    _tree(root, files)


def _prt524(root: Path) -> list:
    res = run(root, [root], Settings(select=("PRT5",)), "audit", jobs=1, use_cache=False)
    return [f for r in res.files for f in r.findings if f.code == "PRT524"]


def _kinds(got: list) -> list[str]:
    """"note" for an informational finding, "error" for the rule's own (actionable) severity."""
    return ["note" if f.severity == Severity.INFO else "error" for f in got]


def test_overload_only_another_backend_includes_is_a_note(tmp_path: Path) -> None:
    _backend_tree(tmp_path)
    got = _prt524(tmp_path)
    assert [(f.path, f.line) for f in got] == [("csrc/common/other_warp.cuh", 4)]
    note = got[0]
    assert note.severity == Severity.INFO and note.category == Category.BENIGN and note.effort_hours == 0.0
    assert "`LIB_USE_OTHERFW`" in note.message and "no HIP build of this tree compiles it" in note.message


@pytest.mark.parametrize(("rel", "text"), [
    ("setup.py", SETUP_PY.replace("    define_macros = []\n", "    define_macros = [('LIB_USE_OTHERFW', None)]\n")),
    ("CMakeLists.txt", "add_definitions(-DLIB_USE_OTHERFW)  # the other backend\n"),
    ("csrc/common/config.h", "#pragma once\n#define LIB_USE_OTHERFW 1\n"),
    ("docs/build.md", "Build the other backend with `CFLAGS=-DLIB_USE_OTHERFW`.\n"),
])
def test_a_backend_macro_the_tree_defines_keeps_the_overload_actionable(tmp_path: Path, rel: str,
                                                                         text: str) -> None:
    _backend_tree(tmp_path, **{rel: text})
    got = _prt524(tmp_path)
    assert [f.path for f in got] == ["csrc/common/other_warp.cuh"] and _kinds(got) == ["error"]


def test_overload_header_a_cuda_extension_includes_stays_actionable(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "csrc/cuda/utils.cuh": (
            "#pragma once\n#include <ATen/ATen.h>\n"
            "__device__ __inline__ at::Half __shfl_up_sync(const unsigned mask, const at::Half var,\n"
            "                                              const unsigned int delta) {\n"
            "  return __shfl_up_sync(mask, var.operator __half(), delta);\n}\n"),
        "csrc/cuda/segment_cuda.cu": ("#include <ATen/cuda/CUDAContext.h>\n#include \"utils.cuh\"\n"
                                      "__global__ void seg(at::Half* x) { x[0] = __shfl_up_sync(0xffffffff, x[0], 1); }\n"),
    })
    got = _prt524(tmp_path)
    assert [(f.path, f.line) for f in got] == [("csrc/cuda/utils.cuh", 3)] and _kinds(got) == ["error"]


def test_a_header_nothing_includes_is_treated_as_reached(tmp_path: Path) -> None:
    _backend_tree(tmp_path, **{"csrc/common/other_cuda_helper.hpp": "#pragma once\n"})
    assert _kinds(_prt524(tmp_path)) == ["error"]


@pytest.mark.parametrize("cond", ["#if THRUST_VERSION >= 100000", "#ifdef __SOME_RESERVED", "#if TORCH_HIP_VERSION"])
def test_toolkit_and_reserved_macros_are_never_assumed_undefined(tmp_path: Path, cond: str) -> None:
    _backend_tree(tmp_path, **{"csrc/common/roll_kernel.cuh": KERNEL_HEADER.replace("#ifdef LIB_USE_OTHERFW", cond)})
    assert _kinds(_prt524(tmp_path)) == ["error"]


@pytest.mark.parametrize("cond", ["#if CUDA_VERSION >= 9000", "#ifdef CUDART_VERSION"])
def test_cuda_toolkit_version_branch_is_not_compiled_by_hip(tmp_path: Path, cond: str) -> None:
    # The AMD HIP headers define neither CUDA toolkit version macro, so HIP compiles the `#else`.
    _backend_tree(tmp_path, **{"csrc/common/roll_kernel.cuh": KERNEL_HEADER.replace("#ifdef LIB_USE_OTHERFW", cond)})
    assert _kinds(_prt524(tmp_path)) == ["note"]


def test_one_unguarded_include_path_is_enough_to_reach_the_header(tmp_path: Path) -> None:
    _backend_tree(tmp_path, **{"csrc/cuda/other_cuda.cu": "#include \"other_cuda_helper.hpp\"\n"})
    assert _kinds(_prt524(tmp_path)) == ["error"]


def test_include_cycles_and_cuda_only_branches(tmp_path: Path) -> None:
    _backend_tree(tmp_path, **{
        "csrc/common/other_cuda_helper.hpp": OTHER_HELPER.replace("#endif\n", "#include \"roll_kernel.cuh\"\n#endif\n"),
    })
    assert _kinds(_prt524(tmp_path)) == ["note"]  # the cycle adds no HIP path
    _backend_tree(tmp_path, **{"csrc/common/roll_kernel.cuh": KERNEL_HEADER.replace("LIB_USE_OTHERFW", "!USE_ROCM")
                               .replace("#ifdef !USE_ROCM", "#ifndef USE_ROCM")})
    got = _prt524(tmp_path)
    assert _kinds(got) == ["note"]  # reached only from a CUDA-only branch
    assert "branch the HIP build does not compile" in got[0].message


def test_reach_reports_the_excluding_macro(tmp_path: Path) -> None:
    _backend_tree(tmp_path)
    rels = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()]
    reach = Reach(tmp_path, rels)
    assert reach.excluded_by("csrc/common/other_warp.cuh") == ("LIB_USE_OTHERFW",)
    assert reach.excluded_by("csrc/common/torch_cuda_helper.hpp") is None
    assert not reach.defined_in_tree("LIB_USE_OTHERFW")  # only in a Python comment
    assert reach.defined_in_tree("LIB_WITH_HIP")


def test_project_macro_names() -> None:
    assert project_macro("LIB_USE_OTHERFW")
    assert not any(project_macro(n) for n in ("CUDA_VERSION", "__CUDACC__", "USE_ROCM", "TORCH_VERSION",
                                              "_MSC_VER", "NDEBUG"))


def test_a_failing_reachability_scan_keeps_the_other_facts(tmp_path: Path, monkeypatch) -> None:
    from porter.codemods.warp_size import analysis as warp_size

    def boom(*_a, **_k):
        raise RecursionError("deep include chain")

    _backend_tree(tmp_path, **{"csrc/common/hip_shim.h": "#ifdef USE_ROCM\n#define __any_sync(m, v) __any(v)\n#endif\n"})
    monkeypatch.setattr(warp_size, "hip_unreached_headers", boom)
    rels = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()]
    facts = warp_size.repo_facts(tmp_path, rels)
    assert facts[warp_size.SHIMS_FACT] == ("__any_sync",) and warp_size.UNREACHED_FACT not in facts


def test_a_definition_in_a_folder_outside_the_run_still_counts(tmp_path: Path) -> None:
    _backend_tree(tmp_path, **{"third_party/cfg/other.h": "#define LIB_USE_OTHERFW\n"})
    rels = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and "third_party" not in str(p)]
    assert Reach(tmp_path, rels).defined_in_tree("LIB_USE_OTHERFW")
