"""AstImportIndex (stdlib ast) against ImportIndex (LibCST): same records, same answers.

The comparison itself lives in benchmarks/ast_index_diff.py (which also runs it over whole trees,
e.g. the installed torch package): gates pair up by walk order and first line; bindings, rebinds,
flags and fallbacks (name, kind, real, module, gate, statement line) must match, and so must
``resolve`` for every Name/Attribute chain of the file, ``resolve_name``/``import_targets``/
``gate_of``/``fallback``/``fallback_in`` for every name, ``alias_for`` for every target and
``gate_names`` for every gate.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from porter.pyast_imports import AstImportIndex
from porter.pyimports import ImportIndex

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ast_index_diff", REPO / "benchmarks" / "ast_index_diff.py")
assert _spec is not None and _spec.loader is not None
diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diff)

FILES = sorted(p for folder in ("tests/fixtures", "examples") for p in (REPO / folder).rglob("*.py"))

SNIPPETS: dict[str, str] = {
    "imports": """
        from __future__ import annotations
        import torch
        import torch.nn.functional as F
        import a.b.c
        import os.path, sys as system
        from torch import nn
        from torch.nn import functional as F2, init
        from . import sibling
        from .. import parent
        from .pkg.mod import z as zz
        from ...deep import w
        from star.pkg import *
        from . import *
        y = F.relu(torch.zeros(1)) + F2.gelu(nn.Linear) + a.b.c.d + zz.q + w.r + parent.s + sibling.t
        """,
    "try_gates": """
        import torch
        try:
            import flash_attn
            from flash_attn import flash_attn_func, flash_attn_varlen_func as varlen
            HAS_FLASH = True
        except ImportError:
            flash_attn = None
            def flash_attn_func(q, k, v):
                return torch.softmax(q @ k, -1) @ v
            class varlen:
                inner_attr = 2
            def helper():
                inner_name = 1
            HAS_FLASH = False
        try:
            from apex.normalization import FusedLayerNorm
        except (ImportError, OSError) as err:
            from torch.nn import LayerNorm as FusedLayerNorm
        try:
            import xformers.ops as xops
        except ModuleNotFoundError:
            xops = "missing"
        else:
            import xformers.components
        finally:
            import logging
        try:
            import triton
        except:
            triton = None
        try:
            import not_a_gate
        except ValueError:
            not_a_gate = 1
        try:
            from flash_attn import new_name as fa
        except ImportError:
            from flash_attn.legacy import old_name as fa
        try:
            import bnb.nn as bnn
        except Exception:
            bnn = 1j
        try:
            from pkg import thing
        except builtins.ImportError:
            thing = ...
        out = flash_attn_func(1, 2, 3) if HAS_FLASH else varlen() or FusedLayerNorm(4) or xops.memory_efficient_attention
        """,
    "try_star": """
        try:
            import deepspeed
        except* ImportError:
            deepspeed = None
        try:
            import apex
        except* (ModuleNotFoundError, KeyError):
            def apex():
                pass
        """,
    "if_gates": """
        import importlib.util
        from transformers.utils import is_flash_attn_2_available, is_torch_available
        if is_flash_attn_2_available():
            from flash_attn import flash_attn_func
        else:
            flash_attn_func = None
        if importlib.util.find_spec("apex") is not None:
            from apex.optimizers import FusedAdam
        else:
            from torch.optim import AdamW as FusedAdam
        HAS_TE = importlib.util.find_spec("transformer_engine") is not None
        if HAS_TE:
            import transformer_engine.pytorch as te
        else:
            te = None
        if is_torch_available():
            import torch
        if is_flash_attn_2_available():
            from flash_attn import a
        elif is_xformers_available():
            from xformers import a
        else:
            def a():
                pass
        if x:
            import plain
        elif is_deepspeed_available():
            import deepspeed
        elif y:
            import other
        else:
            if is_apex_available():
                import apex
            else:
                apex = None
        if package_available("bitsandbytes"):
            import bitsandbytes as bnb
        elif module_available("x"):
            bnb = None
        if find_loader("y") != None:
            import y
        if find_spec("z") == None:
            import z
        if not HAS_TE:
            import w
        if TYPE_CHECKING:
            from typing import Callable
        if torch.cuda.is_available():
            import cuda_only
        else:
            cuda_only = None
        if is_torch_cuda_available():
            import torch_only
        else:
            torch_only = None
        try:
            import two_handlers
        except ValueError:
            two_handlers = 1
        except ImportError:
            pass
        """,
    "rebinds": """
        import torch
        from flash_attn import flash_attn_func
        from apex.normalization import FusedRMSNorm
        attn = flash_attn_func
        attn2 = attn
        functional = torch.nn.functional
        relu = torch.nn.functional.relu
        twice = flash_attn_func
        twice = torch.relu
        a, b = torch.nn, flash_attn_func
        c, *d = torch.optim, torch.cuda
        e = f = torch.amp
        g: object = flash_attn_func
        h: int
        (k, l), m = (torch.nn, torch.cuda), torch.optim
        [n, o] = [torch.nn, torch.fft]
        self.x = torch.nn
        p = q = None
        r = attn2.something
        star_re = flash_attn_func
        first, *star_re = 1, 2
        class Holder:
            def attn(self):
                pass
            functional = None
        try:
            import gated_mod
        except ImportError:
            first, *gated_mod = 1, 2
        """,
    "earlier_fallbacks": """
        from functools import partial
        flash_attn_func = None
        class RMSNorm:
            pass
        def naive():
            pass
        LayerNorm = "placeholder"
        try:
            from flash_attn import flash_attn_func as _fa
            flash_attn_func = _fa
            from apex.normalization import FusedRMSNorm
            RMSNorm = FusedRMSNorm
            naive = partial(FusedRMSNorm, eps=1e-6)
            LayerNorm = partial(FusedRMSNorm)
            LayerNorm2: object
        except ImportError:
            pass
        try:
            from apex.normalization import MixedFusedRMSNorm as RMSNorm
        except ImportError:
            pass
        try:
            from apex import amp
            naive = None
            RMSNorm = amp.x
        except ImportError:
            naive = 0
        """,
    "sentinels": """
        try:
            import a1
        except ImportError:
            a1 = None
        try:
            import a2
        except ImportError:
            a2 = False
        try:
            import a3
        except ImportError:
            a3 = 0
        try:
            import a4
        except ImportError:
            a4 = 1.5
        try:
            import a5
        except ImportError:
            a5 = "x" "y"
        try:
            import a6
        except ImportError:
            a6 = f"{x}"
        try:
            import a7
        except ImportError:
            a7 = b"x"
        try:
            import a8
        except ImportError:
            a8 = -1
        try:
            import a9
        except ImportError:
            a9 = 2j
        try:
            import a10
        except ImportError:
            a10 = ...
        try:
            import a11
        except ImportError:
            a11, a12 = None, None
        try:
            import a13
        except ImportError:
            a13 = a14 = None
        try:
            import a15
        except ImportError:
            a15: object = None
            a15: object
        try:
            import a16
        except ImportError:
            a16 = True
        """,
    "nested_and_local": """
        import torch
        def load():
            try:
                from flash_attn import flash_attn_func as attn
            except ImportError:
                attn = naive_attention
                other, pair = 1, 2
                none_here = None
            return attn
        def load2():
            try:
                import xformers
            except ImportError:
                xformers = None
                xformers = torch
        class Model:
            import torch.nn as tnn
            try:
                import apex
            except ImportError:
                apex = None
            def forward(self):
                import torch.nn.functional as F
                return F
        async def run():
            async with lock:
                import inside_async_with
            async for x in it:
                import inside_async_for
            else:
                import after_async_for
        with ctx:
            import inside_with
            attn = inside_with.attn
        for i in range(3):
            import inside_for
        else:
            import for_else
        while cond:
            try:
                import in_while
            except ImportError:
                in_while = None
        else:
            import while_else
        match cmd:
            case 1:
                import in_match
        @decorator
        def decorated():
            pass
        """,
    "one_liners": """
        import a; b = a.c; import d as e
        if x: import one_liner
        try: import quick
        except ImportError: quick = None
        if is_foo_available(): import foo
        else: foo = None
        def g(): import inner; return inner
        HAS_A = True; HAS_B = find_spec("b")
        if HAS_B: import b_mod
        """,
    "flags_gate_imports": """
        try:
            import apex
            HAS_APEX = True
            HAS_FOO: bool = True
        except ImportError:
            HAS_APEX = False
        if HAS_APEX:
            from apex.optimizers import FusedAdam
        else:
            from torch.optim import AdamW as FusedAdam
        if HAS_FOO:
            import foo
        try:
            pass
        except ValueError:
            pass
        try:
            FLAG_IN_NON_GATE = True
        except ValueError:
            pass
        if FLAG_IN_NON_GATE:
            import nope
        try:
            import thing
            HAS_THING = True
        except* ImportError:
            pass
        if HAS_THING:
            import thing_extra
        else:
            thing_extra = None
        """,
    "alias_for": """
        import torch
        import torch.nn.attention.bias
        import torch.distributed.fsdp as fsdp
        from torch.nn import functional as F
        from torch import cuda
        import bitsandbytes.optim.adam as adam_mod
        from bitsandbytes.optim.adam import Adam8bit
        from apex.optimizers.fused_adam import FusedAdam
        from apex.normalization.fused_layer_norm import FusedLayerNorm, Other
        try:
            import torch.utils.cpp_extension
        except ImportError:
            pass
        def local():
            import deepspeed.ops
        opt = Adam8bit(adam_mod.Adam8bit, FusedAdam, FusedLayerNorm, Other, cuda.amp.autocast, fsdp.x)
        opt2 = torch.nn.attention.bias.causal_lower_right, torch.utils.cpp_extension.load, torch.cuda.nvtx.range
        """,
    "elif_probe_chain": """
        if is_a_available():
            import a
        elif is_b_available():
            import b
        elif c:
            import c
        else:
            a = None
        if cond:
            import p
        elif is_q_available():
            from q import thing
        else:
            thing = None
        if is_r_available():
            import r
        else:
            if is_s_available():
                import s
            elif t:
                import t
            else:
                s = None
        """,
    # every branch of an elif chain after a probe (earlier: skipped), probes in elif tests, gates
    # nested in a no-package path (their fallbacks count for the outer gate too)
    "elif_after_probe_branches": """
        HAS_XF = importlib.util.find_spec("xformers") is not None
        if find_spec("flash_attn"):
            from flash_attn import f, g
            attn = f
        elif HAS_XF:
            from xformers.ops import f
            attn = f
        elif torch.cuda.is_available():
            import apex
            class g:
                pass
        elif is_apex_available():
            try:
                from apex.contrib import f
            except ImportError:
                def f():
                    pass
        else:
            f = None
            def g():
                pass
            if is_deepspeed_available():
                import deepspeed
            else:
                deepspeed = None
        if plain:
            import p1
        elif is_q_available():
            from q import thing, other
        elif other_flag:
            thing = "marker"
        else:
            def other():
                pass
        try:
            from flash_attn import h
        except ImportError:
            try:
                from xformers.ops import k
            except ImportError:
                def h():
                    pass
                k = None
            else:
                h = k
        """,
    "type_checking_and_match": """
        import typing
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            import torch.nn.functional as F
            from flash_attn import flash_attn_func
        elif is_apex_available():
            import apex
        else:
            apex = None
        if typing.TYPE_CHECKING:
            import torch.nn.attention.bias
        import torch
        match backend:
            case "flash":
                from flash_attn import flash_attn_func as fa
            case "xformers":
                try:
                    import xformers.ops as xops
                except ImportError:
                    xops = None
            case _:
                if is_flash_attn_available():
                    from flash_attn import fa
                else:
                    fa = torch.nn.functional.scaled_dot_product_attention
        class Model:
            if is_flash_attn_available():
                from flash_attn import flash_attn_func as kernel
            elif is_xformers_available():
                from xformers.ops import memory_efficient_attention as kernel
            else:
                kernel = None
            def forward(self):
                try:
                    from apex.normalization import FusedRMSNorm as Norm
                except ImportError:
                    if is_te_available():
                        from transformer_engine.pytorch import RMSNorm as Norm
                    else:
                        Norm = torch.nn.RMSNorm
        y = F.relu(torch.nn.attention.bias.x) + torch.nn.functional.gelu(fa)
        """,
    # names an import binds that another module-level binding may replace (another branch, a
    # redefinition), and definitions before a gate that imports the name
    "competing_bindings": """
        def early(q):
            return q
        try:
            from flash_attn import early
        except ImportError:
            pass
        def shadowed(q):
            return q
        if is_flash_attn_2_available():
            from flash_attn import shadowed
        else:
            shadowed = None
        if USE_FLASH:
            from flash_attn import a, b, c, d
        else:
            def a():
                pass
            class b:
                pass
            from .naive import c
            d = None
        match backend:
            case "x":
                from xformers.ops import e
            case _:
                e = make_e()
        from apex.normalization import FusedLayerNorm as g
        from apex.normalization import FusedLayerNorm as g
        h = flash_attn_func = None
        from flash_attn import flash_attn_func
        flash_attn_func = torch.compile(flash_attn_func)
        for _ in range(3):
            from flash_attn import k
        k, m = make()
        try:
            from flash_attn import n
        except ImportError:
            n = None
        if n is None:
            def n():
                pass
        """,
}


def _compare(source: str) -> list[str]:
    parsed = diff.parse_both(source)
    assert parsed is not None, "snippet must parse"
    return diff.compare(*parsed)


_HAS_TRY_STAR = sys.version_info >= (3, 11)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.skipif("except*" in SNIPPETS[n] and not _HAS_TRY_STAR,
                                             reason="except* needs Python 3.11"))
    for n in sorted(SNIPPETS)
])
def test_snippets_agree(name: str) -> None:
    assert _compare(textwrap.dedent(SNIPPETS[name])) == []


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_repo_files_agree(path: Path) -> None:
    parsed = diff.parse_both(path.read_text(encoding="utf-8", errors="replace"))
    if parsed is None:
        return  # a fixture CPython or LibCST cannot parse has no index to compare
    assert diff.compare(*parsed) == []


def test_the_comparison_sees_a_difference() -> None:
    """The differential check is not vacuous: a different source for one side is reported."""
    tree = ast.parse("try:\n    import a\nexcept ImportError:\n    a = None\n")
    module = cst.parse_module("try:\n    import a\nexcept ImportError:\n    def a(): pass\n")
    problems = diff.compare(tree, module)
    assert any(p.startswith("fallback a:") for p in problems)


def test_snippets_cover_every_branch() -> None:
    """The snippets exercise what the index records: fallbacks of every kind, flags, rebinds."""
    kinds: set[tuple[str, bool]] = set()
    flags: set[str] = set()
    rebinds: set[str] = set()
    gate_types: set[str] = set()
    for source in SNIPPETS.values():
        if "except*" in source and not _HAS_TRY_STAR:
            continue
        index = AstImportIndex(ast.parse(textwrap.dedent(source)))
        kinds.update((f.kind, f.real) for f in index.fallbacks.values())
        flags.update(index.flags)
        rebinds.update(index.rebinds)
        gate_types.update(type(g).__name__ for g in index.gates)
    assert {("class", True), ("function", True), ("assignment", True), ("assignment", False), ("import", True),
            ("earlier", True), ("earlier", False)} <= kinds
    assert {"HAS_FLASH", "HAS_TE", "HAS_APEX", "HAS_B"} <= flags
    assert {"attn", "attn2", "functional", "a", "b", "n", "g", "flash_attn_func", "RMSNorm"} <= rebinds
    assert gate_types == ({"Try", "TryStar", "If"} if _HAS_TRY_STAR else {"Try", "If"})


def test_queries_on_ast_nodes() -> None:
    source = textwrap.dedent("""
        import torch.nn.functional as F
        from bitsandbytes.optim.adam import Adam8bit
        try:
            from flash_attn import flash_attn_func
        except ImportError:
            def flash_attn_func(q, k, v):
                return q
        attn = flash_attn_func
        if is_xformers_available():
            import xformers.ops as xops
        else:
            xops = None
        y = F.relu(x)
        """)
    tree = ast.parse(source)
    index = AstImportIndex(tree)
    call = tree.body[-1].value  # type: ignore[attr-defined]
    assert index.resolve(call.func) == "torch.nn.functional.relu"
    assert index.resolve(ast.parse("Adam8bit", mode="eval").body) == "bitsandbytes.optim.Adam8bit"
    assert index.resolve(ast.parse("x.y", mode="eval").body) is None
    assert index.resolve_name("attn") == "flash_attn.flash_attn_func"
    assert index.import_targets("attn") == ("flash_attn.flash_attn_func",)
    assert index.alias_for("torch.nn.functional.gelu") == "F.gelu"
    assert index.gate_of("attn") is None
    gate = index.gate_of("flash_attn_func")
    assert isinstance(gate, ast.Try) and index.gate_names(gate) == ["flash_attn_func"]
    fb = index.fallback("flash_attn_func")
    assert fb is not None and (fb.kind, fb.real) == ("function", True)
    assert isinstance(fb.statement, ast.FunctionDef)
    assert fb.describe() == "def flash_attn_func in the except handler of its availability gate"
    fb = index.fallback("xops")
    assert fb is not None and (fb.kind, fb.real) == ("assignment", False)
    assert fb.describe() == "`xops = ...` in the else branch of its availability gate"
    # the LibCST index says the same
    old = ImportIndex(cst.parse_module(source))
    old_fb = old.fallback("flash_attn_func")
    assert old_fb is not None and old_fb.describe() == "def flash_attn_func in the except handler of its availability gate"
