"""Helpers shared by the quantization (bitsandbytes) and fp8 (Transformer Engine) families.

- :func:`bind` binds a call's arguments by the *source* signature,
- :func:`literal` evaluates literal argument values (numbers, bools, None, strings, tuples),
- :func:`reference` finds how to name a target API in the file (existing alias or a new import),
- :func:`render_call` writes a keyword-only call, keeping a multi-line layout when the source had one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from porter.framework import PyContext

UNKNOWN: Any = object()  # a value that is not a literal


@dataclass
class Bound:
    """A call's arguments bound to the source signature's parameter names."""

    args: dict[str, cst.Arg] = field(default_factory=dict)
    extra_positional: list[cst.Arg] = field(default_factory=list)  # beyond the bindable slots
    unknown: list[str] = field(default_factory=list)  # keywords not in the signature
    star: bool = False  # *args or **kwargs present

    def has(self, name: str) -> bool:
        return name in self.args

    def value(self, name: str) -> cst.BaseExpression | None:
        arg = self.args.get(name)
        return arg.value if arg is not None else None


def bind(call: cst.Call, params: Sequence[str], positional: int | None = None,
         keywords: Sequence[str] = ()) -> Bound:
    """Bind ``call``'s arguments: the first ``positional`` slots of ``params`` by position.

    ``keywords`` lists keyword-only names the signature also accepts.
    """
    limit = len(params) if positional is None else positional
    out = Bound()
    pos = 0
    known = set(params) | set(keywords)
    for arg in call.args:
        if arg.star:
            out.star = True
            continue
        if arg.keyword is None:
            if pos < limit:
                out.args[params[pos]] = arg
            else:
                out.extra_positional.append(arg)
            pos += 1
            continue
        name = arg.keyword.value
        if name in known:
            out.args[name] = arg
        else:
            out.unknown.append(name)
    return out


def literal(node: cst.BaseExpression | None) -> Any:
    """The Python value of a literal expression, else :data:`UNKNOWN`."""
    if node is None:
        return UNKNOWN
    try:
        code = cst.Module(body=[]).code_for_node(node)
        tree = ast.parse(code.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return UNKNOWN
    try:
        return ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return UNKNOWN


def is_literal(node: cst.BaseExpression | None, *values: Any) -> bool:
    """True when ``node`` is a literal equal to one of ``values`` (same type for bools/None)."""
    value = literal(node)
    if value is UNKNOWN:
        return False
    for want in values:
        if want is None or isinstance(want, bool):
            if value is want:
                return True
        elif not isinstance(value, bool) and value == want:
            return True
    return False


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


_INDENT = re.compile(r"[ \t]*")


def line_indent(ctx: PyContext, line: int) -> str:
    m = _INDENT.match(ctx.line_text(line))
    return m.group(0) if m else ""


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


def low_precision_hint(text: str) -> str | None:
    """A sign in the file's text that parameters may be fp16/bf16 (None when there is none)."""
    m = re.search(r"\.half\(\)|\.bfloat16\(\)|torch\.(?:bfloat16|float16|half)\b|[\"'](?:bf16|fp16|bfloat16|float16)[\"']",
                  text)
    return m.group(0) if m else None
