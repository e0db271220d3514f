"""CUDA-only Python packages: every import and use site, plus Hugging Face's FA2 switch.

This is porter's inventory family (PRT01x-PRT03x). It resolves names through the file's
imports, so a project-defined ``flash_attn_forward`` or the word "apex" in a docstring is
never reported. More specific families (attention, optimizers...) report richer findings
on the same calls; those supersede the generic use-site finding here.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from porter.findings import Applicability, Category, Severity
from porter.framework import Family, PyContext, PyVisitor, rule
from porter.pyimports import dotted

NAME = "packages"


@dataclass(frozen=True)
class Package:
    module: str  # import root ("flash_attn", "nvidia.dali")
    dist: str  # distribution name ("flash-attn")
    code: str  # import rule code
    rule_name: str
    category: Category
    advice: str  # the portable route


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
)

_BY_MODULE = {p.module: p for p in PACKAGES}
_ROOTS = {p.module.split(".")[0] for p in PACKAGES}


def package_of(qualname: str | None) -> Package | None:
    """The CUDA-only package a qualified name belongs to, if any."""
    if not qualname:
        return None
    for module, pkg in _BY_MODULE.items():
        if qualname == module or qualname.startswith(module + "."):
            return pkg
    return None


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
         explanation="Gated imports already have a fallback path. porter reports them so the audit "
         "shows which CUDA-only dependencies are optional; rewrites keep the gate's fallback working."),
    rule("PRT030", "hf-flash-attention-2", NAME,
         "Hugging Face `attn_implementation=\"flash_attention_2\"` needs flash-attn; use \"sdpa\".",
         Category.SHIM, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="transformers' `\"sdpa\"` implementation computes the same attention through "
         "`torch.nn.functional.scaled_dot_product_attention`, which has kernels on NVIDIA and AMD. "
         "The rewrite only changes the string; outputs agree up to floating-point rounding.",
         example='```python\nmodel = AutoModel.from_pretrained(name, attn_implementation="flash_attention_2")\n'
         '# becomes\nmodel = AutoModel.from_pretrained(name, attn_implementation="sdpa")\n```'),
    rule("PRT031", "hf-use-flash-attention-2", NAME,
         "Hugging Face `use_flash_attention_2=True` (removed in transformers v5) needs flash-attn.",
         Category.SHIM, severity=Severity.WARNING, fix=Applicability.SAFE, effort_hours=0.25,
         explanation="The legacy flag is replaced by `attn_implementation=\"sdpa\"` (same math via "
         "SDPA). When the value is not a literal `True` porter only reports the site.",
         example='```python\nAutoModel.from_pretrained(name, use_flash_attention_2=True)\n'
         '# becomes\nAutoModel.from_pretrained(name, attn_implementation="sdpa")\n```'),
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


class PackagesVisitor(PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._skip: set[int] = set()  # Name/Attribute nodes that are not references
        self._in_import = 0

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
        gated = any(b.gated and b.statement is stmt for b in self.ctx.imports.statements)
        suffix = " (inside an availability gate)" if gated else ""
        self.report(node, pkg.code, f"import of CUDA-only package {pkg.dist}: {what}{suffix}; {pkg.advice}",
                    fix=Applicability.NONE, data={"package": pkg.dist, "gated": gated})
        if gated:
            self.report(node, "PRT021", f"availability gate around {pkg.dist}: the code has a fallback "
                        "when it is missing", fix=Applicability.NONE, data={"package": pkg.dist})

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
        qual = self.ctx.imports.resolve_name(node.value)
        pkg = package_of(qual)
        if pkg is not None:
            self._use(node, pkg, qual or "")

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))

    def _use(self, node: cst.CSTNode, pkg: Package, qual: str) -> None:
        self.report(node, "PRT020", f"use of {qual} from CUDA-only package {pkg.dist}; {pkg.advice}",
                    fix=Applicability.NONE, generic=True, category=pkg.category,
                    data={"package": pkg.dist, "qualname": qual})

    # -- Hugging Face switches ----------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        keywords = {a.keyword.value: a for a in node.args if a.keyword is not None}
        impl = keywords.get("attn_implementation")
        if impl is not None:
            value = _string_value(impl.value)
            if value in _FA2_VALUES and isinstance(impl.value, cst.SimpleString):
                self.report(impl.value, "PRT030",
                            'attn_implementation="flash_attention_2" needs flash-attn; "sdpa" is portable',
                            replacement=_requote(impl.value, "sdpa"), fix=Applicability.SAFE,
                            fix_title='use attn_implementation="sdpa"')
        legacy = keywords.get("use_flash_attention_2")
        if legacy is not None:
            val = legacy.value
            if isinstance(val, cst.Name) and val.value == "False":
                return
            if isinstance(val, cst.Name) and val.value == "True" and impl is None:
                self.report(legacy, "PRT031",
                            'use_flash_attention_2=True needs flash-attn; use attn_implementation="sdpa"',
                            replacement=legacy.with_changes(
                                keyword=cst.Name("attn_implementation"),
                                value=cst.SimpleString('"sdpa"')),
                            fix=Applicability.SAFE, fix_title='use attn_implementation="sdpa"')
            else:
                reason = ("attn_implementation is also given" if impl is not None
                          else "its value is not a literal True")
                self.report(legacy, "PRT031", f"use_flash_attention_2 needs flash-attn; not rewritten "
                            f"because {reason}", fix=Applicability.NONE)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if _string_value(node.key) == "attn_implementation" and isinstance(node.value, cst.SimpleString):
            if _string_value(node.value) in _FA2_VALUES:
                self.report(node.value, "PRT030",
                            'attn_implementation "flash_attention_2" needs flash-attn; "sdpa" is portable',
                            replacement=_requote(node.value, "sdpa"), fix=Applicability.SAFE,
                            fix_title='use "sdpa"')


FAMILY = Family(
    name=NAME,
    title="CUDA-only packages and Hugging Face attention switches",
    order=10,
    rules=RULES,
    tokens=("flash_attn", "xformers", "apex", "bitsandbytes", "transformer_engine", "pynvml",
            "flash_attention_2"),
    python=PackagesVisitor,
    description="Switches Hugging Face models from the flash-attn implementation to `\"sdpa\"`, "
    "which runs on NVIDIA and AMD through PyTorch's own kernels.",
    verified="Fixture tests (tests/fixtures/packages) check every rewrite and that names in comments, "
    "docstrings, strings and unrelated identifiers are never reported.",
    review="Imports of CUDA-only packages that no rewrite removed still need a port (see the report).",
)
