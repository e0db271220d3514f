"""Vendor-neutral device code: capability gates, vendor checks, TF32 and cuDNN flags.

The second step of a port: stop branching on vendor (or on NVIDIA compute-capability
numbers, which AMD GPUs report too: MI250X 9.0, MI300X 9.4) and branch on capability.
When a rewrite needs them, the capability functions live in one small module that porter
adds to the target repository (the template is ``templates/porter_device.py``):

- ``[tool.porter.devices] module = "porter_device"``: its dotted import name. The default is
  a top-level module ``porter_device.py`` at the repository root, imported as
  ``import porter_device``: that works for scripts run from the root and for tests run by
  pytest from the root. A package should set ``module = "mypkg.porter_device"`` (the file
  then goes to ``mypkg/porter_device.py`` and call sites use
  ``from mypkg import porter_device``, which works from every file of the package).
- ``path = "src/mypkg/porter_device.py"``: the file, when it is not the module name with dots
  turned into slashes (``src/`` layouts).
- ``import-style = "relative"``: import it as ``from .. import porter_device`` from files in
  the module's own package (files outside that folder keep the absolute form).

An existing file at that path is reused as it is (the engine never overwrites it).
Call sites always use the module's name (``porter_device.supports_fp8()``), never a bare
function name, so nothing in the file can be shadowed.
"""

from __future__ import annotations

import ast
import io
import keyword
import posixpath
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from porter.config import Option
from porter.findings import Applicability, Category, Finding, Severity
from porter.framework import Family, FileContext, PyContext, rule
from porter.pyast import AstVisitor

NAME = "devices"
TEMPLATE = "porter_device.py"
DEFAULT_MODULE = "porter_device"


