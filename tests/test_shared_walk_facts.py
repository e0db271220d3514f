"""Facts gathered in the shared stdlib-``ast`` walk instead of a traversal of their own.

- ``porter.pyast.walk`` reaches every node ``ast.walk`` reaches (a fact collected in the walk sees
  what a scan of the tree would), type parameters included on Python 3.12+.
- The build family's gate reads ``gate.BuildGateFacts`` from that walk and answers exactly as its
  own scan of the tree (``build.scan``) does, on inputs built to tell them apart.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from porter import pyast, registry
from porter.codemods import build
from porter.codemods.build.gate import BuildGateFacts
from porter.engine import python_guard, raw_findings
from porter.framework import PyContext
from porter.testing import settings_for

ROOT = Path(__file__).resolve().parent.parent


def _python_sources() -> list[tuple[str, str]]:
    """porter's own modules and the Python fixtures: a varied corpus of real syntax."""
    paths = sorted([*(ROOT / "porter").rglob("*.py"), *(ROOT / "codemods").rglob("*.py"),
                    *(ROOT / "tests" / "fixtures").rglob("*.py")])
    out = []
    for p in paths:
        text = p.read_text(encoding="utf-8", errors="replace")
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            continue  # fixtures of syntax errors
        out.append((str(p.relative_to(ROOT)), text))
    return out


def _walk_ids(tree: ast.AST) -> Counter:
    """How often ``porter.pyast.walk`` visits each node (a visitor with a handler for every class)."""
    seen: Counter = Counter()

    def visit(self: pyast.AstVisitor, node: ast.AST) -> None:
        seen[id(node)] += 1

    every = type("Every", (pyast.AstVisitor,), {f"visit_{cls.__name__}": visit for cls in _ast_classes()})
    pyast.walk(tree, [every.__new__(every)])
    return seen


def _ast_classes() -> list[type]:
    return [c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)]


_SKIPPED = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop, ast.type_ignore)


def _ast_walk_ids(tree: ast.AST) -> Counter:
    return Counter(id(n) for n in ast.walk(tree) if not isinstance(n, _SKIPPED))


def test_shared_walk_reaches_every_node_ast_walk_reaches() -> None:
    sources = _python_sources()
    assert len(sources) > 100
    for relpath, text in sources:
        tree = ast.parse(text)
        # the same nodes, each exactly once (operators and expression contexts are never visited)
        assert _walk_ids(tree) == _ast_walk_ids(tree), relpath


_NODE_FREE_VALUES = {"expr_context": ast.Load, "boolop": ast.And, "operator": ast.Add, "unaryop": ast.Not,
                     "cmpop": ast.Eq}


def _filled(cls: type) -> ast.AST:
    """An instance of ``cls`` with every field its ASDL signature declares set: a fresh marker node
    (a positioned ``Name``) in each field that can hold nodes (one in a list field), plain values
    elsewhere. Source-order special cases and fields a later grammar adds (``type_params`` on 3.12)
    are covered as they come: nothing here names a field."""
    doc = (cls.__doc__ or "").split("\n", 1)[0].strip()
    inner = doc[len(cls.__name__) + 1:-1].strip()
    kinds = dict(reversed(part.split()) for part in inner.split(",")) if inner else {}
    node = cls()
    line = [0]

    def marker() -> ast.AST:
        line[0] += 1
        return ast.Name(id="m", ctx=ast.Load(), lineno=line[0], col_offset=0, end_lineno=line[0], end_col_offset=1)

    for name in cls._fields:
        kind = kinds.get(name, "expr")
        base = kind.rstrip("?*")
        if base in ("identifier", "string"):
            value: object = "x"
        elif base == "int":
            value = 0
        elif base == "constant":
            value = 1
        elif base in _NODE_FREE_VALUES:
            value = _NODE_FREE_VALUES[base]()
        elif base == "type_ignore":
            value = []
            setattr(node, name, value)
            continue
        else:
            value = marker()
        setattr(node, name, [value] if kind.endswith("*") else value)
    return node


