"""A call's arguments, the families' one toolkit: binding by the source signature, literal values,
and writing calls.

- :func:`bind` binds a call's arguments to the *source* signature's parameters and records, in
  source order, every argument it cannot bind (:class:`Problem`); each family words the first
  problem its own way (:meth:`Bound.describe`);
- :func:`literal` is the Python value of a literal expression (``ast.literal_eval``: numbers,
  strings, bools, None, tuples, lists, dicts, sets); :func:`option_literal` the value of an option
  that is a number, a flag or a tuple of them (strings are not options; a list reads as a tuple);
- one sentinel convention for both: :data:`MISSING` when there is no expression (the argument is
  not given) and no default was named, :data:`UNKNOWN` when the expression is not a literal;
- :func:`reference` finds how to name a target API in the file (existing alias or a new import),
  :func:`render_call` writes a keyword-only call, keeping a multi-line layout when the source had one.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import libcst as cst

from porter.framework import PyContext


class _Sentinel:
    """A value no literal can have (compares equal to nothing but itself)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


MISSING: Final[Any] = _Sentinel("MISSING")  # no expression: the argument is not given
UNKNOWN: Final[Any] = _Sentinel("UNKNOWN")  # an expression that is not a literal


@dataclass(frozen=True)
class Problem:
    """An argument :func:`bind` could not bind.

    ``kind``: ``"star"`` (``*args``/``**kwargs``), ``"positional"`` (a positional argument past the
    bindable slots), ``"unknown"`` (a keyword the signature lacks) or ``"repeated"`` (a parameter
    given twice).
    """

    kind: str
    index: int  # the argument's place in the call, from 0
    arg: cst.Arg
    name: str = ""  # the keyword or parameter, for "unknown" and "repeated"


@dataclass
class Bound:
    """A call's arguments bound to the source signature's parameter names."""

    params: tuple[str, ...] = ()
    slots: int = 0  # how many of ``params`` bind by position
    args: dict[str, cst.Arg] = field(default_factory=dict)  # in source order; a repeated one: the last
    extra_positional: list[cst.Arg] = field(default_factory=list)  # beyond the bindable slots
    unknown: list[str] = field(default_factory=list)  # keywords not in the signature
    star: bool = False  # *args or **kwargs present
    problems: list[Problem] = field(default_factory=list)  # in source order

    def has(self, name: str) -> bool:
        return name in self.args

    def value(self, name: str) -> cst.BaseExpression | None:
        arg = self.args.get(name)
        return arg.value if arg is not None else None

    def values(self) -> dict[str, cst.BaseExpression]:
        """Parameter -> argument expression, in source order."""
        return {name: arg.value for name, arg in self.args.items()}

    @property
    def order(self) -> list[str]:
        """The bound parameters in source order."""
        return list(self.args)

    def describe(self, wording: Mapping[str, str], **fields: object) -> str:
        """The first problem in a family's words ("" when every argument bound).

        ``wording`` maps each :class:`Problem` kind to a ``str.format`` template; the fields are
        ``star`` (``*`` or ``**``), ``name``, ``number`` (the argument's place, from 1), ``slots``,
        ``last`` (the last positional slot's name) and any given in ``fields``.
        """
        if not self.problems:
            return ""
        p = self.problems[0]
        last = self.params[self.slots - 1] if 0 < self.slots <= len(self.params) else ""
        return wording[p.kind].format(star=p.arg.star, name=p.name, number=p.index + 1, slots=self.slots,
                                      last=last, **fields)


def bind(call: cst.Call, params: Sequence[str], positional: int | None = None,
         keywords: Sequence[str] = ()) -> Bound:
    """Bind ``call``'s arguments: the first ``positional`` names of ``params`` (all by default) by
    position, any of ``params`` by keyword; ``keywords`` lists keyword-only names the signature also
    accepts. Every argument is looked at; those that cannot bind are recorded as problems.
    """
    limit = len(params) if positional is None else positional
    out = Bound(params=tuple(params), slots=limit)
    pos = 0
    known = set(params) | set(keywords)
    for index, arg in enumerate(call.args):
        if arg.star:
            out.star = True
            out.problems.append(Problem("star", index, arg))
            continue
        if arg.keyword is None:
            if pos >= limit:
                out.extra_positional.append(arg)
                out.problems.append(Problem("positional", index, arg))
                pos += 1
                continue
            name = params[pos]
            pos += 1
        else:
            name = arg.keyword.value
            if name not in known:
                out.unknown.append(name)
                out.problems.append(Problem("unknown", index, arg, name))
                continue
        if name in out.args:
            out.problems.append(Problem("repeated", index, arg, name))
        out.args[name] = arg
    return out


