"""Pure-torch references of NVIDIA apex's documented math (written from apex's docs and kernels).

Each function follows what apex computes (its CUDA kernels ``multi_tensor_adam.cu``,
``multi_tensor_sgd_kernel.cu``, ``multi_tensor_adagrad.cu``, ``layer_norm_cuda`` and the
xentropy kernel), independent of porter and of torch.optim: the parity tests compare porter's
rewritten code against these, and the negative tests show that naive rewrites do not match.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Tensor = torch.Tensor


class ApexAdam:
    """apex ``FusedAdam``: fp32 moments for every param dtype, one step counter per group."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, adam_w_mode: bool = True,
                 weight_decay: float = 0.0) -> None:
        self.params = list(params)
        self.lr, self.bias_correction, self.betas, self.eps = lr, bias_correction, betas, eps
        self.adam_w_mode, self.weight_decay = adam_w_mode, weight_decay
        self.m = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        self.v = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        self.step_count = 0

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        b1, b2 = self.betas
        t = self.step_count
        bc1 = 1 - b1**t if self.bias_correction else 1.0
        bc2 = 1 - b2**t if self.bias_correction else 1.0
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            g = p.grad.float()
            w = p.float()
            if not self.adam_w_mode and self.weight_decay != 0:
                g = g + self.weight_decay * w  # L2: decay joins the gradient
            m.mul_(b1).add_((1 - b1) * g)
            v.mul_(b2).add_((1 - b2) * g * g)
            denom = (v / bc2).sqrt() + self.eps
            update = (m / bc1) / denom
            if self.adam_w_mode:
                update = update + self.weight_decay * w  # decoupled decay
            p.copy_((w - self.lr * update).to(p.dtype))


class ApexSGD:
    """apex ``FusedSGD`` (kernel order: decay, momentum with first-run init, nesterov)."""

    def __init__(self, params: Sequence[Tensor], lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, wd_after_momentum: bool = False) -> None:
        self.params = list(params)
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov, self.wd_after_momentum = weight_decay, nesterov, wd_after_momentum
        self.buf: list[Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.float()
            w = p.float()
            if self.weight_decay != 0 and not self.wd_after_momentum:
                g = g + self.weight_decay * w
            if self.momentum != 0:
                if self.buf[i] is None:
                    buf = g.clone()
                else:
                    buf = self.buf[i] * self.momentum + (1 - self.dampening) * g
                self.buf[i] = buf
                g = g + self.momentum * buf if self.nesterov else buf
            if self.weight_decay != 0 and self.wd_after_momentum:
                g = g + self.weight_decay * w
            p.copy_((w - self.lr * g).to(p.dtype))


class ApexAdagrad:
    """apex ``FusedAdagrad``: mode 0 adds L2 to the gradient, mode 1 decays decoupled."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-2, eps: float = 1e-10, weight_decay: float = 0.0,
                 adagrad_w_mode: bool = False) -> None:
        self.params = list(params)
        self.lr, self.eps, self.weight_decay, self.w_mode = lr, eps, weight_decay, adagrad_w_mode
        self.h = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        for p, h in zip(self.params, self.h, strict=True):
            if p.grad is None:
                continue
            g = p.grad.float()
            w = p.float()
            if not self.w_mode:
                g = g + self.weight_decay * w
            h.add_(g * g)
            upd = g / (h.float().sqrt() + self.eps)
            if self.w_mode:
                upd = upd + self.weight_decay * w
            p.copy_((w - self.lr * upd).to(p.dtype))


def _dims(normalized_shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(range(-len(normalized_shape), 0))


def layer_norm(x: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, bias: Tensor | None,
               eps: float, *, out_dtype: torch.dtype | None = None) -> Tensor:
    """apex layer norm: fp32 statistics and affine; output in the input dtype (``out_dtype`` for Mixed*)."""
    dims = _dims(normalized_shape)
    xf = x.float()
    mean = xf.mean(dims, keepdim=True)
    var = ((xf - mean) ** 2).mean(dims, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(out_dtype or x.dtype)


def rms_norm(x: Tensor, normalized_shape: Sequence[int], weight: Tensor | None, eps: float, *,
             out_dtype: torch.dtype | None = None) -> Tensor:
    """apex RMS norm: ``x / sqrt(mean(x^2) + eps) * w`` in fp32, output like :func:`layer_norm`."""
    dims = _dims(normalized_shape)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    return y.to(out_dtype or x.dtype)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """apex contrib ``GroupNorm`` without ``act``: per-sample, per-group statistics over (C/G, *spatial)."""
    n, c = x.shape[:2]
    xf = x.float().reshape(n, num_groups, -1)
    mean = xf.mean(-1, keepdim=True)
    var = ((xf - mean) ** 2).mean(-1, keepdim=True)
    y = ((xf - mean) * torch.rsqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.float().reshape(shape)
    if bias is not None:
        y = y + bias.float().reshape(shape)
    return y.to(x.dtype)


def batch_norm_eval(x: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None,
                    bias: Tensor | None, eps: float) -> Tensor:
    """apex ``SyncBatchNorm`` in eval mode: normalise with the running statistics."""
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    y = (x.float() - running_mean.reshape(shape)) * torch.rsqrt(running_var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y.to(x.dtype)


def xentropy(logits: Tensor, labels: Tensor, smoothing: float = 0.0, padding_idx: int = 0,
             half_to_float: bool = False) -> Tensor:
    """apex ``SoftmaxCrossEntropyLoss``: per-example ``(lse - mean(x))*s + (lse - x_y)*(1-s)``, 0 at padding."""
    xf = logits.float()
    lse = torch.logsumexp(xf, dim=-1)
    x_y = xf.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    loss = (lse - xf.mean(-1)) * smoothing + (lse - x_y) * (1 - smoothing)
    loss = torch.where(labels == padding_idx, torch.zeros_like(loss), loss)
    return loss if half_to_float else loss.to(logits.dtype)


def ddp_reduce(per_rank_grads: Sequence[Tensor], gradient_average: bool = True) -> Tensor:
    """apex DDP's all-reduce result: the sum over ranks, divided by the world size when averaging."""
    total = torch.stack(list(per_rank_grads)).sum(0)
    return total / len(per_rank_grads) if gradient_average else total


# Parameter names and initial values of apex modules (from their __init__/reset_parameters).
STATE_KEYS = {
    "FusedLayerNorm": {"weight": "ones", "bias": "zeros"},
    "FusedRMSNorm": {"weight": "ones"},
    "MixedFusedLayerNorm": {"weight": "ones", "bias": "zeros"},
    "MixedFusedRMSNorm": {"weight": "ones"},
    "FastLayerNorm": {"weight": "ones", "bias": "zeros"},
    "GroupNorm": {"weight": "ones", "bias": "zeros"},
    "SyncBatchNorm": {"weight": "ones", "bias": "zeros", "running_mean": "zeros", "running_var": "ones",
                      "num_batches_tracked": "zeros"},
}
