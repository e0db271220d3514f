"""String literals as written, over ``ast`` nodes.

``ast`` folds an implicit concatenation (``"a" "b"``, ``"a" f"{b}"``) into one ``Constant`` or
``JoinedStr``; LibCST keeps every literal apart (``SimpleString`` parts of a
``ConcatenatedString``). A rule that reads literals one by one (a variable name, a file name)
gets them here: :func:`literal_parts` tokenizes only the node's own source range, so it is meant
for the few nodes a cheap check on ``Constant.value`` has already selected.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .framework import PyContext

__all__ = ["Literal", "literal_parts"]

_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)


@dataclass(frozen=True)
class Literal:
    """One plain (non-f) string or bytes literal: where it starts, its text and its value."""

    start: int  # character offset of the literal (its prefix) in the file
    text: str
    value: Any  # str or bytes; None when the literal cannot be evaluated

    @property
    def body_start(self) -> int:
        """Offset of the first character inside the quotes."""
        text = self.text
        p = 0
        while p < len(text) and text[p] not in "'\"":
            p += 1
        quote = 3 if text[p : p + 3] in ('"""', "'''") else 1
        return self.start + p + quote


def _is_fstring(token: str) -> bool:
    for c in token:
        if c in "'\"":
            return False
        if c in "fF":
            return True
    return False


def literal_parts(ctx: PyContext, node: ast.AST) -> list[Literal]:
    """The plain literals a ``Constant`` string/bytes or ``JoinedStr`` is written as, in source order.

    F-string parts are left out (their replacement fields are ``ast`` nodes of their own); a
    range that does not tokenize is read as one literal.
    """
    start, end = ctx.ast_span(node)
    segment = ctx.text[start:end]
    offsets: list[int] = []
    reader = io.StringIO("(" + segment + ")")
    pos = 0

    def readline() -> str:
        nonlocal pos
        line = reader.readline()
        offsets.append(pos)
        pos += len(line)
        return line

    parts: list[Literal] = []
    depth = 0
    try:
        for tok in tokenize.generate_tokens(readline):
            if _FSTRING_START is not None and tok.type == _FSTRING_START:
                depth += 1
            elif _FSTRING_END is not None and tok.type == _FSTRING_END:
                depth -= 1
            elif tok.type == tokenize.STRING and depth == 0 and not _is_fstring(tok.string):
                row, col = tok.start
                parts.append(Literal(start + offsets[row - 1] + col - 1, tok.string, _evaluate(tok.string)))
    except (tokenize.TokenError, SyntaxError, IndexError):
        return [Literal(start, segment, _evaluate(segment))]
    return parts


def _evaluate(text: str) -> Any:
    try:
        value = ast.literal_eval(text)
    except Exception:  # noqa: BLE001 - any literal the evaluator rejects
        return None
    return value if isinstance(value, (str, bytes)) else None
