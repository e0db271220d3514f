"""Helpers of the attention family: argument binding, literals, versions, code rendering.

An implementation module inside the family's package (the registry loads only the package).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from porter.pyimports import dotted


class NotLiteral(Exception):
    """The expression is not a literal porter can evaluate statically."""


_MISSING = object()


def literal(expr: cst.BaseExpression | None, default: object = _MISSING) -> object:
    """The Python value of a literal expression (numbers, True/False/None, tuples, unary -)."""
    if expr is None:
        if default is _MISSING:
            raise NotLiteral
        return default
    if isinstance(expr, cst.Integer):
        return int(expr.evaluated_value)
    if isinstance(expr, cst.Float):
        return float(expr.evaluated_value)
    if isinstance(expr, cst.Name) and expr.value in {"True", "False", "None"}:
        return {"True": True, "False": False, "None": None}[expr.value]
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        value = literal(expr.expression)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(expr.operator, cst.Minus) else value
        raise NotLiteral
    if isinstance(expr, (cst.Tuple, cst.List)):
        return tuple(literal(el.value) for el in expr.elements if not isinstance(el, cst.StarredElement))
    raise NotLiteral


def is_literal(expr: cst.BaseExpression) -> bool:
    try:
        literal(expr)
    except NotLiteral:
        return False
    return True


@dataclass
class Bound:
    """Arguments of one call, bound by the source signature."""

    args: dict[str, cst.BaseExpression]
    error: str | None = None

    def get(self, name: str) -> cst.BaseExpression | None:
        return self.args.get(name)


def bind(
    call: cst.Call,
    positional: Sequence[str],
    keywords: Sequence[str],
    *,
    positional_note: str = "",
) -> Bound:
    """Bind ``call``'s arguments to names by the SOURCE signature.

    ``positional`` lists the slots porter binds positionally (a prefix of the signature that
    is the same in every release); a positional argument past it is an error, as are
    ``*args``/``**kwargs`` and unknown keywords.
    """
    out: dict[str, cst.BaseExpression] = {}
    allowed = set(positional) | set(keywords)
    for i, arg in enumerate(call.args):
        if arg.star:
            return Bound(out, f"`{arg.star}` unpacking hides which arguments are passed")
        if arg.keyword is None:
            if i >= len(positional):
                return Bound(out, f"positional argument {i + 1} is past `{positional[-1]}`{positional_note}; "
                             "pass it by keyword")
            name = positional[i]
        else:
            name = arg.keyword.value
            if name not in allowed:
                return Bound(out, f"unknown keyword argument `{name}`")
        if name in out:
            return Bound(out, f"argument `{name}` given twice")
        out[name] = arg.value
    return Bound(out)


def is_simple(expr: cst.BaseExpression) -> bool:
    """True for expressions that are cheap and side-effect free to evaluate twice."""
    if isinstance(expr, cst.Name):
        return True
    if isinstance(expr, cst.Attribute):
        return is_simple(expr.value)
    if isinstance(expr, cst.Subscript):
        if not is_simple(expr.value):
            return False
        for el in expr.slice:
            sl = el.slice
            if isinstance(sl, cst.Index):
                if not (is_simple(sl.value) or is_literal(sl.value)):
                    return False
            elif isinstance(sl, cst.Slice):
                for part in (sl.lower, sl.upper, sl.step):
                    if part is not None and not (is_simple(part) or is_literal(part)):
                        return False
        return True
    return False


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString)


def atom(code: str, expr: cst.BaseExpression) -> str:
    """``code`` wrapped in parentheses unless ``expr`` binds tighter than a method call."""
    if isinstance(expr, _ATOMS) or (expr.lpar and expr.rpar):
        return code
    return f"({code})"


def flat(code: str) -> str:
    """One-line form of an argument's source (newlines inside brackets collapse)."""
    if "\n" not in code or "#" in code:
        return code
    parts = [p.strip() for p in code.splitlines()]
    out = ""
    for p in parts:
        if out and not out.endswith(("(", "[", "{")) and not p.startswith((")", "]", "}")):
            out += " "
        out += p
    return out


def render_call(func: str, args: Sequence[str], suffix: str, indent: str, first_col: int) -> str:
    """``func(args...)suffix`` on one line when it fits in 99 columns, else one arg per line."""
    one = f"{func}({', '.join(args)}){suffix}"
    if first_col + len(one) <= 99 and "\n" not in one:
        return one
    inner = indent + "    "
    body = "".join(f"{inner}{a.replace(chr(10), chr(10) + '    ')},\n" for a in args)
    return f"{func}(\n{body}{indent}){suffix}"


# -- versions -----------------------------------------------------------------------------

_FA_CANDIDATES = ("0.2.8", "1.0.9", "2.0.0", "2.0.9", "2.1.0", "2.3.6", "2.5.9", "2.6.3", "2.8.4")


@dataclass(frozen=True)
class FlashVersion:
    """What porter knows of the repo's flash-attn version."""

    era: str  # "v1", "v2.0", "v2.1+"
    note: str  # for messages: where it comes from / what was assumed
    known: bool  # False when assumed (unpinned, unknown)


def flash_version(spec: str | None) -> FlashVersion:
    """Classify a flash-attn version specifier (from ``RepoFacts.pins``)."""
    if spec is None:
        return FlashVersion("v2.1+", "flash-attn version unknown (no manifest names it); "
                            "assumed the current release (2.1+, bottom-right causal)", False)
    spec = spec.strip()
    if not spec:
        return FlashVersion("v2.1+", "flash-attn is unpinned; assumed the current release "
                            "(2.1+, bottom-right causal)", False)
    versions: list[Version] = []
    for op in ("===", "=="):
        if spec.startswith(op) and "," not in spec and "*" not in spec:
            try:
                versions = [Version(spec[len(op):].strip())]
            except InvalidVersion:
                versions = []
            break
    if not versions:
        try:
            sset = SpecifierSet(spec)
        except InvalidSpecifier:
            return FlashVersion("v2.1+", f"flash-attn pin `{spec}` is not understood; assumed the "
                                "current release (2.1+, bottom-right causal)", False)
        versions = [Version(v) for v in _FA_CANDIDATES if sset.contains(v, prereleases=True)]
        if not versions:
            return FlashVersion("v2.1+", f"flash-attn pin `{spec}` admits no known release; assumed "
                                "the current release (2.1+, bottom-right causal)", False)
    newest = max(versions)
    eras = {_era(v) for v in versions}
    era = _era(newest)
    if len(eras) == 1:
        return FlashVersion(era, f"flash-attn `{spec}` ({_era_text(era)})", True)
    return FlashVersion(era, f"flash-attn `{spec}` admits several releases; the newest ({newest}) "
                        f"is what pip installs ({_era_text(era)})", True)


def _era(v: Version) -> str:
    if v.release[:1] < (2,):
        return "v1"
    if v.release[:2] < (2, 1):
        return "v2.0"
    return "v2.1+"


def _era_text(era: str) -> str:
    return {"v1": "v1 API, top-left causal", "v2.0": "v2.0, top-left causal",
            "v2.1+": "2.1+, bottom-right causal"}[era]


def name_of(expr: cst.BaseExpression) -> str | None:
    return dotted(expr)