# -- the capability module ----------------------------------------------------------------------
@lru_cache(maxsize=1)
def template_text() -> str:
    """The capability module porter adds to a target repository."""
    return resources.files("porter.codemods").joinpath("templates", TEMPLATE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class DeviceModule:
    """Where the capability module lives and how the file being fixed reaches it."""

    module: str  # dotted import name ("porter_device", "mypkg.porter_device")
    path: str  # file relative to the repository root
    import_stmt: str  # the statement the fixed file needs
    local: str  # the name call sites use

    def call(self, function: str, args: str = "") -> str:
        return f"{self.local}.{function}({args})"

    @property
    def new_files(self) -> tuple[tuple[str, str], ...]:
        return ((self.path, template_text()),)


def _absolute_import(module: str) -> tuple[str, str]:
    pkg, _, name = module.rpartition(".")
    if pkg:
        return f"from {pkg} import {name}", name
    return f"import {module}", module


def device_module(ctx: FileContext) -> DeviceModule | None:
    """The capability module for this file (None when the file *is* that module)."""
    module = str(ctx.settings.option(NAME, "module", DEFAULT_MODULE) or DEFAULT_MODULE).strip()
    if not all(part.isidentifier() for part in module.split(".")):
        module = DEFAULT_MODULE
    path = str(ctx.settings.option(NAME, "path", "") or module.replace(".", "/") + ".py")
    path = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    if ctx.relpath == path:
        return None
    stmt, local = _absolute_import(module)
    style = str(ctx.settings.option(NAME, "import-style", "absolute"))
    if style == "relative":
        mod_dir = posixpath.dirname(path)
        file_dir = posixpath.dirname(ctx.relpath)
        name = posixpath.splitext(posixpath.basename(path))[0]
        if mod_dir and (file_dir == mod_dir or file_dir.startswith(mod_dir + "/")):
            depth = 0 if file_dir == mod_dir else file_dir[len(mod_dir) + 1 :].count("/") + 1
            stmt, local = f"from {'.' * (depth + 1)} import {name}", name
    return DeviceModule(module, path, stmt, local)


# -- rules ---------------------------------------------------------------------------------------
SAFE, UNSAFE, NONE = Applicability.SAFE, Applicability.UNSAFE, Applicability.NONE

_AMD_CAPS = "AMD GPUs report a compute capability too: MI250X (gfx90a) 9.0, MI300X (gfx942) 9.4"

RULES = (
    rule("PRT700", "capability-gate", NAME,
         "A feature gate on the CUDA compute capability (`get_device_capability`, `.major`/`.minor`).",
         Category.SHIM, fix=SAFE, effort_hours=0.5,
         explanation=f"{_AMD_CAPS}, so thresholds chosen for NVIDIA generations mean something else on AMD: "
         "`major >= 9` (\"Hopper or newer\") is true on MI250X, which has no FP8. When the code says what it "
         "gates (a bf16/fp8/tf32 name or dtype), porter replaces the test with the capability module's "
         "`supports_bf16()`, `supports_fp8()` or `supports_tf32()`: a safe fix when the test gives the same "
         "answer on every NVIDIA generation (checked exhaustively from sm_35 to sm_121), an unsafe one when it "
         "differs on exactly one NVIDIA generation (the message names it; e.g. `major >= 9` for fp8 leaves out "
         "Ada, sm_89); a test that differs on more is taken to gate something else. Otherwise the finding lists what the test "
         "answers on A100, H100, MI250X and MI300X.",
         example="```python\nuse_bf16 = torch.cuda.get_device_capability()[0] >= 8\n# becomes\n"
         "use_bf16 = porter_device.supports_bf16()\n```"),
    rule("PRT701", "device-name-check", NAME,
         "A vendor or model test on the device name (`get_device_name()` substrings).",
         Category.SHIM, fix=UNSAFE, effort_hours=0.5,
         explanation="Device names are marketing strings: older NVIDIA parts are named \"Tesla V100-SXM2-16GB\" "
         "without \"NVIDIA\", AMD parts \"AMD Instinct MI300X\". A vendor test becomes "
         "`porter_device.is_nvidia()`/`is_amd()` (unsafe: it answers differently for names without the "
         "vendor word). A model test (\"A100\", \"H100\") is flagged: gate on the capability you need."),
    rule("PRT702", "cuda-version-check", NAME,
         "`torch.version.cuda` used as a GPU or feature test (None on ROCm builds).",
         Category.SHIM, fix=NONE, effort_hours=0.5,
         explanation="`torch.version.cuda` is None on ROCm builds (and CPU builds); `torch.version.hip` is set "
         "instead. Parsing it (`float(...)`, `version.parse(...)`, `.split('.')`) raises on ROCm. A truthiness "
         "test treats a ROCm build as CPU-only. Use `torch.cuda.is_available()` for \"is there a GPU\", "
         "`porter_device.is_rocm()`/`is_nvidia()` for vendor-specific code, and the `supports_*` functions "
         "for features."),
    rule("PRT710", "tf32-matmul-flag", NAME, "`torch.backends.cuda.matmul.allow_tf32`: reviewed for ROCm.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.0,
         explanation="Portable: on ROCm the same flag selects XF32 in hipBLASLt, which exists on MI300-class "
         "parts (gfx94x, gfx95x; `porter_device.supports_tf32()`) and is ignored elsewhere. Older ROCm builds "
         "of PyTorch also required `HIPBLASLT_ALLOW_TF32=1`. Do not mix it with the newer "
         "`fp32_precision` API: PyTorch raises when legacy and new TF32 settings are mixed."),
    rule("PRT711", "cudnn-tf32-flag", NAME, "`torch.backends.cudnn.allow_tf32`: no effect on ROCm.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.0,
         explanation="On ROCm `torch.backends.cudnn` drives MIOpen, whose convolutions do not use TF32 in "
         "current releases: the flag is accepted and changes nothing. Convolution numerics on AMD are fp32."),
    rule("PRT712", "cudnn-version-check", NAME, "`torch.backends.cudnn.version()`: the MIOpen version on ROCm.",
         Category.SHIM, effort_hours=0.25,
         explanation="On ROCm it returns MIOpen's version number, which is not comparable with cuDNN "
         "versions; a gate such as `cudnn.version() >= 8900` means nothing there."),
    rule("PRT713", "cudnn-flag", NAME, "`torch.backends.cudnn.benchmark/deterministic/enabled`: MIOpen on ROCm.",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.0,
         explanation="Portable. On ROCm, `benchmark=True` makes MIOpen search for the fastest kernels "
         "(first iterations are slow; `MIOPEN_FIND_MODE` tunes it); `deterministic=True` is honoured by "
         "MIOpen; `enabled=False` disables MIOpen."),
    rule("PRT716", "nvfuser-flag", NAME,
         "`torch._C._jit_set_nvfuser_enabled(...)` and other nvFuser switches of TorchScript.",
         Category.SHIM, effort_hours=0.1,
         explanation="nvFuser was NVIDIA's TorchScript fuser. It was never built for ROCm (old ROCm builds "
         "reject the switch), and it has left TorchScript: in current PyTorch the call only warns "
         "\"nvfuser is no longer supported in torch script\" and does nothing. Delete the call (and its "
         "`_jit_set_nvfuser_*` siblings); use `torch.compile` for fusion. porter does not delete it itself: "
         "the statement may be the only one of its block, and some code reads the returned previous state."),
    rule("PRT717", "torchscript-fuser-flag", NAME,
         "A TorchScript GPU fuser switch (`_jit_set_texpr_fuser_enabled`, `_jit_override_can_fuse_on_gpu`, "
         "`_jit_set_fusion_strategy`).",
         Category.BENIGN, severity=Severity.INFO, effort_hours=0.0,
         explanation="These choose how TorchScript fuses graphs on the GPU: speed, not results. They exist "
         "in ROCm builds too, but TorchScript is in maintenance mode and its GPU fusers generate kernels at run "
         "time; measure on the AMD build, or move the model to `torch.compile`."),
    rule("PRT715", "cudnn-sdpa-backend", NAME, "cuDNN attention backend selected: not on ROCm.",
         Category.SHIM, severity=Severity.INFO, effort_hours=0.25,
         explanation="ROCm builds have no cuDNN SDPA backend; SDPA falls back to the flash (AOTriton/CK), "
         "memory-efficient or math backends. Select those (or let SDPA dispatch) for portable code."),
)

# -- capability arithmetic ---------------------------------------------------------------------
# Every NVIDIA compute capability PyTorch has supported (sm_35 ... sm_121): a rewrite is safe
# only when the original test and the capability function agree on all of them.
NVIDIA_CAPS: tuple[tuple[int, int], ...] = (
    (3, 5), (3, 7), (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5),
    (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1),
)
REFERENCE: tuple[tuple[str, tuple[int, int]], ...] = (
    ("A100", (8, 0)), ("H100", (9, 0)), ("MI250X/gfx90a", (9, 0)), ("MI300X/gfx942", (9, 4)),
)
_NV_NAMES = {(7, 0): "V100", (7, 5): "T4", (8, 0): "A100", (8, 6): "A10/RTX 30", (8, 9): "L4/RTX 40",
             (9, 0): "H100", (10, 0): "B200", (12, 0): "RTX 50"}

# feature -> (capability-module function, its answer on an NVIDIA (major, minor))
FEATURES = {
    "bf16": ("supports_bf16", lambda c: c[0] >= 8),
    "tf32": ("supports_tf32", lambda c: c[0] >= 8),
    "fp8": ("supports_fp8", lambda c: c >= (8, 9)),
}
_INTENT = {
    "bf16": re.compile(r"bf16|bfloat16"),
    "fp8": re.compile(r"(?<![a-z])fp8|float8|e4m3|e5m2"),  # not mxfp8 (Blackwell microscaling)
    "tf32": re.compile(r"tf32"),
}
_OPS = {
    ast.GtE: (">=", lambda a, b: a >= b), ast.Gt: (">", lambda a, b: a > b),
    ast.LtE: ("<=", lambda a, b: a <= b), ast.Lt: ("<", lambda a, b: a < b),
    ast.Eq: ("==", lambda a, b: a == b), ast.NotEq: ("!=", lambda a, b: a != b),
}
_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "==", "!=": "!="}
_BY_SYMBOL = {sym: fn for sym, fn in _OPS.values()}


