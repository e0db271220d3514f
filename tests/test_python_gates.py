"""Detection without LibCST where a family cannot report: warp_size on the ast tier, and the exact
``python_gate`` of build, attention, apex and fp8.

Each gate gets a file it admits (the finding is still there, including the cases the gate's
derivation had to think about: nested imports, pieces of an implicit concatenation) and files it
rejects (the family's tokens occur, but nothing it reports can: LibCST is never parsed).
"""

from __future__ import annotations

from porter import registry
from porter.engine import python_guard, raw_findings
from porter.findings import Finding
from porter.framework import PyContext
from porter.testing import settings_for


def _run(family: str, text: str, relpath: str = "m.py") -> tuple[list[Finding], bool]:
    """(the family's findings on ``text``, whether LibCST parsed the file)."""
    fam = next(f for f in registry.families() if f.name == family)
    settings = settings_for(family)
    assert fam.matches(text, "python", relpath), "the test file must pass the family's token pre-filter"
    problem, tree = python_guard(relpath, text)
    assert problem is None and tree is not None
    ctx = PyContext(relpath, text, "python", settings, None, ast_tree=tree)
    found = raw_findings(ctx, [fam])
    return found, ctx.cst_parsed


def _spans(found: list[Finding]) -> list[tuple[str, int, int, int, int]]:
    return sorted((f.code, f.line, f.column, f.end_line, f.end_column) for f in found)


# -- warp_size: the Python side on the ast tier ------------------------------------------------------

WARP = ('K = ("__global__ void k(float* v) { v[0] = __shfl_down_sync(0xffffffff, v[0], 16); }" "\\n",\n'
        '     b"__device__ void d() { __syncwarp(); }"  # bytes without escapes: analysed verbatim\n'
        ') if 0 else ("__device__ void e() {\\n  __syncwarp();\\n}" \'__global__ void g() { __syncwarp(); }\')\n'
        'F = f"{n}" "__device__ void h() { __syncwarp(); }"\n'
        'W = (num_warps * 32, (n + 31) // 32)\n')


def test_warp_python_side_needs_no_libcst_and_keeps_libcst_positions() -> None:
    found, parsed = _run("warp_size", WARP)
    assert not parsed
    # the positions the LibCST visitor gave (each literal of a concatenation on its own; a literal
    # whose escapes change the text reports at its start; the f-string's plain neighbour counts)
    assert _spans(found) == [
        ("PRT501", 1, 44, 1, 82),
        ("PRT516", 2, 30, 2, 42),
        ("PRT516", 3, 14, 3, 14),
        ("PRT516", 3, 81, 3, 93),
        ("PRT516", 4, 35, 4, 47),
        ("PRT520", 5, 6, 5, 20),
        ("PRT520", 5, 22, 5, 36),
    ]
    assert all(f.message.endswith("move it to a .cu file)") for f in found if f.code != "PRT520")


def test_warp_names_are_read_as_written() -> None:
    # ast normalises identifiers (NFKC: fullwidth `ｗarps` is `warps`); LibCST read the source text
    src = "u = ｗarps * 32\nv = Ｗ_WARPS * 32\n"
    found, _ = _run("warp_size", src.replace("u =", "num_warps = 4\nu ="))
    assert [f.line for f in found] == [3]


def test_warp_family_has_no_libcst_visitor() -> None:
    fam = next(f for f in registry.families() if f.name == "warp_size")
    assert fam.python is None and fam.python_ast is not None


# -- build ------------------------------------------------------------------------------------------

