"""CUDA-only Python packages: every import and use site, plus Hugging Face's FA2 switch.

This is porter's inventory family (PRT01x-PRT03x). It resolves names through the file's
imports, so a project-defined ``flash_attn_forward`` or the word "apex" in a docstring is
never reported. More specific families (attention, optimizers...) report richer findings
on the same calls; those supersede the generic use-site finding here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from porter.fallbacks import KEEPS_FALLBACK, describe_gate, gate_facts, keep_fallback
from porter.findings import Applicability, Category, Edit, Severity
from porter.framework import Family, PyContext, PyVisitor, rule
from porter.pyfix import referenced_names
from porter.pyimports import dotted

from . import _hf_attention as hf

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
    if not qualname:
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

_FA2_VALUES = {"flash_attention_2"}


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes
            return None
        return value if isinstance(value, str) else None
    return None


def _requote(node: cst.SimpleString, value: str) -> str:
    quote = node.quote
    return f"{node.prefix}{quote}{value}{quote}"


_STDLIB_ROOTS = {"importlib", "pkgutil", "pkg_resources"}
_IMPORTERS = {"importlib.import_module", "__import__", "importlib.__import__", "builtins.__import__"}
_PROBES = {"importlib.util.find_spec", "importlib.find_loader", "pkgutil.find_loader",
           "importlib.metadata.version", "importlib.metadata.distribution", "importlib_metadata.version",
           "pkg_resources.get_distribution", "pkg_resources.require"}
# lightning_utilities-style probes: RequirementCache("flash-attn>=2.0"), package_available("apex")
_REQ_PROBES = {"RequirementCache", "package_available", "module_available", "compare_version"}
_REQ_PROBE_LIBS = {"lightning_utilities", "lightning", "pytorch_lightning", "lightning_fabric"}


def _requirement_name(text: str) -> str:
    """The distribution name of a PEP 508 requirement string (``flash-attn>=2.0`` -> ``flash-attn``)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover
        return re.split(r"[<>=!~;\[ ]", text.strip(), maxsplit=1)[0]
    try:
        return Requirement(text).name
    except InvalidRequirement:
        return text.strip()


_HELPER = re.compile(r"^is_(flash_attn(?:_2|_3)?|xformers|bitsandbytes|bnb|apex|transformer_engine|pynvml|"
                     r"cupy|tensorrt|torch_tensorrt)_available$|^is_(flash_attn)_greater_or_equal\w*$")
_HELPER_LIBS = {"transformers", "diffusers", "accelerate", "peft", "trl", "optimum", "lightning",
                "pytorch_lightning", "deepspeed", "vllm", "sentence_transformers"}


def _helper_pkg(key: str) -> Package | None:
    return _BY_MODULE.get({"bnb": "bitsandbytes", "torch_tensorrt": "tensorrt"}.get(
        key, "flash_attn" if key.startswith("flash_attn") else key))


_HELPER_PACKAGES = {k: p for k in ("flash_attn", "flash_attn_2", "flash_attn_3", "xformers", "bitsandbytes",
                                   "bnb", "apex", "transformer_engine", "pynvml", "cupy", "tensorrt",
                                   "torch_tensorrt") if (p := _helper_pkg(k)) is not None}


# imported for what importing them does (a CUDA context, a torch.compile backend): not dead when unused
_SIDE_EFFECT_IMPORTS = ("pycuda.autoinit", "torch_tensorrt", "transformer_engine.pytorch")


def _dunder_import_chain(func: cst.BaseExpression) -> str | None:
    """``importlib.util.find_spec`` for ``__import__("importlib").util.find_spec``."""
    parts: list[str] = []
    while isinstance(func, cst.Attribute):
        parts.append(func.attr.value)
        func = func.value
    if not parts or not isinstance(func, cst.Call) or dotted(func.func) not in {"__import__", "importlib.import_module"}:
        return None
    arg = next((a.value for a in func.args if a.keyword is None), None)
    name = _string_value(arg) if arg is not None else None
    if name not in _STDLIB_ROOTS and name not in {"importlib.util", "importlib.metadata"}:
        return None
    return ".".join([name, *reversed(parts)])