def intent_of(text: str) -> str | None:
    """The single feature a piece of code talks about (bf16, fp8, tf32), else None."""
    low = text.lower()
    found = [k for k, pat in _INTENT.items() if pat.search(low)]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Gate:
    """``<capability value> <op> <literal>`` in normal form (value on the left)."""

    kind: str  # "cap" (the (major, minor) tuple), "major" or "minor"
    op: str
    literal: tuple[int, ...] | int

    def evaluate(self, cap: tuple[int, int]) -> bool:
        value: tuple[int, ...] | int = cap if self.kind == "cap" else cap[0] if self.kind == "major" else cap[1]
        literal = self.literal
        if self.kind == "cap" and isinstance(literal, int):
            literal = (literal,)
        if isinstance(value, tuple) and isinstance(literal, tuple) and self.op in ("==", "!="):
            return _BY_SYMBOL[self.op](value, literal)
        return bool(_BY_SYMBOL[self.op](value, literal))

    def nvidia_mismatch(self, feature: str) -> tuple[bool, list[tuple[int, int]]]:
        """(negated, NVIDIA capabilities where the test and the feature function disagree)."""
        truth = FEATURES[feature][1]
        same = [c for c in NVIDIA_CAPS if self.evaluate(c) != truth(c)]
        opposite = [c for c in NVIDIA_CAPS if self.evaluate(c) == truth(c)]
        if len(opposite) < len(same):
            return True, opposite
        return False, same

    def table(self) -> str:
        return ", ".join(f"{name} {'true' if self.evaluate(cap) else 'false'}" for name, cap in REFERENCE)


def _literal(node: ast.AST) -> tuple[int, ...] | int | None:
    value = _int(node)
    if value is not None:
        return value
    if isinstance(node, ast.Tuple) and node.elts:
        vals = [_literal(_unstar(el)) for el in node.elts]
        if all(isinstance(v, int) for v in vals):
            return tuple(v for v in vals if isinstance(v, int))
    return None


# Only the vendor names: "GeForce", "Tesla", "Radeon", "Instinct" are product lines, and a test
# on them (consumer vs data-centre parts) is not a vendor test.
_VENDOR_WORDS = {"nvidia": "nvidia", "amd": "amd"}
_AMD_MODEL = re.compile(r"^(mi ?\d|gfx\d|rx ?\d|radeon pro|w\d{4})")
_ROCM_GUARD = re.compile(r"hip|rocm|version\.cuda", re.IGNORECASE)
_PARSERS = {"float", "int", "tuple", "packaging.version.parse", "packaging.version.Version",
            "distutils.version.LooseVersion", "pkg_resources.parse_version", "version.parse"}


@dataclass
class _Candidate:
    node: ast.Compare
    scope: int
    context: tuple[str, object] | None  # where the intent is read from (see DevicesVisitor._context_text)


_Pos = tuple[int, int]


def _start(node: ast.AST) -> _Pos:
    decorators = getattr(node, "decorator_list", None)
    if decorators:  # a decorated definition starts at its first decorator
        node = decorators[0]
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def _end(node: ast.AST) -> _Pos:
    return node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]


def _inside(node: ast.AST, first: ast.AST, last: ast.AST) -> bool:
    """Whether ``node`` lies in the source range from ``first`` to ``last``."""
    return _start(first) <= _start(node) and _end(node) <= _end(last)


