"""The apex family's visitors and checkers; its rules, options and pre-filters are declared
in ``porter.codemods.apex`` (``__init__.py``), which describes what the family does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from porter.codemods._shared.class_strings import is_dotted_path, prefix_of, yaml_paths
from porter.codemods.apex import NAME, NONE
from porter.codemods.apex.amp import _AMP_HELPERS, AmpHandlers
from porter.codemods.apex.amp import HANDLERS as _AMP_HANDLERS
from porter.codemods.apex.base import Handler
from porter.codemods.apex.contrib import HANDLERS as _CONTRIB_HANDLERS
from porter.codemods.apex.contrib import ContribHandlers
from porter.codemods.apex.norms import HANDLERS as _NORM_HANDLERS
from porter.codemods.apex.norms import NormHandlers
from porter.codemods.apex.optimizers import HANDLERS as _OPTIMIZER_HANDLERS
from porter.codemods.apex.optimizers import OptimizerHandlers
from porter.codemods.apex.parallel import HANDLERS as _PARALLEL_HANDLERS
from porter.codemods.apex.parallel import ParallelHandlers
from porter.findings import Finding
from porter.framework import FileContext, PyContext
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

# -- handler table: qualified name -> (handler method, the code its reason is reported under) -----

_BY_KEY: dict[str, tuple[Handler, str]] = {
    **_OPTIMIZER_HANDLERS, **_NORM_HANDLERS, **_AMP_HANDLERS, **_PARALLEL_HANDLERS, **_CONTRIB_HANDLERS,
}
_HANDLERS: dict[str, tuple[Handler, str]] = {qual: _BY_KEY[key] for qual, key in _API.items()}

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
    "DDP": "torch.nn.parallel.DistributedDataParallel(module, broadcast_buffers=False)",
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

_AUTOCAST = re.compile(r"\bautocast\b|is_autocast_enabled|get_autocast_dtype|\bcustom_fwd\b")
_LOW_PRECISION = re.compile(r"\.half\(\)|\.bfloat16\(\)|torch\.(?:float16|half|bfloat16)\b|opt_level\s*=\s*['\"]O[23]['\"]")


class ApexVisitor(ImportDepthMixin, OptimizerHandlers, NormHandlers, AmpHandlers, ParallelHandlers, ContribHandlers):
    """The apex family's LibCST visitor: resolves each apex name through the file's imports and
    dispatches a call through ``_HANDLERS`` to the handler of the mixin that owns it."""

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

    # -- traversal --------------------------------------------------------------------------
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._indents.append(node.indent if node.indent is not None else self.ctx.module.default_indent)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock) -> None:
        self._indents.pop()

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
                self._dispatch(node, qual, via or "")
                return
        qual, via = self._resolve(func)
        if qual is None:
            return
        if qual in _HANDLERS:
            self._mark(func)
            self._dispatch(node, qual, via or "")
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
    def _dispatch(self, node: cst.Call, qual: str, via: str) -> None:
        """Run the handler ``_HANDLERS`` names for ``qual``; report its rewrite, or its reason not to."""
        handler, flag = _HANDLERS[qual]
        result = handler(self, node, qual)
        if isinstance(result, str):
            self.report(node, flag, result, fix=NONE, data={"qualname": qual})
            return
        self.report(node, result.code, result.message, replacement=result.replacement, fix=result.fix,
                    fix_title=result.title, remove_imports=(via,) if via else (), add_imports=result.adds,
                    data={"qualname": qual})


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