def _aliases(stmt: cst.Import | cst.ImportFrom) -> list[cst.ImportAlias]:
    names = stmt.names
    return list(names) if not isinstance(names, cst.ImportStar) else []


class PackagesVisitor(PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._skip: set[int] = set()  # Name/Attribute nodes that are not references
        self._in_import = 0
        self._attn = hf.facts_for(ctx.facts.extra, ctx.relpath, ctx.text)
        self._switch_seen: set[int] = set()  # 'flash_attention_2' literals already reported
        self._impl_names: dict[str, int] = {}  # names passed as attn_implementation=<name>, and how often
        self._fa2_assigns: list[tuple[str, cst.BaseExpression]] = []  # name = <'flash_attention_2' ...>
        self._used: set[str] | None = None
        self._lines: dict[int, cst.SimpleStatementLine] = {}  # import statement -> its line
        self._module_lines = {id(stmt) for stmt in ctx.module.body}

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        for small in node.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                self._lines[id(small)] = node

    # -- imports ------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1
        for alias in node.names:
            name = dotted(alias.name) or ""
            pkg = package_of(name)
            if pkg is not None:
                self._report_import(alias, pkg, name, node)

    def leave_Import(self, original_node: cst.Import) -> None:
        self._in_import -= 1

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1
        if node.relative or node.module is None:
            return
        module = dotted(node.module) or ""
        pkg = package_of(module)
        if pkg is None and not isinstance(node.names, cst.ImportStar):
            # `from nvidia import dali` style
            for alias in node.names:
                full = f"{module}.{dotted(alias.name)}"
                sub = package_of(full)
                if sub is not None:
                    self._report_import(alias, sub, full, node)
            return
        if pkg is not None:
            target: cst.CSTNode = node.module
            names = "*" if isinstance(node.names, cst.ImportStar) else ", ".join(
                dotted(a.name) or "" for a in node.names
            )
            self._report_import(target, pkg, f"{module} ({names})", node)

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self._in_import -= 1

    def _report_import(self, node: cst.CSTNode, pkg: Package, what: str, stmt: cst.CSTNode) -> None:
        mine = [b for b in self.ctx.imports.statements if b.statement is stmt]
        gated = any(b.gated for b in mine)
        suffix = " (inside an availability gate)" if gated else ""
        unused = self._unused_import(mine, stmt)
        if unused is not None:
            edit, names = unused
            self.report(node, pkg.code, f"import of CUDA-only package {pkg.dist}: {what} is not used in this "
                        f"module; removed ({', '.join(names)}), since importing it fails where {pkg.dist} is not "
                        "installed", fix=Applicability.SAFE, fix_title="remove the unused import",
                        edits=(edit,), data={"package": pkg.dist, "gated": False})
            return
        root = module_of(what.split(" ")[0])
        if root in ALIASES and pkg.module in {"apex", "flash_attn"}:
            head = f"import of {root}, a compiled CUDA extension of {pkg.dist}"
        elif root in ALIASES:
            head = f"import of CUDA-only package {pkg.dist} ({root})"
        else:
            head = f"import of CUDA-only package {pkg.dist}"
        self.report(node, pkg.code, f"{head}: {what}{suffix}; {pkg.advice}",
                    fix=Applicability.NONE, data={"package": pkg.dist, "gated": gated})
        if gated:
            self._report_gate(node, pkg, mine)

    def _report_gate(self, node: cst.CSTNode, pkg: Package, mine: list) -> None:
        gate = next((b.gate for b in mine if b.gate is not None), None)
        if gate is None:
            self.report(node, "PRT021", f"availability gate around {pkg.dist}", fix=Applicability.NONE,
                        data={"package": pkg.dist})
            return
        imports = self.ctx.imports
        facts = gate_facts(imports, gate, lambda t: package_of(t) is not None)
        message = describe_gate(facts, pkg.dist)
        text = keep_fallback(imports, gate, self.ctx.module, lambda m: package_of(m) is not None)
        if text is None:
            self.report(node, "PRT021", message, fix=Applicability.NONE, data={"package": pkg.dist})
            return
        start, end = self.span(gate)
        if not text:
            # nothing runs without the package: the statement and its line go
            line_start = self.ctx.text.rfind("\n", 0, start) + 1
            nl = self.ctx.text.find("\n", end)
            start, end = line_start, (len(self.ctx.text) if nl < 0 else nl + 1)
            while start >= 2 and self.ctx.text[start - 1] == "\n" and self.ctx.text[start - 2] == "\n":
                start -= 1  # the blank lines that separated it from the code before
        self.report(node, "PRT021", message + f"; the import branch only serves {pkg.dist}, so the port keeps the "
                    "fallback (what runs without the package) and drops the try/except",
                    fix=Applicability.SAFE, fix_title="keep the fallback, drop the dead import branch",
                    edits=(Edit(start, end, text),), data={"package": pkg.dist, KEEPS_FALLBACK: True})

    def _unused_import(self, mine: list, stmt: cst.CSTNode) -> tuple[Edit, list[str]] | None:
        """An edit removing the statement's CUDA-only bindings that nothing in the module uses, when
        the statement is an ungated top-level import outside a package ``__init__.py``."""
        if not mine or any(b.gated or not b.toplevel or b.local == "*" for b in mine):
            return None
        if self.ctx.relpath.rsplit("/", 1)[-1] == "__init__.py":
            return None
        used = self._used_names()
        if used is None:
            return None
        dead = [b for b in mine if b.local not in used and package_of(b.target) is not None
                and len(self.ctx.imports.bindings.get(b.local, ())) == 1
                and not any(t == m or t.startswith(m + ".") for m in _SIDE_EFFECT_IMPORTS for t in (b.target, b.module))]
        if not dead:
            return None
        # only worth it when the package then goes from the module: dropping unused names beside
        # live ones of the same package changes nothing on a machine without it
        dead_ids = {id(b) for b in dead}
        pkgs = {package_of(b.target) for b in dead}
        for b in self.ctx.imports.statements:
            if id(b) in dead_ids or b.gated or package_of(b.target) not in pkgs:
                continue
            return None
        for alias in _aliases(stmt):  # type: ignore[arg-type]
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name) and \
                    alias.asname.name.value == (dotted(alias.name) or ""):
                return None  # `import x as x`: an explicit re-export
        line = self._lines.get(id(stmt))
        if line is None or id(line) not in self._module_lines:
            return None  # only imports at the top of the module body (not under `if TYPE_CHECKING:`)
        dead_locals = {b.local for b in dead}
        keep = []
        for alias in _aliases(stmt):  # type: ignore[arg-type]
            if isinstance(stmt, cst.Import):
                local = (alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                         else (dotted(alias.name) or "").split(".")[0])
            else:
                local = (alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name)
                         else dotted(alias.name) or "")
            if local not in dead_locals:
                keep.append(alias)
        if not keep and len(line.body) == 1:
            start, stmt_end = self.span(line)
            text = self.ctx.text
            line_start = text.rfind("\n", 0, start) + 1
            if text[line_start:start].strip():
                return None
            end = text.find("\n", stmt_end)
            end = len(text) if end < 0 else end + 1
            # the whole line goes, with its comment
            return Edit(line_start, end, ""), sorted(dead_locals)
        if not keep:
            return None
        keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        start, end = self.span(stmt)
        return Edit(start, end, self.code(stmt.with_changes(names=keep))), sorted(dead_locals)  # type: ignore[attr-defined]

    def _used_names(self) -> set[str] | None:
        if self._used is None:
            try:
                self._used = referenced_names(self.ctx.text)
            except (SyntaxError, ValueError, RecursionError):
                self._used = set()
                return None
        return self._used

    # -- use sites ----------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        if id(node) in self._skip or self._in_import:
            self._skip.add(id(node.value))
            return
        qual = self.qualname(node)
        pkg = package_of(qual)
        if pkg is not None:
            # report the outermost chain only
            inner: cst.BaseExpression = node.value
            while isinstance(inner, cst.Attribute):
                self._skip.add(id(inner))
                self._skip.add(id(inner.attr))
                inner = inner.value
            self._skip.add(id(inner))
            self._use(node, pkg, qual or "")

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) in self._skip or self._in_import:
            return
        if node.value not in self.ctx.imports.bindings:
            fb = self.ctx.imports.fallback(node.value)
            if fb is not None and fb.real:
                return  # `RMSNorm = FusedRMSNorm` in a gate, with the project's RMSNorm as fallback
        qual = self.ctx.imports.resolve_name(node.value)
        pkg = package_of(qual)
        if pkg is not None:
            self._use(node, pkg, qual or "")

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):  # `bnb = None` in a fallback is not a use
            self._skip.add(id(node.target))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))

    def _use(self, node: cst.CSTNode, pkg: Package, qual: str) -> None:
        if not pkg.report_uses:
            return
        self.report(node, "PRT020", f"use of {qual} from CUDA-only package {pkg.dist}; {pkg.advice}",
                    fix=Applicability.NONE, generic=True, category=pkg.use_category or pkg.category,
                    effort_hours=pkg.use_effort,
                    data={"package": pkg.dist, "qualname": qual})

    # -- Hugging Face switches ----------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self._dynamic_import(node)
        self._xformers_switch(node)
        keywords = {a.keyword.value: a for a in node.args if a.keyword is not None}
        impl = keywords.get("attn_implementation")
        if impl is not None:
            self._fa2_value(impl.value, call=node, flows=not _is_loader(node))
            if isinstance(impl.value, cst.Name):
                self._impl_names[impl.value.value] = self._impl_names.get(impl.value.value, 0) + 1
        legacy = keywords.get("use_flash_attention_2")
        if legacy is not None:
            self._legacy_switch(node, legacy, impl)
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value != "use_flash_attention_2" and \
                    _SWITCH_NAME.match(arg.keyword.value) and _is_true(arg.value):
                self._plumbing(arg, f"`{arg.keyword.value}=True` passed to `{self.code(node.func)}`")

    def _legacy_switch(self, node: cst.Call, legacy: cst.Arg, impl: cst.Arg | None) -> None:
        val = legacy.value
        if isinstance(val, cst.Name) and val.value == "False":
            return
        if not _is_loader(node):
            self._plumbing(legacy, f"`use_flash_attention_2={self.code(val)}` passed to `{self.code(node.func)}`, "
                           "not to a transformers from_pretrained/from_config (renaming the keyword would break "
                           "the call)")
            return
        if isinstance(val, cst.Name) and val.value == "True" and impl is None:
            blockers = self._switch_blockers(node, flows=False)
            if blockers:
                self.report(legacy, "PRT031", "use_flash_attention_2=True needs flash-attn; not rewritten to "
                            'attn_implementation="sdpa" because ' + "; ".join(blockers), fix=Applicability.NONE)
                return
            self.report(legacy, "PRT031",
                        'use_flash_attention_2=True needs flash-attn; use attn_implementation="sdpa" (nothing in '
                        "the repository dispatches on the attention string, and the call loads no remote code)",
                        replacement=legacy.with_changes(
                            keyword=cst.Name("attn_implementation"),
                            value=cst.SimpleString('"sdpa"')),
                        fix=Applicability.SAFE, fix_title='use attn_implementation="sdpa"')
        else:
            reason = ("attn_implementation is also given" if impl is not None
                      else "its value is not a literal True")
            self.report(legacy, "PRT031", f"use_flash_attention_2 needs flash-attn; not rewritten "
                        f"because {reason}", fix=Applicability.NONE)

    def _switch_blockers(self, call: cst.Call | None, *, flows: bool) -> list[str]:
        """Why switching the attention string here might not be exact (empty: it is)."""
        out = self._attn.blockers()
        pin = self.ctx.facts.pin("transformers")
        if not hf.transformers_admits_sdpa(pin):
            out.append(f"the repo pins transformers `{pin}`; attn_implementation=\"sdpa\" needs transformers >= 4.36")
        if call is not None:
            trc = next((a for a in call.args if a.keyword is not None and a.keyword.value == "trust_remote_code"),
                       None)
            if trc is not None and not (isinstance(trc.value, cst.Name) and trc.value.value in ("False", "None")):
                out.append(f"the call loads Hub remote code (`trust_remote_code={self.code(trc.value)}`), whose "
                           "attention classes porter cannot read")
                return out
            if any(a.star == "**" for a in call.args):
                flows = True
        if flows and self._attn.remote:
            site = self._attn.remote[0].show()
            out.append(f"the value flows through a variable, config attribute, **kwargs or project function, and "
                       f"the repository loads Hub remote code ({site}), whose attention classes porter cannot "
                       "read")
        return out

    def _fa2_value(self, value: cst.BaseExpression, *, call: cst.Call | None, flows: bool,
                   where: str = "attn_implementation") -> None:
        """Report every 'flash_attention_2' literal that ``value`` can evaluate to."""
        literals = _fa2_literals(value)
        if not literals:
            return
        blockers = self._switch_blockers(call, flows=flows)
        cond = " (the flash branch of a conditional)" if not isinstance(value, cst.SimpleString) else ""
        for lit in literals:
            if id(lit) in self._switch_seen:
                continue
            self._switch_seen.add(id(lit))
            if blockers:
                self.report(lit, "PRT030", f'{where} "flash_attention_2"{cond} needs flash-attn; not rewritten '
                            'to "sdpa" because ' + "; ".join(blockers), fix=Applicability.NONE)
                continue
            self.report(lit, "PRT030", f'{where} "flash_attention_2"{cond} needs flash-attn; "sdpa" is portable '
                        "(nothing in the repository dispatches on, patches or redefines the attention string, "
                        "and no remote code is loaded on its path)",
                        replacement=_requote(lit, "sdpa"), fix=Applicability.SAFE,
                        fix_title='use attn_implementation="sdpa"')

    def _plumbing(self, node: cst.CSTNode, what: str) -> None:
        self.report(node, "PRT032", f"{what}: a switch that turns on a flash-attn code path; on ROCm turn it off, "
                    'pass attn_implementation="sdpa" where it reaches transformers, or install AMD\'s flash-attn '
                    "build", fix=Applicability.NONE)

    def _xformers_switch(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        name = func.attr.value
        if name == "set_use_memory_efficient_attention_xformers":
            first = node.args[0].value if node.args else None
            if first is None or _is_false(first):
                return
        elif name != "enable_xformers_memory_efficient_attention":
            return
        self.report(node, "PRT033", f"`{name}` turns on xformers attention (diffusers installs "
                    "XFormersAttnProcessor and raises without xformers; a project's own method of that name "
                    "usually selects xformers.ops); with torch >= 2.0, diffusers since early 2023 already uses "
                    "AttnProcessor2_0 (scaled_dot_product_attention, portable): drop the call and its xformers "
                    "availability check, unless processors set before it (LoRA, IP-Adapter, custom) relied on "
                    "being swapped for their xformers variants; a project model needs its SDPA path selected "
                    "instead", fix=Applicability.NONE)

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))
        if node.default is None:
            return
        name = node.name.value
        if _IMPL_NAME.search(name):
            self._fa2_value(node.default, call=None, flows=True, where=f"parameter `{name}` default")
        elif _SWITCH_NAME.match(name) and _is_true(node.default):
            self._plumbing(node, f"parameter `{name}` defaults to True")

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is None or not isinstance(node.target, cst.Name):
            return
        name = node.target.value
        value = node.value
        if isinstance(value, cst.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] == "field":
            default = next((a.value for a in value.args if a.keyword is not None
                            and a.keyword.value == "default"), None)
            if default is None:
                return
            value = default
        if _IMPL_NAME.search(name):
            self._fa2_value(value, call=None, flows=True, where=f"`{name}`")
        elif _SWITCH_NAME.match(name) and _is_true(value):
            self._plumbing(node, f"`{name}` defaults to True")

    def _dynamic_import(self, node: cst.Call) -> None:
        func = node.func
        qual = self.qualname(func)
        if qual is None and isinstance(func, cst.Name) and func.value == "__import__":
            qual = "__import__"
        if qual is None:
            qual = _dunder_import_chain(func)
        if qual is None:
            # `importlib.util.find_spec(...)` in a module that never imports importlib itself (it
            # works when another module imported importlib.util first): resolve the stdlib root
            text = dotted(func) or ""
            if text.split(".")[0] in _STDLIB_ROOTS and self.ctx.imports.resolve_name(text.split(".")[0]) is None:
                qual = text
        if qual is None:
            return
        first = next((a.value for a in node.args if a.keyword is None and not a.star), None)
        if first is None:
            first = next((a.value for a in node.args if a.keyword is not None
                          and a.keyword.value in {"name", "distribution_name"}), None)
        name = _string_value(first) if first is not None else None
        if qual in _IMPORTERS:
            pkg = package_of(name) if name else None
            if pkg is not None and name is not None:
                self.report(node, "PRT019", f"{qual}(\"{name}\") loads CUDA-only {pkg.dist} at run time; "
                            f"{pkg.advice} (uses of the returned module are not traced)",
                            fix=Applicability.NONE, data={"package": pkg.dist, "module": name})
        elif qual in _PROBES or qual.rsplit(".", 1)[-1] in _REQ_PROBES and qual.split(".")[0] in _REQ_PROBE_LIBS:
            pkg = package_of_dist(_requirement_name(name)) if name else None
            if pkg is not None and name is not None:
                self.report(node, "PRT023", f"{qual}(\"{name}\") probes for CUDA-only {pkg.dist}; check "
                            "the fallback path on ROCm", fix=Applicability.NONE, data={"package": pkg.dist})
        else:
            m = _HELPER.match(qual.rsplit(".", 1)[-1])
            if m and qual.split(".")[0] in _HELPER_LIBS:
                pkg = _HELPER_PACKAGES.get(m.group(1) or m.group(2))
                if pkg is not None:
                    self.report(node, "PRT023", f"{qual}() probes for CUDA-only {pkg.dist}; check the fallback "
                                "path on ROCm", fix=Applicability.NONE, data={"package": pkg.dist})

    # -- re-exports ---------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        exported: set[str] = set()
        for stmt in node.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                targets: list[cst.BaseExpression] = []
                value: cst.BaseExpression | None = None
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                    value = small.value
                elif isinstance(small, cst.AugAssign):
                    targets, value = [small.target], small.value
                if value is not None and any(isinstance(t, cst.Name) and t.value == "__all__" for t in targets):
                    if isinstance(value, (cst.List, cst.Tuple)):
                        for el in value.elements:
                            v = _string_value(el.value)
                            if v:
                                exported.add(v)
        is_init = self.ctx.relpath.rsplit("/", 1)[-1] == "__init__.py"
        for b in self.ctx.imports.statements:
            if not b.toplevel:
                continue
            pkg = package_of(b.target if b.local != "*" else b.module)
            if pkg is None:
                continue
            reason = ""
            if b.local == "*":
                reason = "`from ... import *`"
            elif b.local in exported:
                reason = "listed in __all__"
            elif isinstance(b.statement, cst.ImportFrom) and is_init and not b.gated:
                reason = "imported by a package __init__.py"
            else:
                for alias in _aliases(b.statement):
                    # PEP 484's explicit re-export: `import x as x`, `from m import x as x`
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name) and \
                            alias.asname.name.value == b.local == (dotted(alias.name) or ""):
                        reason = "`import x as x` re-export idiom"
            if reason:
                self.report(b.statement, "PRT022", f"re-export of {b.target} ({pkg.dist}) from this module: "
                            f"{reason}; modules that import it from here are not attributed to {pkg.dist} "
                            "(porter resolves names per file)", fix=Applicability.NONE,
                            data={"package": pkg.dist, "name": b.local})

    def visit_Assign(self, node: cst.Assign) -> None:
        if not _fa2_literals(node.value):
            return
        for t in node.targets:
            target = t.target
            key = None
            if isinstance(target, cst.Subscript) and len(target.slice) == 1 and isinstance(
                target.slice[0].slice, cst.Index
            ):
                key = _string_value(target.slice[0].slice.value)
            elif isinstance(target, cst.Attribute):
                key = target.attr.value.lstrip("_")
            elif isinstance(target, cst.Name) and _IMPL_NAME.search(target.value):
                key = "attn_implementation"
            elif isinstance(target, cst.Name):
                self._fa2_assigns.append((target.value, node.value))
            if key == "attn_implementation":
                self._fa2_value(node.value, call=None, flows=True, where=f"`{self.code(target)}`")
                return

    def leave_Module(self, original_node: cst.Module) -> None:
        # `impl = "flash_attention_2" if flag else "eager"` ... `attn_implementation=impl`
        stores: dict[str, int] = {}
        for name, _ in self._fa2_assigns:
            stores[name] = stores.get(name, 0) + 1
        for name, value in self._fa2_assigns:
            if name not in self._impl_names:
                continue
            where = f"`{name}` (passed as attn_implementation)"
            uses = len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", self.ctx.text))
            if uses != stores[name] + self._impl_names[name]:
                for lit in _fa2_literals(value):
                    if id(lit) not in self._switch_seen:
                        self._switch_seen.add(id(lit))
                        self.report(lit, "PRT030", f'{where} "flash_attention_2" needs flash-attn; not rewritten '
                                    f'to "sdpa" because `{name}` is also used for something else in this file',
                                    fix=Applicability.NONE)
                continue
            self._fa2_value(value, call=None, flows=True, where=where)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if _string_value(node.key) == "attn_implementation":
            self._fa2_value(node.value, call=None, flows=True, where='"attn_implementation" entry')


