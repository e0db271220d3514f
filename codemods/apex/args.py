"""Call rebuilding for the apex family (private helpers).

Calls are bound by the *source* (apex) signature with the families' shared toolkit
(``porter.codemods._shared.calls``), then rebuilt as keyword arguments in the source order (so
argument expressions are still evaluated in the order the user wrote them), keeping each kept
argument's own whitespace and comments.
"""

from __future__ import annotations

import libcst as cst

_NO_SPACE = cst.SimpleWhitespace("")

# The first argument apex's rewrites cannot bind, in the family's words (``Bound.describe``).
BIND_WORDING = {
    "star": "it passes `{star}` arguments, which porter cannot bind statically",
    "positional": "it passes more than {slots} positional arguments",
    "unknown": "it passes the unknown argument `{name}`",
    "repeated": "it passes `{name}` twice",
}


_PURE_LEAVES = (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)


def pure(expr: cst.BaseExpression) -> bool:
    """True when evaluating ``expr`` can have no side effects worth keeping (no calls)."""
    if isinstance(expr, _PURE_LEAVES):
        return True
    if isinstance(expr, cst.ConcatenatedString):
        return True
    if isinstance(expr, cst.Attribute):
        return pure(expr.value)
    if isinstance(expr, cst.UnaryOperation):
        return pure(expr.expression)
    if isinstance(expr, cst.BinaryOperation):
        return pure(expr.left) and pure(expr.right)
    if isinstance(expr, cst.BooleanOperation):
        return pure(expr.left) and pure(expr.right)
    if isinstance(expr, cst.Comparison):
        return pure(expr.left) and all(pure(c.comparator) for c in expr.comparisons)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(isinstance(e, cst.Element) and pure(e.value) for e in expr.elements)
    if isinstance(expr, cst.Subscript):
        return pure(expr.value) and all(
            isinstance(s.slice, cst.Index) and pure(s.slice.value) for s in expr.slice
        )
    return False


def atom(text: str, expr: cst.BaseExpression) -> str:
    """``text`` (the code of ``expr``) safe to follow with ``.attr``."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return text
    return f"({text})"


def kwarg(name: str, value: cst.BaseExpression | str) -> cst.Arg:
    if isinstance(value, str):
        value = cst.parse_expression(value)
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE),
    )


def as_keyword(arg: cst.Arg, name: str) -> cst.Arg:
    """``arg`` passed as ``name=...`` (keeps its value, comments and comma)."""
    if arg.keyword is not None and arg.keyword.value == name:
        return arg
    equal = arg.equal if arg.keyword is not None else cst.AssignEqual(
        whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE
    )
    return arg.with_changes(keyword=cst.Name(name), equal=equal)


def as_positional(arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)


_Sep = tuple  # (comma, whitespace_after_arg): what follows an argument


def _sep(arg: cst.Arg) -> _Sep:
    return (arg.comma, arg.whitespace_after_arg)


def _break(sep: _Sep) -> cst.BaseParenthesizableWhitespace:
    """The whitespace that carries a separator's line break (and trailing comment), if any."""
    comma, after = sep
    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
        return comma.whitespace_after
    return after


def _strip(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
    return ws


def _comment(ws: cst.BaseParenthesizableWhitespace) -> cst.TrailingWhitespace | None:
    if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
        return ws.first_line
    return None


def rebuild(call: cst.Call, func: str, args: list[cst.Arg]) -> cst.Call:
    """``call`` with a new callee and argument list, separators laid out like the original.

    Kept arguments keep their own separators (and comments); the original last separator
    (which holds the layout before ``)``) stays last; new arguments get a comment-free copy
    of the first inner separator.
    """
    originals = list(call.args)
    if not originals:
        return call.with_changes(func=cst.parse_expression(func), args=args)
    last_orig = originals[-1]
    closing = _sep(last_orig)
    template: _Sep = (cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), cst.SimpleWhitespace(""))
    for a in originals[:-1]:
        if isinstance(a.comma, cst.Comma):
            template = (a.comma.with_changes(whitespace_after=_strip(a.comma.whitespace_after)),
                        _strip(a.whitespace_after_arg))
            break
    originals_by_value = {id(a.value): a for a in originals}
    laid: list[cst.Arg] = []
    for i, a in enumerate(args):
        src = originals_by_value.get(id(a.value))
        is_last = i == len(args) - 1
        if is_last:
            if src is last_orig:
                comma, after = closing
            else:  # the closing layout, with this argument's comment instead of the old last one's
                comma, after = closing
                if isinstance(comma, cst.Comma):
                    comma = comma.with_changes(whitespace_after=_strip(comma.whitespace_after))
                after = _strip(after)
                note = _comment(_break(_sep(src))) if src is not None else None
                if note is not None:
                    if isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
                        comma = comma.with_changes(whitespace_after=comma.whitespace_after.with_changes(first_line=note))
                    elif isinstance(after, cst.ParenthesizedWhitespace):
                        after = after.with_changes(first_line=note)
        elif src is not None and src is not last_orig and isinstance(src.comma, cst.Comma):
            comma, after = _sep(src)
        elif src is last_orig:  # the old last argument moves inwards: keep its comment
            comma, after = template
            note = _comment(_break(closing))
            if note is not None:
                ws = comma.whitespace_after if isinstance(comma, cst.Comma) else cst.SimpleWhitespace("")
                if isinstance(ws, cst.ParenthesizedWhitespace):
                    ws = ws.with_changes(first_line=note)
                else:
                    ws = cst.ParenthesizedWhitespace(first_line=note, indent=True,
                                                     last_line=_indent_of(_break(closing)))
                comma = cst.Comma(whitespace_after=ws)
        else:
            comma, after = template
        laid.append(a.with_changes(comma=comma, whitespace_after_arg=after))
    return call.with_changes(func=cst.parse_expression(func), args=laid)


def _indent_of(ws: cst.BaseParenthesizableWhitespace) -> cst.SimpleWhitespace:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return cst.SimpleWhitespace(ws.last_line.value + "    ")
    return cst.SimpleWhitespace("")
