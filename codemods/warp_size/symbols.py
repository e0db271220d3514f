"""Constant resolution for the warp-size pass: ``#define`` / ``constexpr`` values and masks.

Everything here works on source text (macro bodies are opaque to tree-sitter). The evaluator
accepts integer literals with C suffixes, casts to integer types, the usual arithmetic and bit
operators and names that resolve through the symbol table; anything else gives ``None``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")
_CASTS = re.compile(
    r"static_cast\s*<[^<>]*>|reinterpret_cast\s*<[^<>]*>|"
    r"\(\s*(?:const\s+)?(?:unsigned\s+long\s+long|unsigned\s+long|unsigned\s+int|unsigned|long\s+long|long|int|"
    r"u?int(?:8|16|32|64)_t|size_t)\s*\)"
)
_FUNC_CAST = re.compile(r"\b(?:unsigned|int|u?int(?:8|16|32|64)_t|size_t)\s*(?=\()")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_WIDE = re.compile(r"\b(?:0[xX][0-9a-fA-F]+|\d+)(?:[uU]?[lL]{2}|[lL]{2}[uU]?)\b|u?int64_t|long\s+long|size_t")

WARP_NAME = re.compile(
    r"^(?:k_?|K_?|C10_|CUB_PTX_|CUB_)?(?:WARP_?SIZE|WarpSize|warp_?size|warpsize|WARPSIZE|THREADS_PER_WARP|"
    r"ThreadsPerWarp|threads_per_warp|WARP_THREADS|WarpThreads|warp_threads|NUM_THREADS_PER_WARP|"
    r"WAVE_?SIZE|wave_?size|WAVEFRONT_SIZE|wavefront_size|WARP_SZ|WARP_LEN)$"
)
_ALLOWED = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
    ast.Mod, ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor, ast.USub, ast.UAdd, ast.Invert,
)


class Symbols:
    """Object-like macros, function-like macros and integer constants of one file."""

    def __init__(self) -> None:
        self.defines: dict[str, str] = {}
        self.fn_macros: dict[str, tuple[tuple[str, ...], str]] = {}
        self.consts: dict[str, str] = {}
        self.dependent: set[str] = set()  # macros defined from warpSize or wavefront macros

    def body(self, name: str) -> str | None:
        if name in self.defines:
            return self.defines[name]
        return self.consts.get(name)

    def expand(self, text: str, depth: int = 0) -> str:
        """Replace known names with their bodies (bounded)."""
        if depth > 8:
            return text

        def sub(m: re.Match[str]) -> str:
            body = self.body(m.group(0))
            if body is None or body.strip() == m.group(0):
                return m.group(0)
            return "(" + self.expand(body, depth + 1) + ")"

        return _IDENT.sub(sub, text)

    def value(self, text: str) -> int | None:
        """The integer value of a C constant expression, or None."""
        return evaluate(self.expand(text))

    def is_wide(self, text: str) -> bool:
        return bool(_WIDE.search(self.expand(text)))

    def is_full_mask32(self, text: str) -> bool:
        """True for a 32-bit all-ones mask: 0xffffffff, ~0u, -1, uint32_t(-1), FULL_MASK..."""
        expanded = self.expand(text)
        if _WIDE.search(expanded):
            return False
        v = evaluate(expanded)
        return v is not None and (v == 0xFFFFFFFF or v == -1)

    def is_warp_name(self, name: str) -> bool:
        if WARP_NAME.match(name):
            return True
        body = self.body(name)
        return body is not None and body.strip() == "warpSize"

    def warp_const(self, text: str) -> int | None:
        """Value of an expression that is a warp constant (32, or a warp-named symbol)."""
        t = text.strip()
        while t.startswith("(") and t.endswith(")"):
            t = t[1:-1].strip()
        if _IDENT.fullmatch(t) and self.is_warp_name(t):
            v = self.value(t)
            return v if v is not None else 32
        v = self.value(t) if not _IDENT.fullmatch(t) or self.body(t) is not None else None
        return v


def evaluate(text: str) -> int | None:
    t = _CASTS.sub("", text)
    t = _FUNC_CAST.sub("", t)
    t = _SUFFIX.sub(lambda m: m.group(1), t)
    t = t.replace("/", "//").replace("////", "//").strip()
    if not t or _IDENT.search(re.sub(r"0[xX][0-9a-fA-F]+", "0", t)):
        return None
    try:
        tree = ast.parse(t, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    if not all(isinstance(n, _ALLOWED) for n in ast.walk(tree)):
        return None
    for n in ast.walk(tree):  # keep the arithmetic small: no huge literals or shifts
        if isinstance(n, ast.Constant) and (not isinstance(n.value, int) or abs(n.value) >= 1 << 66):
            return None
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.LShift) and not (
            isinstance(n.right, ast.Constant) and 0 <= n.right.value <= 128
        ):
            return None
    try:
        v = eval(compile(tree, "<c-const>", "eval"), {"__builtins__": {}}, {})  # noqa: S307 - vetted AST
    except (ArithmeticError, ValueError, TypeError, RecursionError):
        return None
    return v if isinstance(v, int) and abs(v) < 1 << 70 else None


def collect_defines(items: Mapping[str, str]) -> Symbols:
    s = Symbols()
    s.defines.update(items)
    return s
