"""Both import indexes on branch chains: ``elif`` after an availability probe, gates nested in a
no-package path, ``if TYPE_CHECKING:`` blocks and ``match`` cases.

The semantics: every branch's imports are recorded; an ``elif`` is the ``if`` it is inside the
``else`` before it, so its test may be a probe of its own (gating its body), and it and every branch
after it run when an earlier probe failed (a fallback of that probe's gate, and of every gate whose
no-package path the chain sits in). Imports under ``if TYPE_CHECKING:`` never run, so they are no
binding a rewrite may spell a name through. The second half shows what a rule does with it.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable

import libcst as cst
import pytest

from porter.findings import Applicability
from porter.framework import RepoFacts
from porter.importindex import BaseImportIndex
from porter.pyast_imports import AstImportIndex
from porter.pyimports import ImportIndex
from porter.testing import findings, fixed


def _ast(source: str) -> BaseImportIndex:
    return AstImportIndex(ast.parse(source))


def _cst(source: str) -> BaseImportIndex:
    return ImportIndex(cst.parse_module(source))


BOTH = pytest.mark.parametrize("build", [_ast, _cst], ids=["ast", "libcst"])
Build = Callable[[str], BaseImportIndex]


def _index(build: Build, source: str) -> BaseImportIndex:
    return build(textwrap.dedent(source))


def _line(index: BaseImportIndex, node: object, source: str) -> int:
    """First line of a record's statement in either tree (LibCST nodes carry no position: find the text)."""
    if isinstance(node, ast.AST):
        return node.lineno  # type: ignore[attr-defined]
    code = cst.Module(body=[]).code_for_node(node).strip().splitlines()[0]  # type: ignore[arg-type]
    lines = textwrap.dedent(source).splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.strip() == code.strip())


# -- the records ---------------------------------------------------------------------------------

PROBE_ELIF_ELSE = """
    if find_spec("flash_attn"):
        from flash_attn import f
    elif find_spec("xformers"):
        from xformers.ops import f
    else:
        f = None
    """


@BOTH
def test_probe_elif_else_records_every_branch(build: Build) -> None:
    index = _index(build, PROBE_ELIF_ELSE)
    # before: the elif chain after a probe was never walked (no xformers binding, no fallback)
    assert [b.target for b in index.bindings["f"]] == ["flash_attn.f", "xformers.ops.f"]
    first, second = index.gates
    assert [b.gate for b in index.bindings["f"]] == [first, second]
    assert all(b.gated for b in index.bindings["f"])
    fb = index.fallback("f")  # the flash-attn gate: without it the xformers import runs
    assert fb is not None and (fb.kind, fb.real, fb.module) == ("import", True, "xformers.ops")
    assert fb.describe() == "an import of f in the elif/else branches of its availability gate"
    inner = index.fallback_in(second, "f")  # the xformers gate: without it only a placeholder
    assert inner is not None and (inner.kind, inner.real) == ("assignment", False)


@BOTH
def test_elif_without_a_probe_is_the_probes_fallback(build: Build) -> None:
    src = """
        if is_flash_attn_available():
            from flash_attn import g
        elif torch.cuda.is_available():
            from xformers.ops import h
        else:
            def g(q, k, v):
                return q
        """
    index = _index(build, src)
    (gate,) = index.gates
    assert index.resolve_name("h") == "xformers.ops.h"
    (h,) = index.bindings["h"]
    assert not h.gated and h.gate is None  # the elif is no probe: its import is not gated
    fb = index.fallback("g")
    assert fb is not None and (fb.kind, fb.real) == ("function", True) and fb.gate is gate
    assert _line(index, fb.statement, src) == 7


@BOTH
def test_probe_in_an_elif_after_a_plain_if_gates_its_own_imports(build: Build) -> None:
    src = """
        if USE_RING:
            from .ring import ring_attention
        elif find_spec("flash_attn") is not None:
            from flash_attn import flash_attn_func
        else:
            def flash_attn_func(q, k, v, causal=False):
                return q
        """
    index = _index(build, src)
    (gate,) = index.gates  # the elif's own test is examined as a probe
    (b,) = index.bindings["flash_attn_func"]
    assert b.gated and b.gate is gate
    fb = index.fallback("flash_attn_func")
    assert fb is not None and fb.kind == "function" and fb.real and fb.gate is gate
    assert not index.bindings["ring_attention"][0].gated