def test_the_walk_visits_every_field_the_running_pythons_grammar_declares() -> None:
    # every concrete node class of this Python, each field filled: the walk must reach what ast.walk
    # reaches (on 3.12+ this includes `type_params`, which the walk's source-order cases once skipped)
    checked = 0
    for cls in _ast_classes():
        if not cls._fields or issubclass(cls, _SKIPPED) or not (cls.__doc__ or "").startswith(cls.__name__ + "("):
            continue
        node = _filled(cls)
        assert _walk_ids(node) == _ast_walk_ids(node), cls.__name__
        checked += 1
    assert checked > 60


# -- the build family's gate ---------------------------------------------------------------------------

# (source, expected gate answer): each literal form the LibCST visitor reads one by one, and the
# near misses that must not count
GATE_CASES = [
    ('import cpp_extension_helper\nFLAGS = "--use_fast_math" " -O3"\n', True),  # a piece of a concatenation
    ('import cpp_extension_helper\nFLAGS = "-gen" "code"\n', True),  # the whole folded value counts too
    ('import cpp_extension_helper\nFLAGS = "\\x2dgencode"\n', True),  # an escape spells the flag
    ('import cpp_extension_helper\nFLAGS = f"{x}" "-lineinfo"\n', True),  # an f-string's plain neighbour
    ("import cpp_extension_helper\nF = f\"{'--use_fast_math' if y else ''}\"\n", True),  # in a field
    ('import cpp_extension_helper\nF = f"{x:{\'-lineinfo\'}}"\n', True),  # in a format spec's field
    # f-string text is no plain literal, but the scan tests the piece's value (a gate may admit more)
    ('import cpp_extension_helper\nF = f"-lineinfo{x}"\n', True),
    ('import cpp_extension_helper\nF = b"-lineinfo"\n', False),  # bytes
    ('import cpp_extension_helper\nF = "-t"\n', False),  # a flag the visitor leaves alone
    ('import cpp_extension_helper\nF = "-G"\n', False),
    ('import cpp_extension_helper\nF = "use -arch=sm_80 here"\n', False),  # a needle inside a longer value
    ('import cpp_extension_helper\nF = "TORCH_CUDA_ARCH_LIST"\n', True),
    ('import cpp_extension_helper\nargs = {"nvcc": []}\n', True),
    ('import cpp_extension_helper\nargs = {**other, 1: "nvcc"}\n', False),  # a value, not a key
    ('import cpp_extension_helper\nload(extra_cuda_cflags=x)\n', True),
    ('import cpp_extension_helper\nload(nvcc=x)\n', True),
    ('import cpp_extension_helper\nload(**{"nvcc_flags": x})\n', False),
    ('"""Builds with nvcc when it is found."""\nfrom torch.utils import cpp_extension\n', False),
    ('def f(a="-Xptxas"):\n    import cpp_extension\n', True),  # a default value
    ('@d("--expt-relaxed-constexpr")\nclass C:\n    x: "cpp_extension"\n', True),  # a decorator argument
    ('match x:\n    case "-lineinfo":\n        import cpp_extension\n', True),  # a match pattern
]


def _gate(text: str, *, shared_walk: bool) -> bool:
    fam = registry.family("build")
    assert fam is not None and fam.matches(text, "python", "m.py")
    problem, tree = python_guard("m.py", text)
    assert problem is None and tree is not None
    ctx = PyContext("m.py", text, "python", settings_for("build"), None, ast_tree=tree)
    if shared_walk:
        facts = BuildGateFacts(ctx)
        pyast.walk(tree, [facts])
        assert ctx.cache[build.GATE_FACTS] is facts and not facts.failed
    else:
        assert build.GATE_FACTS not in ctx.cache
    return build.python_gate(ctx)


@pytest.mark.parametrize(("text", "expected"), GATE_CASES)
def test_build_gate_facts_answer_as_the_scan(text: str, expected: bool) -> None:
    assert _gate(text, shared_walk=False) is expected
    assert _gate(text, shared_walk=True) is expected


