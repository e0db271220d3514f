"""Cheap exact facts for the ``python_gate`` of LibCST families (stdlib ``ast``, no LibCST).

A gate must hold on every file where its family's LibCST visitor can report; these helpers give
the two facts the gates are built from:

- :func:`imported_modules`: every module named by an ``import`` statement anywhere in the file
  (any statement depth: functions, classes, ``if``/``try``/``with``/``match`` bodies). The LibCST
  import index resolves a name to ``pkg.x`` only through one of these statements, so "no import
  of ``pkg``" proves that no name in the file resolves into ``pkg``.
- :func:`literal_values` / :func:`any_literal`: the values of the separate string literals (as LibCST sees them: each
  piece of an implicit concatenation, f-strings' plain neighbours) whose node value contains a
  needle. A literal's value is a substring of its ``ast`` node's value, so the needle test on
  the node loses none.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from porter.framework import PyContext

_KEY = "py_gates.imported_modules"


def imported_modules(ctx: PyContext) -> tuple[str, ...]:
    """Dotted module names of every import statement (``import a.b`` → ``a.b``; ``from a import b`` →
    ``a``; relative imports keep their leading dots). Computed once per file."""
    found = ctx.cache.get(_KEY)
    if found is None:
        out: list[str] = []
        stack: list[ast.AST] = list(ctx.tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Import):
                out.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                out.append("." * node.level + (node.module or ""))
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    value = getattr(node, field, None)
                    if isinstance(value, list):
                        stack.extend(v for v in value if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)))
        found = ctx.cache[_KEY] = tuple(out)
    return found


def imports_module(ctx: PyContext, test: Callable[[str], bool]) -> bool:
    """Whether an import statement names a module ``test`` accepts."""
    return any(test(m) for m in imported_modules(ctx))


def literal_values(ctx: PyContext, node: ast.AST, contains: Callable[[str], bool]) -> Iterator[str]:
    """Candidate literal values of ``node`` (a ``Constant`` or ``JoinedStr``): a ``Constant``'s whole
    value, then the values of the plain string literals the node is written as, when ``contains``
    holds on its ``ast`` value (for a ``JoinedStr``: on one of its text pieces). Never fewer than
    LibCST's literals, sometimes one more (a gate only needs a superset).

    ``contains`` must hold on every string that has a wanted literal value as a substring (a
    needle test): the literals are tokenized only for the few nodes it selects.
    """
    from porter.pyast_strings import literal_parts

    if isinstance(node, ast.Constant):
        if not isinstance(node.value, str) or not contains(node.value):
            return
        # the whole value first: it is the literal's own when the node is one literal, and it does
        # not depend on ast's positions (unreliable for code inside f-string replacement fields)
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        if not any(isinstance(v, ast.Constant) and isinstance(v.value, str) and contains(v.value)
                   for v in node.values):
            return
    else:
        return
    for part in literal_parts(ctx, node):
        if isinstance(part.value, str):
            yield part.value


def any_literal(ctx: PyContext, contains: Callable[[str], bool], wanted: Callable[[str], bool]) -> bool:
    """Whether some plain string literal of the file has a value ``wanted`` accepts (see
    :func:`literal_values` for ``contains``)."""
    if ctx.tree is None:
        return True
    for node in ast.walk(ctx.tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            for value in literal_values(ctx, node, contains):
                if wanted(value):
                    return True
    return False