@BOTH
def test_probe_flag_and_helper_probe_in_elif(build: Build) -> None:
    src = """
        HAS_XF = importlib.util.find_spec("xformers") is not None
        if is_flash_attn_2_available():
            from flash_attn import attn
        elif HAS_XF:
            from xformers.ops import memory_efficient_attention as attn
        elif is_apex_available():
            from apex.contrib import attn
        else:
            from .naive import attn
        """
    index = _index(build, src)
    flash, xf, apex = index.gates
    assert [b.gate for b in index.bindings["attn"]] == [flash, xf, apex, None]
    assert index.fallback_in(flash, "attn").module == "xformers.ops"  # type: ignore[union-attr]
    assert index.fallback_in(xf, "attn").module == "apex.contrib"  # type: ignore[union-attr]
    assert index.fallback_in(apex, "attn").module == ".naive"  # type: ignore[union-attr]


@BOTH
def test_try_inside_elif(build: Build) -> None:
    src = """
        HAS_FLASH = find_spec("flash_attn") is not None
        if HAS_FLASH:
            from flash_attn import g
        elif x:
            try:
                from xformers.ops import g
            except ImportError:
                g = naive
        """
    index = _index(build, src)
    probe, trygate = index.gates
    assert type(trygate).__name__ == "Try"
    assert index.fallback_in(probe, "g").module == "xformers.ops"  # type: ignore[union-attr]
    inner = index.fallback_in(trygate, "g")
    assert inner is not None and (inner.kind, inner.real) == ("assignment", True)


NESTED = {
    "if_under_else": """
        if is_flash_attn_available():
            from flash_attn import g
        else:
            if is_xformers_available():
                from xformers.ops import h
            else:
                def g(q, k, v):
                    return q
        """,
    "try_in_handler": """
        try:
            from flash_attn import g
        except ImportError:
            try:
                from xformers.ops import h
            except ImportError:
                def g(q, k, v):
                    return q
        """,
    "elif_chain_then_try": """
        if is_flash_attn_available():
            from flash_attn import g
        elif is_xformers_available():
            from xformers.ops import h
        else:
            try:
                from apex.contrib import k
            except ImportError:
                def g(q, k, v):
                    return q
        """,
}


@BOTH
@pytest.mark.parametrize("case", sorted(NESTED))
def test_a_gate_nested_in_a_fallback_path_is_a_fallback_of_the_outer_gate_too(build: Build, case: str) -> None:
    index = _index(build, NESTED[case])
    outer = index.gates[0]
    # before: `def g` counted only for the innermost gate, so the outer `g` had no fallback
    fb = index.fallback("g")
    assert fb is not None and fb.kind == "function" and fb.real and fb.gate is outer
    for gate in index.gates[1:]:
        inner = index.fallback_in(gate, "g")
        assert inner is not None and inner.statement is fb.statement


@BOTH
def test_a_long_elif_chain_is_walked_without_recursion(build: Build) -> None:
    arms = "".join(f"elif is_p{i}_available():\n    from p{i} import f\n" for i in range(300))
    index = build("if is_flash_attn_available():\n    from flash_attn import f\n" + arms + "else:\n    f = None\n")
    assert len(index.gates) == 301 and len(index.bindings["f"]) == 301
    assert index.fallback("f").module == "p0"  # type: ignore[union-attr]


# -- TYPE_CHECKING -------------------------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("test", ["TYPE_CHECKING", "typing.TYPE_CHECKING"])
def test_type_checking_imports_are_no_run_time_binding(build: Build, test: str) -> None:
    src = f"""
        import typing
        from typing import TYPE_CHECKING
        if {test}:
            import torch
            import torch.nn.functional as F
            import torch.nn.attention.bias
        else:
            import numpy as np
        """
    index = _index(build, src)
    assert index.resolve_name("F") == "torch.nn.functional"  # annotations still resolve
    assert index.bindings["F"][0].gated and index.bindings["torch"][0].gated
    assert not index.bindings["np"][0].gated  # the else branch runs
    assert not index.gates
    # before: `F` (bound only for type checkers) was offered as the run-time spelling
    assert index.alias_for("torch.nn.functional") is None
    assert index.alias_for("torch.nn.attention.bias.causal_lower_right") is None