def test_build_gate_facts_match_the_scan_on_the_fixtures() -> None:
    checked = 0
    for relpath, text in _python_sources():
        tree = ast.parse(text)
        ctx = PyContext(relpath, text, "python", settings_for("build"), None, ast_tree=tree)
        facts = BuildGateFacts(ctx)
        pyast.walk(tree, [facts])
        assert facts.hit is build.scan(ctx), relpath
        checked += facts.hit
    assert checked > 5  # the corpus has files the gate admits


def test_build_gate_reads_the_shared_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a run the gate's facts come from the walk every ast family shares: no second traversal."""
    def no_scan(ctx: PyContext) -> bool:
        raise AssertionError("the build gate scanned the tree itself")

    monkeypatch.setattr(build, "scan", no_scan)
    text = 'from torch.utils import cpp_extension\nFLAGS = ["-O3"]\nprint("built with nvcc")\n'
    fam = registry.family("build")
    assert fam is not None
    problem, tree = python_guard("m.py", text)
    ctx = PyContext("m.py", text, "python", settings_for("build"), None, ast_tree=tree)
    assert raw_findings(ctx, [fam]) == [] and not ctx.cst_parsed
    text = 'from torch.utils import cpp_extension\nFLAGS = ["-O3", "--use_fast_math"]\n'
    problem, tree = python_guard("m.py", text)
    ctx = PyContext("m.py", text, "python", settings_for("build"), None, ast_tree=tree)
    assert [f.code for f in raw_findings(ctx, [fam])] == ["PRT841"] and ctx.cst_parsed


def test_build_gate_scans_when_a_fact_test_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A literal test that raises leaves the decision to the scan (the gate's answer before facts)."""
    from porter.codemods.build import gate

    def broken(ctx: PyContext, node: ast.AST, contains: object):
        raise ValueError("broken")

    monkeypatch.setattr(gate, "literal_values", broken)
    text = 'import cpp_extension_helper\nFLAGS = "--use_fast_math"\n'
    problem, tree = python_guard("m.py", text)
    ctx = PyContext("m.py", text, "python", settings_for("build"), None, ast_tree=tree)
    facts = BuildGateFacts(ctx)
    pyast.walk(tree, [facts])
    assert facts.failed and build.python_gate(ctx) is True


# -- visit_Name pre-filters (AstVisitor.name_ids) ----------------------------------------------------

class _Names(pyast.AstVisitor):
    def __init__(self, tag: str, ids: frozenset[str] | None, log: list[tuple[str, str]]) -> None:
        self.tag, self.name_ids, self.log = tag, ids, log

    def visit_Name(self, node: ast.Name) -> None:
        self.log.append((self.tag, node.id))


def test_walk_calls_visit_name_for_the_ids_a_visitor_asked_for_in_order() -> None:
    log: list[tuple[str, str]] = []
    visitors = [_Names("a", frozenset({"x"}), log), _Names("b", None, log), _Names("c", frozenset({"y", "x"}), log)]
    pyast.walk(ast.parse("x + y + z\n"), visitors)
    assert log == [("a", "x"), ("b", "x"), ("c", "x"), ("b", "y"), ("c", "y"), ("b", "z")]


def _finding_keys(found: list) -> list[tuple]:
    return [(f.code, f.line, f.column, f.end_line, f.end_column, f.message, f.fix, tuple(f.edits)) for f in found]


@pytest.mark.parametrize("family", ["packages", "device_audit"])
def test_name_filters_leave_the_findings_unchanged(family: str) -> None:
    """The families' name_ids only skip calls that would do nothing: the same findings without them."""
    fam = registry.family(family)
    assert fam is not None and fam.python_ast is not None
    from porter.framework import load

    cls = load(fam.python_ast)
    compared = 0
    for relpath, text in _python_sources():
        if not fam.matches(text, "python", relpath):
            continue
        tree = ast.parse(text)
        runs = []
        for keep in (True, False):
            ctx = PyContext(relpath, text, "python", settings_for(family), None, ast_tree=tree)
            visitor = cls(ctx)
            assert visitor.name_ids is not None
            if not keep:
                visitor.name_ids = None
            pyast.walk(tree, [visitor])
            runs.append(_finding_keys(visitor.findings))
        assert runs[0] == runs[1], relpath
        compared += bool(runs[0])
    assert compared > 10