_LOADERS = {"from_pretrained", "from_config", "_from_config"}
# project switch names that turn on a flash-attn path
_SWITCH_NAME = re.compile(r"^(?:use_|enable_)?flash_?attn(?:_?2)?$|^(?:use_|enable_)flash_attention(?:_?2)?$")
_IMPL_NAME = re.compile(r"(?:^|_)attn_impl|attention_impl", re.IGNORECASE)


def _is_loader(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name in _LOADERS


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")


def _fa2_literals(node: cst.BaseExpression) -> list[cst.SimpleString]:
    """The 'flash_attention_2' literals ``node`` evaluates to (itself, or a conditional's branches)."""
    if isinstance(node, cst.SimpleString):
        return [node] if _string_value(node) in _FA2_VALUES else []
    if isinstance(node, cst.IfExp):
        return _fa2_literals(node.body) + _fa2_literals(node.orelse)
    return []


FAMILY = Family(
    name=NAME,
    title="CUDA-only packages and Hugging Face attention switches",
    order=10,
    rules=RULES,
    tokens=("flash_attn", "xformers", "apex", "bitsandbytes", "transformer_engine", "pynvml",
            "flash_attention_2", "dali", "cupy", "pycuda", "tensorrt", "cuda", "amp_C", "syncbn",
            "fast_layer_norm", "dropout_layer_norm", "fused_dense_lib", "rotary_emb", "ft_attention", "_lib", "flash-attn", "transformer-engine",
            "nvidia-ml-py", "_available", "cutlass"),
    python=PackagesVisitor,
    description="Switches Hugging Face models from the flash-attn implementation to `\"sdpa\"`, "
    "which runs on NVIDIA and AMD through PyTorch's own kernels.",
    verified="Fixture tests (tests/fixtures/packages) check every rewrite and that names in comments, "
    "docstrings, strings and unrelated identifiers are never reported.",
    review="Imports of CUDA-only packages that no rewrite removed still need a port (see the report).",
)
