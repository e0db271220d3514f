"""What each target compiles: a small preprocessor-condition evaluator for the warp-size pass.

A CUDA tree that already has HIP paths (``#ifdef USE_ROCM``, ``__HIP_PLATFORM_AMD__``,
``#ifdef MMCV_WITH_HIP``, project macros defined from those) holds three kinds of code: code both
targets compile, CUDA-only code HIP never compiles, and human-written HIP code. Only the first
kind can be a warp hazard porter should report or patch for AMD. :func:`scan` walks the
conditional directives line by line (so directives inside statements work too) and evaluates
each condition under two configurations:

- ``cuda``: nvcc. ``__CUDACC__``/``__NVCC__`` defined, HIP macros undefined, ``__CUDA_ARCH__``
  unknown (host and device pass).
- ``hip``: hipcc for AMD after HIPify. ``__HIPCC__``, ``__HIP__``, ``__HIP_PLATFORM_AMD__`` and
  project macros named like ``USE_ROCM``/``*_WITH_HIP``/``GGML_USE_HIP`` defined; ``__CUDACC__``
  too (HIPify renames it to ``__HIPCC__``); ``__NVCC__``, ``__CUDA_ARCH__`` undefined.

Each value is tri-state: 1, 0 or ``None`` (unknown: a build flag or a header porter cannot
see). Unknown conditions keep every branch. Object-like ``#define``\\ s are tracked with the
configurations they are active in, so ``#if defined(USE_ROCM)`` / ``#define MY_HIP 1`` makes
``MY_HIP`` a HIP macro, and ``WARP_SIZE`` can have one value per target.

:func:`mask` blanks (keeping every character and byte offset) the lines that are not compiled
by both targets, and the directives of the conditional groups that lost a branch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

CUDA = "cuda"
HIP = "hip"
CONFIGS = (CUDA, HIP)

_HIP_NAME = re.compile(r"(?:^|_)(?:HIP|ROCM|ROCm|HIPCC|HCC)(?:_|$)")
_NV_ONLY = {"__NVCC__", "__CUDA_ARCH__", "__CUDACC_VER_MAJOR__", "__CUDACC_VER_MINOR__", "__CUDACC_RTC__",
            "__CUDA_ARCH_LIST__", "__NVCOMPILER", "__HIP_PLATFORM_NVIDIA__", "__HIP_PLATFORM_NVCC__"}
_BOTH_DEFINED = {"__CUDACC__", "__cplusplus"}
# The CUDA toolkit's version macros (cuda.h, cuda_runtime_api.h): the AMD HIP headers do not define them, so
# `#if CUDA_VERSION >= 9000 ... #else <legacy shuffles> #endif` compiles the `#else` on HIP. On CUDA they are
# defined only where the header was included: their value (and definedness) stays unknown there.
_CUDA_TOOLKIT = {"CUDA_VERSION", "CUDART_VERSION"}
_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|define|undef)\b(.*)$", re.S)
_TOKEN = re.compile(r"\s*(?:(\d[\w.]*)|([A-Za-z_]\w*)|(&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%()!<>~&|^?:,]))")

def _builtin(name: str, config: str) -> tuple[bool, int | None] | None:
    """(defined?, value) of a name porter knows in ``config``; None when it is not one of those.

    A value of None means "defined, value unknown"; ``(False, 0)`` means undefined.
    """
    if name in _BOTH_DEFINED:
        return (True, None)
    if name in _CUDA_TOOLKIT:
        return (False, 0) if config == HIP else None
    if name in _NV_ONLY:
        if config == HIP:
            return (False, 0)
        if name in ("__HIP_PLATFORM_NVIDIA__", "__HIP_PLATFORM_NVCC__"):
            return (False, 0)
        return (True, None) if name != "__CUDA_ARCH__" else None
    if name.startswith("__GFX") or name.startswith("__gfx") or name.startswith("__AMDGCN"):
        return (False, 0) if config == CUDA else None
    if _HIP_NAME.search(name) or name in ("__HIP__", "__HIPCC__"):
        if config == CUDA:
            return (False, 0)
        if re.search(r"VERSION|DISABLE|ENABLE|DEVICE_COMPILE|NVIDIA|NVCC", name):
            return None
        return (True, 1)
    return None


def hip_defined(name: str) -> bool:
    """A platform macro that every HIP build defines as true (`USE_ROCM`, `__HIP_PLATFORM_AMD__`)."""
    return _builtin(name, HIP) == (True, 1)


@dataclass
class Define:
    name: str
    body: str
    line: int
    active: dict[str, int | None]  # config -> 1 / 0 / None


@dataclass
class Scan:
    """Per line (0-based): config -> 1 / 0 / None; defines in order; groups to blank."""

    lines: list[str]
    status: list[dict[str, int | None]]
    defines: list[Define] = field(default_factory=list)
    blank_directive: set[int] = field(default_factory=set)
    has_platform_branches: bool = False

    def compiled_by_both(self, line: int) -> bool:
        st = self.status[line]
        return st[CUDA] != 0 and st[HIP] != 0

    def view(self, config: str) -> dict[str, str]:
        """Object-like macros visible in ``config`` (a definitely active definition wins)."""
        out: dict[str, str] = {}
        sure: set[str] = set()
        for d in self.defines:
            a = d.active[config]
            if a == 0:
                continue
            if a == 1 and d.name not in sure:
                out[d.name] = d.body
                sure.add(d.name)
            elif d.name not in out:
                out[d.name] = d.body
        return out


def _logical_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _strip_comments(s: str) -> str:
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//.*", "", s)


class _Eval:
    """Tri-state evaluation of one #if expression in one configuration."""

    def __init__(self, config: str, macros: dict[str, tuple[bool | None, str | None]],
                 known: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.macros = macros  # name -> (defined: True/False/None, body)
        self.known = known or {}  # macros other headers define on one platform only: name -> config

    def _known(self, name: str) -> tuple[bool, int | None] | None:
        where = self.known.get(name)
        if where is None:
            return None
        return (False, 0) if where != self.config else None

    def defined(self, name: str) -> int | None:
        if name in self.macros:
            d = self.macros[name][0]
            return None if d is None else int(d)
        b = _builtin(name, self.config) or self._known(name)
        return None if b is None else int(b[0])

    def value(self, name: str, depth: int = 0) -> int | None:
        if name in self.macros:
            d, body = self.macros[name]
            if d is False:
                return 0
            if d is None or body is None or depth > 6:
                return None
            if not body.strip():
                return None
            return self.expr(body, depth + 1)
        b = _builtin(name, self.config) or self._known(name)
        if b is None:
            return None
        return b[1] if b[0] else 0

    def expr(self, text: str, depth: int = 0) -> int | None:
        text = _strip_comments(text).replace("\\\n", " ").strip()
        out: list[str] = []
        pos = 0
        toks: list[tuple[str, str]] = []
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                if text[pos:].strip():
                    return None
                break
            pos = m.end()
            if m.group(1):
                toks.append(("num", m.group(1)))
            elif m.group(2):
                toks.append(("id", m.group(2)))
            else:
                toks.append(("op", m.group(3)))
        i = 0
        while i < len(toks):
            kind, t = toks[i]
            if kind == "id" and t == "defined":
                if i + 1 < len(toks) and toks[i + 1] == ("op", "("):
                    if i + 3 < len(toks) and toks[i + 2][0] == "id" and toks[i + 3] == ("op", ")"):
                        name, i = toks[i + 2][1], i + 4
                    else:
                        return None
                elif i + 1 < len(toks) and toks[i + 1][0] == "id":
                    name, i = toks[i + 1][1], i + 2
                else:
                    return None
                v = self.defined(name)
                out.append("None" if v is None else str(v))
                continue
            if kind == "id":
                if i + 1 < len(toks) and toks[i + 1] == ("op", "("):
                    return None  # function-like macro or __has_include: unknown
                if t in ("true", "false"):
                    out.append("1" if t == "true" else "0")
                else:
                    v = self.value(t, depth)
                    out.append("None" if v is None else str(v))
            elif kind == "num":
                n = re.sub(r"[uUlL]+$", "", t)
                try:
                    out.append(str(int(n, 0) if not re.fullmatch(r"0\d+", n) else int(n, 8)))
                except ValueError:
                    return None
            else:
                if t in ("?", ":", ","):
                    return None
                out.append({"&&": " and ", "||": " or ", "!": " not ", "/": "//"}.get(t, t))
            i += 1
        src = " ".join(out).strip()
        try:
            tree = ast.parse(src, mode="eval")
        except (SyntaxError, ValueError, RecursionError):
            return None
        try:
            return _tri(tree.body)
        except (ArithmeticError, ValueError, TypeError, RecursionError):
            return None


def _tri(n: ast.AST) -> int | None:
    if isinstance(n, ast.Constant):
        if n.value is None:
            return None
        if isinstance(n.value, bool) or not isinstance(n.value, int):
            raise ValueError
        return n.value
    if isinstance(n, ast.BoolOp):
        vals = [_tri(v) for v in n.values]
        if isinstance(n.op, ast.And):
            if any(v == 0 for v in vals):
                return 0
            return None if any(v is None for v in vals) else 1
        if any(v not in (0, None) for v in vals):
            return 1
        return None if any(v is None for v in vals) else 0
    if isinstance(n, ast.UnaryOp):
        v = _tri(n.operand)
        if v is None:
            return None
        if isinstance(n.op, ast.Not):
            return int(not v)
        if isinstance(n.op, ast.USub):
            return -v
        if isinstance(n.op, ast.UAdd):
            return v
        if isinstance(n.op, ast.Invert):
            return ~v
        raise ValueError
    if isinstance(n, ast.BinOp):
        a, b = _tri(n.left), _tri(n.right)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
               ast.FloorDiv: lambda x, y: x // y, ast.Mod: lambda x, y: x % y,
               ast.LShift: lambda x, y: x << y if 0 <= y < 128 else None, ast.RShift: lambda x, y: x >> y,
               ast.BitAnd: lambda x, y: x & y, ast.BitOr: lambda x, y: x | y, ast.BitXor: lambda x, y: x ^ y}
        f = ops.get(type(n.op))
        if f is None:
            raise ValueError
        return f(a, b)
    if isinstance(n, ast.Compare):
        left = _tri(n.left)
        result: int | None = 1
        for op, comp in zip(n.ops, n.comparators, strict=True):
            right = _tri(comp)
            if left is None or right is None:
                result = None if result != 0 else 0
            else:
                ok = {ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                      ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}.get(type(op))
                if ok is None:
                    raise ValueError
                if not ok:
                    result = 0
            left = right
        return result
    raise ValueError


