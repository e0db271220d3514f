"""The apex family's handlers for ``apex.contrib``: clip_grad_norm_, SoftmaxCrossEntropyLoss,
FastLayerNorm and GroupNorm."""

from __future__ import annotations

import libcst as cst

from porter.codemods._shared.calls import MISSING, UNKNOWN
from porter.codemods.apex import SAFE
from porter.codemods.apex.args import as_keyword, as_positional, atom, kwarg, pure, rebuild
from porter.codemods.apex.base import ApexBase, Handler, Rewrite


class ContribHandlers(ApexBase):
    """Handlers for ``apex.contrib`` calls: each returns a :class:`Rewrite` or the reason it reports."""

    def _rw_clip_grad_norm_(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, ("parameters", "max_norm", "norm_type", "error_if_nonfinite"))
        if isinstance(b, str):
            return b
        keep = {n: n for n in ("parameters", "max_norm", "norm_type", "error_if_nonfinite")}
        args = self._args(b, keep, positional=("parameters",))
        callee, adds = self._torch("torch.nn.utils.clip_grad_norm_")
        new = rebuild(node, callee, args)
        return Rewrite("PRT350", self._render(new), SAFE,
                        "apex clip_grad_norm_ → torch.nn.utils.clip_grad_norm_ (same semantics)",
                        "use torch.nn.utils.clip_grad_norm_", adds=adds)

    def _rw_xentropy(self, node: cst.Call, qual: str) -> Rewrite | str:
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
        # a literal zero smoothing is torch's default: leaving it out keeps the call valid before torch 1.10
        smoothing = self._lit(b, "smoothing")
        no_smoothing = smoothing is not UNKNOWN and smoothing is not MISSING and smoothing == 0
        for name in b.order:
            if name == "smoothing" and no_smoothing:
                continue
            if name in rest:
                args.append(as_keyword(b.args[name], rest[name]))
        args.append(kwarg("reduction", '"none"'))
        if not b.has("padding_idx"):
            args.append(kwarg("ignore_index", "0"))
        callee, adds = self._torch("torch.nn.functional.cross_entropy")
        new = rebuild(node, callee, args)
        return Rewrite("PRT351", self._render(new), SAFE,
                        "apex SoftmaxCrossEntropyLoss → F.cross_entropy with reduction=\"none\" (apex returns "
                        "per-example losses) and ignore_index written out (apex's padding_idx defaults to 0, "
                        "torch's ignore_index to -100)", "use torch.nn.functional.cross_entropy", adds=adds)

    def _rw_FastLayerNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, ("hidden_size", "eps", "memory_efficient"))
        if isinstance(b, str):
            return b
        reason = self._drop(b, qual, ("memory_efficient",))
        if reason:
            return reason
        if not b.has("hidden_size"):
            return f"{qual} not rewritten: no hidden_size"
        args = self._args(b, {"hidden_size": "normalized_shape", "eps": "eps"}, positional=("hidden_size",))
        callee, adds = self._torch("torch.nn.LayerNorm")
        new = rebuild(node, callee, args)
        fix, msg = self._norm_fix("apex FastLayerNorm → torch.nn.LayerNorm (same parameters and eps)")
        return Rewrite("PRT352", self._render(new), fix, msg, "use torch.nn.LayerNorm", adds=adds)

    def _rw_GroupNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
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
        callee, adds = self._torch("torch.nn.GroupNorm")
        new = rebuild(node, callee, args)
        return Rewrite("PRT353", self._render(new), SAFE,
                        "apex contrib GroupNorm (no act) → torch.nn.GroupNorm (same arguments and parameters)",
                        "use torch.nn.GroupNorm", adds=adds)


# api key -> (handler, the code its reason is reported under when it does not rewrite)
HANDLERS: dict[str, tuple[Handler, str]] = {
    "clip_grad_norm_": (ContribHandlers._rw_clip_grad_norm_, "PRT350"),
    "xentropy": (ContribHandlers._rw_xentropy, "PRT351"),
    "FastLayerNorm": (ContribHandlers._rw_FastLayerNorm, "PRT352"),
    "GroupNorm": (ContribHandlers._rw_GroupNorm, "PRT353"),
}
