"""The families' one call toolkit (``porter.codemods._shared.calls``): binding, literals, sentinels."""

from __future__ import annotations

import ast
from pathlib import Path

import libcst as cst
import pytest

from porter.codemods._shared.calls import MISSING, UNKNOWN, bind, is_literal, literal, option_literal

CODEMODS = Path(__file__).resolve().parent.parent / "codemods"


def _call(code: str) -> cst.Call:
    node = cst.parse_expression(code)
    assert isinstance(node, cst.Call)
    return node


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def test_bind_binds_positional_slots_then_keywords() -> None:
    b = bind(_call("f(1, 2, c=3, k=4)"), ("a", "b", "c"), keywords=("k",))
    assert b.order == ["a", "b", "c", "k"]
    assert [cst.Module(body=[]).code_for_node(v) for v in b.values().values()] == ["1", "2", "3", "4"]
    assert not b.problems and b.describe({}) == ""


def test_bind_records_every_problem_in_source_order() -> None:
    b = bind(_call("f(1, 2, 3, x=4, a=5, *r, **kw)"), ("a", "b", "c"), positional=2)
    assert [(p.kind, p.index, p.name) for p in b.problems] == [
        ("positional", 2, ""), ("unknown", 3, "x"), ("repeated", 4, "a"), ("star", 5, ""), ("star", 6, "")]
    assert b.star and b.unknown == ["x"] and len(b.extra_positional) == 1
    assert cst.Module(body=[]).code_for_node(b.value("a")) == "5"  # a repeated parameter: the last one


def test_describe_words_the_first_problem_with_the_familys_table() -> None:
    wording = {"star": "`{star}` given", "positional": "argument {number} past `{last}` of {slots}{note}",
               "unknown": "no `{name}`", "repeated": "`{name}` twice"}
    assert bind(_call("f(1, 2, 3)"), ("a", "b"), positional=1).describe(wording, note="!") == \
        "argument 2 past `a` of 1!"
    assert bind(_call("f(1, b=2, *r)"), ("a", "b")).describe(wording, note="") == "`*` given"
    assert bind(_call("f(1, a=2)"), ("a",)).describe(wording, note="") == "`a` twice"


def test_one_sentinel_convention() -> None:
    assert literal(None) is MISSING and option_literal(None) is MISSING
    assert literal(None, 7) == 7 and option_literal(None, (-1, -1)) == (-1, -1)
    assert literal(_expr("x + 1")) is UNKNOWN and option_literal(_expr("x")) is UNKNOWN
    assert repr(MISSING) == "MISSING" and repr(UNKNOWN) == "UNKNOWN"
    assert UNKNOWN != MISSING and UNKNOWN != None and MISSING != 0  # noqa: E711 - compares equal to nothing
    assert not is_literal(None, None) and not is_literal(_expr("x"), None)
    assert is_literal(_expr("None"), None) and is_literal(_expr("0"), 0) and not is_literal(_expr("False"), 0)


@pytest.mark.parametrize(("code", "python", "option"), [
    ("1", 1, 1), ("-2.5", -2.5, -2.5), ("True", True, True), ("None", None, None),
    ("(1, -1)", (1, -1), (1, -1)), ("[1, -1]", [1, -1], (1, -1)),  # an option reads a list as a tuple
    ("'nf4'", "nf4", UNKNOWN),  # strings are Python literals, not options
    ("-True", UNKNOWN, UNKNOWN), ("1j", 1j, UNKNOWN), ("{'a': 1}", {"a": 1}, UNKNOWN),
    ("(1,  # why\n 2)", (1, 2), (1, 2)), ("(*w, 1, 2)", UNKNOWN, UNKNOWN),
])
def test_literal_and_option_literal(code: str, python: object, option: object) -> None:
    node = _expr(code)
    value = literal(node)
    assert value is python if python is UNKNOWN else value == python and type(value) is type(python)
    got = option_literal(node)
    assert got is option if option is UNKNOWN else got == option


def test_no_family_keeps_its_own_binder_or_sentinel() -> None:
    # one toolkit: binding, literal evaluation and their sentinels live in codemods/_shared/calls.py only
    offenders = []
    for path in sorted(CODEMODS.rglob("*.py")):
        if path == CODEMODS / "_shared" / "calls.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in {"bind", "literal", "is_literal", "option_literal"}:
                offenders.append(f"{path.relative_to(CODEMODS)}: def {node.name}")
            if isinstance(node, ast.ClassDef) and node.name in {"Bound", "NotLiteral"}:
                offenders.append(f"{path.relative_to(CODEMODS)}: class {node.name}")
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "object"
                    and not node.value.args):
                offenders.append(f"{path.relative_to(CODEMODS)}:{node.lineno}: a sentinel `object()`")
    assert offenders == []
