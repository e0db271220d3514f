"""The fp8 family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.fp8`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import (
    UNKNOWN,
    Bound,
    bind,
    comments_of,
    is_literal,
    literal,
    reference,
    render_call,
    src,
)
from porter.codemods._shared.statements import StatementTracker
from porter.codemods.fp8 import (
    _CKPT,
    AUTOCASTS,
    LINEAR_EXTRA,
    LINEAR_PARAMS,
    LINEAR_REQUIRED,
    LNL_EXTRA,
    LNL_PARAMS,
    LNL_REQUIRED,
    MODEL_INITS,
    NAME,
    NORM_PARAMS,
    OTHER_MODULES,
    RECIPES,
    SHIM_CODE,
    SHIM_NAME,
    TE,
    TE_INIT_STD,
)
from porter.findings import Applicability, Edit
from porter.framework import PyContext, PyVisitor


def _te_name(qual: str | None) -> str | None:
    if not qual or not qual.startswith(TE + "."):
        return None
    return qual.rsplit(".", 1)[-1]


def _recipe_name(qual: str | None) -> str | None:
    if qual and qual.startswith("transformer_engine.common.recipe."):
        return qual.rsplit(".", 1)[-1]
    return None


class Fp8Visitor(PyVisitor, StatementTracker):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        PyVisitor.__init__(self, ctx)
        StatementTracker.__init__(self)
        self._called: set[int] = set()  # Call.func nodes (constructions are handled in visit_Call)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.track_statement(node)

    def visit_With(self, node: cst.With) -> None:
        self.track_with(node)

    # -- helpers ----------------------------------------------------------------------------
    def _flag(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.report(node, code, message, fix=Applicability.NONE)

    @staticmethod
    def _blockers(b: Bound, required: dict[str, tuple[object, ...]]) -> list[str]:
        out = []
        if b.star:
            out.append("*args/**kwargs hide arguments")
        if b.extra_positional:
            out.append("positional arguments past the sizes (their order changed between TE versions)")
        for name in b.unknown:
            if name.startswith("ub_"):
                continue
            out.append(f"unknown argument `{name}`")
        for name, allowed in required.items():
            if b.has(name) and not is_literal(b.value(name), *allowed):
                out.append(f"`{name}={src_value(b, name)}` (exact only for {allowed[0]!r})")
        return out

    # -- dispatch ---------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        if id(node) not in self._called:
            self._reference(node, self.qualname(node))

    def visit_Arg(self, node: cst.Arg) -> None:
        if isinstance(node.value, cst.Name) and id(node.value) not in self._called:
            self._reference(node.value, self.qualname(node.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Name):
            self._reference(node.value, self.qualname(node.value))

    def _reference(self, node: cst.BaseExpression, qual: str | None) -> None:
        """A TE module or autocast used as a value (alias, registry, isinstance, base class)."""
        name = _te_name(qual)
        if name in ("Linear", "LayerNorm", "RMSNorm", "LayerNormLinear"):
            code = "PRT604" if name != "LayerNormLinear" else "PRT603"
        elif name in AUTOCASTS:
            code = "PRT610"
        elif name in OTHER_MODULES:
            code = "PRT620"
        else:
            return
        self._flag(node, code, f"te.{name} is referenced as a value (an alias, a registry, isinstance or a base "
                   "class), not constructed here: porter cannot see its arguments; port it where it is "
                   "constructed and update isinstance checks and subclasses by hand")

    def visit_Call(self, node: cst.Call) -> None:
        self._called.add(id(node.func))
        qual = self.qualname(node.func)
        recipe = _recipe_name(qual)
        if recipe is not None:
            if recipe in RECIPES:
                self._flag(node, "PRT611", f"TE recipe {recipe}: {RECIPES[recipe]}; it only matters with FP8 "
                           "(see PRT610)")
            return
        name = _te_name(qual)
        if name is None:
            return
        if name == "Linear":
            self._linear(node)
        elif name in ("LayerNorm", "RMSNorm"):
            self._norm(node, name)
        elif name == "LayerNormLinear":
            self._layernorm_linear(node)
        elif name in AUTOCASTS:
            self._autocast(node, name)
        elif name in MODEL_INITS:
            self._flag(node, "PRT612", f"te.{name} allocates parameters in FP8; torch.nn modules keep "
                       "high-precision parameters: drop it and, for FP8 compute on MI300+/SM89+, use "
                       "torchao.float8.convert_to_float8_training")
        elif name in OTHER_MODULES:
            self._flag(node, "PRT620", f"te.{name}: {OTHER_MODULES[name]}; no torch.nn drop-in")

    # -- te.Linear --------------------------------------------------------------------------
    def _linear(self, node: cst.Call) -> None:
        b = bind(node, LINEAR_PARAMS, 2, LINEAR_EXTRA)
        blockers = self._blockers(b, LINEAR_REQUIRED)
        for name in b.unknown:
            if name.startswith("ub_") and not is_literal(_kw(node, name), False):
                blockers.append(f"`{name}` (userbuffers communication overlap)")
        if not (b.has("in_features") and b.has("out_features")):
            blockers.append("feature sizes not given")
        site = self.assign_sites.get(id(node))
        init_method = b.value("init_method")
        has_init = init_method is not None and not is_literal(init_method, None)
        if site is None and has_init:
            blockers.append("a custom init_method needs the call to be the whole right-hand side of an "
                            "assignment")
        if blockers:
            self._flag(node, "PRT604", "te.Linear not rewritten because " + "; ".join(blockers))
            return
        func, imports = reference(self.ctx, "torch.nn.Linear")
        bias = b.value("bias")
        kwargs = [("in_features", src(self.ctx, b.value("in_features"))),
                  ("out_features", src(self.ctx, b.value("out_features"))),
                  ("bias", src(self.ctx, bias) if bias is not None else "True"),
                  ("device", src(self.ctx, b.value("device")) if b.has("device") else '"cuda"')]
        if b.has("params_dtype") and not is_literal(b.value("params_dtype"), None):
            kwargs.append(("dtype", src(self.ctx, b.value("params_dtype"))))
        multiline, indent = self.multiline(node)
        replacement = render_call(func, kwargs, multiline=multiline, indent=indent,
                                  comments=comments_of(b, {"params_dtype": "dtype"}))
        edits: list[Edit] = []
        if site is not None:
            target = src(self.ctx, site.target)
            lines, more = self._linear_init(target, bias, init_method if has_init else None)
            imports = tuple(dict.fromkeys(imports + more))
            edits.append(self.insert_after(site.statement, lines))
            fix = Applicability.SAFE
            init_note = ("TE's init written out (weight ~ N(0, 0.023), zero bias)" if not has_init else
                         "the init_method applied to the weight and a zero bias, as TE does")
            message = (f"te.Linear → torch.nn.Linear: same math outside FP8 autocast; device kept "
                       f"({_device_note(b)}); {init_note}; {_CKPT}")
        else:
            fix = Applicability.UNSAFE
            message = ("te.Linear → torch.nn.Linear (unsafe: init differs): nn.Linear initialises weight and bias "
                       "kaiming-uniform instead of TE's N(0, 0.023) weight and zero bias, and no statement can "
                       "follow this call to restore it; exact when a checkpoint is loaded; device kept; " + _CKPT)
        self.report(node, "PRT600", message, replacement=replacement, fix=fix, add_imports=imports,
                    edits=tuple(edits), remove_imports=("transformer_engine",), fix_title="use torch.nn.Linear")

    def _linear_init(self, target: str, bias: cst.BaseExpression | None,
                     init_method: cst.BaseExpression | None) -> tuple[list[str], tuple[str, ...]]:
        imports: tuple[str, ...] = ()
        lines: list[str] = []
        if init_method is None:
            normal, imports = reference(self.ctx, "torch.nn.init.normal_")
            lines.append(f"{normal}({target}.weight, mean=0.0, std={TE_INIT_STD})")
        else:
            no_grad, imports = reference(self.ctx, "torch.no_grad")
            fn = src(self.ctx, init_method)
            if not isinstance(init_method, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                fn = f"({fn})"  # a lambda or other expression must be parenthesised to be called
            lines += [f"with {no_grad}():", f"    {fn}({target}.weight)"]
        if bias is None or not is_literal(bias, False):
            zeros, more = reference(self.ctx, "torch.nn.init.zeros_")
            imports = tuple(dict.fromkeys(imports + more))
            if bias is None or is_literal(bias, True):
                lines.append(f"{zeros}({target}.bias)")
            else:
                lines += [f"if {target}.bias is not None:", f"    {zeros}({target}.bias)"]
        return lines, imports

    # -- te.LayerNormLinear -----------------------------------------------------------------
    def _layernorm_linear(self, node: cst.Call) -> None:
        b = bind(node, LNL_PARAMS, 3, LNL_EXTRA)
        blockers = self._blockers(b, LNL_REQUIRED)
        for name in b.unknown:
            if name.startswith("ub_") and not is_literal(_kw(node, name), False):
                blockers.append(f"`{name}` (userbuffers communication overlap)")
        if not (b.has("in_features") and b.has("out_features")):
            blockers.append("feature sizes not given")
        norm = b.value("normalization")
        if norm is not None and literal(norm) not in ("LayerNorm", "RMSNorm"):
            blockers.append("normalization is not a literal \"LayerNorm\"/\"RMSNorm\"")
        if b.has("zero_centered_gamma") and not is_literal(b.value("zero_centered_gamma"), False):
            blockers = [x for x in blockers if not x.startswith("`zero_centered_gamma")]
            blockers.append("zero_centered_gamma stores γ-1 (checkpoint conversion needed)")
        statement = self._toplevel_insert_point()
        if statement is None:
            blockers.append("no module-level import block to place the shim class after")
        if blockers:
            self._flag(node, "PRT603", "te.LayerNormLinear registers layer_norm_weight, layer_norm_bias, weight "
                       "and bias; a torch.nn.Sequential would rename them and break checkpoints; not "
                       "rewritten because " + "; ".join(blockers))
            return
        kwargs = [("in_features", src(self.ctx, b.value("in_features"))),
                  ("out_features", src(self.ctx, b.value("out_features"))),
                  ("eps", src(self.ctx, b.value("eps")) if b.has("eps") else "1e-5"),
                  ("bias", src(self.ctx, b.value("bias")) if b.has("bias") else "True"),
                  ("normalization", src(self.ctx, norm) if norm is not None else '"LayerNorm"'),
                  ("return_layernorm_output", src(self.ctx, b.value("return_layernorm_output"))
                   if b.has("return_layernorm_output") else "False"),
                  ("device", src(self.ctx, b.value("device")) if b.has("device") else '"cuda"')]
        if b.has("init_method") and not is_literal(b.value("init_method"), None):
            kwargs.append(("init_method", src(self.ctx, b.value("init_method"))))
        if b.has("params_dtype") and not is_literal(b.value("params_dtype"), None):
            kwargs.append(("dtype", src(self.ctx, b.value("params_dtype"))))
        multiline, indent = self.multiline(node)
        edits: list[Edit] = []
        if f"class {SHIM_NAME}(" not in self.ctx.text:
            edits.append(Edit(statement, statement, "\n\n" + SHIM_CODE.strip("\n") + "\n"))
        imports = ("import torch",) if self.ctx.imports.resolve_name("torch") in (None, "torch") else ()
        self.report(node, "PRT603", f"te.LayerNormLinear → {SHIM_NAME}, a torch module defined in this file that "
                    "keeps TE's parameter names (layer_norm_weight, layer_norm_bias, weight, bias), init (norm "
                    "weight 1, bias 0, weight ~ N(0, 0.023) or init_method) and return_layernorm_output; same "
                    f"math outside FP8 autocast; device kept ({_device_note(b)}); {_CKPT}",
                    replacement=render_call(SHIM_NAME, kwargs, multiline=multiline, indent=indent,
                                            comments=comments_of(b, {"params_dtype": "dtype"})),
                    fix=Applicability.SAFE, edits=tuple(edits), add_imports=imports,
                    remove_imports=("transformer_engine",), fix_title=f"use {SHIM_NAME}")

    def _toplevel_insert_point(self) -> int | None:
        """Offset just after the module's leading import block (where the shim class goes)."""
        body = self.ctx.module.body
        last: cst.CSTNode | None = None
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and stmt.body and (
                all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
                or (i == 0 and isinstance(stmt.body[0], cst.Expr))
            ):
                last = stmt
                continue
            break
        if last is None:
            return None
        start, end = self.span(last)
        line, _ = self.ctx.position(max(end - 1, start))  # the line holding the statement's last character
        starts = self.ctx.line_starts
        return starts[line] if line < len(starts) else None

    # -- te.LayerNorm / te.RMSNorm ----------------------------------------------------------
    def _norm(self, node: cst.Call, name: str) -> None:
        b = bind(node, NORM_PARAMS, 2)
        required: dict[str, tuple[object, ...]] = {"sequence_parallel": (None, False),
                                                   "zero_centered_gamma": (False,)}
        blockers = self._blockers(b, required)
        shape = b.value("normalized_shape") or b.value("hidden_size")
        if shape is None:
            blockers.append("normalized_shape not given")
        if b.has("normalized_shape") and b.has("hidden_size"):
            blockers.append("both normalized_shape and hidden_size given")
        if b.has("params_dtype") and b.has("dtype"):
            blockers.append("both params_dtype and dtype given")
        if b.has("zero_centered_gamma") and not is_literal(b.value("zero_centered_gamma"), False):
            blockers = [x for x in blockers if not x.startswith("`zero_centered_gamma")]
            blockers.append("zero_centered_gamma: TE computes x̂·(1+γ)+β and stores γ-1 (zero-initialised); "
                            "torch.nn norms would read those checkpoints as γ (convert with w+1, or keep a shim)")
        if blockers:
            self._flag(node, "PRT604", f"te.{name} not rewritten because " + "; ".join(blockers))
            return
        func, imports = reference(self.ctx, f"torch.nn.{name}")
        eps = b.value("eps")
        dtype = b.value("params_dtype") if b.has("params_dtype") else b.value("dtype")
        kwargs = [("normalized_shape", src(self.ctx, shape)),
                  ("eps", src(self.ctx, eps) if eps is not None else "1e-5"),
                  ("device", src(self.ctx, b.value("device")) if b.has("device") else '"cuda"')]
        if dtype is not None and not is_literal(dtype, None):
            kwargs.append(("dtype", src(self.ctx, dtype)))
        multiline, indent = self.multiline(node)
        eps_note = (" (torch.nn.RMSNorm's own default would be finfo(float32).eps)" if name == "RMSNorm" else "")
        code = "PRT601" if name == "LayerNorm" else "PRT602"
        self.report(node, code, f"te.{name} → torch.nn.{name}: same math, init and parameter names; eps "
                    f"written out{eps_note}; device kept ({_device_note(b)})",
                    replacement=render_call(func, kwargs, multiline=multiline, indent=indent,
                                            comments=comments_of(b, {"hidden_size": "normalized_shape",
                                                                     "params_dtype": "dtype"})),
                    fix=Applicability.SAFE, add_imports=imports, remove_imports=("transformer_engine",),
                    fix_title=f"use torch.nn.{name}")

    # -- autocast ---------------------------------------------------------------------------
    def _autocast(self, node: cst.Call, name: str) -> None:
        params = AUTOCASTS[name]
        b = bind(node, params, 1)
        site = self.with_sites.get(id(node))
        enabled = b.value("enabled")
        if b.star or b.extra_positional or b.unknown or site is None:
            why = ("it is not an item of a `with` statement" if site is None else
                   "unknown or hidden arguments")
            self._flag(node, "PRT610", f"te.{name}: FP8 execution has no portable drop-in; not rewritten because "
                       f"{why}; for FP8 on MI300+/SM89+ use torchao.float8.convert_to_float8_training(model, "
                       "config=Float8LinearConfig.from_recipe_name(\"tensorwise\")), else run in BF16")
            return
        null, imports = reference(self.ctx, "contextlib.nullcontext")
        if enabled is not None and is_literal(enabled, False):
            fix = Applicability.SAFE
            message = f"te.{name}(enabled=False) does nothing: replaced by contextlib.nullcontext() (exact)"
        else:
            fix = Applicability.UNSAFE
            recipe = b.value(params[2])
            recipe_note = (f" (recipe {src(self.ctx, recipe)})" if recipe is not None else
                           " (recipe=None: TE picks MXFP8, current or delayed scaling by GPU)")
            cond = ("" if enabled is None or is_literal(enabled, True) else
                    f" when `{src(self.ctx, enabled)}` is true")
            message = (f"te.{name}{recipe_note}: FP8 has no portable drop-in; the unsafe fix drops the FP8 context"
                       f"{cond}, so modules inside run in their parameter dtype (e.g. BF16: more precise than "
                       "FP8 e4m3/e5m2, slower, more memory); to keep FP8 on MI300+/SM89+ call "
                       "torchao.float8.convert_to_float8_training(model, config=Float8LinearConfig."
                       "from_recipe_name(\"tensorwise\")) once after building the model (dynamic per-tensor "
                       "scaling, not TE's delayed amax history)")
        self.report(node, "PRT610", message, replacement=f"{null}()", fix=fix, add_imports=imports,
                    remove_imports=("transformer_engine",), fix_title="drop the FP8 context")


def _device_note(b: Bound) -> str:
    return "given" if b.has("device") else 'TE default "cuda"'


def _kw(node: cst.Call, name: str) -> cst.BaseExpression | None:
    for a in node.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    return None


def src_value(b: Bound, name: str) -> str:
    value = b.value(name)
    if value is None:
        return ""
    v = literal(value)
    return "…" if v is UNKNOWN else repr(v)  # a computed value is elided, never the sentinel's repr


