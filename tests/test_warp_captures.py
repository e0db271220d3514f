"""The warp pass finds its nodes with one walk over the tree instead of a compiled tree-sitter query
(compiling any query against the CUDA grammar costs a fixed ~10 ms). The walk must capture exactly
what the query did; the analysis must not depend on the order of nodes that start at one byte (the
query returned those in an order of its own); and the faster call-name pattern must find exactly
what the plain one does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from porter.codemods._cuda_tree import language, parse
from porter.codemods.warp_size import engine
from porter.codemods.warp_size.common import CALLED, captures

tree_sitter = pytest.importorskip("tree_sitter")

# the query the analysis used before the walk replaced it (the reference the walk is held to)
REFERENCE_QUERY = """
(call_expression function: (_) @callee arguments: (argument_list) @args) @call
(for_statement) @for
(declaration) @decl
(binary_expression) @bin
(gnu_asm_expression) @asm
(if_statement condition: (_) @cond consequence: (_) @then) @if
((identifier) @wid (#match? @wid "^(warpSize|__AMDGCN_WAVEFRONT_SIZE|__AMDGCN_WAVEFRONT_SIZE__|C10_WARP_SIZE)$"))
((type_identifier) @wid (#eq? @wid "warpSize"))
((field_identifier) @wfield (#eq? @wfield "warpSize"))
(preproc_def name: (identifier) @dname value: (preproc_arg) @dbody) @def
(preproc_function_def name: (identifier) @fname parameters: (preproc_params) @fparams value: (preproc_arg) @fbody) @fdef
(function_definition) @fn
(launch_bounds) @lb
(template_type name: (type_identifier) @tname arguments: (template_argument_list) @targs) @ttype
(template_function name: (identifier) @tfname arguments: (template_argument_list) @tfargs) @tfunc
(optional_parameter_declaration) @optparam
(subscript_expression) @sub
"""
# the captures the analysis reads (the others only constrain a pattern)
READ = ("call", "for", "decl", "bin", "asm", "if", "wid", "wfield", "def", "fdef", "fn", "lb", "ttype", "tfunc",
        "optparam", "sub")

TESTS = Path(__file__).parent
CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c")
CPP_FILES = sorted(p for base in (TESTS / "fixtures", TESTS / "kernels") for p in base.rglob("*")
                   if p.suffix in CPP_SUFFIXES and p.is_file())

# shapes the fixtures may not hold: nested expressions starting at one byte, broken code, macros, templates,
# identifiers that only look like the warp names, non-ASCII text
SNIPPETS = [
    "int x = a + b + c + d; int y = lane % 32 / 16 * 2;",
    "void f() { g(1)(2)(3); a[1][2][3]; t.value().data_ptr(); cg::tiled_partition<32>(b).shfl(v, 0); }",
    "#define W warpSize\n#define F(a, b) __shfl_sync(a, b, 0)\n#define EMPTY\n#define G() 1\n",
    "template <int N = warpSize> __global__ void __launch_bounds__(256) k(int x = 32) { if (x) { return; } }",
    "struct S { int warpSize; }; void f(S s) { int w = s.warpSize + warpSize_ + C10_WARP_SIZE_X; }",
    "using T = Foo<warpSize>; auto v = bar<__AMDGCN_WAVEFRONT_SIZE>(1); int q = warpSize2;",
    "__global__ void k() { asm volatile(\"shfl.sync.bfly.b32 %0, %1;\" : \"=r\"(x) : \"r\"(y)); for (;;) {} }",
    "void f() { if (x { g(; } for (int i = 0; i < warpSize; ++i",  # broken: error recovery
    "int main() { int é = 1; return C10_WARP_SIZE + __AMDGCN_WAVEFRONT_SIZE__; } /* warpSize */",
    "#if __AMDGCN_WAVEFRONT_SIZE == 64\n#define WS 64\n#else\n#define WS 32\n#endif\nint a[WS];\n",
    "",
]


def _key(node) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    return (node.start_byte, node.end_byte, node.kind_id)


def _sources() -> list[tuple[str, str]]:
    out = [(str(p.relative_to(TESTS)), p.read_text(encoding="utf-8", errors="surrogateescape")) for p in CPP_FILES]
    out += [(f"snippet {i}", s) for i, s in enumerate(SNIPPETS)]
    # truncated copies of the fixtures: trees with ERROR and MISSING nodes
    for name, text in list(out[: len(CPP_FILES)]):
        out.append((f"{name} (first half)", text[: len(text) // 2]))
    return out


def test_the_walk_captures_exactly_what_the_query_did() -> None:
    assert CPP_FILES, "no C/C++ fixtures found"
    query = tree_sitter.Query(language(), REFERENCE_QUERY)
    for name, text in _sources():
        data = text.encode("utf-8", "surrogatepass")
        root = parse(text).root_node
        want = tree_sitter.QueryCursor(query).captures(root)
        got = captures(root, data)
        assert set(got) <= set(READ), name
        for cap in READ:
            nodes = [_key(n) for n in got.get(cap, [])]
            assert sorted(nodes) == sorted(_key(n) for n in want.get(cap, [])), (name, cap)
            assert len(set(nodes)) == len(nodes), (name, cap)
            assert [s for s, _e, _k in nodes] == sorted(s for s, _e, _k in nodes), (name, cap)  # source order


def _sites(text: str, strategy: str) -> list[tuple]:
    return [(s.code, s.start, s.end, s.message, tuple(s.edits), s.fix, s.needs_header, s.info, s.work)
            for s in engine.analyse(text, strategy).sites]


@pytest.mark.parametrize("strategy", ["logical", "physical"])
def test_findings_do_not_depend_on_the_order_of_nodes_starting_at_one_byte(
        strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [(n, t) for n, t in _sources() if "(first half)" not in n]
    before = {name: _sites(text, strategy) for name, text in sources}
    assert any(before.values())

    def inner_first(root, data):  # type: ignore[no-untyped-def]
        # the walk gives a node before the nodes it contains; this gives the innermost first
        return {k: sorted(v, key=lambda n: (n.start_byte, n.end_byte)) for k, v in captures(root, data).items()}

    monkeypatch.setattr(engine, "captures", inner_first)
    for name, text in sources:
        assert _sites(text, strategy) == before[name], name


PLAIN_CALLED = re.compile(r"([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab_Z09é ()<>;{}\n\t,x", max_size=40))
def test_the_call_name_pattern_finds_what_the_plain_one_does(text: str) -> None:
    assert CALLED.findall(text) == PLAIN_CALLED.findall(text)


def test_the_call_name_pattern_on_the_fixtures() -> None:
    for _name, text in _sources():
        assert CALLED.findall(text) == PLAIN_CALLED.findall(text)