def _dotted(expr: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def _unstar(node: ast.AST) -> ast.AST:
    return node.value if isinstance(node, ast.Starred) else node


def _int(node: ast.AST) -> int | None:
    """The value of an integer literal (not a bool: ``True`` is a name, not a number)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _call_args(node: ast.Call) -> list[ast.AST]:
    """Positional, starred and keyword arguments in source order."""
    if node.args and node.keywords:
        return sorted([*node.args, *node.keywords], key=_start)
    return [*node.args, *node.keywords]


def _skip_left(text: str, i: int) -> int:
    """The offset of the first character at or before ``i`` that is not blank or a comment."""
    while i >= 0:
        c = text[i]
        if c == "\n":
            line_start = text.rfind("\n", 0, i) + 1
            hash_at = text.find("#", line_start, i)
            if hash_at >= 0:  # the previous line ends in a comment
                i = hash_at
        elif c not in " \t\f\r\\":
            return i
        i -= 1
    return i


def _skip_right(text: str, j: int) -> int:
    """The offset of the first character at or after ``j`` that is not blank or a comment."""
    while j < len(text):
        c = text[j]
        if c == "#":
            nl = text.find("\n", j)
            j = len(text) if nl < 0 else nl
        elif c not in " \t\f\r\n\\":
            return j
        else:
            j += 1
    return j


_CALL_PARENS = frozenset(keyword.kwlist) - {"True", "False", "None"}


class DevicesVisitor(AstVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._scopes: list[int] = [0]
        self._fn_names: list[str] = []
        # (name, scope) -> (assigned value, tuple index or None)
        self._assigns: dict[tuple[str, int], tuple[ast.AST, int | None]] = {}
        self._stores: dict[tuple[str, int], int] = {}
        self._context: dict[int, tuple[str, object]] = {}  # id(comparison) -> where its intent is read
        self._candidates: list[_Candidate] = []
        self._seen_version: set[int] = set()
        self.dm = device_module(ctx)
        # enclosing if / conditional expression / and-or nodes: their branches are guarded by their tests
        self._branching: list[ast.If | ast.IfExp | ast.BoolOp] = []
        # a capability value needs torch.cuda.get_device_{capability,properties,name}: the name's last
        # part is written in the file (in the chain or in its import), so without it no comparison
        # can be a gate and the bookkeeping for gates is skipped
        self._gates = "get_device_" in ctx.text
        self._names: dict[str, str | None] = {}

    def report(self, node: ast.AST, code: str, message: str, **kwargs: Any) -> Finding | None:  # type: ignore[override]
        """Report nothing inside the capability module itself: its checks are the reference."""
        if self.dm is None:
            return None
        return super().report(node, code, message, **kwargs)

    # -- source text --------------------------------------------------------------------------
    def _shown(self, node: ast.AST) -> str:
        """The node's text as LibCST prints it: with the parentheses that wrap it (not those of
        a call around it), continuation lines without the statement's indentation."""
        start, end = self._parenthesized(node)
        return self._unindented(start, end, node)

    def _parenthesized(self, node: ast.AST) -> tuple[int, int]:
        text = self.ctx.text
        start, end = self.span(node)
        while True:
            i = _skip_left(text, start - 1)
            if i < 0 or text[i] != "(":
                break
            j = _skip_right(text, end)
            if j >= len(text) or text[j] != ")":
                break
            k = i - 1
            while k >= 0 and text[k] in " \t\f\\":
                k -= 1
            if k >= 0 and (text[k] in ")]}'\"" or text[k].isalnum() or text[k] == "_"):
                m = k
                while m >= 0 and (text[m].isalnum() or text[m] == "_"):
                    m -= 1
                if text[m + 1 : k + 1] not in _CALL_PARENS:
                    break  # the parentheses of a call (or of a def/class header)
            start, end = i, j + 1
        return start, end

    def _unindented(self, start: int, end: int, node: ast.AST) -> str:
        """``text[start:end]`` without the enclosing statement's indentation at the start of
        its continuation lines (LibCST prints a node's code that way); the lines inside a
        string literal and after a backslash continuation keep theirs."""
        text = self.ctx.text[start:end]
        if "\n" not in text:
            return text
        indent = self._statement_indent(node)
        if not indent:
            return text
        keep: set[int] = set()  # offsets in ``text`` of line starts inside string literals
        try:
            for tok in tokenize.generate_tokens(io.StringIO("(" + text + ")").readline):
                if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                    keep.update(range(tok.start[0] + 1, tok.end[0] + 1))
        except (tokenize.TokenError, SyntaxError):
            pass
        lines = text.split("\n")
        for n in range(1, len(lines)):
            if n + 1 not in keep and not lines[n - 1].endswith("\\") and lines[n].startswith(indent):
                lines[n] = lines[n][len(indent):]
        return "\n".join(lines)

    def _statement_indent(self, node: ast.AST) -> str:
        """The indentation of the innermost statement around ``node``."""
        pos, stop = _start(node), _end(node)
        body: list[ast.stmt] = self.ctx.tree.body
        found: ast.stmt | None = None
        while body:
            stmt = next((s for s in reversed(body) if _start(s) <= pos), None)
            if stmt is None or _end(stmt) < stop:
                break
            found = stmt
            blocks = [getattr(stmt, name, None) or [] for name in ("body", "orelse", "finalbody")]
            blocks += [h.body for h in getattr(stmt, "handlers", ())]
            blocks += [c.body for c in getattr(stmt, "cases", ())]
            body = next((b for b in blocks if b and _start(b[0]) <= pos and stop <= _end(b[-1])), [])
        if found is None:
            return ""
        line = self.ctx.line_text(_start(found)[0])
        return line[: len(line) - len(line.lstrip(" \t\f"))]

    def _arg_texts(self, call: ast.Call) -> list[str]:
        """Each argument's text up to the next one (its comma included); the last up to ``)``."""
        args = _call_args(call)
        starts = [self.span(a)[0] for a in args]
        close = self.span(call)[1] - 1
        return [self._unindented(s, starts[i + 1] if i + 1 < len(starts) else close, call)
                for i, s in enumerate(starts)]

    def _body_text(self, node: ast.If) -> str:
        """The text of an ``if``'s block: the rest of the header line, the statements, and the
        comment lines after them that are indented at the block's level."""
        text = self.ctx.text
        start = self.span(node.test)[1]
        first = node.body[0]
        end = text.find("\n", self.span(node.body[-1])[1])
        end = len(text) if end < 0 else end + 1
        first_start = self.span(first)[0]
        indent = text[self.ctx.line_starts[first.lineno - 1] : first_start]
        if indent.strip(" \t\f"):
            return text[start:end]  # `if x: stmt` (no indented block)
        pos = last = end
        while pos < len(text):
            nl = text.find("\n", pos)
            stop = len(text) if nl < 0 else nl + 1
            stripped = text[pos:stop].strip()
            if stripped and not stripped.startswith("#"):
                break
            if text.startswith(indent, pos):
                last = stop
            pos = stop
        return text[start:last]

    def _context_text(self, where: tuple[str, object] | None) -> str:
        if where is None:
            return ""
        kind, node = where
        if kind == "text":
            return str(node)
        if kind == "if":
            assert isinstance(node, ast.If)
            return self._body_text(node)
        if kind == "assert":
            assert isinstance(node, ast.Assert)
            return self.code(node.msg) if node.msg is not None else ""
        if kind == "assign":
            assert isinstance(node, ast.Assign)
            return " ".join(self.code(t) for t in node.targets)
        assert isinstance(node, ast.AnnAssign)
        return self.code(node.target)

    # -- scopes and contexts ----------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scopes.append(id(node))
        self._fn_names.append(node.name)

    def leave_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scopes.pop()
        self._fn_names.pop()

    visit_AsyncFunctionDef = visit_FunctionDef
    leave_AsyncFunctionDef = leave_FunctionDef

    def _mark(self, expr: ast.AST | None, where: tuple[str, object]) -> None:
        """Give every comparison reachable through and/or/not/parentheses this intent context."""
        if isinstance(expr, ast.Compare):
            self._context.setdefault(id(expr), where)
        elif isinstance(expr, ast.BoolOp):
            for value in expr.values:
                self._mark(value, where)
        elif isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            self._mark(expr.operand, where)

    def visit_Assert(self, node: ast.Assert) -> None:
        if self._gates:
            self._mark(node.test, ("assert", node))

    def visit_Return(self, node: ast.Return) -> None:
        if self._gates:
            self._mark(node.value, ("text", self._fn_names[-1] if self._fn_names else ""))

    def visit_Assign(self, node: ast.Assign) -> None:
        targets = node.targets
        if self._gates:
            self._mark(node.value, ("assign", node))
            self._track(targets[0] if len(targets) == 1 else None, node.value)
            for t in targets:
                self._count_stores(t)
        self._flag_assignment(targets)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if self._gates:
            self._mark(node.value, ("ann", node))
            self._track(node.target, node.value)
            self._count_stores(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if self._gates:
            self._count_stores(node.target, 2)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        if self._gates:
            self._count_stores(node.target, 2)

    visit_AsyncFor = visit_For

    def visit_arg(self, node: ast.arg) -> None:
        if self._gates:
            self._stores[(node.arg, self._scopes[-1])] = 2

    def _count_stores(self, target: ast.AST, n: int = 1) -> None:
        if isinstance(target, ast.Name):
            names = [target.id]
        elif isinstance(target, (ast.Tuple, ast.List)):
            names = [el.id for el in map(_unstar, target.elts) if isinstance(el, ast.Name)]
        else:
            return
        scope = self._scopes[-1]
        for name in names:
            key = (name, scope)
            self._stores[key] = self._stores.get(key, 0) + n

    # -- where capability values come from ------------------------------------------------------
    # Assignments are recorded as written and resolved when the module has been read, so a
    # name counts only when it is stored exactly once in its scope (or at module level).
    def _track(self, target: ast.AST | None, value: ast.AST | None) -> None:
        if target is None or value is None:
            return
        scope = self._scopes[-1]
        if isinstance(target, ast.Name):
            self._assigns[(target.id, scope)] = (value, None)
        elif isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
            for i, el in enumerate(map(_unstar, target.elts)):
                if isinstance(el, ast.Name):
                    self._assigns[(el.id, scope)] = (value, i)

    def _name(self, name: str, scope: int, depth: int) -> tuple[str, ast.Call] | None:
        for sc in dict.fromkeys((scope, 0)):
            key = (name, sc)
            if key in self._assigns:
                if self._stores.get(key, 0) != 1:
                    return None
                value, index = self._assigns[key]
                src = self._resolve(value, sc, depth + 1)
                if index is None:
                    return src
                if src is not None and src[0] == "cap":
                    return ("major" if index == 0 else "minor"), src[1]
                return None
        return None

    def _resolve(self, expr: ast.AST, scope: int, depth: int = 0) -> tuple[str, ast.Call] | None:
        """("cap"|"major"|"minor"|"props"|"name", torch.cuda call) for a capability-valued expression."""
        if depth > 4:
            return None
        if isinstance(expr, ast.Name):
            return self._name(expr.id, scope, depth)
        if isinstance(expr, ast.Call):
            q = self.qualname(expr.func)
            if q == "torch.cuda.get_device_capability":
                return "cap", expr
            if q == "torch.cuda.get_device_properties":
                return "props", expr
            if q == "torch.cuda.get_device_name":
                return "name", expr
            if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("lower", "upper", "strip") \
                    and not expr.args and not expr.keywords:
                inner = self._resolve(expr.func.value, scope, depth + 1)
                if inner is not None and inner[0] == "name":
                    return inner
            return None
        if isinstance(expr, ast.Subscript):
            index = expr.slice
            if isinstance(index, ast.Tuple) and index.elts and _start(index) == _start(index.elts[0]):
                # no parentheses of its own: the subscript's elements (`cap[0, 1]`; `cap[0,]` is one)
                if len(index.elts) != 1:
                    return None
                index = index.elts[0]
            value = _int(index)
            if value not in (0, 1):
                return None
            base = self._resolve(expr.value, scope, depth + 1)
            if base is not None and base[0] == "cap":
                return ("major" if value == 0 else "minor"), base[1]
            return None
        if isinstance(expr, ast.Attribute):
            base = self._resolve(expr.value, scope, depth + 1)
            if base is not None and base[0] == "props" and expr.attr in ("major", "minor", "name"):
                return expr.attr, base[1]
            return None
        if isinstance(expr, ast.Tuple) and len(expr.elts) == 2:
            parts = [self._resolve(_unstar(el), scope, depth + 1) for el in expr.elts]
            if parts[0] is not None and parts[1] is not None and parts[0][0] == "major" \
                    and parts[1][0] == "minor" and parts[0][1] is parts[1][1]:
                return "cap", parts[0][1]
        return None

    # -- comparisons ------------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) != 1:
            return
        if self._gates:
            self._candidates.append(_Candidate(node, self._scopes[-1], self._context.get(id(node))))
        self._version_compare(node)

    def leave_Module(self, node: ast.Module) -> None:
        for cand in self._candidates:
            self._decide(cand)

    def _decide(self, cand: _Candidate) -> None:
        node = cand.node
        operator = type(node.ops[0])
        left, right = node.left, node.comparators[0]
        if operator is ast.In or operator is ast.NotIn:
            src = self._resolve(right, cand.scope)
            if src is not None and src[0] == "name":
                self._name_check(node, left, src[1], negated=operator is ast.NotIn)
            return
        op = _OPS.get(operator)
        if op is None:
            return
        symbol = op[0]
        src = self._resolve(left, cand.scope)
        lit = _literal(right)
        if src is None or lit is None:
            src, lit = self._resolve(right, cand.scope), _literal(left)
            symbol = _FLIP[symbol]
        if src is None or lit is None:
            if src is None:
                s2 = self._resolve(left, cand.scope) or self._resolve(right, cand.scope)
                other = right if self._resolve(left, cand.scope) else left
                if s2 is not None and s2[0] == "name" and operator in (ast.Eq, ast.NotEq):
                    self._name_check(node, other, s2[1], negated=operator is ast.NotEq, exact=True)
            return
        kind, call = src
        if kind not in ("cap", "major", "minor"):
            return
        if kind == "major" and isinstance(lit, tuple) or kind == "cap" and isinstance(lit, int) and symbol in ("==", "!="):
            return
        gate = Gate(kind, symbol, lit)
        self._report_gate(node, gate, call, self._context_text(cand.context))

    def _report_gate(self, node: ast.Compare, gate: Gate, call: ast.Call, context: str) -> None:
        shown = self._shown(node)
        table = gate.table()
        feature = intent_of(context)
        base = f"capability gate `{shown}`: {table}; {_AMD_CAPS}"
        if feature is None or gate.kind == "minor" or gate.op in ("==", "!=") or self.dm is None:
            why = ("it does not say which feature it gates (name the bf16/fp8/tf32 flag, or call a "
                   "porter_device.supports_* function)" if feature is None else
                   "it tests the minor version alone" if gate.kind == "minor" else
                   "an equality test picks one NVIDIA generation, not a feature; use "
                   "porter_device.gpu_arch() for architecture-specific code" if gate.op in ("==", "!=") else
                   "this file is the capability module")
            self.report(node, "PRT700", f"{base}; not rewritten: {why}", fix=NONE,
                        data={"gate": shown, "feature": feature})
            return
        fn, _truth = FEATURES[feature]
        negated, mismatch = gate.nvidia_mismatch(feature)
        args = ", ".join(self._arg_texts(call))
        replacement = ("not " if negated else "") + self.dm.call(fn, args)
        if len(mismatch) > 1:
            names = ", ".join(f"sm_{a}{b}" for a, b in mismatch)
            self.report(node, "PRT700", f"{base}; not rewritten: it mentions {feature} but answers differently "
                        f"from porter_device.{fn}() on {names}, so it likely gates something else",
                        fix=NONE, data={"gate": shown, "feature": feature})
            return
        if mismatch:
            names = ", ".join(f"sm_{a}{b}" + (f" ({_NV_NAMES[(a, b)]})" if (a, b) in _NV_NAMES else "")
                              for a, b in mismatch)
            level = UNSAFE
            note = (f"; unsafe: on NVIDIA it answers differently from the original test on {names} "
                    f"(porter_device.{fn} follows the hardware)")
        else:
            level, note = SAFE, "; the same answer on every NVIDIA generation"
        self.report(node, "PRT700", f"{base}; gates {feature}: use porter_device.{fn}(){note}",
                    replacement=replacement, fix=level, add_imports=(self.dm.import_stmt,),
                    new_files=self.dm.new_files, data={"gate": shown, "feature": feature})

    def _name_check(self, node: ast.Compare, needle: ast.AST, call: ast.Call, *,
                    negated: bool, exact: bool = False) -> None:
        text = self._str(needle)
        if text is None:
            return
        low = text.lower().strip()
        vendor = _VENDOR_WORDS.get(low)
        if vendor is not None and not exact and self.dm is not None:
            fn = "is_nvidia" if vendor == "nvidia" else "is_amd"
            args = ""
            rep = ("not " if negated else "") + self.dm.call(fn, args)
            other = "\"Tesla V100-SXM2-16GB\" or \"GeForce GTX 1080\"" if vendor == "nvidia" else \
                "names without \"AMD\" (e.g. \"Device 74a1\" on some ROCm drivers)"
            self.report(node, "PRT701", f"vendor test on the device name ({text!r}): use porter_device.{fn}(); "
                        f"unsafe: the name test answers differently for {other}, and this checks the "
                        "current device only", replacement=rep, fix=UNSAFE,
                        add_imports=(self.dm.import_stmt,), new_files=self.dm.new_files)
            return
        hint = ("use porter_device.supports_fp8()/supports_bf16() for features, porter_device.gpu_arch() "
                "for architecture-specific tuning")
        if _AMD_MODEL.match(low):
            self.report(node, "PRT701", f"AMD model test on the device name ({text!r}): marketing names differ "
                        "between drivers and SKUs (\"AMD Instinct MI300X\", \"AMD Radeon Graphics\"); "
                        "compare porter_device.gpu_arch() (e.g. \"gfx942\") instead", fix=NONE)
            return
        self.report(node, "PRT701", f"model test on the device name ({text!r}) is never true on AMD "
                    f"(names like \"AMD Instinct MI300X\"); {hint}", fix=NONE)

    def _str(self, node: ast.AST) -> str | None:
        """The value of a single string literal (not an implicit concatenation, not bytes)."""
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            return None
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(self.code(node)).readline))
        except (tokenize.TokenError, SyntaxError):
            return None
        strings = [t for t in tokens if t.type not in _LAYOUT]
        return node.value if len(strings) == 1 and strings[0].type == tokenize.STRING else None

    # -- torch.version.cuda ----------------------------------------------------------------------
    def _is_cuda_version(self, expr: ast.AST) -> bool:
        """``torch.version.cuda`` through the file's imports (``torch.version.cuda``, ``version.cuda``,
        ``tv.cuda``, an imported ``cuda``)."""
        if isinstance(expr, ast.Attribute):
            if expr.attr != "cuda":
                return False
            value = expr.value
            if not (isinstance(value, ast.Name) or isinstance(value, ast.Attribute) and value.attr == "version"):
                return False
            return self.qualname(expr) == "torch.version.cuda"
        if isinstance(expr, ast.Name):
            return self._name_qualname(expr) == "torch.version.cuda"
        return False

    def _name_qualname(self, node: ast.Name) -> str | None:
        """What a bare name resolves to (the import index does not depend on where it is used)."""
        try:
            return self._names[node.id]
        except KeyError:
            found = self._names[node.id] = self.qualname(node)
            return found

    def _version_compare(self, node: ast.Compare) -> None:
        for side in (node.left, node.comparators[0]):
            if self._is_cuda_version(side) and id(side) not in self._seen_version:
                self._seen_version.add(id(side))
                if self._rocm_aware(node):
                    continue
                if isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                    self._version_test(side, "an `is None` test")
                else:
                    self.report(side, "PRT702", "torch.version.cuda compared as a version: it is None on ROCm "
                                "builds (the comparison is False or raises TypeError); gate on the feature "
                                "(porter_device.supports_*) or on torch.version.hip", fix=NONE,
                                severity=Severity.ERROR)

    def _version_test(self, node: ast.AST, what: str) -> None:
        self.report(node, "PRT702", f"torch.version.cuda used as {what}: None on ROCm builds, so ROCm is "
                    "treated like a CPU-only build; use torch.cuda.is_available() for \"has a GPU\", "
                    "porter_device.is_nvidia() for NVIDIA-only code", fix=NONE)

    def visit_If(self, node: ast.If) -> None:
        if self._gates:
            self._mark(node.test, ("if", node))
        orelse = node.orelse
        # (only a torch.version.cuda test is ever looked up in _seen_version)
        if len(orelse) == 1 and isinstance(orelse[0], ast.If) and orelse[0].col_offset == node.col_offset \
                and self._is_cuda_version(node.test):
            test = self.code(orelse[0].test)  # an `elif`
            if _ROCM_GUARD.search(test) and "version.cuda" not in test:
                self._seen_version.add(id(node.test))  # `if torch.version.cuda: ... elif torch.version.hip: ...`
        self._truthy(node.test, node)
        self._branching.append(node)

    def leave_If(self, node: ast.If) -> None:
        self._branching.pop()

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._truthy(node.test, node)
        self._branching.append(node)

    def leave_IfExp(self, node: ast.IfExp) -> None:
        self._branching.pop()

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for value in node.values:
            self._truthy(value, node)
        self._branching.append(node)

    def leave_BoolOp(self, node: ast.BoolOp) -> None:
        self._branching.pop()

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            self._truthy(node.operand, node)

    def _guards(self, node: ast.AST) -> list[str]:
        """The conditions that choose the branch ``node`` is in (never a test itself):
        an ``if``'s or conditional expression's test for its body and else branch, and the
        operands before it in an ``and``/``or`` chain."""
        found = []
        for owner in self._branching:
            if isinstance(owner, ast.If):
                if _inside(node, owner.body[0], owner.body[-1]) or \
                        owner.orelse and _inside(node, owner.orelse[0], owner.orelse[-1]):
                    found.append(self.code(owner.test))
            elif isinstance(owner, ast.IfExp):
                if _inside(node, owner.body, owner.body) or _inside(node, owner.orelse, owner.orelse):
                    found.append(self.code(owner.test))
            else:
                values = owner.values
                for i in range(1, len(values)):
                    if _inside(node, values[i], values[i]):
                        start, end = self.span(values[0])[0], self.span(values[i - 1])[1]
                        found.append(self.ctx.text[start:end])
                        break
        return found

    def _rocm_aware(self, node: ast.AST) -> bool:
        """Inside a branch chosen by a ROCm/HIP test or by a test of torch.version.cuda itself."""
        return bool(self._branching) and any(_ROCM_GUARD.search(text) for text in self._guards(node))

    def _truthy(self, expr: ast.AST, at: ast.AST) -> None:
        if self._is_cuda_version(expr) and id(expr) not in self._seen_version:
            self._seen_version.add(id(expr))
            if not self._rocm_aware(at):
                self._version_test(expr, "a truth value")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        first: ast.AST | None = None
        if node.keywords:
            first = _call_args(node)[0]
            first = first.value if isinstance(first, (ast.keyword, ast.Starred)) else first
        elif node.args:
            first = _unstar(node.args[0])
        arg_version = first is not None and self._is_cuda_version(first)
        method_of_version = isinstance(func, ast.Attribute) and self._is_cuda_version(func.value)
        if (arg_version or method_of_version) and self._rocm_aware(node):
            return  # the branch is already chosen by a ROCm/HIP test or a torch.version.cuda test
        if arg_version:
            q = self.qualname(func)
            func_name = q or (_dotted(func) or "")
            if func_name in _PARSERS or func_name.endswith(("version.parse", "Version", "LooseVersion")):
                assert first is not None
                self._seen_version.add(id(first))
                self.report(node, "PRT702", f"{self._shown(node)} raises on ROCm builds (torch.version.cuda is "
                            "None); gate on the feature (porter_device.supports_*) or read torch.version.hip "
                            "there", fix=NONE, severity=Severity.ERROR)
                return
        if method_of_version:
            assert isinstance(func, ast.Attribute)
            self._seen_version.add(id(func.value))
            self.report(node, "PRT702", f"{self._shown(node)} raises AttributeError on ROCm builds "
                        "(torch.version.cuda is None)", fix=NONE, severity=Severity.ERROR)
            return
        if isinstance(func, ast.Attribute):
            last = func.attr
            if not ("nvfuser" in last or last in _TS_FUSER or last == "version" or last == "enable_cudnn_sdp"):
                return  # the qualified name ends with this attribute: none of the switches below
            q = self.qualname(func)
        elif isinstance(func, ast.Name):
            q = self._name_qualname(func)
        else:
            return
        if q is not None and q.startswith("torch._C.") and _NVFUSER.match(q[len("torch._C."):]):
            self.report(node, "PRT716", f"{self._shown(func)}: nvFuser was never built for ROCm and has left "
                        "TorchScript (current PyTorch only warns and does nothing); delete the call, and use "
                        "torch.compile for fusion", fix=NONE)
        elif q is not None and q.startswith("torch._C.") and q[len("torch._C."):] in _TS_FUSER:
            self.report(node, "PRT717", f"{self._shown(func)}: a TorchScript fuser setting (speed "
                        "only); it exists on ROCm builds, but TorchScript is in maintenance mode: measure there or "
                        "move to torch.compile", fix=NONE)
        elif q == "torch.backends.cudnn.version":
            self.report(node, "PRT712", "torch.backends.cudnn.version() is the MIOpen version on ROCm; "
                        "comparisons with cuDNN version numbers mean nothing there", fix=NONE)
        elif q == "torch.backends.cuda.enable_cudnn_sdp":
            self.report(node, "PRT715", "enable_cudnn_sdp: ROCm has no cuDNN attention backend; SDPA uses "
                        "flash (AOTriton/CK), memory-efficient or math kernels there", fix=NONE)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "CUDNN_ATTENTION" and (self.qualname(node) or "").endswith("SDPBackend.CUDNN_ATTENTION"):
            self.report(node, "PRT715", "SDPBackend.CUDNN_ATTENTION does not exist as a kernel on ROCm; list "
                        "FLASH_ATTENTION/EFFICIENT_ATTENTION too so SDPA has a portable backend", fix=NONE)

    # -- flags ------------------------------------------------------------------------------------
    def _flag_assignment(self, targets: list[ast.expr]) -> None:
        for t in targets:
            last = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            if last not in _FLAGS:
                continue
            q = self.qualname(t)
            if q == "torch.backends.cuda.matmul.allow_tf32":
                self.report(t, "PRT710", "allow_tf32 kept: on ROCm it selects XF32 in hipBLASLt on "
                            "MI300-class GPUs (gfx94x/gfx95x, porter_device.supports_tf32()) and is ignored "
                            "elsewhere; older ROCm builds of PyTorch also need HIPBLASLT_ALLOW_TF32=1; do not "
                            "mix with the fp32_precision API", fix=NONE)
            elif q == "torch.backends.cudnn.allow_tf32":
                self.report(t, "PRT711", "cudnn.allow_tf32 kept: on ROCm it reaches MIOpen, whose "
                            "convolutions do not use TF32 in current releases (no effect)", fix=NONE)
            elif q in ("torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
                       "torch.backends.cudnn.enabled"):
                attr = q.rsplit(".", 1)[1]
                meaning = {"benchmark": "MIOpen searches for the fastest kernels (slow first iterations; "
                           "MIOPEN_FIND_MODE tunes it)", "deterministic": "honoured by MIOpen",
                           "enabled": "switches MIOpen"}[attr]
                self.report(t, "PRT713", f"cudnn.{attr} kept: on ROCm {meaning}", fix=NONE)


