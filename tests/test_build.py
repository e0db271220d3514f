"""build family: nvcc flag gating, Dockerfiles and scripts."""

from __future__ import annotations

import ast

import pytest

from porter.codemods.build.visitor import nvcc_only
from porter.testing import codes, findings, fixed

FAM = "build"

SETUP = '''from torch.utils.cpp_extension import CUDAExtension
ext = CUDAExtension("e", ["e.cu"], extra_compile_args={"cxx": ["-O3"], "nvcc": NVCC})
'''


def _nvcc_branches(out: str) -> tuple[list[str], list[str]]:
    tree = ast.parse(out)
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp):
            return ast.literal_eval(node.body), ast.literal_eval(node.orelse)
    raise AssertionError("no gate")


@pytest.mark.parametrize(("flags", "rocm"), [
    (["-O3", "-gencode", "arch=compute_80,code=sm_80"], ["-O3"]),
    (["-O3", "--use_fast_math", "-arch=sm_90", "-lineinfo"], ["-O3"]),
    (["-Xptxas", "-v", "-std=c++17", "--expt-relaxed-constexpr"], ["-std=c++17"]),
    (["-DNDEBUG", "--threads", "4", "-U__CUDA_NO_HALF_OPERATORS__"], ["-DNDEBUG", "-U__CUDA_NO_HALF_OPERATORS__"]),
])
def test_gate_keeps_cuda_list_and_drops_only_nvcc_flags(flags: list[str], rocm: list[str]) -> None:
    src = SETUP.replace("NVCC", repr(flags))
    out = fixed(src, "setup.py", family=FAM)
    hip, cuda = _nvcc_branches(out)
    assert cuda == flags and hip == rocm
    assert "import torch\n" in out
    assert fixed(out, "setup.py", family=FAM) == out


def test_existing_torch_alias_is_used() -> None:
    src = "import torch as T\n" + SETUP.replace("NVCC", '["-arch=sm_80"]')
    out = fixed(src, "setup.py", family=FAM)
    assert "[] if T.version.hip else" in out and out.count("import torch") == 1


@pytest.mark.parametrize("flags", [["-O3", "-Xcompiler", "-fopenmp", "-arch=sm_80"], ["-O3", "-rdc=true", "-arch=sm_80"],
                                   ["-O3", "-gencode"]])
def test_untranslatable_lists_are_flagged_not_rewritten(flags: list[str]) -> None:
    src = SETUP.replace("NVCC", repr(flags))
    assert fixed(src, "setup.py", family=FAM) == src
    found = findings(src, "setup.py", family=FAM)
    assert codes(found) == ["PRT840"] and found[0].fix.value == "none"


def test_portable_lists_are_not_reported() -> None:
    src = SETUP.replace("NVCC", '["-O3", "-DFOO", "-std=c++17"]')
    assert findings(src, "setup.py", family=FAM) == []


def test_flag_classifier() -> None:
    assert nvcc_only("-gencode=arch=compute_80,code=sm_80") and nvcc_only("--use_fast_math")
    assert not nvcc_only("-O3") and not nvcc_only("-ffast-math") and not nvcc_only("--offload-arch=gfx942")


def test_files_without_extension_builds_are_ignored() -> None:
    src = 'FLAGS = ["-arch=sm_80"]\n'
    assert findings(src, "model.py", family=FAM) == []


def test_dockerfile_image_swap_is_unsafe_only() -> None:
    src = "FROM nvcr.io/nvidia/pytorch:24.01-py3\nRUN echo hi\n"
    assert fixed(src, "Dockerfile", family=FAM) == src
    assert fixed(src, "Dockerfile", family=FAM, unsafe=True) == "FROM rocm/pytorch:latest\nRUN echo hi\n"
    assert findings("FROM rocm/pytorch:latest\n", "Dockerfile", family=FAM) == []


def test_scripts() -> None:
    src = "docker run --gpus=all img\n"
    assert fixed(src, "run.sh", family=FAM, unsafe=True) == (
        "docker run --device=/dev/kfd --device=/dev/dri --group-add video img\n")
    assert findings("echo nvidia-smi-like\n# nvidia-smi\n", "run.sh", family=FAM) == []
    pip = "pip install torch==2.7.0+cu121 --index-url https://download.pytorch.org/whl/cu121\n"
    assert fixed(pip, "ci.yml", family=FAM) == (
        "pip install torch==2.7.0 --index-url https://download.pytorch.org/whl/rocm6.3\n")


def test_list_variables_and_nested_lists_are_gated() -> None:
    src = ('from torch.utils.cpp_extension import CUDAExtension\nimport torch\n'
           'base = ["-O3", "-arch=sm_80"]\ntwice = ["-O2"]\ntwice = twice + ["-lineinfo"]\n'
           'e = CUDAExtension("e", [], extra_compile_args={"nvcc": base + twice + ["--use_fast_math", "-DX"]})\n')
    out = fixed(src, "setup.py", family=FAM)
    assert 'base = ["-O3"] if torch.version.hip else ["-O3", "-arch=sm_80"]\n' in out
    assert '+ (["-DX"] if torch.version.hip else ["--use_fast_math", "-DX"])})' in out
    assert 'twice = twice + ["-lineinfo"]' in out  # assigned twice: only reported
    assert codes(findings(out, "setup.py", family=FAM)) == ["PRT841"]
    ns: dict = {}
    for hip in (None, "6.3"):
        class _V:
            pass

        class _T:
            version = _V()

        _T.version.hip = hip
        body = out.split("\n", 2)[2].split("e = CUDAExtension")[0]
        exec(compile(body, "setup.py", "exec"), {"torch": _T}, ns)
        assert ns["base"] == (["-O3"] if hip else ["-O3", "-arch=sm_80"])


def test_untagged_image_names_and_arch_list_references() -> None:
    src = 'BASE_IMAGE="nvcr.io/nvidia/pytorch"\nexport TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0}"\n'
    found = findings(src, "check.sh", family=FAM)
    assert [(f.line, f.code, f.fix.value) for f in found] == [(1, "PRT844", "none"), (2, "PRT842", "none")]
