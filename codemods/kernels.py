"""Custom-kernel inventory (PRT860-PRT899): the "needs replacement" core of a port.

Python: ``load_inline``/``load`` with CUDA sources, ``CUDAExtension`` (the build family reports
its nvcc flags), Triton kernels and their NVIDIA-only bits, CuPy raw kernels, Numba CUDA and
PyCUDA kernels. CUDA/C++ (tree-sitter, queries only): one finding per ``.cu``/``.cuh`` file,
every ``__global__`` kernel, CUTLASS/CuTe, CUB, Thrust, WMMA/MMA, cooperative groups, inline PTX
and NVIDIA library headers. Warp-size hazards inside kernels are the ``warp_size`` family's.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from porter.findings import Applicability, Category, Finding, Severity
from porter.framework import Family, FileContext, PyContext, rule
from porter.pyast import AstVisitor
from porter.pyast_strings import literal_parts

from ._cuda_tree import language, parse

NAME = "kernels"

CPP_EXT = "torch.utils.cpp_extension"
FILE_HOURS = 4.0  # HIPify, build and test one CUDA source file (fixed cost per file)

RULES = (
    rule("PRT860", "load-inline-cuda", NAME,
         "`torch.utils.cpp_extension.load_inline` with CUDA sources: a JIT-compiled custom kernel.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="On a ROCm build `load_inline` hipifies `cuda_sources` and compiles them with "
         "hipcc, so straightforward kernels build; warp-size assumptions (wavefront 64), PTX, "
         "CUTLASS and NVIDIA-only intrinsics do not. Options, most portable first: delete it "
         "(try the eager PyTorch or `torch.compile` version), rewrite it in Triton, or keep it and "
         "verify the HIPified source."),
    rule("PRT861", "load-cuda-sources", NAME,
         "`torch.utils.cpp_extension.load` of `.cu` sources: a JIT-compiled custom kernel.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="Same as PRT860: ROCm builds hipify and compile the sources; the kernels "
         "themselves are reported per file (PRT870) and per kernel (PRT871)."),
    rule("PRT862", "cuda-extension", NAME,
         "A `CUDAExtension` build: the repository ships custom CUDA kernels.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=2.0,
         explanation="`CUDAExtension` builds HIP sources on a ROCm install (torch hipifies the "
         "sources during the build). The build family reports nvcc-only flags; this rule reports "
         "the extension itself so the kernel port is planned."),
    rule("PRT863", "cupy-raw-kernel", NAME,
         "CuPy `RawKernel`/`RawModule`/`ElementwiseKernel`/`ReductionKernel`: CUDA C++ compiled at run time.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=3.0,
         explanation="CuPy's ROCm build compiles these sources with hipRTC: CUDA-only headers, "
         "intrinsics and a 32-lane warp assumption in the source string break there. Port the "
         "source, or rewrite the kernel in Triton or PyTorch."),
    rule("PRT864", "triton-kernel", NAME,
         "A Triton kernel (`@triton.jit`): portable, Triton has an AMD backend.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.5,
         explanation="One Triton kernel serves both vendors. Verify numerics and retune block sizes "
         "and `num_warps` on AMD (a wavefront has 64 lanes)."),
    rule("PRT865", "triton-inline-asm", NAME,
         "`tl.inline_asm_elementwise`: inline PTX inside a Triton kernel.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=3.0,
         explanation="The assembly string is PTX, which the AMD backend cannot compile. Express the "
         "operation in `tl.*` ops, or branch on the target and provide AMDGCN assembly."),
    rule("PRT866", "triton-num-warps", NAME,
         "`num_warps=` in Triton configs or launches (one finding per file): sized for 32-lane warps.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.5,
         explanation="On AMD a warp is a 64-lane wavefront, so `num_warps=8` means 512 threads. The "
         "kernel still runs; retune the autotune configs on the target."),
    rule("PRT867", "triton-nvidia-only", NAME,
         "A Triton API that exists only for NVIDIA (`triton.language.extra.cuda`).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=1.0,
         explanation="`tl.extra.cuda` (libdevice, `globaltimer`, `smid`...) is NVIDIA-only; use "
         "`tl.extra.libdevice`/`tl.math` or the HIP equivalents under `tl.extra.hip`."),
    rule("PRT868", "numba-cuda-kernel", NAME,
         "A Numba CUDA kernel (`@numba.cuda.jit`).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="Numba's CUDA target does not run on AMD GPUs. Rewrite the kernel in Triton or "
         "PyTorch."),
    rule("PRT869", "pycuda-source-module", NAME,
         "A PyCUDA `SourceModule`: CUDA C++ compiled at run time.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=4.0,
         explanation="PyCUDA does not support ROCm. Move the kernel to a `load_inline` extension "
         "(hipified on ROCm), Triton or PyTorch."),
    rule("PRT879", "cute-dsl-kernel", NAME,
         "A CUTLASS CuTe DSL kernel in Python (`@cute.kernel`/`@cute.jit`).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=8.0,
         explanation="The CuTe Python DSL (nvidia-cutlass-dsl) compiles to NVIDIA GPUs only. Rewrite the "
         "kernel in Triton or PyTorch, or keep a PyTorch fallback path for ROCm."),
    rule("PRT880", "tilelang-kernel", NAME,
         "A TileLang kernel (`@tilelang.jit`): has a HIP backend, verify on AMD.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=1.0,
         explanation="TileLang compiles for CUDA and for HIP (CDNA). Kernels tuned with NVIDIA-only "
         "features (TMA, warp-group MMA, `T.ptx`/inline PTX) need a check; rerun the autotuner on the "
         "target."),
    rule("PRT870", "cuda-source-file", NAME,
         "A CUDA source file (`.cu`/`.cuh`): per-file HIPify, build and test cost.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=FILE_HOURS,
         explanation="Every CUDA translation unit has to be HIPified (torch does it for extensions), "
         "built for the AMD target and tested. The message counts the kernels, device functions, "
         "launches and NVIDIA libraries in the file."),
    rule("PRT871", "cuda-kernel", NAME, "A `__global__` kernel definition.",
         Category.REPLACE, severity=Severity.INFO, effort_hours=1.5,
         explanation="Each kernel needs a review on a wave64 part (see the warp_size family's "
         "PRT5xx findings) and a numerical test against a PyTorch reference."),
    rule("PRT872", "cutlass", NAME, "CUTLASS/CuTe templates (NVIDIA-only GEMM/attention building blocks).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=16.0,
         explanation="CUTLASS and CuTe have no ROCm port. Replace the operation with a PyTorch op, "
         "Triton, hipBLASLt or Composable Kernel."),
    rule("PRT873", "cub", NAME, "CUB block/warp/device primitives.", Category.SHIM,
         severity=Severity.INFO, effort_hours=0.5,
         explanation="HIPify maps `cub::` to `hipcub::` (rocPRIM underneath). Warp-level templates "
         "default to the 64-lane wavefront there (warp_size family, H13)."),
    rule("PRT874", "thrust", NAME, "Thrust algorithms.", Category.SHIM, severity=Severity.INFO,
         effort_hours=0.25, explanation="rocThrust provides the `thrust::` API on ROCm."),
    rule("PRT875", "inline-ptx", NAME, "Inline PTX assembly (`asm(...)`).", Category.REPLACE,
         severity=Severity.WARNING, effort_hours=3.0,
         explanation="PTX does not exist on AMD. Replace it with a HIP intrinsic or builtin "
         "(`__builtin_amdgcn_*`), or plain C++. Warp-level PTX is reported in detail by the "
         "warp_size family."),
    rule("PRT876", "wmma-mma", NAME, "Tensor-core WMMA/MMA (`nvcuda::wmma`, `<mma.h>`).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=8.0,
         explanation="rocWMMA offers a similar fragment API on CDNA; fragment shapes, layouts and lane "
         "maps differ. Often better: a PyTorch matmul, Triton `tl.dot` or hipBLASLt."),
    rule("PRT877", "cooperative-groups", NAME, "Cooperative groups.", Category.SHIM,
         severity=Severity.INFO, effort_hours=0.5,
         explanation="HIP implements cooperative groups (`hip/hip_cooperative_groups.h`). Tiles of 32 "
         "and grid-wide sync (cooperative launch) need a check on wave64 parts."),
    rule("PRT878", "cuda-library-header", NAME,
         "An NVIDIA library header (cuBLAS, cuRAND, cuDNN, NVRTC, libcu++...).",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.5,
         explanation="Most have a hip* twin that HIPify maps (hipBLAS/hipBLASLt, hipRAND, hipSPARSE, "
         "hipFFT, hipSOLVER, hipRTC, RCCL). cuDNN (MIOpen's API differs) and libcu++ "
         "(`cuda/barrier`, `cuda/pipeline`) need real replacement; the message says which."),
)


# -- Python --------------------------------------------------------------------------------------


def _strings(ctx: PyContext, expr: ast.AST) -> list[str]:
    """Every plain string literal value inside ``expr`` (lists, calls, joins...), last first.

    Each literal of an implicit concatenation counts on its own; f-string text does not, the
    literals inside its replacement fields do."""
    found: list[tuple[int, str]] = []
    stack: list[ast.AST] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            if isinstance(node, ast.JoinedStr) or isinstance(node.value, (str, bytes)):
                found.extend((p.start, p.value) for p in literal_parts(ctx, node) if isinstance(p.value, str))
            if isinstance(node, ast.JoinedStr):
                stack.extend(_fields(node))
            continue
        stack.extend(ast.iter_child_nodes(node))
    found.sort(key=lambda item: item[0])
    return [value for _, value in reversed(found)]


def _fields(joined: ast.JoinedStr) -> list[ast.AST]:
    """The expressions of an f-string's replacement fields (format specs included)."""
    out: list[ast.AST] = []
    for value in joined.values:
        if isinstance(value, ast.FormattedValue):
            out.append(value.value)
            if isinstance(value.format_spec, ast.JoinedStr):
                out.extend(_fields(value.format_spec))
    return out