def literal(node: cst.BaseExpression | None, default: Any = MISSING) -> Any:
    """The Python value of a literal expression (``ast.literal_eval``); ``default`` when ``node`` is
    None, :data:`UNKNOWN` when it is not a literal."""
    if node is None:
        return default
    try:
        code = cst.Module(body=[]).code_for_node(node)
        return ast.literal_eval(ast.parse(code.strip(), mode="eval"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def is_literal(node: cst.BaseExpression | None, *values: Any) -> bool:
    """True when ``node`` is a literal equal to one of ``values`` (same type for bools/None)."""
    value = literal(node)
    if value is UNKNOWN or value is MISSING:
        return False
    for want in values:
        if want is None or isinstance(want, bool):
            if value is want:
                return True
        elif not isinstance(value, bool) and value == want:
            return True
    return False


_CONSTANTS = {"True": True, "False": False, "None": None}


def option_literal(node: cst.BaseExpression | None, default: Any = MISSING) -> Any:
    """The value of an option that is a number, True/False/None, a signed number, or a tuple or
    list of those (read as a tuple); ``default`` when ``node`` is None, :data:`UNKNOWN` for anything
    else (strings and starred elements included)."""
    if node is None:
        return default
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.Name) and node.value in _CONSTANTS:
        return _CONSTANTS[node.value]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        value = option_literal(node.expression, UNKNOWN)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.operator, cst.Minus) else value
        return UNKNOWN
    if isinstance(node, (cst.Tuple, cst.List)):
        if any(isinstance(el, cst.StarredElement) for el in node.elements):
            return UNKNOWN  # `(*w, 1, 2)`: its length and items are not known
        items = tuple(option_literal(el.value, UNKNOWN) for el in node.elements)
        return UNKNOWN if any(item is UNKNOWN for item in items) else items
    return UNKNOWN


# Modules that may be reached through `from pkg import module` bindings as well.
_MODULES = {"torch", "torch.nn", "torch.optim", "torch.nn.init", "torch.nn.functional", "torchao",
            "torchao.optim", "torchao.quantization", "torchao.float8", "transformers", "contextlib"}


def reference(ctx: PyContext, target: str, *, style: str = "module") -> tuple[str, tuple[str, ...]]:
    """An expression naming ``target`` in this file and the import statements it needs.

    ``style="module"`` imports the module (``import torch`` → ``torch.nn.Linear``);
    ``style="from"`` imports the name (``from transformers import TorchAoConfig``) unless the name is
    already bound to something else in the file.
    """
    alias = ctx.imports.alias_for(target)
    # `from torch import nn` / `import torch.nn as nn`: reuse a binding of a known module
    best: str | None = alias
    for binding in ctx.imports.statements:
        if not binding.toplevel or binding.gated or binding.local == "*":
            continue
        if binding.target in _MODULES and target.startswith(binding.target + "."):
            candidate = binding.local + target[len(binding.target):]
            if best is None or len(candidate) < len(best):
                best = candidate
    if best is not None:
        return best, ()
    module, _, name = target.rpartition(".")
    if style == "from" and name not in ctx.imports.bindings:
        return name, (f"from {module} import {name}",)
    root = target.split(".")[0]
    other = [b for b in ctx.imports.bindings.get(root, ()) if b.target != root]
    if other:  # the root name means something else here: fall back to importing the name
        return name, (f"from {module} import {name}",)
    if root == "torch":
        return target, ("import torch",)
    return target, (f"import {module}",)


def arg_comment(arg: cst.Arg | None) -> str | None:
    """The end-of-line comment written after an argument (``x=1,  # why``), if any."""
    if arg is None:
        return None
    for ws in ((arg.comma.whitespace_after if isinstance(arg.comma, cst.Comma) else None),
               arg.whitespace_after_arg):
        if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
            return ws.first_line.comment.value
    return None


def render_call(func: str, kwargs: Sequence[tuple[str, str]], *, multiline: bool, indent: str = "",
                comments: dict[str, str] | None = None) -> str:
    """``func(k=v, ...)``; one argument per line when ``multiline`` (keeping argument comments)."""
    parts = [f"{k}={v}" for k, v in kwargs]
    if not multiline or not parts:
        return f"{func}({', '.join(parts)})"
    inner = indent + "    "
    comments = comments or {}
    body = "".join(
        f"{inner}{p},{'  ' + comments[k] if k in comments else ''}\n" for (k, _), p in zip(kwargs, parts, strict=True)
    )
    return f"{func}(\n{body}{indent})"


def comments_of(bound: Bound, rename: dict[str, str] | None = None) -> dict[str, str]:
    """Argument comments by (renamed) parameter name."""
    out = {}
    for name, arg in bound.args.items():
        c = arg_comment(arg)
        if c is not None:
            out[(rename or {}).get(name, name)] = c
    return out


def src(ctx: PyContext, node: cst.CSTNode | None) -> str:
    return ctx.code_for(node) if node is not None else ""