# -- match -------------------------------------------------------------------------------------


@BOTH
def test_match_cases_are_walked(build: Build) -> None:
    src = """
        match backend:
            case "flash":
                from flash_attn import flash_attn_func
            case "xformers":
                try:
                    import xformers.ops as xops
                except ImportError:
                    xops = None
            case _:
                pass
        """
    index = _index(build, src)
    assert index.resolve_name("flash_attn_func") == "flash_attn.flash_attn_func"
    (gate,) = index.gates
    fb = index.fallback("xops")
    assert fb is not None and fb.gate is gate and not fb.real


# -- what a rule does with it -----------------------------------------------------------------

FACTS = RepoFacts(pins={"torch": "==2.6.0", "flash-attn": "==2.5.0"})

RULE_CASES = {
    # an elif probe's import is the no-flash-attn path: the uses must keep meaning that import
    "elif_import": """
        import torch
        from transformers.utils import is_flash_attn_2_available, is_xformers_available

        if is_flash_attn_2_available():
            from flash_attn import flash_attn_func
        elif is_xformers_available():
            from .xformers_compat import flash_attn_func
        else:
            def flash_attn_func(q, k, v, causal=False):
                return q


        def attn(q, k, v):
            return flash_attn_func(q, k, v, causal=True)
        """,
    # the probe sits in the elif: its import was recorded ungated, the else's def ignored
    "probe_in_elif": """
        import torch
        from importlib.util import find_spec

        if USE_RING:
            from .ring import ring_attention
        elif find_spec("flash_attn") is not None:
            from flash_attn import flash_attn_func
        else:
            def flash_attn_func(q, k, v, causal=False):
                return q


        def attn(q, k, v):
            return flash_attn_func(q, k, v, causal=True)
        """,
    # the fallback sits in a gate nested in the else branch
    "nested_gate": """
        import torch
        from transformers.utils import is_flash_attn_2_available

        if is_flash_attn_2_available():
            from flash_attn import flash_attn_func
        else:
            try:
                import xformers.ops as xops
            except ImportError:
                def flash_attn_func(q, k, v, causal=False):
                    return q


        def attn(q, k, v):
            return flash_attn_func(q, k, v, causal=True)
        """,
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_attention_rewrite_with_a_fallback_in_a_later_branch_is_flagged_not_applied(case: str) -> None:
    src = textwrap.dedent(RULE_CASES[case])
    (call,) = [f for f in findings(src, family="attention", facts=FACTS) if f.code == "PRT100"]
    # before: `[*] flash_attn_func → F.scaled_dot_product_attention`, applied silently
    assert call.fix == Applicability.NONE and not call.edits
    assert "fallback binding" in call.message
    assert fixed(src, family="attention", facts=FACTS) == src


def test_attention_rewrite_never_spells_a_name_bound_only_for_type_checkers() -> None:
    src = textwrap.dedent("""
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            import torch
            import torch.nn.functional as F

        from flash_attn import flash_attn_func


        def attn(q: "torch.Tensor", k, v):
            return flash_attn_func(q, k, v, causal=True)
        """)
    out = fixed(src, family="attention", facts=FACTS)
    assert "flash_attn_func" not in out
    # before: `return F.scaled_dot_product_attention(...)`, with F unbound at run time (NameError)
    body = out.split("def attn", 1)[1]
    assert "F.scaled_dot_product_attention" not in body
    assert "torch.nn.functional.scaled_dot_product_attention(" in body
    code = compile(out, "t.py", "exec")
    tree = ast.parse(out)
    runtime = {a.asname or a.name.split(".")[0] for stmt in tree.body if isinstance(stmt, (ast.Import, ast.ImportFrom))
               for a in stmt.names}
    assert "torch" in runtime and code is not None


# -- other bindings of an imported name ----------------------------------------------------------


@BOTH
def test_a_definition_before_a_gated_import_is_its_fallback(build: Build) -> None:
    src = """
        def flash_attn_func(q, k, v):
            return q
        try:
            from flash_attn import flash_attn_func
        except ImportError:
            pass
        """
    index = _index(build, src)
    fb = index.fallback("flash_attn_func")
    # before: None (only `name = <imported>` rebindings looked at the definition before the gate)
    assert fb is not None and (fb.kind, fb.real) == ("earlier", True) and fb.gate is index.gates[0]


@BOTH
def test_a_handler_binding_shadows_the_definition_before_the_gate(build: Build) -> None:
    src = """
        def flash_attn_func(q, k, v):
            return q
        if is_flash_attn_2_available():
            from flash_attn import flash_attn_func
        else:
            flash_attn_func = None
        """
    index = _index(build, src)
    fb = index.fallback_in(index.gates[0], "flash_attn_func")
    assert fb is not None and (fb.kind, fb.real) == ("assignment", False)  # what runs is the placeholder
    # the index follows no paths: the earlier def still counts as another binding (a report, not a fix)
    alternative = index.fallback("flash_attn_func")
    assert alternative is not None and alternative.kind == "other-function"


COMPETING = {
    "plain_if_else_def": ("if USE_FLASH:\n    from flash_attn import f\nelse:\n    def f(q):\n        return q\n",
                          "other-function", 4),
    "plain_if_earlier_def": ("def f(q):\n    return q\nif USE_FLASH:\n    from flash_attn import f\n",
                             "other-function", 1),
    "match_case_class": ("match b:\n    case 1:\n        from flash_attn import f\n    case _:\n        class f:\n"
                         "            pass\n", "other-class", 5),
    "later_redefinition": ("from flash_attn import f\nf = make_attention(f)\n", "other-assignment", 2),
    "loop_body_import": ("f = naive\nfor _ in range(n):\n    from flash_attn import f\n", "other-assignment", 1),
    "other_import_in_branch": ("if USE_FLASH:\n    from flash_attn import f\nelse:\n    from .naive import f\n",
                               "other-import", 4),
    "function_plain_if": ("def attn(q):\n    if USE_FLASH:\n        from flash_attn import f\n    else:\n"
                          "        f = naive\n    return f(q)\n", "other-assignment", 5),
    "function_local_shadows_module_import": ("from flash_attn import f\ndef attn(q):\n    f = make_attention()\n"
                                             "    return f(q)\n", "other-assignment", 3),
    "function_earlier_local_then_gated_import": ("def attn(q):\n    def f(q):\n        return q\n    try:\n"
                                                 "        from flash_attn import f\n    except ImportError:\n"
                                                 "        pass\n    return f(q)\n", "other-function", 2),
    "sentinel_gate_then_def": ("try:\n    from flash_attn import f\nexcept ImportError:\n    f = None\n"
                               "if f is None:\n    def f(q):\n        return q\n", "other-function", 6),
}


@BOTH
@pytest.mark.parametrize("case", sorted(COMPETING))
def test_another_binding_on_another_path_is_reported_as_an_alternative(build: Build, case: str) -> None:
    src, kind, line = COMPETING[case]
    index = build(src)
    fb = index.fallback("f")
    # before: None, so a rule rewrote every use of `f` to the package's semantics
    assert fb is not None and fb.kind == kind and fb.real
    assert _line(index, fb.statement, src) == line
    assert fb.describe().endswith("elsewhere in the module (another branch or scope, or a redefinition after the import)")


NOT_COMPETING = {
    "earlier_def_unconditional_import": "def f(q):\n    return q\nfrom flash_attn import f\n",
    "same_import_twice": "if a:\n    from flash_attn import f\nelse:\n    from flash_attn import f\n",
    "placeholder": "f = None\nif USE_FLASH:\n    from flash_attn import f\n",
    "rebinding_the_import": "from flash_attn import flash_attn_func\nf = flash_attn_func\nif x:\n    f = flash_attn_func\n",
    "reimport_in_handler": "try:\n    from flash_attn import f\nexcept ImportError:\n    from flash_attn.v1 import g as f\n",
    "local_in_a_function": "from flash_attn import f\ndef g():\n    f = 1\n    return f\n",
    "lazy_imports_in_functions": "def a():\n    from flash_attn import f\n    return f\ndef b():\n"
                                 "    from flash_attn import f\n    return f\n",
    "function_gate_with_handler": "def a():\n    try:\n        from flash_attn import f\n    except ImportError:\n"
                                  "        f = naive\n    return f\n",
    "function_local_before_unconditional_import": "def a():\n    f = naive\n    from flash_attn import f\n"
                                                  "    return f\n",
    "class_attribute": "from flash_attn import f\nclass M:\n    f = staticmethod(f)\n    def g(self):\n"
                       "        return f\n",
}


@BOTH
@pytest.mark.parametrize("case", sorted(NOT_COMPETING))
def test_bindings_that_cannot_replace_the_import_are_no_alternative(build: Build, case: str) -> None:
    index = build(NOT_COMPETING[case])
    fb = index.fallback("f")
    assert fb is None or not fb.kind.startswith("other-")
    assert not index.alternatives


@pytest.mark.parametrize("src", [
    # a plain `if` (no probe) or a match arm: the else branch's def is what other paths call
    "if USE_FLASH:\n    from flash_attn import flash_attn_func\nelse:\n    def flash_attn_func(q, k, v, causal=False):\n"
    "        return q\n\n\ndef attn(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n",
    "match BACKEND:\n    case 'flash':\n        from flash_attn import flash_attn_func\n    case _:\n"
    "        def flash_attn_func(q, k, v, causal=False):\n            return q\n\n\n"
    "def attn(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n",
    # the definition before a gate that only overrides it
    "def flash_attn_func(q, k, v, causal=False):\n    return q\n\n\ntry:\n    from flash_attn import flash_attn_func\n"
    "except ImportError:\n    pass\n\n\ndef attn(q, k, v):\n    return flash_attn_func(q, k, v, causal=True)\n",
    # the same inside a function, and a function's local that shadows the module's import
    "def attn(q, k, v):\n    if USE_FLASH:\n        from flash_attn import flash_attn_func\n    else:\n"
    "        flash_attn_func = make_naive()\n    return flash_attn_func(q, k, v, causal=True)\n",
    "from flash_attn import flash_attn_func\n\n\ndef attn(q, k, v):\n    flash_attn_func = make_naive()\n"
    "    return flash_attn_func(q, k, v, causal=True)\n",
], ids=["plain_if", "match", "earlier_def", "function_plain_if", "function_local"])
def test_attention_rewrite_with_another_binding_of_the_name_is_flagged_not_applied(src: str) -> None:
    src = "import torch\n\n" + src
    (call,) = [f for f in findings(src, family="attention", facts=FACTS) if f.code == "PRT100"]
    # before: applied, so the path that binds the other definition ran flash-attn's semantics instead
    assert call.fix == Applicability.NONE and not call.edits
    assert "not rewritten" in call.message
    assert fixed(src, family="attention", facts=FACTS) == src


def test_a_cuda_only_import_for_type_checkers_is_worded_as_such_and_no_gate() -> None:
    src = ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import bitsandbytes as bnb\n\n\n"
           "def f(layer: \"bnb.nn.Linear8bitLt\"):\n    return layer\n")
    found = findings(src, family="packages")
    (imp,) = [f for f in found if f.code == "PRT014"]
    assert "never imported at run time" in imp.message and "availability gate" not in imp.message
    assert not [f for f in found if f.code == "PRT021"]  # no availability gate to describe


def test_apex_norm_rebound_locally_to_a_subclass_is_not_rewritten() -> None:
    """The shape of a real converter: the module imports apex's norm under an alias, and the function
    rebinds that alias to the project's own subclass (which adds a hook) before calling it."""
    src = textwrap.dedent("""
        import torch
        from torch import nn

        try:
            from apex.normalization import FusedLayerNorm as ApexNorm

            class HookedNorm(ApexNorm):
                def forward(self, x):
                    return add_hook(super().forward(x), self.weight)
        except ImportError:
            pass


        def convert(module, fast):
            if fast:
                ApexNorm = make_fast_norm()
            else:
                ApexNorm = HookedNorm
            return ApexNorm(module.normalized_shape, eps=module.eps)
        """)
    # before: `ApexNorm(...)` became `nn.LayerNorm(...)`, dropping the project's hook
    assert fixed(src, family="apex") == src
    (norm,) = [f for f in findings(src, family="apex") if f.code == "PRT310"]
    assert norm.fix == Applicability.NONE and "not rewritten" in norm.message
