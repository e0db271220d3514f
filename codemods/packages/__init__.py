"""CUDA-only Python packages: every import and use site, plus Hugging Face's FA2 switch.

This is porter's inventory family (PRT01x-PRT03x). It resolves names through the file's
imports, so a project-defined ``flash_attn_forward`` or the word "apex" in a docstring is
never reported. More specific families (attention, optimizers...) report richer findings
on the same calls; those supersede the generic use-site finding here.
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.findings import Applicability, Category, Severity
from porter.framework import Family, rule

NAME = "packages"


@dataclass(frozen=True)
class Package:
    module: str  # import root ("flash_attn", "nvidia.dali")
    dist: str  # distribution name ("flash-attn")
    code: str  # import rule code
    rule_name: str
    category: Category
    advice: str  # the portable route
    use_category: Category | None = None  # class of a use site (default: the package's)
    use_effort: float | None = None  # manual hours per use site (default: PRT020's)
    report_uses: bool = True  # False: the import is the inventory item (kernel DSLs: the kernels
    # family reports each kernel; every Int32/Float32 reference would only be noise)


PACKAGES: tuple[Package, ...] = (
    Package("flash_attn", "flash-attn", "PRT011", "flash-attn-import", Category.REPLACE,
            "use torch.nn.functional.scaled_dot_product_attention (or flex_attention); "
            "AMD also ships a ROCm build of flash-attn"),
    Package("xformers", "xformers", "PRT012", "xformers-import", Category.REPLACE,
            "use torch.nn.functional.scaled_dot_product_attention; memory-efficient attention is upstream"),
    Package("apex", "apex", "PRT013", "apex-import", Category.REPLACE,
            "use torch.optim.*(fused=True), torch.nn norms, torch.amp and torch DDP"),
    Package("bitsandbytes", "bitsandbytes", "PRT014", "bitsandbytes-import", Category.REPLACE,
            "use torchao quantization and torchao.optim, or a ROCm-capable bitsandbytes build"),
    Package("transformer_engine", "transformer-engine", "PRT015", "transformer-engine-import",
            Category.REPLACE, "use torch.nn modules with torchao.float8 on supported parts, else BF16"),
    Package("pynvml", "nvidia-ml-py", "PRT016", "pynvml-import", Category.SHIM,
            "use torch.cuda telemetry (mem_get_info, utilization, power_draw, temperature) or amdsmi"),
    Package("nvidia.dali", "nvidia-dali", "PRT017", "nvidia-dali-import", Category.REPLACE,
            "use torchdata or torch.utils.data.DataLoader with more workers (DALI's GPU pipelines have "
            "no ROCm build; AMD's rocAL is the closest analogue)"),
    Package("cupy", "cupy", "PRT018", "cupy-import", Category.SHIM,
            "install CuPy's ROCm build (cupy-rocm-* wheels, or build with CUPY_INSTALL_USE_HIP=1) instead "
            "of a cupy-cuda* wheel; raw kernel sources are reported by the kernels family",
            use_category=Category.BENIGN, use_effort=0.0),
    Package("pycuda", "pycuda", "PRT024", "pycuda-import", Category.REPLACE,
            "PyCUDA has no ROCm support: use torch tensors and streams, or hip-python"),
    Package("tensorrt", "tensorrt", "PRT025", "tensorrt-import", Category.REPLACE,
            "TensorRT is NVIDIA-only: use torch.compile, ONNX Runtime (MIGraphX/ROCm providers) or MIGraphX"),
    Package("cutlass", "nvidia-cutlass-dsl", "PRT027", "cutlass-python-import", Category.REPLACE,
            "CUTLASS's Python DSL/interface targets NVIDIA GPUs only: keep a Triton or PyTorch path for ROCm "
            "(kernels are reported by the kernels family)", use_effort=0.0, report_uses=False),
    Package("cuda.bindings", "cuda-python", "PRT026", "cuda-python-import", Category.REPLACE,
            "NVIDIA's cuda-python bindings: use hip-python (`from hip import hip, hiprtc`) or torch.cuda APIs"),
)

# Other import roots that belong to one of the packages above: sub-distributions and the
# compiled extension modules they install at the top level of site-packages.
ALIASES: dict[str, str] = {
    "cupyx": "cupy",
    "cupy_backends": "cupy",
    "torch_tensorrt": "tensorrt",
    "cuda.cudart": "cuda.bindings",
    "cuda.cuda": "cuda.bindings",
    "cuda.nvrtc": "cuda.bindings",
    "cuda.core": "cuda.bindings",
    # apex's compiled extensions
    "amp_C": "apex",
    "apex_C": "apex",
    "fused_layer_norm_cuda": "apex",
    "fused_adam_cuda": "apex",
    "fused_lamb_cuda": "apex",
    "syncbn": "apex",
    "xentropy_cuda": "apex",
    "fused_dense_cuda": "apex",
    "mlp_cuda": "apex",
    "focal_loss_cuda": "apex",
    "fast_layer_norm": "apex",
    "fused_weight_gradient_mlp_cuda": "apex",
    "distributed_adam_cuda": "apex",
    # flash-attn's compiled extensions
    "flash_attn_2_cuda": "flash_attn",
    "flash_attn_cuda": "flash_attn",
    "dropout_layer_norm": "flash_attn",
    "fused_dense_lib": "flash_attn",
    "xentropy_cuda_lib": "flash_attn",
    "rotary_emb": "flash_attn",
    "ft_attention": "flash_attn",
    "fused_softmax_lib": "flash_attn",
}

_BY_MODULE = {p.module: p for p in PACKAGES}
_ALL_MODULES = {**{m: _BY_MODULE[t] for m, t in ALIASES.items()}, **_BY_MODULE}
_ROOTS = {m.split(".")[0] for m in _ALL_MODULES}
_BY_DIST = {p.dist: p for p in PACKAGES} | {"cupy-cuda": _BY_MODULE["cupy"], "torch-tensorrt": _BY_MODULE["tensorrt"]}


def package_of(qualname: str | None) -> Package | None:
    """The CUDA-only package a qualified name belongs to, if any."""
    if not qualname or qualname.split(".", 1)[0] not in _ROOTS:
        return None
    for module, pkg in _ALL_MODULES.items():
        if qualname == module or qualname.startswith(module + "."):
            return pkg
    return None


def module_of(qualname: str) -> str:
    """The import root (package or extension module) ``qualname`` starts with."""
    for module in _ALL_MODULES:
        if qualname == module or qualname.startswith(module + "."):
            return module
    return qualname


def package_of_dist(name: str) -> Package | None:
    """A package by distribution or module name as written in a string (``flash-attn``, ``flash_attn``)."""
    norm = name.strip().lower().replace("_", "-").split("[")[0]
    if norm.startswith("cupy-cuda"):
        return _BY_MODULE["cupy"]
    if norm in _BY_DIST:
        return _BY_DIST[norm]
    return package_of(name.strip())


_IMPORT_DOC = (
    "The package has no ROCm build on PyPI (or only a vendor fork), so `pip install` of the "
    "repository fails on an AMD machine, or the import fails at runtime. porter lists every import "
    "so the port can be planned; the families that rewrite the package's APIs remove the import "
    "once nothing uses it."
)

RULES = tuple(
    rule(p.code, p.rule_name, NAME, f"Import of the CUDA-only package `{p.module}` ({p.dist}).",
         p.category, severity=Severity.WARNING, effort_hours=0.25,
         explanation=f"{_IMPORT_DOC}\n\nPortable route: {p.advice}.",
         example=f"```python\nimport {p.module}  # PRT: reported\n```")
    for p in PACKAGES
) + (
    rule("PRT020", "cuda-only-api-use", NAME,
         "Use of an API from a CUDA-only package that no more specific rule covers.",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=2.0,
         explanation="A call or attribute reached through an import of flash_attn, xformers, apex, "
         "bitsandbytes, transformer_engine or pynvml. The specific families (attention, optimizers, "
         "quantization, fp8, telemetry) report most of these with a precise rewrite or reason; what "
         "remains here needs a manual port."),
    rule("PRT021", "import-gate", NAME,
         "An availability gate (`try: import x except ImportError`) around a CUDA-only package.",
         Category.BENIGN, severity=Severity.INFO,
         explanation="porter reads what the gate does when the package is missing. Only a real "
         "alternative binding of the same names on that path (a class or function, another import, an "
         "expression; or a definition before the gate that the gate only overrides) counts as a "
         "*fallback*; a handler that raises, logs, passes or only sets a flag or a `None` placeholder "
         "provides none, and the message says so.\n\n"
         "A name with a fallback ports to that fallback, because it is what runs on a machine without "
         "the package: no family rewrites its uses (their findings say why), and when every name of a "
         "module-level `try` gate has one, the fix (safe) drops the dead import branch and keeps the "
         "handler's body. When every use of a gated import without a fallback is rewritten instead, the "
         "engine removes the import and folds the gate into the literal flags of its body "
         "(`HAS_FLASH = True`: the rewritten calls now provide what the flag announced).",
         example="```python\ntry:\n    from apex.normalization import FusedRMSNorm as RMSNorm\n"
         "except ImportError:\n    class RMSNorm(nn.Module): ...  # eps=1e-6, fp32\n"
         "# becomes\nclass RMSNorm(nn.Module): ...  # eps=1e-6, fp32\n```"),
    rule("PRT019", "string-import", NAME,
         "A CUDA-only package or extension module imported by name (`importlib.import_module(\"...\")`, "
         "`__import__`).", Category.REPLACE, severity=Severity.WARNING, effort_hours=0.5,
         explanation="String-based imports hide a dependency from import scanners: the module is loaded "
         "at run time and fails the same way on ROCm. porter reports the call; attribute uses of the "
         "returned module are not traced, so review them by hand.",
         example='```python\nln = importlib.import_module("fused_layer_norm_cuda")  # apex extension\n```'),
    rule("PRT022", "cuda-only-reexport", NAME,
         "A module re-exports a name from a CUDA-only package (`__all__`, `import x as x`, "
         "`from pkg import *`, or a package `__init__.py`).",
         Category.REPLACE, severity=Severity.WARNING, effort_hours=0.5,
         explanation="porter resolves names file by file, through each file's own imports. Modules that "
         "import the re-exported name from this module (`from mypkg.ops import flash_attn_func`) are "
         "not attributed to the CUDA-only package, so their call sites are not reported. Port the "
         "re-exporting module first, or grep its importers."),
    rule("PRT023", "availability-probe", NAME,
         "A run-time probe for a CUDA-only package (`find_spec`, `importlib.metadata.version`, "
         "`is_flash_attn_2_available()`...).", Category.BENIGN, severity=Severity.INFO,
         explanation="The probe itself is portable: it returns False/raises when the package is "
         "missing. It marks an optional code path; check that the fallback is the one you want on ROCm."),
    rule("PRT030", "hf-flash-attention-2", NAME,
         "Hugging Face `attn_implementation=\"flash_attention_2\"` needs flash-attn; use \"sdpa\".",
         Category.SHIM, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="transformers' `\"sdpa\"` implementation computes the same attention through "
         "`torch.nn.functional.scaled_dot_product_attention`, which has kernels on NVIDIA and AMD. "
         "The rewrite only changes the string; outputs agree up to floating-point rounding.\n\n"
         "That holds only when the string reaches an upstream transformers model, so porter rewrites it "
         "only when nothing in the repository says otherwise; each of these turns the fix into a report "
         "with the reason: an attention-class table or patch keyed by the string (`*_ATTENTION_CLASSES`, "
         "a dict or subscript keyed by `\"flash_attention_2\"`: the repo's own model may map only "
         "eager/flash_attention_2, and a patched flash entry would be bypassed), code that compares "
         "against the string, a repository model declaring flash-attn support without SDPA, and Hub "
         "remote code (`trust_remote_code`) on the call, or anywhere in the repository when the value "
         "flows through a variable, a config attribute, `**kwargs` or a project function. A conditional "
         "value (`\"flash_attention_2\" if use_flash else \"eager\"`) has its flash branch rewritten.",
         example='```python\nmodel = AutoModel.from_pretrained(name, attn_implementation="flash_attention_2")\n'
         '# becomes\nmodel = AutoModel.from_pretrained(name, attn_implementation="sdpa")\n```'),
    rule("PRT031", "hf-use-flash-attention-2", NAME,
         "Hugging Face `use_flash_attention_2=True` (removed in transformers v5) needs flash-attn.",
         Category.SHIM, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="The legacy flag is replaced by `attn_implementation=\"sdpa\"` (same math via "
         "SDPA). When the value is not a literal `True` porter only reports the site.",
         example='```python\nAutoModel.from_pretrained(name, use_flash_attention_2=True)\n'
         '# becomes\nAutoModel.from_pretrained(name, attn_implementation="sdpa")\n```'),
    rule("PRT032", "flash-attention-switch", NAME,
         "A project switch that turns on a flash-attn code path (`use_flash_attn=True`, "
         "`use_flash_attention_2=True` passed to a project function, a `True` default).",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.25,
         explanation="The switch is plumbing: the code it selects needs flash-attn (or, through Hugging "
         "Face, `attn_implementation=\"flash_attention_2\"`). porter cannot see what the project does with "
         "it, so it reports the switch where it is turned on: on ROCm turn it off, select `\"sdpa\"` where "
         "the value reaches transformers, or install AMD's flash-attn build."),
    rule("PRT033", "diffusers-xformers-attention", NAME,
         "diffusers `enable_xformers_memory_efficient_attention()` needs xformers.",
         Category.SHIM, severity=Severity.WARNING, effort_hours=0.25,
         explanation="diffusers switches every attention processor to `XFormersAttnProcessor`, which imports "
         "xformers (and raises when it is missing). With torch >= 2.0, diffusers releases since early 2023 "
         "(PR #2303) already build their models with `AttnProcessor2_0`, i.e. `scaled_dot_product_attention`, "
         "which is memory-efficient and runs on NVIDIA and AMD: drop the call (and the availability check "
         "around it); older diffusers fall back to the plain, portable processor. porter does not drop it "
         "itself: processors set before the call (LoRA, IP-Adapter, custom) would be kept instead of being "
         "replaced by their xformers variants, and guards around the call usually raise when xformers is "
         "missing.",
         example="```python\nunet.enable_xformers_memory_efficient_attention()  # reported\n```"),
)


# The pre-filter: every rule needs one of these in the file's text (names spelled out, not built
# from escape sequences in a string literal):
# - an import, use, gate or re-export, and a by-name import (PRT019), name a package's module
#   or extension (`cuda` covers cuda.* and the *_cuda extensions; `fused_softmax_lib` is the one
#   extension that no other token covers);
# - a probe by distribution name (PRT023) calls importlib / pkgutil / pkg_resources or a lightning
#   helper (the name is matched case-insensitively, so only the callee's module is certain); a
#   transformers-style `is_*_available` helper names its package (`bnb` has its own token);
# - the Hugging Face switches: the literal "flash_attention_2", a switch name (flash_attn,
#   flashattn, flash_attention...) or a diffusers xformers method.
_TOKENS = ("flash_attn", "flashattn", "flash_attention", "xformers", "apex", "bitsandbytes", "is_bnb_available",
           "transformer_engine", "pynvml", "dali", "cupy", "pycuda", "tensorrt", "cutlass", "cuda", "amp_C",
           "syncbn", "fast_layer_norm", "dropout_layer_norm", "fused_dense_lib", "fused_softmax_lib", "rotary_emb",
           "ft_attention", "importlib", "pkgutil", "pkg_resources", "lightning")

FAMILY = Family(
    name=NAME,
    title="CUDA-only packages and Hugging Face attention switches",
    order=10,
    rules=RULES,
    tokens=_TOKENS,
    python_ast="porter.codemods.packages.visitor:PackagesVisitor",
    description="Switches Hugging Face models from the flash-attn implementation to `\"sdpa\"`, "
    "which runs on NVIDIA and AMD through PyTorch's own kernels.",
    verified="Fixture tests (tests/fixtures/packages) check every rewrite and that names in comments, "
    "docstrings, strings and unrelated identifiers are never reported.",
    review="Imports of CUDA-only packages that no rewrite removed still need a port (see the report).",
)