@dataclass
class _Group:
    start: int  # line of the #if
    parent_active: dict[str, int | None]
    taken: dict[str, int | None]  # has an earlier branch been taken: 1 / 0 / None
    current: dict[str, int | None]
    directive_lines: list[int] = field(default_factory=list)
    branch_status: list[dict[str, int | None]] = field(default_factory=list)
    platform: bool = False


def _and(a: int | None, b: int | None) -> int | None:
    if a == 0 or b == 0:
        return 0
    if a is None or b is None:
        return None
    return 1


def _not(a: int | None) -> int | None:
    return None if a is None else int(not a)


def _or(a: int | None, b: int | None) -> int | None:
    if a == 1 or b == 1:
        return 1
    if a is None or b is None:
        return None
    return 0


def scan(text: str, known: Mapping[str, str] | None = None) -> Scan:
    """Evaluate every conditional of ``text``; ``known`` maps macros that other headers of the
    repository define on one platform only (``"cuda"`` or ``"hip"``) to that platform."""
    lines = _logical_lines(text)
    status: list[dict[str, int | None]] = []
    out = Scan(lines, status)
    stack: list[_Group] = []
    top = {CUDA: 1, HIP: 1}
    cur = dict(top)
    macros = {c: {} for c in CONFIGS}  # config -> name -> (defined, body)
    i = 0
    n = len(lines)
    while i < n:
        # join continuation lines of a directive
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if not m:
            status.append(dict(cur))
            i += 1
            continue
        first = i
        full = line
        while full.rstrip("\r\n").endswith("\\") and i + 1 < n:
            i += 1
            full = full.rstrip("\r\n")[:-1] + " " + lines[i]
        m = _DIRECTIVE.match(full) or m
        kind, rest = m.group(1), _strip_comments(m.group(2)).strip()
        span = range(first, i + 1)

        def cond_of(config: str, kind: str = kind, rest: str = rest) -> int | None:
            ev = _Eval(config, macros[config], known)
            if kind in ("ifdef", "elifdef", "ifndef", "elifndef"):
                name = rest.split()[0] if rest.split() else ""
                v = ev.defined(name) if name else None
                return _not(v) if kind.endswith("ndef") else v
            return ev.expr(rest)

        if kind in ("if", "ifdef", "ifndef"):
            for _ in span:
                status.append(dict(cur))
            conds = {c: cond_of(c) for c in CONFIGS}
            g = _Group(first, dict(cur), dict(conds), {c: _and(cur[c], conds[c]) for c in CONFIGS})
            g.platform = conds[CUDA] != conds[HIP]
            g.directive_lines.extend(span)
            g.branch_status.append(dict(g.current))
            stack.append(g)
            cur = dict(g.current)
        elif kind in ("elif", "elifdef", "elifndef", "else") and stack:
            g = stack[-1]
            for _ in span:
                status.append(dict(g.parent_active))
            conds = {c: (1 if kind == "else" else cond_of(c)) for c in CONFIGS}
            if kind != "else" and conds[CUDA] != conds[HIP]:
                g.platform = True
            g.current = {c: _and(g.parent_active[c], _and(_not(g.taken[c]), conds[c])) for c in CONFIGS}
            g.taken = {c: _or(g.taken[c], conds[c]) for c in CONFIGS}
            g.directive_lines.extend(span)
            g.branch_status.append(dict(g.current))
            cur = dict(g.current)
        elif kind == "endif" and stack:
            g = stack.pop()
            for _ in span:
                status.append(dict(g.parent_active))
            g.directive_lines.extend(span)
            cur = dict(g.parent_active)
            parent_both = g.parent_active[CUDA] != 0 and g.parent_active[HIP] != 0
            dropped = any(b[CUDA] == 0 or b[HIP] == 0 for b in g.branch_status)
            if g.platform:
                out.has_platform_branches = True
            if parent_both and dropped and g.platform:
                out.blank_directive.update(g.directive_lines)
        else:
            for _ in span:
                status.append(dict(cur))
            if kind == "define":
                dm = re.match(r"\s*([A-Za-z_]\w*)(\()?(.*)$", rest, re.S)
                if dm and not dm.group(2):
                    name, body = dm.group(1), dm.group(3).strip()
                    out.defines.append(Define(name, body, first, dict(cur)))
                    for c in CONFIGS:
                        prev = macros[c].get(name)
                        if cur[c] == 1:
                            macros[c][name] = (True, body)
                        elif cur[c] is None:
                            macros[c][name] = (None if prev is None or prev[0] is not True else True,
                                               body if prev is None else prev[1])
                        elif prev is None:
                            macros[c][name] = (False, None)
                elif dm:
                    name = dm.group(1)
                    for c in CONFIGS:
                        if cur[c] != 0:
                            macros[c][name] = (True if cur[c] == 1 else None, None)
            elif kind == "undef":
                name = rest.split()[0] if rest.split() else ""
                for c in CONFIGS:
                    if name and cur[c] == 1:
                        macros[c][name] = (False, None)
                    elif name and cur[c] is None and name in macros[c]:
                        macros[c][name] = (None, macros[c][name][1])
        i += 1
    return out


_SPACE = {1: " ", 2: "\u00a0", 3: "\u3000"}


_ASCII_BLANK = {i: " " for i in range(128) if chr(i) not in "\r\n"}


def _blank(s: str) -> str:
    if s.isascii():
        return s.translate(_ASCII_BLANK)
    return "".join(ch if ch in "\r\n" else (" " if ord(ch) < 128 else _SPACE.get(len(ch.encode("utf-8",
                   "surrogatepass")), ch)) for ch in s)


def mask(text: str, sc: Scan | None = None, known: Mapping[str, str] | None = None) -> tuple[str, Scan]:
    """``text`` with the lines not compiled by both targets blanked (offsets unchanged)."""
    sc = sc or scan(text, known)
    if not sc.has_platform_branches:
        return text, sc
    out = []
    for i, line in enumerate(sc.lines):
        if i in sc.blank_directive or not sc.compiled_by_both(i):
            out.append(_blank(line))
        else:
            out.append(line)
    return "".join(out), sc
