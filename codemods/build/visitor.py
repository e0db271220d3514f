"""The build family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.build`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from porter.codemods.build import (
    _TRANSLATE,
    _WITH_ARG,
    DEFAULT_IMAGE,
    DEVICE_FLAGS,
    NAME,
    NONE,
    SAFE,
    UNSAFE,
    nvcc_only,
)
from porter.codemods.dependencies.catalog import (
    CUDA_TORCH_INDEX,
    DEFAULT_ROCM_VERSION,
    EXACT_TORCH,
    ROCM_VERSION_RE,
    rocm_index,
    rocm_index_problem,
)
from porter.findings import Finding
from porter.framework import FileContext, PyContext, PyVisitor
from porter.pycst import ImportDepthMixin

# -- nvcc flags -------------------------------------------------------------------------------------

def _translate(flag: str) -> str | None:
    if flag in _TRANSLATE:
        return _TRANSLATE[flag]
    for key in ("-Xcompiler=", "--compiler-options=", "-ccbin=", "--compiler-bindir="):
        if flag.startswith(key):
            return _TRANSLATE[key[:-1]]
    return None


def _str(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001
            return None
        return value if isinstance(value, str) else None
    return None


_HIP_TEST = re.compile(r"(?<![A-Za-z])(hip|rocm)(?![a-z])", re.IGNORECASE)


class BuildVisitor(ImportDepthMixin, PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        text = ctx.text
        self.active = ("cpp_extension" in text or "CUDAExtension" in text or "nvcc" in text
                       or "extra_cuda_cflags" in text)
        self._gated = 0
        self._handled: set[int] = set()
        self._assigned: dict[str, list[tuple[cst.List | None, bool]]] = {}  # name -> (list, gated)
        self._nvcc_names: set[str] = set()
        self._pending: list[tuple[cst.SimpleString, str, str]] = []

    # gates: code under `if torch.version.hip` / `x if IS_HIP_EXTENSION else y` is left alone
    def visit_If(self, node: cst.If) -> None:
        if self.active and _HIP_TEST.search(self.code(node.test)):
            self._gated += 1

    def leave_If(self, original_node: cst.If) -> None:
        if self.active and _HIP_TEST.search(self.code(original_node.test)):
            self._gated -= 1

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if self.active and _HIP_TEST.search(self.code(node.test)):
            self._gated += 1

    def leave_IfExp(self, original_node: cst.IfExp) -> None:
        if self.active and _HIP_TEST.search(self.code(original_node.test)):
            self._gated -= 1

    # "nvcc": [...] in a dict literal, nvcc=[...] in dict(...); a list variable used there
    def visit_DictElement(self, node: cst.DictElement) -> None:
        if self.active and not self._gated and _str(node.key) == "nvcc":
            self._nvcc_value(node.value)

    def visit_Arg(self, node: cst.Arg) -> None:
        # dict(nvcc=[...]); load()/load_inline(extra_cuda_cflags=[...]) also go to hipcc on ROCm
        if (self.active and not self._gated and node.keyword is not None
                and node.keyword.value in ("nvcc", "extra_cuda_cflags")):
            self._nvcc_value(node.value)

    def _nvcc_value(self, value: cst.BaseExpression) -> None:
        if isinstance(value, cst.List):
            self._nvcc_list(value)
            return
        stack: list[cst.CSTNode] = [value]
        while stack:  # names the flags come from: nvcc_flags + cc_flag, helper(nvcc_flags)
            expr = stack.pop()
            if isinstance(expr, cst.Name):
                self._nvcc_names.add(expr.value)
            elif isinstance(expr, cst.BinaryOperation):
                stack += [expr.left, expr.right]
            elif isinstance(expr, cst.Call):
                stack += [a.value for a in expr.args]
            elif isinstance(expr, cst.List) and expr is not value:
                self._nvcc_list(expr, nested=True)

    def visit_Assign(self, node: cst.Assign) -> None:
        if not self.active:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                lst = node.value if isinstance(node.value, cst.List) and len(node.targets) == 1 else None
                self._assigned.setdefault(target.target.value, []).append((lst, bool(self._gated)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self.active and isinstance(node.target, cst.Name):
            self._assigned.setdefault(node.target.value, []).append((None, bool(self._gated)))

    def leave_Module(self, original_node: cst.Module) -> None:
        for name in sorted(self._nvcc_names):
            assigns = self._assigned.get(name, [])
            if len(assigns) == 1 and assigns[0][0] is not None and not assigns[0][1]:
                self._nvcc_list(assigns[0][0], variable=name)
        for node, code, message in self._pending:
            if id(node) not in self._handled:
                self.report(node, code, message, fix=NONE)

    def _nvcc_list(self, lst: cst.List, variable: str = "", nested: bool = False) -> None:
        values: list[tuple[cst.BaseElement, str | None]] = [(el, _str(el.value)) for el in lst.elements]
        for el, _ in values:
            self._handled.add(id(el.value))
        keep: list[str] = []
        dropped: list[str] = []
        problems: list[str] = []
        skip_next = False
        for el, value in values:
            if skip_next:
                skip_next = False
                if value is None:
                    problems.append(f"the argument of {dropped[-1]} is not a literal")
                dropped.append(value or "?")
                continue
            if value is None or isinstance(el, cst.StarredElement):
                problems.append(f"`{self.code(el.value)}` is not a literal string")
                keep.append(self.code(el.value))
                continue
            why = _translate(value)
            if why is not None:
                problems.append(f"{value}: {why}")
                continue
            if nvcc_only(value):
                dropped.append(value)
                skip_next = value in _WITH_ARG
                continue
            keep.append(self.code(el.value))
        if not dropped and not problems:
            return
        if problems or skip_next:
            if skip_next:
                problems.append(f"{dropped[-1]} has no argument")
            if dropped or any(":" in p for p in problems):
                self.report(lst, "PRT840", f"nvcc flags hipcc rejects ({', '.join(dropped) or 'none droppable'}); "
                            f"not rewritten: {'; '.join(problems)}", fix=NONE)
            return
        torch_name = self.ctx.imports.alias_for("torch") or "torch"
        adds = () if self.ctx.imports.alias_for("torch") else ("import torch",)
        replacement = f"[{', '.join(keep)}] if {torch_name}.version.hip else {self.code(lst)}"
        if nested:  # inside `a + [...]`: the conditional needs parentheses
            replacement = f"({replacement})"
        where = f" (list `{variable}`, used as nvcc flags)" if variable else ""
        self.report(lst, "PRT840", f"nvcc-only flags {', '.join(dropped)}{where} break hipcc on ROCm: gated on "
                    "torch.version.hip (set PYTORCH_ROCM_ARCH for the ROCm targets)", replacement=replacement,
                    fix=SAFE, add_imports=adds, fix_title="gate the nvcc-only flags on torch.version.hip")

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if not self.active or self._gated or id(node) in self._handled:
            return
        value = _str(node)
        if value is None:
            return
        if value == "TORCH_CUDA_ARCH_LIST":
            self.report(node, "PRT842", "TORCH_CUDA_ARCH_LIST selects NVIDIA targets; ROCm extension builds read "
                        "PYTORCH_ROCM_ARCH", fix=NONE)
            return
        if nvcc_only(value) and value not in ("-t", "-code", "-keep"):
            self._pending.append((node, "PRT841", f"nvcc-only flag {value} outside a literal \"nvcc\" list: gate it "
                                  "on torch.version.hip by hand"))
        elif value in _TRANSLATE and value not in ("-G", "-dc"):
            self._pending.append((node, "PRT841", f"nvcc flag {value} needs a ROCm translation ({_TRANSLATE[value]})"))

    def visit_Name(self, node: cst.Name) -> None:
        if not self.active or self.in_import or self._gated or node.value != "CUDA_HOME":
            return
        if self.qualname(node) == "torch.utils.cpp_extension.CUDA_HOME":
            self.report(node, "PRT843", "CUDA_HOME is None on ROCm builds of torch: accept ROCM_HOME too or branch "
                        "on IS_HIP_EXTENSION", fix=NONE)


# -- text files --------------------------------------------------------------------------------------


def _code_part(line: str) -> str:
    m = re.search(r"(^|\s)#", line)
    return line if m is None else line[: m.start()]


def _lines(text: str) -> Iterator[tuple[int, str]]:
    pos = 0
    for raw in text.splitlines(keepends=True):
        yield pos, _code_part(raw.rstrip("\r\n"))
        pos += len(raw)


def _rocm_version(ctx: FileContext) -> str:
    value = str(ctx.settings.option("dependencies", "rocm-version", DEFAULT_ROCM_VERSION))
    return value if ROCM_VERSION_RE.match(value) else DEFAULT_ROCM_VERSION


_SMI = re.compile(r"(?<![\w./-])nvidia-smi(?![\w.-])")
_GPUS = re.compile(r"--gpus(?:=|\s+)(\"[^\"]*\"|'[^']*'|\S+)")
_RUNTIME = re.compile(r"--runtime(?:=|\s+)nvidia\b|^\s*runtime:\s*nvidia\b|\bdriver:\s*nvidia\b")
_K8S = re.compile(r"nvidia\.com/gpu\b")
_NV_ENV = re.compile(r"(?<![\w$])(NVIDIA_VISIBLE_DEVICES|NVIDIA_DRIVER_CAPABILITIES|NVIDIA_REQUIRE_CUDA)\b")
_ARCH_LIST = re.compile(r"(?<![\w${])TORCH_CUDA_ARCH_LIST(?=\s*[=:]|\s+\S)")
_URL = re.compile(CUDA_TORCH_INDEX.pattern)
_TORCH_PIN = re.compile(r"(?<![\w.-])(torch|torchvision|torchaudio)(==|===|>=|<=|~=)([0-9][\w.]*)(\+cu\d+)")


_NV_IMAGE = re.compile(r"(?<![\w./-])(?:docker\.io/)?(?:nvcr\.io/nvidia/[\w.-]+(?:/[\w.-]+)*|nvidia/cuda)"
                       r"(?::[\w.-]+|@sha256:[0-9a-f]+)?")


def _image_finding(ctx: FileContext, image: str, start: int, end: int) -> Finding:
    target = str(ctx.settings.option(NAME, "rocm-image", DEFAULT_IMAGE))
    if image.startswith("nvcr.io/nvidia/pytorch") and (":" in image or "@" in image):
        return ctx.finding("PRT844", f"{image} is NVIDIA's PyTorch container: start from {target} (AMD's PyTorch "
                           f"container) and run it with {DEVICE_FLAGS}", start, end, replacement=target,
                           fix=UNSAFE, fix_title=f"use {target}")
    return ctx.finding("PRT844", f"{image} is an NVIDIA image: start from rocm/pytorch (or a rocm/dev-* image "
                       f"without torch) and run it with {DEVICE_FLAGS}", start, end)


def _common(ctx: FileContext, *, docker: bool = False) -> Iterator[Finding]:
    version = _rocm_version(ctx)
    for pos, line in _lines(ctx.text):
        if not line.strip():
            continue
        if not (docker and _FROM.match(line)):
            for m in _NV_IMAGE.finditer(line):
                yield _image_finding(ctx, m.group(0), pos + m.start(), pos + m.end())
        for m in _SMI.finditer(line):
            yield ctx.finding("PRT846", "nvidia-smi is NVIDIA-only: use amd-smi (or rocm-smi) on AMD; their output "
                              "differs", pos + m.start(), pos + m.end())
        for m in _NV_ENV.finditer(line):
            yield ctx.finding("PRT847", f"{m.group(1)} is read only by the NVIDIA container runtime; on ROCm pass "
                              "/dev/kfd and /dev/dri and select GPUs with HIP_VISIBLE_DEVICES",
                              pos + m.start(1), pos + m.end(1))
        for m in _ARCH_LIST.finditer(line):
            yield ctx.finding("PRT842", "TORCH_CUDA_ARCH_LIST selects NVIDIA targets; set PYTORCH_ROCM_ARCH "
                              "(e.g. gfx942) for ROCm extension builds", pos + m.start(), pos + m.end())
        if "pip" in line or "uv " in line or "index" in line:
            for m in _URL.finditer(line):
                url = m.group(0).rstrip("/")
                if m.group("stable"):
                    yield ctx.finding("PRT848", f"CUDA wheel page {url}: use --extra-index-url "
                                      f"{rocm_index(version)} instead", pos + m.start(), pos + m.end())
                    continue
                new = rocm_index(version, nightly=bool(m.group("nightly")))
                problem = None if m.group("nightly") else rocm_index_problem(EXACT_TORCH.findall(line), version)
                if problem is not None:
                    yield ctx.finding("PRT848", f"CUDA PyTorch index {url}: not rewritten: {problem}",
                                      pos + m.start(), pos + m.start() + len(url))
                    continue
                yield ctx.finding("PRT848", f"CUDA PyTorch index {url}: the ROCm {version} index replaces it",
                                  pos + m.start(), pos + m.start() + len(url), replacement=new, fix=SAFE,
                                  fix_title=f"use {new}")
            for m in _TORCH_PIN.finditer(line):
                yield ctx.finding("PRT848", f"{m.group(0)} pins a CUDA build: the +cu label is dropped",
                                  pos + m.start(4), pos + m.end(4), replacement="", fix=SAFE,
                                  fix_title="drop the +cu label")
        for m in _RUNTIME.finditer(line):
            yield ctx.finding("PRT845", "the nvidia container runtime exposes NVIDIA GPUs only; ROCm containers need "
                              f"{DEVICE_FLAGS}", pos + m.start(), pos + m.end())
        for m in _K8S.finditer(line):
            yield ctx.finding("PRT845", "nvidia.com/gpu is NVIDIA's device-plugin resource; AMD's is amd.com/gpu",
                              pos + m.start(), pos + m.end())
        if "docker" in line or "podman" in line:
            for m in _GPUS.finditer(line):
                value = m.group(1).strip("\"'")
                if value == "all":
                    yield ctx.finding("PRT845", "--gpus exposes NVIDIA GPUs only; ROCm containers need "
                                      f"{DEVICE_FLAGS}", pos + m.start(), pos + m.end(),
                                      replacement="--device=/dev/kfd --device=/dev/dri --group-add video",
                                      fix=UNSAFE, fix_title="pass the ROCm device files")
                else:
                    yield ctx.finding("PRT845", f"--gpus {m.group(1)} selects NVIDIA GPUs; on ROCm pass "
                                      "/dev/kfd and the chosen /dev/dri/renderD* nodes", pos + m.start(),
                                      pos + m.end())


def check_shell(ctx: FileContext) -> Iterator[Finding]:
    yield from _common(ctx)


def check_yaml(ctx: FileContext) -> Iterator[Finding]:
    yield from _common(ctx)


_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)", re.IGNORECASE)


def check_dockerfile(ctx: FileContext) -> Iterator[Finding]:
    for pos, line in _lines(ctx.text):
        m = _FROM.match(line)
        if not m:
            continue
        image = m.group("image")
        start, end = pos + m.start("image"), pos + m.end("image")
        bare = image[len("docker.io/"):] if image.startswith("docker.io/") else image
        if bare.startswith(("nvcr.io/nvidia/", "nvidia/cuda")):
            yield _image_finding(ctx, bare, start, end)
    yield from _common(ctx, docker=True)


