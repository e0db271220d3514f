"""Helpers of the attention family: how it words binding problems, versions, code rendering (arguments
are bound and literals read by the families' shared toolkit, ``porter.codemods._shared.calls``).

An implementation module inside the family's package (the registry loads only the package).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from porter.codemods._shared.calls import UNKNOWN, Bound, option_literal
from porter.pyimports import dotted

# The first argument the attention rewrites cannot bind, in the family's words (``Bound.describe``;
# ``note`` says why later positional slots are not bound).
BIND_WORDING = {
    "star": "`{star}` unpacking hides which arguments are passed",
    "positional": "positional argument {number} is past `{last}`{note}; pass it by keyword",
    "unknown": "unknown keyword argument `{name}`",
    "repeated": "argument `{name}` given twice",
}


def bind_error(bound: Bound, note: str = "") -> str:
    """Why ``bound`` cannot be rewritten ("" when every argument bound)."""
    return bound.describe(BIND_WORDING, note=note)


def _is_option(expr: cst.BaseExpression) -> bool:
    return option_literal(expr, UNKNOWN) is not UNKNOWN


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
                if not (is_simple(sl.value) or _is_option(sl.value)):
                    return False
            elif isinstance(sl, cst.Slice):
                for part in (sl.lower, sl.upper, sl.step):
                    if part is not None and not (is_simple(part) or _is_option(part)):
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
