"""The apex family's handlers for ``apex.parallel``: DistributedDataParallel, SyncBatchNorm and
convert_syncbn_model."""

from __future__ import annotations

import re

import libcst as cst

from porter.codemods.apex import SAFE
from porter.codemods.apex.args import kwarg, rebuild
from porter.codemods.apex.base import ApexBase, Handler, Rewrite

_DDP_METHODS = re.compile(r"\.(?:disable_allreduce|enable_allreduce|allreduce_params|allreduce_buffers|needs_refresh)\b")


class ParallelHandlers(ApexBase):
    """Handlers for ``apex.parallel`` calls: each returns a :class:`Rewrite` or the reason it reports."""

    _DDP = ("module", "message_size", "delay_allreduce", "shared_param", "allreduce_trigger_params",
            "retain_allreduce_buffers", "allreduce_always_fp32", "num_allreduce_streams",
            "allreduce_communicators", "gradient_average", "gradient_predivide_factor",
            "gradient_average_split_factor", "prof")

    def _rw_DDP(self, node: cst.Call, qual: str) -> Rewrite | str:
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
        # apex syncs no buffers at all; broadcast_buffers=False says so on every torch release (torch 2.13
        # deprecates it for forward_sync_buffers, which is a TypeError before 2.13 and still syncs at init)
        args.append(kwarg("broadcast_buffers", "False"))
        callee, adds = self._torch("torch.nn.parallel.DistributedDataParallel")
        new = rebuild(node, callee, args)
        return Rewrite("PRT340", self._render(new), SAFE,
                        "apex DistributedDataParallel → torch DDP: both average gradients "
                        "(gradient_average=True); broadcast_buffers=False keeps apex's no-buffer-sync forward "
                        "(torch 2.13 deprecates the keyword with a warning; its replacement forward_sync_buffers "
                        "is a TypeError before 2.13)",
                        "use torch.nn.parallel.DistributedDataParallel", adds=adds)

    def _rw_SyncBatchNorm(self, node: cst.Call, qual: str) -> Rewrite | str:
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
        callee, adds = self._torch("torch.nn.SyncBatchNorm")
        new = rebuild(node, callee, args)
        return Rewrite("PRT341", self._render(new), SAFE,
                        "apex SyncBatchNorm → torch.nn.SyncBatchNorm (same arguments, defaults and parameter "
                        "names)", "use torch.nn.SyncBatchNorm", adds=adds)

    def _rw_convert_syncbn_model(self, node: cst.Call, qual: str) -> Rewrite | str:
        b = self._bind(node, qual, ("module", "process_group", "channel_last"))
        if isinstance(b, str):
            return b
        reason = self._require(b, qual, "channel_last", False, "torch SyncBatchNorm has no channels-last flag")
        if reason:
            return reason
        if not b.has("module"):
            return f"{qual} not rewritten: no `module` argument"
        args = self._args(b, {"module": "module", "process_group": "process_group"}, positional=("module",))
        callee, adds = self._torch("torch.nn.SyncBatchNorm")
        new = rebuild(node, callee + ".convert_sync_batchnorm", args)
        return Rewrite("PRT342", self._render(new), SAFE,
                        "apex convert_syncbn_model → torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                        "use convert_sync_batchnorm", adds=adds)


# api key -> (handler, the code its reason is reported under when it does not rewrite)
HANDLERS: dict[str, tuple[Handler, str]] = {
    "DDP": (ParallelHandlers._rw_DDP, "PRT340"),
    "SyncBatchNorm": (ParallelHandlers._rw_SyncBatchNorm, "PRT341"),
    "convert_syncbn_model": (ParallelHandlers._rw_convert_syncbn_model, "PRT342"),
}