def test_build_gate_admits_flag_lists_and_flag_pieces() -> None:
    src = ('from torch.utils.cpp_extension import CUDAExtension\n'
           'ext = CUDAExtension("e", ["e.cu"], extra_compile_args={"nvcc": ["-O3", "-arch=sm_80"]})\n')
    found, parsed = _run("build", src, "setup.py")
    assert parsed and [f.code for f in found] == ["PRT840"]
    # a flag that is one piece of an implicit concatenation is reported on its own
    src = 'import cpp_extension_helper\nFLAGS = "--use_fast_math" " -O3"\n'
    found, parsed = _run("build", src)
    assert parsed and [f.code for f in found] == ["PRT841"]
    # a flag literal inside an f-string's replacement field
    src = "import cpp_extension_helper\nFLAGS = (f\"{x}\"\n         f\"\"\"{ '--use_fast_math' if y else ''}\"\"\")\n"
    found, parsed = _run("build", src)
    assert parsed and _spans(found) == [("PRT841", 3, 16, 3, 33)]


def test_build_gate_admits_cuda_home_from_torch() -> None:
    src = "from torch.utils.cpp_extension import CUDA_HOME\nprint(CUDA_HOME)\n"
    found, parsed = _run("build", src)
    assert parsed and [f.code for f in found] == ["PRT843"]


def test_build_gate_rejects_files_without_flags() -> None:
    for src in ('"""Builds with nvcc when it is found."""\nfrom torch.utils import cpp_extension\n'
                'cpp_extension.load("m", ["m.cpp"], extra_cflags=["-O3"])\n',
                'CUDA_HOME = "/usr/local/cuda"  # nvcc lives here\nprint(CUDA_HOME, "-arch is a word")\n'):
        found, parsed = _run("build", src)
        assert found == [] and not parsed


def test_build_python_tokens_are_the_visitor_activation_words() -> None:
    fam = next(f for f in registry.families() if f.name == "build")
    # Docker/shell words say nothing about a Python file the visitor could report on
    assert not fam.matches('IMAGE = "nvcr.io/nvidia/pytorch:24.01-py3"  # nvidia\n', "python", "m.py")


# -- attention --------------------------------------------------------------------------------------

def test_attention_gate_admits_an_import_in_a_function() -> None:
    src = ("def attend(q, k, v):\n"
           "    from flash_attn import flash_attn_func\n"
           "    return flash_attn_func(q, k, v, causal=True)\n")
    found, parsed = _run("attention", src)
    assert parsed and found and all(f.code.startswith("PRT1") for f in found)


def test_attention_gate_rejects_mentions() -> None:
    src = ('"""Faster than xformers and flash_attn."""\n'
           'BACKENDS = ("flash_attn", "xformers")\n'
           'def flash_attn_func(q, k, v):\n    return q\n'
           'flash_attn_func(1, 2, 3)\n')
    found, parsed = _run("attention", src)
    assert found == [] and not parsed


# -- apex -------------------------------------------------------------------------------------------

def test_apex_gate_admits_imports_and_class_strings() -> None:
    src = "from apex.optimizers import FusedAdam\nopt = FusedAdam(params, lr=1e-3)\n"
    found, parsed = _run("apex", src)
    assert parsed and found
    # no import: a class named by a string, as one piece of a concatenation
    src = 'OPTS = {"adam": "" "apex.optimizers.FusedAdam"}\n'
    found, parsed = _run("apex", src)
    assert parsed and [f.code for f in found] == ["PRT397"]


def test_apex_gate_rejects_the_word() -> None:
    src = ('"""The apex of the curve; see also apex.optimizers in the docs."""\n'
           'apex = max(values)\nprint(apex, "top apex")\n')
    found, parsed = _run("apex", src)
    assert found == [] and not parsed


# -- fp8 --------------------------------------------------------------------------------------------

def test_fp8_gate_admits_transformer_engine_imports() -> None:
    src = "import transformer_engine.pytorch as te\nlayer = te.Linear(16, 32)\n"
    found, parsed = _run("fp8", src)
    assert parsed and [f.code for f in found] == ["PRT600"]


def test_fp8_gate_rejects_mentions() -> None:
    src = 'HINT = "pip install transformer_engine"  # transformer_engine is optional\n'
    found, parsed = _run("fp8", src)
    assert found == [] and not parsed