def _is_cuda_file(name: str) -> bool:
    return name.lower().endswith((".cu", ".cuh"))


def _kwarg(call: ast.Call, name: str, position: int | None = None) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if position is not None:
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        if len(positional) > position:
            return positional[position]
    return None


def _is_true(expr: ast.expr | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is True


def _is_none(expr: ast.expr | None) -> bool:
    return expr is None or (isinstance(expr, ast.Constant) and expr.value is None)


def _ext_name(ctx: PyContext, call: ast.Call) -> str:
    name = _kwarg(call, "name", 0)
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        parts = literal_parts(ctx, name)
        if len(parts) == 1 and isinstance(parts[0].value, str):
            return parts[0].value
    return "?"


CUPY_KERNELS = {"RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel"}
_DEF = re.compile(r"(?:async[ \t\f\\\r\n]+)?def[ \t\f\\\r\n]+")
_EXTRA_CUDA = "triton.language.extra.cuda"


class KernelsVisitor(AstVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._warps: list[ast.keyword] = []
        self._skip: set[int] = set()
        self._triton: bool | None = None  # does any import reach triton (PRT867 needs one)

    def visit_Call(self, node: ast.Call) -> None:
        qual = self.qualname(node.func)
        if qual is None:
            if isinstance(node.func, ast.Subscript):
                self._num_warps(node, launch=True)
            return
        if qual == f"{CPP_EXT}.load_inline":
            cuda = _kwarg(node, "cuda_sources", 2)
            if not _is_none(cuda) or _is_true(_kwarg(node, "with_cuda")):
                self.report(node, "PRT860", f"load_inline extension '{_ext_name(self.ctx, node)}' compiles "
                            "CUDA sources at run time (hipified on ROCm); port or replace its kernels",
                            fix=Applicability.NONE)
        elif qual == f"{CPP_EXT}.load":
            sources = _kwarg(node, "sources", 1)
            cu = [s for s in _strings(self.ctx, sources) if _is_cuda_file(s)] if sources is not None else []
            if cu or _is_true(_kwarg(node, "with_cuda")) or _kwarg(node, "extra_cuda_cflags") is not None:
                what = ", ".join(posixpath.basename(s) for s in cu) or "CUDA sources"
                self.report(node, "PRT861", f"cpp_extension.load '{_ext_name(self.ctx, node)}' JIT-compiles "
                            f"{what} (hipified on ROCm); port or replace its kernels", fix=Applicability.NONE)
        elif qual == f"{CPP_EXT}.CUDAExtension":
            sources = _kwarg(node, "sources", 1)
            cu = [s for s in _strings(self.ctx, sources) if _is_cuda_file(s)] if sources is not None else []
            count = f"{len(cu)} .cu source(s)" if cu else "sources not listed literally"
            ext = _ext_name(self.ctx, node)
            self.report(node, "PRT862", f"CUDAExtension '{ext}' ({count}): custom CUDA kernels "
                        "to port; torch hipifies them on a ROCm build", fix=Applicability.NONE,
                        data={"extension": ext, "cu_sources": len(cu)})
        elif qual.startswith("cupy.") and qual.rsplit(".", 1)[-1] in CUPY_KERNELS:
            self.report(node, "PRT863", f"{qual}: CUDA C++ source compiled at run time (hipRTC on CuPy's "
                        "ROCm build); port the source or rewrite it", fix=Applicability.NONE)
        elif qual == "triton.Config":
            self._num_warps(node, launch=False)
        elif qual == "triton.language.inline_asm_elementwise":
            self.report(node, "PRT865", "tl.inline_asm_elementwise carries PTX, which the AMD backend "
                        "cannot compile", fix=Applicability.NONE)
        elif qual == "pycuda.compiler.SourceModule":
            self.report(node, "PRT869", "PyCUDA SourceModule: PyCUDA has no ROCm support; move the kernel "
                        "to load_inline, Triton or PyTorch", fix=Applicability.NONE)

    def _num_warps(self, node: ast.Call, *, launch: bool) -> None:
        if launch and not any(b.target.split(".")[0] == "triton" for b in self.ctx.ast_imports.statements):
            return
        self._warps.extend(kw for kw in node.keywords if kw.arg == "num_warps")

    def leave_Module(self, node: ast.Module) -> None:
        warps = self._warps
        if warps:  # one finding per file: the retuning is per file, not per config line
            values = sorted({self.code(kw.value) for kw in warps})
            shown = ", ".join(values[:6]) + (", ..." if len(values) > 6 else "")
            self.report(warps[0], "PRT866", f"{len(warps)} num_warps setting(s) in this file ({shown}) assume "
                        "32-lane warps; on AMD a wavefront has 64 lanes: retune the configs",
                        fix=Applicability.NONE, data={"count": len(warps)})

    def visit_Attribute(self, node: ast.Attribute) -> None:
        skip = self._skip
        if id(node) in skip:
            skip.add(id(node.value))
            return
        if self._triton is None:
            self._triton = any(b.target.startswith("triton") for b in self.ctx.ast_imports.statements)
        if not self._triton:
            return  # no import reaches triton: no chain resolves under triton.language.extra.cuda
        qual = self.qualname(node)
        if qual and (qual == _EXTRA_CUDA or qual.startswith(_EXTRA_CUDA + ".")):
            skip.add(id(node.value))
            self.report(node, "PRT867", f"{qual} is NVIDIA-only; use tl.extra.libdevice/tl.math or the HIP "
                        "variant", fix=Applicability.NONE)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module
        if module is None or node.level:
            return
        if module.startswith(_EXTRA_CUDA) or (
            module == "triton.language.extra" and any(a.name == "cuda" for a in node.names)
        ):
            self.report(node, "PRT867", f"import from {module}: NVIDIA-only Triton helpers",
                        fix=Applicability.NONE)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not node.decorator_list:
            return
        name = node.name
        for expr in node.decorator_list:
            target = expr.func if isinstance(expr, ast.Call) else expr
            qual = self.qualname(target)
            if qual in {"triton.jit", "triton.runtime.jit.jit"}:
                self._report_name(node, "PRT864", f"Triton kernel {name}: portable (AMD backend); "
                                  "verify numerics and retune on the target")
            elif qual == "numba.cuda.jit":
                self._report_name(node, "PRT868", f"Numba CUDA kernel {name}: no AMD target; "
                                  "rewrite in Triton or PyTorch")
            elif qual == "tilelang.jit":
                self._report_name(node, "PRT880", f"TileLang kernel {name}: has a HIP backend; verify "
                                  "and retune on the target")
            elif qual in {"cutlass.cute.kernel", "cutlass.cute.jit"}:
                self._report_name(node, "PRT879", f"CuTe DSL kernel {name} ({qual}): NVIDIA-only; "
                                  "rewrite in Triton or PyTorch")
                break
            elif qual == "cupyx.jit.rawkernel":
                self._report_name(node, "PRT863", f"CuPy JIT kernel {name}: check it on CuPy's "
                                  "ROCm build")

    visit_AsyncFunctionDef = visit_FunctionDef

    def _report_name(self, node: ast.FunctionDef | ast.AsyncFunctionDef, code: str, message: str) -> None:
        """Report at the function's name (``ast`` gives the position of ``def`` only)."""
        start, _ = self.span(node)
        m = _DEF.match(self.ctx.text, start)
        begin = m.end() if m is not None else start
        self.findings.append(self.ctx.finding(code, message, begin, begin + len(node.name)))


# -- CUDA / C++ (tree-sitter) -----------------------------------------------------------------

_QUERY = """
(preproc_include path: (_) @include)
(function_definition "__global__" declarator: (function_declarator declarator: (_) @kernel)) @kdef
(function_definition "__device__") @device_fn
(kernel_call_syntax) @launch
(gnu_asm_expression) @asm
(qualified_identifier scope: (namespace_identifier) @ns)
(namespace_alias_definition (namespace_identifier) @ns)
(using_declaration (identifier) @ns)
"""

_NAMESPACES = {
    "cutlass": "PRT872", "cute": "PRT872",
    "cub": "PRT873", "hipcub": None,
    "thrust": "PRT874",
    "wmma": "PRT876", "nvcuda": "PRT876",
    "cooperative_groups": "PRT877", "cg": None,
}

# header prefix -> (code, advice)
_HEADERS: tuple[tuple[str, str, str], ...] = (
    ("cutlass/", "PRT872", "no ROCm port; use PyTorch, Triton, hipBLASLt or Composable Kernel"),
    ("cute/", "PRT872", "no ROCm port; use PyTorch, Triton, hipBLASLt or Composable Kernel"),
    ("cub/", "PRT873", "hipcub on ROCm"),
    ("thrust/", "PRT874", "rocThrust on ROCm"),
    ("mma.h", "PRT876", "rocWMMA on ROCm (different fragment shapes)"),
    ("crt/mma.h", "PRT876", "rocWMMA on ROCm (different fragment shapes)"),
    ("cooperative_groups", "PRT877", "hip/hip_cooperative_groups.h on ROCm"),
    ("cublasLt.h", "PRT878", "hipBLASLt"),
    ("cublas_v2.h", "PRT878", "hipBLAS (HIPify maps it)"),
    ("cublas.h", "PRT878", "hipBLAS (HIPify maps it)"),
    ("curand", "PRT878", "hipRAND/rocRAND (HIPify maps it)"),
    ("cusparse", "PRT878", "hipSPARSE (HIPify maps it)"),
    ("cufft", "PRT878", "hipFFT (HIPify maps it)"),
    ("cusolver", "PRT878", "hipSOLVER (HIPify maps it)"),
    ("nvrtc.h", "PRT878", "hipRTC"),
    ("nccl.h", "PRT878", "RCCL (same API)"),
    ("cudnn", "PRT878", "MIOpen, whose API differs: replace, do not map"),
    ("cuda/barrier", "PRT878", "libcu++ has no ROCm equivalent: replace"),
    ("cuda/pipeline", "PRT878", "libcu++ has no ROCm equivalent: replace"),
    ("cuda/std/", "PRT878", "libcu++: use the standard library or rocPRIM"),
    ("cuda/atomic", "PRT878", "libcu++: use HIP atomics"),
    ("nvToolsExt", "", ""),  # telemetry family (nvtx)
)
_REPLACE_HEADERS = ("cudnn", "cuda/barrier", "cuda/pipeline", "cuda/std/", "cuda/atomic")


@lru_cache(maxsize=1)
def _ts() -> tuple[Any, Any] | None:
    lang = language()
    if lang is None:  # pragma: no cover - declared dependency
        return None
    from tree_sitter import Query

    return lang, Query(lang, _QUERY)


def _tree(ctx: FileContext) -> Any:
    return parse(ctx.text, ctx.cache)


def _char_offsets(ctx: FileContext) -> Any:
    """Map a UTF-8 byte offset to a character offset (identity for ASCII text)."""
    text = ctx.text
    if text.isascii():
        return lambda b: b
    raw = text.encode("utf-8")
    return lambda b: len(raw[:b].decode("utf-8", errors="ignore"))


def _header(node: Any) -> str:
    text = node.text.decode("utf-8", errors="replace")
    return text.strip('<>"')


_CPP_TOKENS = ("__global__", "__device__", "asm", "cutlass", "cute", "cub", "thrust", "wmma", "mma.h",
               "cooperative_groups", "cublas", "curand", "cusparse", "cufft", "cusolver", "nvrtc", "nccl.h",
               "cudnn", "cuda/")


def check_cuda(ctx: FileContext) -> Iterator[Finding]:
    if not _is_cuda_file(ctx.relpath) and not any(tok in ctx.text for tok in _CPP_TOKENS):
        return  # a plain C/C++ file: nothing to inventory, skip the parse
    ts = _ts()
    tree = _tree(ctx)
    if ts is None or tree is None:
        return
    from tree_sitter import QueryCursor

    conv = _char_offsets(ctx)
    kernels: list[str] = []
    device_fns = 0
    launches = 0
    libraries: dict[str, tuple[int, int, str]] = {}  # code -> first (start, end, what)
    includes: list[tuple[int, int, str, str]] = []
    for _pattern, caps in QueryCursor(ts[1]).matches(tree.root_node):
        if "include" in caps:
            node = caps["include"][0]
            includes.append((conv(node.start_byte), conv(node.end_byte), _header(node), ""))
        elif "kernel" in caps:
            name_node = caps["kernel"][0]
            kname = name_node.text.decode("utf-8", errors="replace")
            kernels.append(kname)
            yield ctx.finding("PRT871", f"__global__ kernel {kname}: review on wave64 and test against a "
                              "PyTorch reference", conv(name_node.start_byte), conv(name_node.end_byte),
                              data={"kernel": kname})
        elif "device_fn" in caps:
            device_fns += 1
        elif "launch" in caps:
            launches += 1
        elif "asm" in caps:
            node = caps["asm"][0]
            yield ctx.finding("PRT875", "inline PTX assembly: no PTX on AMD; use a HIP builtin or plain C++",
                              conv(node.start_byte), conv(node.end_byte), generic=True)
        elif "ns" in caps:
            node = caps["ns"][0]
            name = node.text.decode("utf-8", errors="replace")
            code = _NAMESPACES.get(name)
            if code and code not in libraries:
                libraries[code] = (conv(node.start_byte), conv(node.end_byte), f"{name}::")
    seen_header_codes: set[str] = set()
    for start, end, header, _ in includes:
        for prefix, code, advice in _HEADERS:
            if header == prefix or header.startswith(prefix) or posixpath.basename(header).startswith(prefix):
                if not code:
                    break
                if code == "PRT878":
                    category = Category.REPLACE if header.startswith(_REPLACE_HEADERS) or "cudnn" in header \
                        else None
                    yield ctx.finding(code, f"#include <{header}>: {advice}", start, end, category=category,
                                      effort_hours=4.0 if category else None, data={"header": header})
                elif code not in seen_header_codes:
                    seen_header_codes.add(code)
                    libraries.pop(code, None)
                    yield ctx.finding(code, f"#include <{header}>: {advice}", start, end,
                                      data={"header": header})
                break
    for code, (start, end, what) in libraries.items():
        if code in seen_header_codes:
            continue
        advice = next(a for _p, c, a in _HEADERS if c == code)
        yield ctx.finding(code, f"{what} used: {advice}", start, end, data={"namespace": what})
    if _is_cuda_file(ctx.relpath):
        libs = sorted({c for c in seen_header_codes} | set(libraries))
        names = {"PRT872": "CUTLASS", "PRT873": "CUB", "PRT874": "Thrust", "PRT876": "WMMA",
                 "PRT877": "cooperative groups"}
        uses = ", ".join(names[c] for c in libs if c in names)
        message = (f"CUDA source file: {len(kernels)} __global__ kernel(s), {device_fns} __device__ "
                   f"function(s), {launches} launch(es)" + (f"; uses {uses}" if uses else "")
                   + "; HIPify, build for the AMD target and test")
        yield ctx.finding("PRT870", message, 0, 0,
                          data={"kernels": len(kernels), "device_functions": device_fns, "launches": launches})


FAMILY = Family(
    name=NAME,
    title="Custom kernels: CUDA sources, extensions, Triton, CuPy, Numba",
    order=88,
    rules=RULES,
    tokens=("load_inline", "cpp_extension", "cute.", "tilelang", "CUDAExtension", "triton", "cupy", "numba", "pycuda",
            "__global__", "__device__", "asm", "cutlass", "cute", "cub", "thrust", "wmma", "mma.h",
            "cooperative_groups", "cublas", "curand", "cusparse", "cufft", "cusolver", "nvrtc", "nccl.h",
            "cudnn", "cuda", "CUDA", "<<<", "threadIdx", "blockIdx", "#include", "#pragma"),
    # every Python rule resolves a name through an import of one of these modules
    python_tokens=("cpp_extension", "cupy", "triton", "numba", "pycuda", "cutlass", "tilelang"),
    python_ast=KernelsVisitor,
    checkers={"cuda": check_cuda},
    description="Inventory only: lists the custom kernels a port has to delete, rewrite in Triton or "
    "HIPify. No automatic changes.",
    verified="Fixture tests (tests/fixtures/kernels) for every rule, including kernels in comments, "
    "strings and macros that must not be counted, and project names that contain library names.",
    review="Each kernel needs a numerical test on an AMD GPU.",
)