_NVFUSER = re.compile(r"_jit_set_nvfuser_\w+$|_jit_nvfuser_\w+$|_nvfuser\w*$")
_TS_FUSER = {"_jit_set_texpr_fuser_enabled", "_jit_override_can_fuse_on_gpu", "_jit_set_texpr_reductions_enabled",
             "_jit_set_fusion_strategy"}
_FLAGS = {"allow_tf32", "benchmark", "deterministic", "enabled"}
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT}


FAMILY = Family(
    name=NAME,
    title="Vendor-neutral device code: capability gates, vendor checks, TF32/cuDNN flags",
    order=60,
    rules=RULES,
    tokens=("get_device_capability", "get_device_properties", "get_device_name", "version.cuda",
            "allow_tf32", "cudnn", "CUDNN_ATTENTION", "_jit_", "nvfuser"),
    python_ast=DevicesVisitor,
    description="Replaces compute-capability gates that name the feature they gate (bf16, fp8, tf32) with "
    "the capability module's `supports_*()` functions, which are right on NVIDIA and AMD, and adds that "
    "module (`porter_device.py` by default) to the repository.",
    verified="Fixture tests (tests/fixtures/devices); every gate rewrite is checked against all NVIDIA "
    "compute capabilities (sm_35...sm_121); tests/test_devices.py executes the capability module against "
    "mocked A100, H100, MI250X and MI300X properties.",
    review="Gates porter could not attribute to a feature are listed with their answers on A100, H100, "
    "MI250X and MI300X: decide what each one means.",
    options=(
        Option("module", "string", DEFAULT_MODULE, "Dotted import name of the capability module porter adds "
               "(a package should use `mypkg.porter_device`)."),
        Option("path", "string", "", "The module's file, when it is not the module name with dots turned into "
               "slashes (src/ layouts).", path=True),
        Option("import-style", "string", "absolute", "`relative`: files in the module's own package import it "
               "relatively.", choices=("absolute", "relative")),
    ),
)
