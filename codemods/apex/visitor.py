"""The apex family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.apex`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import libcst as cst
from libcst._nodes.internal import CodegenState

from porter.codemods._apex_args import (
    MISSING,
    UNKNOWN,
    Bound,
    as_keyword,
    as_positional,
    atom,
    bind,
    kwarg,
    literal,
    pure,
    rebuild,
)
from porter.codemods._class_strings import is_dotted_path, prefix_of, yaml_paths
from porter.codemods.apex import _AUTOCAST_NOTE, _STEP_NOTE, NAME, NONE, SAFE, UNSAFE
from porter.findings import Applicability, Finding
from porter.framework import FileContext, PyContext, PyVisitor
from porter.pycst import ImportDepthMixin
from porter.pyimports import dotted

# -- API table --------------------------------------------------------------------------------

_API: dict[str, str] = {}


def _names(key: str, *quals: str) -> None:
    for q in quals:
        _API[q] = key


_names("FusedAdam", "apex.optimizers.FusedAdam", "apex.optimizers.fused_adam.FusedAdam")
_names("FusedSGD", "apex.optimizers.FusedSGD", "apex.optimizers.fused_sgd.FusedSGD")
_names("FusedAdagrad", "apex.optimizers.FusedAdagrad", "apex.optimizers.fused_adagrad.FusedAdagrad")
_names("FusedLAMB", "apex.optimizers.FusedLAMB", "apex.optimizers.fused_lamb.FusedLAMB",
       "apex.optimizers.FusedMixedPrecisionLamb",
       "apex.optimizers.fused_mixed_precision_lamb.FusedMixedPrecisionLamb")
_names("FusedNovoGrad", "apex.optimizers.FusedNovoGrad", "apex.optimizers.fused_novograd.FusedNovoGrad")
for _n in ("FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm",
           "fused_layer_norm_affine", "fused_layer_norm", "fused_rms_norm_affine", "fused_rms_norm",
           "mixed_dtype_fused_layer_norm_affine", "mixed_dtype_fused_rms_norm_affine"):
    _names(_n, f"apex.normalization.{_n}", f"apex.normalization.fused_layer_norm.{_n}")
for _n in ("initialize", "scale_loss", "master_params", "state_dict", "load_state_dict"):
    _names(f"amp.{_n}", f"apex.amp.{_n}")
_names("amp.initialize", "apex.amp.frontend.initialize")
_names("amp.scale_loss", "apex.amp.handle.scale_loss")
_names("amp.master_params", "apex.amp._amp_state.master_params")
_names("amp.state_dict", "apex.amp.frontend.state_dict")
_names("amp.load_state_dict", "apex.amp.frontend.load_state_dict")
_names("DDP", "apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel")
_names("SyncBatchNorm", "apex.parallel.SyncBatchNorm",
       "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm", "apex.parallel.sync_batchnorm.SyncBatchNorm")
_names("convert_syncbn_model", "apex.parallel.convert_syncbn_model")
_names("clip_grad_norm_", "apex.contrib.clip_grad.clip_grad_norm_", "apex.contrib.clip_grad.clip_grad.clip_grad_norm_")
_names("xentropy", "apex.contrib.xentropy.SoftmaxCrossEntropyLoss",
       "apex.contrib.xentropy.softmax_xentropy.SoftmaxCrossEntropyLoss")
_names("FastLayerNorm", "apex.contrib.layer_norm.FastLayerNorm", "apex.contrib.layer_norm.layer_norm.FastLayerNorm")
_names("GroupNorm", "apex.contrib.group_norm.GroupNorm", "apex.contrib.group_norm.group_norm.GroupNorm")

# What a hand port of an escaping reference should use (PRT398).
_EQUIVALENT = {
    "FusedAdam": "torch.optim.AdamW (adam_w_mode=True) or torch.optim.Adam; write weight_decay "
                 "(apex 0.0, AdamW 0.01) and bind positional arguments by apex's order",
    "FusedSGD": "torch.optim.SGD (always pass lr)",
    "FusedAdagrad": "torch.optim.Adagrad with keyword arguments (positional order differs)",
    "FusedLAMB": "no torch equivalent (keep ROCm/apex)",
    "FusedNovoGrad": "no torch equivalent (keep ROCm/apex)",
    "FusedLayerNorm": "torch.nn.LayerNorm (same defaults; its 4th positional slot is `bias`, "
                      "not `memory_efficient`)",
    "FusedRMSNorm": "torch.nn.RMSNorm with eps=1e-5 written out (torch's default is ~1.19e-7)",
    "MixedFusedLayerNorm": "torch.nn.LayerNorm plus a cast of the output to the weight dtype",
    "MixedFusedRMSNorm": "torch.nn.RMSNorm(eps=1e-5) plus a cast of the output to the weight dtype",
    "DDP": "torch.nn.parallel.DistributedDataParallel(module, forward_sync_buffers=False)",
    "SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "convert_syncbn_model": "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "FastLayerNorm": "torch.nn.LayerNorm",
    "GroupNorm": "torch.nn.GroupNorm",
}

_NO_EQUIVALENT = {
    "apex.contrib.optimizers": "DistributedFusedAdam/DistributedFusedLAMB shard optimizer state (ZeRO); "
                               "FSDP2 + torch.optim.AdamW is a redesign, not a rewrite",
    "apex.contrib.sparsity": "ASP 2:4 sparsity has no portable equivalent",
    "apex.contrib.transducer": "no portable transducer kernels",
    "apex.contrib.focal_loss": "write focal loss in torch (torchvision.ops.sigmoid_focal_loss is close)",
    "apex.contrib.bottleneck": "fused ResNet bottleneck: use the torch modules",
    "apex.contrib.peer_memory": "CUDA peer-memory halo exchange has no portable equivalent",
    "apex.contrib.nccl_allocator": "NCCL allocator: use RCCL defaults",
    "apex.contrib.cudnn_gbn": "cuDNN group batch norm: use torch.nn.SyncBatchNorm with a process group",
    "apex.contrib.groupbn": "group batch norm: use torch.nn.SyncBatchNorm with a process group",
    "apex.contrib.conv_bias_relu": "use torch conv + bias + relu (torch.compile fuses them)",
    "apex.contrib.index_mul_2d": "use torch indexing and multiplication",
    "apex.contrib.openfold_triton": "OpenFold Triton kernels: Triton runs on ROCm, port the package",
    "apex.contrib.multihead_attn": "use torch.nn.functional.scaled_dot_product_attention",
    "apex.contrib.fmha": "use torch.nn.functional.scaled_dot_product_attention",
    "apex.fused_dense": "use torch.nn.Linear (+ activation); torch.compile fuses",
    "apex.mlp": "use a torch.nn.Sequential of Linear layers",
    "apex.fp16_utils": "FP16_Optimizer/network_to_half: use torch.autocast + torch.amp.GradScaler, or bf16",
    "apex.RNN": "removed upstream in 25.07; use torch.nn.LSTM/GRU",
    "apex.reparameterization": "use torch.nn.utils.parametrizations.weight_norm",
    "apex.transformer": "Megatron-style tensor parallelism: use torch.distributed.tensor",
    "apex.parallel.LARC": "LARC wrapper: port the trust-ratio logic by hand",
    "apex.multi_tensor_apply": "multi_tensor_applier launches apex's CUDA kernels (amp_C); use torch._foreach_* "
                               "ops or torch.nn.utils.get_total_norm",
}

_DDP_METHODS = re.compile(r"\.(?:disable_allreduce|enable_allreduce|allreduce_params|allreduce_buffers|needs_refresh)\b")
_TORCH_MODULES = frozenset({"torch", "torch.optim", "torch.nn", "torch.nn.functional", "torch.nn.parallel",
                            "torch.nn.utils"})
_AUTOCAST = re.compile(r"\bautocast\b|is_autocast_enabled|get_autocast_dtype|\bcustom_fwd\b")
_LOW_PRECISION = re.compile(r"\.half\(\)|\.bfloat16\(\)|torch\.(?:float16|half|bfloat16)\b|opt_level\s*=\s*['\"]O[23]['\"]")


@dataclass(frozen=True)
class _Rewrite:
    code: str
    replacement: str
    fix: Applicability
    message: str
    title: str


class ApexVisitor(ImportDepthMixin, PyVisitor):
    family = NAME

    def __init__(self, ctx: PyContext) -> None:
        super().__init__(ctx)
        self._handled: set[int] = set()
        self._skip: set[int] = set()
        self._indents: list[str] = []
        self._local_defs = {
            s.name.value for s in ctx.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))
        }
        m = _LOW_PRECISION.search(ctx.text)
        self._low_precision = ctx.position(m.start())[0] if m else 0
        m = _AUTOCAST.search(ctx.text)
        self._autocast = ctx.position(m.start())[0] if m else 0

    def _norm_fix(self, message: str) -> tuple[Applicability, str]:
        """SAFE, unless this file uses autocast, where the output dtype difference is observable."""
        if self._autocast:
            return UNSAFE, (f"{message}; UNSAFE here because this file uses autocast (line {self._autocast}), "
                            "where the output dtype changes")
        return SAFE, message

    # -- name resolution ------------------------------------------------------------------
    def _resolve(self, expr: cst.BaseExpression) -> tuple[str | None, str | None]:
        """(qualified name, the import target to drop once unused).

        A gated import goes too once nothing reads it: the engine then folds its ``try`` into
        the literal flags of its body (``has_apex = True``), the value they have with the
        package, whose uses are now rewritten. A name with a fallback binding is never
        rewritten (the engine's fallback guard), so its gate stays.
        """
        text = dotted(expr)
        if text is None:
            return None, None
        head = text.split(".")[0]
        if head in self._local_defs:
            return None, None
        found = self.ctx.imports.bindings.get(head)
        if not found:
            return None, None
        qual = self.qualname(expr)
        return qual, found[0].target

    def _torch(self, target: str) -> tuple[str, tuple[str, ...]]:
        """How to spell ``target`` here, and the import to add if none names it."""
        alias = self.ctx.imports.alias_for(target)
        # alias_for() extends only `import` bindings; `from torch import optim` binds a module too
        for b in self.ctx.imports.statements:
            if (b.toplevel and not b.gated and b.target in _TORCH_MODULES and target.startswith(b.target + ".")
                    and self.ctx.imports.bindings[b.local][0] is b):
                candidate = b.local + target[len(b.target):]
                if alias is None or len(candidate) < len(alias):
                    alias = candidate
        if alias is not None:
            return alias, ()
        return target, ("import torch",)

    # -- traversal --------------------------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.append(node.indent if node.indent is not None else self.ctx.module.default_indent)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self._indents.pop()

    def _render(self, node: cst.CSTNode) -> str:
        """Code for a new node placed at the current block depth (continuation lines indented)."""
        module = self.ctx.module
        state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                                 indent_tokens=list(self._indents))
        node._codegen(state)
        return "".join(state.tokens)

    def _src(self, node: cst.CSTNode) -> str:
        """The source text of an original node, exactly as written."""
        start, end = self.span(node)
        return self.ctx.text[start:end]

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._skip.add(id(node.name))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._skip.add(id(node.target))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        # `X is None` / `X is not None`: an availability check, not a use
        for comp in node.comparisons:
            if isinstance(comp.operator, (cst.Is, cst.IsNot)):
                if isinstance(comp.comparator, cst.Name) and comp.comparator.value == "None":
                    self._skip.add(id(node.left))
                elif isinstance(node.left, cst.Name) and node.left.value == "None":
                    self._skip.add(id(comp.comparator))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._skip.add(id(node.name))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.add(id(node.name))

    def _mark(self, expr: cst.BaseExpression) -> None:
        while True:
            self._handled.add(id(expr))
            if isinstance(expr, cst.Attribute):
                self._handled.add(id(expr.attr))
                expr = expr.value
            else:
                return

    def visit_Call(self, node: cst.Call) -> None:
        self._name_dispatch(node)
        func = node.func
        # SoftmaxCrossEntropyLoss.apply(...)
        if isinstance(func, cst.Attribute) and func.attr.value == "apply":
            qual, via = self._resolve(func.value)
            if qual is not None and _API.get(qual) == "xentropy":
                self._mark(func)
                self._dispatch("xentropy", node, qual, via or "")
                return
        qual, via = self._resolve(func)
        if qual is None:
            return
        key = _API.get(qual)
        if key is not None:
            self._mark(func)
            self._dispatch(key, node, qual, via or "")
            return
        for prefix, why in _NO_EQUIVALENT.items():
            if qual == prefix or qual.startswith(prefix + "."):
                self._mark(func)
                self.report(node, "PRT390", f"{qual} has no portable 1:1 replacement: {why}", fix=NONE,
                            data={"qualname": qual})
                return
        if qual.startswith("apex.amp."):
            self._mark(func)
            advice = _AMP_HELPERS.get(qual.rsplit(".", 1)[1],
                                      "use torch.autocast regions and torch.amp.custom_fwd(cast_inputs=...)")
            self.report(node, "PRT334", f"{qual} (apex amp, removed upstream in 25.07) has no torch counterpart: "
                        f"{advice}", fix=NONE, data={"qualname": qual})

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        self._reference(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        """`"apex.optimizers.FusedAdam"` in a registry, a config dict or an instantiate target."""
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes
            return
        if isinstance(value, str) and is_dotted_path(value, "apex"):
            advice = class_by_name(value)
            if advice is not None:
                self.report(node, "PRT397", f"apex class named by a string ({value!r}): imported at run time, so "
                            f"it fails where apex is missing; port the name and its arguments by hand: {advice}",
                            fix=NONE, data={"qualname": value})

    def _name_dispatch(self, node: cst.Call) -> None:
        """`name.startswith("apex.")`: code that picks behaviour by an apex class name."""
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "startswith" and node.args:
            first = node.args[0].value
            if isinstance(first, cst.SimpleString):
                try:
                    value = first.evaluated_value
                except Exception:  # noqa: BLE001
                    return
                if isinstance(value, str) and prefix_of(value, "apex"):
                    self.report(node, "PRT397", f"dispatch on an apex class name (`{self._src(node)}`): the branch "
                                "serves apex classes named by strings elsewhere (a registry or config); port by hand "
                                "those names and this branch together", fix=NONE)

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def _reference(self, node: cst.Name | cst.Attribute) -> None:
        if self.in_import or id(node) in self._handled or id(node) in self._skip:
            return
        qual, _ = self._resolve(node)
        key = _API.get(qual or "")
        if key is None and qual:
            self._other_reference(node, qual)
            return
        if key is None:
            return
        self._mark(node)
        if key.startswith("amp."):
            what = "a GradScaler (see PRT330/PRT331)"
        elif key == "xentropy":
            what = "torch.nn.functional.cross_entropy(reduction='none', ignore_index=<padding_idx, apex default 0>)"
        else:
            what = _EQUIVALENT.get(key, "a torch equivalent")
        self.report(node, "PRT398", f"{qual} is used without a direct call, so porter cannot bind its "
                    f"arguments; replace it by hand with {what}", fix=NONE, data={"qualname": qual})

    def _other_reference(self, node: cst.Name | cst.Attribute, qual: str) -> None:
        """Non-call uses of apex amp helpers (decorators) and of APIs without an equivalent."""
        if qual.rsplit(".", 1)[-1].startswith("__"):
            return  # `amp.__dict__`, `apex.__version__`: introspection, not a use
        if qual.startswith("apex.amp."):
            self._mark(node)
            name = qual.rsplit(".", 1)[1]
            advice = _AMP_HELPERS.get(name, "use torch.autocast regions and torch.amp.custom_fwd(cast_inputs=...)")
            self.report(node, "PRT334", f"{qual} (apex amp, removed upstream in 25.07) has no torch counterpart: "
                        f"{advice}", fix=NONE, data={"qualname": qual})
            return
        for prefix, why in _NO_EQUIVALENT.items():
            if qual.startswith(prefix + "."):
                self._mark(node)
                self.report(node, "PRT390", f"{qual} has no portable 1:1 replacement: {why}", fix=NONE,
                            data={"qualname": qual})
                return

    # -- dispatch ---------------------------------------------------------------------------
    def _dispatch(self, key: str, node: cst.Call, qual: str, via: str) -> None:
        handler: Callable[[cst.Call, str], _Rewrite | str] | None = getattr(self, f"_rw_{_ident(key)}", None)
        if handler is None:
            return
        result = handler(node, qual)
        if isinstance(result, str):
            code = _FLAG_CODE[key]
            self.report(node, code, result, fix=NONE, data={"qualname": qual})
            return
        self.report(node, result.code, result.message, replacement=result.replacement, fix=result.fix,
                    fix_title=result.title, remove_imports=(via,) if via else (), add_imports=self._adds,
                    data={"qualname": qual})

    _adds: tuple[str, ...] = ()

    def _callee(self, target: str) -> str:
        name, adds = self._torch(target)
        self._adds = tuple(dict.fromkeys(self._adds + adds))
        return name

    def _begin(self) -> None:
        self._adds = ()

    # -- shared checks ----------------------------------------------------------------------
    def _bind(self, node: cst.Call, qual: str, params: tuple[str, ...], **kw: tuple[str, ...]) -> Bound | str:
        b = bind(node, params, **kw)
        if b.error:
            return f"{qual} not rewritten: {b.error}"
        return b

    def _lit(self, b: Bound, name: str) -> object:
        return literal(b.value(name), self.ctx.module)

    def _require(self, b: Bound, qual: str, name: str, ok: object, why: str) -> str | None:
        """A reason to flag unless argument ``name`` is absent or literally ``ok``."""
        val = self._lit(b, name)
        if val is MISSING or (val is not UNKNOWN and val == ok and type(val) is type(ok)):
            return None
        shown = self.code(b.value(name)) if b.value(name) is not None else "?"
        state = " (not a literal)" if val is UNKNOWN else ""
        return f"{qual} not rewritten: `{name}={shown}`{state}; {why}"

    def _drop(self, b: Bound, qual: str, names: tuple[str, ...]) -> str | None:
        for name in names:
            v = b.value(name)
            if v is not None and not pure(v):
                return (f"{qual} not rewritten: `{name}` has no torch counterpart and dropping it would "
                        f"drop the evaluation of `{self.code(v)}`")
        return None

    def _args(self, b: Bound, keep: dict[str, str], positional: tuple[str, ...] = ()) -> list[cst.Arg]:
        """Kept arguments in source order, renamed by ``keep`` (apex name -> torch keyword)."""
        out: list[cst.Arg] = []
        for name in b.order:
            if name not in keep:
                continue
            arg = b.args[name]
            if name in positional and all(
                b.args[n].keyword is None for n in b.order[: b.order.index(name) + 1]
            ):
                out.append(as_positional(arg))
            else:
                out.append(as_keyword(arg, keep[name]))
        return out

    # -- optimizers ---------------------------------------------------------------------------
    _ADAM = ("params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
             "set_grad_none", "capturable", "master_weights")

    def _fused_opt(self) -> bool:
        return bool(self.ctx.settings.option(NAME, "fused", True))

    def _rw_FusedAdam(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, self._ADAM)
        if isinstance(b, str):
            return b
        for reason in (
            self._require(b, qual, "bias_correction", True,
                          "torch Adam/AdamW always apply bias correction"),
            self._require(b, qual, "master_weights", False,
                          "torch has no fp32 master-weight copy for fp16 parameters"),
            self._require(b, qual, "amsgrad", False, "apex raises for amsgrad=True"),
            self._drop(b, qual, ("set_grad_none",)),
        ):
            if reason:
                return reason
        if not b.has("params"):
            return f"{qual} not rewritten: no `params` argument"
        mode = self._lit(b, "adam_w_mode")
        keep = {n: n for n in ("params", "lr", "betas", "eps", "weight_decay", "capturable")}
        if mode is MISSING or (mode is not UNKNOWN and bool(mode)):
            target, cls = "torch.optim.AdamW", "AdamW"
        elif mode is UNKNOWN:
            target, cls = "torch.optim.Adam", "Adam(decoupled_weight_decay=adam_w_mode)"
            keep["adam_w_mode"] = "decoupled_weight_decay"
        else:
            target, cls = "torch.optim.Adam", "Adam (coupled L2)"
        cap = self._lit(b, "capturable")
        if cap is not UNKNOWN and not cap:
            keep.pop("capturable")
        args = self._args(b, keep, positional=("params",))
        if not b.has("weight_decay"):
            args.append(kwarg("weight_decay", "0.0"))
        if self._fused_opt():
            args.append(kwarg("fused", "True"))
        new = rebuild(node, self._callee(target), args)
        assume = bool(self.ctx.settings.option(NAME, "assume-fp32-params", False))
        if assume and not self._low_precision:
            fix = SAFE
            why = "exact: parameters are fp32 ([tool.porter.apex] assume-fp32-params)"
        else:
            fix = UNSAFE
            why = ("exact only for fp32 parameters: for fp16/bf16 parameters apex keeps exp_avg/exp_avg_sq "
                   "in fp32, torch in the parameter dtype (moments rounded to 8/11 significant bits every "
                   "step, so training drifts)")
            if self._low_precision:
                why += f"; this file mentions half/bfloat16 (line {self._low_precision})"
            else:
                why += "; set [tool.porter.apex] assume-fp32-params = true if they are fp32"
        return _Rewrite("PRT300", self._render(new), fix,
                        f"apex FusedAdam → torch.optim.{cls} with weight_decay explicit: {why}. {_STEP_NOTE}"
                        f"{_grad_none_note(b)}",
                        f"use torch.optim.{cls.split('(')[0].split(' ')[0]}")

    _SGD = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "wd_after_momentum",
            "materialize_master_grads", "set_grad_none")

    def _rw_FusedSGD(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, self._SGD)
        if isinstance(b, str):
            return b
        if not b.has("lr"):
            return f"{qual} not rewritten: `lr` is missing (apex requires it; torch SGD would silently use 1e-3)"
        for reason in (
            self._require(b, qual, "wd_after_momentum", False,
                          "torch SGD applies weight decay before momentum only"),
            self._drop(b, qual, ("materialize_master_grads", "set_grad_none")),
        ):
            if reason:
                return reason
        keep = {n: n for n in ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov")}
        args = self._args(b, keep, positional=("params",))
        if self._fused_opt():
            args.append(kwarg("fused", "True"))
        new = rebuild(node, self._callee("torch.optim.SGD"), args)
        return _Rewrite("PRT301", self._render(new), SAFE,
                        "apex FusedSGD → torch.optim.SGD: the same update (decay before momentum, buffer "
                        "initialised to the first gradient, same Nesterov form)" + _grad_none_note(b),
                        "use torch.optim.SGD")

    def _rw_FusedAdagrad(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode"))
        if isinstance(b, str):
            return b
        for reason in (
            self._require(b, qual, "adagrad_w_mode", False,
                          "torch Adagrad has no decoupled weight decay"),
            self._drop(b, qual, ("set_grad_none",)),
        ):
            if reason:
                return reason
        args = self._args(b, {n: n for n in ("params", "lr", "eps", "weight_decay")}, positional=("params",))
        if self._fused_opt():
            args.append(kwarg("fused", "True"))
        new = rebuild(node, self._callee("torch.optim.Adagrad"), args)
        return _Rewrite("PRT302", self._render(new), SAFE,
                        "apex FusedAdagrad → torch.optim.Adagrad (keywords: torch's positional order differs; "
                        "lr_decay=0 and initial_accumulator_value=0 match apex)" + _grad_none_note(b),
                        "use torch.optim.Adagrad")

    def _rw_FusedLAMB(self, node: cst.Call, qual: str) -> str:
        return (f"{qual}: torch 2.13 has no LAMB optimizer; keep apex built from ROCm/apex or port LAMB by "
                "hand (apex defaults lr=1e-3, eps=1e-6, weight_decay=0.01, max_grad_norm=1.0)")

    def _rw_FusedNovoGrad(self, node: cst.Call, qual: str) -> str:
        return f"{qual}: torch 2.13 has no NovoGrad optimizer; keep apex built from ROCm/apex or port it by hand"

    # -- norms --------------------------------------------------------------------------------
    def _norm_module(self, node: cst.Call, qual: str, target: str, code: str, *, mixed: bool,
                     write_eps: bool) -> _Rewrite | str:
        self._begin()
        if mixed:
            b = self._bind(node, qual, ("normalized_shape", "eps"),
                           kwonly=("memory_efficient",), extra_kw=("elementwise_affine",))
        else:
            b = self._bind(node, qual, ("normalized_shape", "eps", "elementwise_affine", "memory_efficient"))
        if isinstance(b, str):
            return b
        if not b.has("normalized_shape"):
            return f"{qual} not rewritten: no `normalized_shape` argument"
        if mixed:
            reason = self._require(b, qual, "elementwise_affine", True, "apex raises for elementwise_affine=False")
            if reason:
                return reason
        reason = self._drop(b, qual, ("memory_efficient",) + (("elementwise_affine",) if mixed else ()))
        if reason:
            return reason
        keep = {"normalized_shape": "normalized_shape", "eps": "eps"}
        if not mixed:
            keep["elementwise_affine"] = "elementwise_affine"
        args = self._args(b, keep, positional=("normalized_shape",))
        if write_eps and not b.has("eps"):
            args.append(kwarg("eps", "1e-5"))
        new = rebuild(node, self._callee(target), args)
        cls = target.rsplit(".", 1)[1]
        if mixed:
            return _Rewrite(code, self._render(new), UNSAFE,
                            f"apex {qual.rsplit('.', 1)[1]} → torch.nn.{cls}: same values, but apex returns the "
                            "parameter dtype and torch the input dtype (e.g. bf16 input with fp32 weights now "
                            "gives bf16); cast the output to the weight dtype where that matters",
                            f"use torch.nn.{cls}")
        extra = " with eps=1e-5 written out (torch's default is finfo(float32).eps)" if write_eps else ""
        fix, msg = self._norm_fix(f"apex {qual.rsplit('.', 1)[1]} → torch.nn.{cls}{extra}; note: {_AUTOCAST_NOTE}")
        return _Rewrite(code, self._render(new), fix, msg, f"use torch.nn.{cls}")

    def _rw_FusedLayerNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.LayerNorm", "PRT310", mixed=False, write_eps=False)

    def _rw_FusedRMSNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.RMSNorm", "PRT311", mixed=False, write_eps=True)

    def _rw_MixedFusedLayerNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.LayerNorm", "PRT312", mixed=True, write_eps=False)

    def _rw_MixedFusedRMSNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._norm_module(node, qual, "torch.nn.RMSNorm", "PRT312", mixed=True, write_eps=True)

    def _functional(self, node: cst.Call, qual: str, params: tuple[str, ...], target: str, *,
                    mixed: bool) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, params + ("eps", "memory_efficient"))
        if isinstance(b, str):
            return b
        missing = [p for p in params if not b.has(p)]
        if missing:
            return f"{qual} not rewritten: `{missing[0]}` is missing"
        reason = self._drop(b, qual, ("memory_efficient",))
        if reason:
            return reason
        keep = {p: p for p in params if p != "input"}
        keep["eps"] = "eps"
        keep["input"] = "input"
        args = self._args(b, keep, positional=("input",))
        if not b.has("eps"):
            args.append(kwarg("eps", "1e-6"))
        new = self._render(rebuild(node, self._callee(target), args))
        fn = qual.rsplit(".", 1)[1]
        if mixed:
            weight = b.value("weight")
            assert weight is not None
            if not pure(weight):
                return (f"{qual} not rewritten: the output must be cast to the weight's dtype and "
                        f"`{self.code(weight)}` would be evaluated twice")
            new = f"{new}.to({atom(self._src(weight), weight)}.dtype)"
        fix, msg = self._norm_fix(
            f"apex {fn} → {target.rsplit('.', 1)[1]}: arguments bound by apex's order (weight before "
            "normalized_shape), eps written out (apex's functional default is "
            f"1e-6){'; output cast to the weight dtype as apex does' if mixed else ''}; note: {_AUTOCAST_NOTE}")
        return _Rewrite("PRT313", new, fix, msg, f"use torch.nn.functional.{target.rsplit('.', 1)[1]}")

    def _rw_fused_layer_norm_affine(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "bias", "normalized_shape"),
                                "torch.nn.functional.layer_norm", mixed=False)

    def _rw_fused_layer_norm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "normalized_shape"), "torch.nn.functional.layer_norm",
                                mixed=False)

    def _rw_fused_rms_norm_affine(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "normalized_shape"),
                                "torch.nn.functional.rms_norm", mixed=False)

    def _rw_fused_rms_norm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "normalized_shape"), "torch.nn.functional.rms_norm",
                                mixed=False)

    def _rw_mixed_dtype_fused_layer_norm_affine(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "bias", "normalized_shape"),
                                "torch.nn.functional.layer_norm", mixed=True)

    def _rw_mixed_dtype_fused_rms_norm_affine(self, node: cst.Call, qual: str) -> _Rewrite | str:
        return self._functional(node, qual, ("input", "weight", "normalized_shape"),
                                "torch.nn.functional.rms_norm", mixed=True)

    # -- amp ------------------------------------------------------------------------------------
    _INIT = ("models", "optimizers", "enabled", "opt_level", "cast_model_type", "patch_torch_functions",
             "keep_batchnorm_fp32", "master_weights", "loss_scale", "cast_model_outputs", "num_losses",
             "verbosity", "min_loss_scale", "max_loss_scale")

    def _rw_amp_initialize(self, node: cst.Call, qual: str) -> str:
        b = bind(node, self._INIT)
        head = ("apex.amp.initialize (apex amp was removed upstream in 25.07) needs a hand port to "
                "torch.amp: ")
        if b.error:
            return head + f"porter cannot bind it ({b.error}); " + _AMP_CHECKLIST
        enabled = self._lit(b, "enabled")
        if enabled is not MISSING and enabled is not UNKNOWN and not enabled:
            return head + ("enabled=False makes every amp call a no-op: replace the call by its model/"
                           "optimizer arguments and each `with amp.scale_loss(loss, opt) as s: s.backward()` "
                           "by `loss.backward()`")
        level = self._lit(b, "opt_level")
        parts = []
        if level is MISSING:
            level = "O1"
        if level == "O0":
            parts.append("O0 is fp32 training with loss scale 1: remove the call (apex also casts the model "
                         "to fp32) and replace each scale_loss block by `loss.backward()`")
        elif level == "O1":
            parts.append("O1 → wrap forward and loss in `torch.autocast(\"cuda\", dtype=torch.float16)` "
                         "(APPROX: autocast's per-op cast lists differ from apex's patched functions); "
                         + _AMP_CHECKLIST)
        elif level in ("O2", "O3"):
            parts.append(f"{level} keeps an fp16 model{' with fp32 master weights' if level == 'O2' else ''}: "
                         "torch has no equivalent; train in bf16 autocast (or fp16 autocast + GradScaler) "
                         "with fp32 parameters instead and re-validate, or keep ROCm/apex")
        else:
            parts.append("opt_level is not a literal, so porter cannot tell O0/O1/O2/O3 apart: O1 maps to "
                         "autocast + GradScaler (APPROX), O2/O3 have no torch equivalent; " + _AMP_CHECKLIST)
        scale = self._lit(b, "loss_scale")
        if scale is not MISSING and scale != "dynamic":
            parts.append("a static loss_scale cannot be reproduced: GradScaler is always dynamic")
        for name in ("cast_model_type", "keep_batchnorm_fp32", "master_weights", "cast_model_outputs"):
            if b.has(name):
                parts.append(f"`{name}` has no torch.amp counterpart")
        if b.has("num_losses") and self._lit(b, "num_losses") != 1:
            parts.append("several losses (num_losses) share one GradScaler in torch")
        if level != "O0":
            parts.append("apex caps the dynamic scale at max_loss_scale=2**24, GradScaler has no cap")
        return head + "; ".join(parts)

    def _rw_amp_scale_loss(self, node: cst.Call, qual: str) -> str:
        b = bind(node, ("loss", "optimizers", "loss_id", "model", "delay_unscale", "delay_overflow_check"))
        extra = []
        if not b.error:
            if b.has("loss_id") and self._lit(b, "loss_id") != 0:
                extra.append("several loss_ids have no GradScaler equivalent (use one scaler)")
            if b.has("delay_unscale") and self._lit(b, "delay_unscale") is not False:
                extra.append("delay_unscale=True (gradient accumulation) maps to calling scaler.step only "
                             "on the last micro-batch")
        return ("apex.amp.scale_loss not rewritten (a GradScaler has to be threaded through the training loop "
                "by hand): replace `with amp.scale_loss(loss, opt) as s: s.backward()` by "
                "`scaler.scale(loss).backward()` and `opt.step()` by `scaler.step(opt); scaler.update()`; apex "
                "unscaled the grads when the block exited, GradScaler does not: call `scaler.unscale_(opt)` "
                "before any clipping or gradient inspection"
                + ("; " + "; ".join(extra) if extra else ""))

    def _rw_amp_master_params(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("optimizer",))
        if isinstance(b, str):
            return b
        opt = b.value("optimizer")
        if opt is None:
            return f"{qual} not rewritten: no optimizer argument"
        text = f"(p for group in {atom(self._src(opt), opt)}.param_groups for p in group[\"params\"])"
        return _Rewrite("PRT332", text, SAFE,
                        "amp.master_params(opt) is a generator over opt.param_groups; inlined (with a "
                        "GradScaler, call scaler.unscale_(opt) before clipping these)", "inline master_params")

    def _rw_amp_state_dict(self, node: cst.Call, qual: str) -> str:
        return ("apex.amp.state_dict() not rewritten (it needs the GradScaler of the hand port): save `scaler.state_dict()` of the torch.amp.GradScaler that replaces "
                "amp; the formats differ, so old checkpoints' amp entries cannot be loaded")

    def _rw_amp_load_state_dict(self, node: cst.Call, qual: str) -> str:
        return ("apex.amp.load_state_dict() not rewritten (it needs the GradScaler of the hand port): load into `scaler.load_state_dict()` of the GradScaler that "
                "replaces amp; checkpoints written by apex amp have a different format and must skip it")

    # -- parallel ------------------------------------------------------------------------------
    _DDP = ("module", "message_size", "delay_allreduce", "shared_param", "allreduce_trigger_params",
            "retain_allreduce_buffers", "allreduce_always_fp32", "num_allreduce_streams",
            "allreduce_communicators", "gradient_average", "gradient_predivide_factor",
            "gradient_average_split_factor", "prof")

    def _rw_DDP(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, self._DDP)
        if isinstance(b, str):
            return b
        if not b.has("module"):
            return f"{qual} not rewritten: no `module` argument"
        for reason in (
            self._require(b, qual, "gradient_average", True,
                          "with gradient_average=False apex SUMS gradients across ranks while torch DDP "
                          "averages them (scale the loss or the learning rate by the world size by hand)"),
            self._require(b, qual, "allreduce_always_fp32", False,
                          "apex all-reduces fp16 gradients in fp32; torch DDP reduces in the gradient dtype "
                          "(APPROX; a comm hook can restore it)"),
            self._require(b, qual, "retain_allreduce_buffers", False,
                          "code reading `allreduce_buffers` has no torch DDP counterpart"),
            self._require(b, qual, "allreduce_communicators", None,
                          "custom communicators must become a torch process_group"),
            self._require(b, qual, "shared_param", None, "the deprecated shared_param has no counterpart"),
            self._require(b, qual, "gradient_average_split_factor", None,
                          "the deprecated split factor has no counterpart"),
            self._drop(b, qual, ("message_size", "delay_allreduce", "allreduce_trigger_params",
                                 "num_allreduce_streams", "gradient_predivide_factor", "prof")),
        ):
            if reason:
                return reason
        hooks = _DDP_METHODS.search(self.ctx.text)
        if hooks:
            return (f"{qual} not rewritten: this file calls `{hooks.group(0)}` (line "
                    f"{self.ctx.position(hooks.start())[0]}), an apex DDP method torch DDP lacks; use "
                    "`with ddp.no_sync():` for accumulation steps, then rewrite the wrapper")
        args = self._args(b, {"module": "module"}, positional=("module",))
        args.append(kwarg("forward_sync_buffers", "False"))
        new = rebuild(node, self._callee("torch.nn.parallel.DistributedDataParallel"), args)
        return _Rewrite("PRT340", self._render(new), SAFE,
                        "apex DistributedDataParallel → torch DDP: both average gradients "
                        "(gradient_average=True); forward_sync_buffers=False keeps apex's no-buffer-sync "
                        "forward; torch also broadcasts buffers from rank 0 once at construction",
                        "use torch.nn.parallel.DistributedDataParallel")

    def _rw_SyncBatchNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("num_features", "eps", "momentum", "affine", "track_running_stats",
                                    "process_group", "channel_last", "fuse_relu"))
        if isinstance(b, str):
            return b
        for reason in (
            self._require(b, qual, "channel_last", False, "torch SyncBatchNorm has no channels-last kernel flag"),
            self._require(b, qual, "fuse_relu", False, "torch SyncBatchNorm does not fuse a ReLU"),
        ):
            if reason:
                return reason
        keep = {n: n for n in ("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group")}
        args = self._args(b, keep, positional=("num_features",))
        new = rebuild(node, self._callee("torch.nn.SyncBatchNorm"), args)
        return _Rewrite("PRT341", self._render(new), SAFE,
                        "apex SyncBatchNorm → torch.nn.SyncBatchNorm (same arguments, defaults and parameter "
                        "names)", "use torch.nn.SyncBatchNorm")

    def _rw_convert_syncbn_model(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("module", "process_group", "channel_last"))
        if isinstance(b, str):
            return b
        reason = self._require(b, qual, "channel_last", False, "torch SyncBatchNorm has no channels-last flag")
        if reason:
            return reason
        if not b.has("module"):
            return f"{qual} not rewritten: no `module` argument"
        args = self._args(b, {"module": "module", "process_group": "process_group"}, positional=("module",))
        new = rebuild(node, self._callee("torch.nn.SyncBatchNorm") + ".convert_sync_batchnorm", args)
        return _Rewrite("PRT342", self._render(new), SAFE,
                        "apex convert_syncbn_model → torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                        "use convert_sync_batchnorm")

    # -- contrib -------------------------------------------------------------------------------
    def _rw_clip_grad_norm_(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("parameters", "max_norm", "norm_type", "error_if_nonfinite"))
        if isinstance(b, str):
            return b
        keep = {n: n for n in ("parameters", "max_norm", "norm_type", "error_if_nonfinite")}
        args = self._args(b, keep, positional=("parameters",))
        new = rebuild(node, self._callee("torch.nn.utils.clip_grad_norm_"), args)
        return _Rewrite("PRT350", self._render(new), SAFE,
                        "apex clip_grad_norm_ → torch.nn.utils.clip_grad_norm_ (same semantics)",
                        "use torch.nn.utils.clip_grad_norm_")

    def _rw_xentropy(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "apply"):
            return (f"{qual} is an autograd Function: only `.apply(logits, labels, smoothing, padding_idx, "
                    "half_to_float)` calls are rewritten")
        b = self._bind(node, qual, ("logits", "labels", "smoothing", "padding_idx", "half_to_float"))
        if isinstance(b, str):
            return b
        if not (b.has("logits") and b.has("labels")):
            return f"{qual} not rewritten: logits and labels are required"
        logits = b.value("logits")
        assert logits is not None
        h2f = self._lit(b, "half_to_float")
        ltext = self._src(logits)
        if h2f is MISSING or (h2f is not UNKNOWN and not h2f):
            first = b.args["logits"]
        elif h2f is not UNKNOWN:
            first = b.args["logits"].with_changes(value=cst.parse_expression(f"{atom(ltext, logits)}.float()"))
        else:
            flag = b.value("half_to_float")
            assert flag is not None
            if not pure(logits) or not pure(flag):
                return (f"{qual} not rewritten: half_to_float is not a literal and `{ltext}` would be "
                        "written twice")
            first = b.args["logits"].with_changes(value=cst.parse_expression(
                f"({atom(ltext, logits)}.float() if {self._src(flag)} else {ltext})"))
        args = [as_positional(first), as_positional(b.args["labels"])]
        rest = {"smoothing": "label_smoothing", "padding_idx": "ignore_index"}
        for name in b.order:
            if name in rest:
                args.append(as_keyword(b.args[name], rest[name]))
        args.append(kwarg("reduction", '"none"'))
        if not b.has("padding_idx"):
            args.append(kwarg("ignore_index", "0"))
        new = rebuild(node, self._callee("torch.nn.functional.cross_entropy"), args)
        return _Rewrite("PRT351", self._render(new), SAFE,
                        "apex SoftmaxCrossEntropyLoss → F.cross_entropy with reduction=\"none\" (apex returns "
                        "per-example losses) and ignore_index written out (apex's padding_idx defaults to 0, "
                        "torch's ignore_index to -100)", "use torch.nn.functional.cross_entropy")

    def _rw_FastLayerNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("hidden_size", "eps", "memory_efficient"))
        if isinstance(b, str):
            return b
        reason = self._drop(b, qual, ("memory_efficient",))
        if reason:
            return reason
        if not b.has("hidden_size"):
            return f"{qual} not rewritten: no hidden_size"
        args = self._args(b, {"hidden_size": "normalized_shape", "eps": "eps"}, positional=("hidden_size",))
        new = rebuild(node, self._callee("torch.nn.LayerNorm"), args)
        fix, msg = self._norm_fix("apex FastLayerNorm → torch.nn.LayerNorm (same parameters and eps)")
        return _Rewrite("PRT352", self._render(new), fix, msg, "use torch.nn.LayerNorm")

    def _rw_GroupNorm(self, node: cst.Call, qual: str) -> _Rewrite | str:
        self._begin()
        b = self._bind(node, qual, ("num_groups", "num_channels", "eps", "affine", "device", "dtype", "act"))
        if isinstance(b, str):
            return b
        act = self._lit(b, "act")
        if not (act is MISSING or act is None or act == ""):
            shown = self.code(b.value("act")) if b.value("act") is not None else ""
            return (f"{qual} not rewritten: act={shown} fuses a SiLU into the norm; a torch module swap would "
                    "need an extra nn.SiLU and change the state_dict keys")
        keep = {n: n for n in ("num_groups", "num_channels", "eps", "affine", "device", "dtype")}
        args = self._args(b, keep, positional=("num_groups", "num_channels"))
        new = rebuild(node, self._callee("torch.nn.GroupNorm"), args)
        return _Rewrite("PRT353", self._render(new), SAFE,
                        "apex contrib GroupNorm (no act) → torch.nn.GroupNorm (same arguments and parameters)",
                        "use torch.nn.GroupNorm")


_AMP_CHECKLIST = (
    "checklist: (1) create `scaler = torch.amp.GradScaler(\"cuda\")` once; (2) wrap forward and loss in "
    "`with torch.autocast(\"cuda\", dtype=torch.float16):`; (3) replace each `with amp.scale_loss(loss, opt) "
    "as s: s.backward()` by `scaler.scale(loss).backward()`; (4) call `scaler.unscale_(opt)` before gradient "
    "clipping; (5) replace `opt.step()` by `scaler.step(opt); scaler.update()`; (6) save/load "
    "`scaler.state_dict()` instead of `amp.state_dict()`"
)

_AMP_HELPERS = {
    "float_function": "run it with autocast disabled on float32 inputs (`with torch.autocast(\"cuda\", "
                      "enabled=False):` and `.float()`; for an autograd Function "
                      "`@torch.amp.custom_fwd(device_type=\"cuda\", cast_inputs=torch.float32)`)",
    "half_function": "autocast already runs matmuls/convolutions in fp16; otherwise cast the inputs with "
                     "`torch.amp.custom_fwd(device_type=\"cuda\", cast_inputs=torch.float16)`",
    "bfloat16_function": "cast the inputs with `torch.amp.custom_fwd(device_type=\"cuda\", "
                         "cast_inputs=torch.bfloat16)`",
    "promote_function": "torch.autocast promotes mixed-dtype inputs of its promote-list ops itself; cast "
                        "explicitly elsewhere",
    "disable_casts": "use `with torch.autocast(\"cuda\", enabled=False):`",
}

_FLAG_CODE = {
    "FusedAdam": "PRT300", "FusedSGD": "PRT301", "FusedAdagrad": "PRT302", "FusedLAMB": "PRT303",
    "FusedNovoGrad": "PRT304", "FusedLayerNorm": "PRT310", "FusedRMSNorm": "PRT311",
    "MixedFusedLayerNorm": "PRT312", "MixedFusedRMSNorm": "PRT312",
    "amp.initialize": "PRT330", "amp.scale_loss": "PRT331", "amp.master_params": "PRT332",
    "amp.state_dict": "PRT333", "amp.load_state_dict": "PRT333", "DDP": "PRT340", "SyncBatchNorm": "PRT341",
    "convert_syncbn_model": "PRT342", "clip_grad_norm_": "PRT350", "xentropy": "PRT351",
    "FastLayerNorm": "PRT352", "GroupNorm": "PRT353",
}
for _fn in ("fused_layer_norm_affine", "fused_layer_norm", "fused_rms_norm_affine", "fused_rms_norm",
            "mixed_dtype_fused_layer_norm_affine", "mixed_dtype_fused_rms_norm_affine"):
    _FLAG_CODE[_fn] = "PRT313"


def _grad_none_note(b: Bound) -> str:
    if not b.has("set_grad_none"):
        return ""
    return ("; set_grad_none dropped: with torch >= 2.0 apex's zero_grad() also sets grads to None when it is "
            "False (it calls Optimizer.zero_grad()), so zero_grad() behaves the same")


def _ident(key: str) -> str:
    return key.replace(".", "_")


def class_by_name(qual: str) -> str | None:
    """What a hand port of an apex API named by a string should use (None: not an apex API)."""
    key = _API.get(qual)
    if key is not None:
        if key.startswith("amp."):
            return "torch.autocast and torch.amp.GradScaler (see PRT330/PRT331)"
        return _EQUIVALENT.get(key, "see the apex rules (porter rule PRT300-PRT353)")
    for prefix, why in _NO_EQUIVALENT.items():
        if qual == prefix or qual.startswith(prefix + "."):
            return f"no portable 1:1 replacement: {why}"
    return None


def check_yaml(ctx: FileContext) -> Iterator[Finding]:
    """Hydra `_target_:` / Lightning `class_path:` values (any YAML scalar) naming apex classes."""
    for start, end, path in yaml_paths(ctx.text, "apex"):
        advice = class_by_name(path)
        if advice is not None:
            yield ctx.finding("PRT397", f"apex class named in a config ({path}): instantiated at run time, so it "
                              f"fails where apex is missing; port the target and its keys by hand: {advice}",
                              start, end, data={"qualname": path})


