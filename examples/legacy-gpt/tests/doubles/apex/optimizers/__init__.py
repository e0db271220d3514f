"""Test double of ``apex.optimizers.FusedAdam`` (pure torch, same update rule).

Documented semantics (apex ``optimizers/fused_adam.py``, ``csrc/multi_tensor_adam.cu``):

``FusedAdam(params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
weight_decay=0.0, amsgrad=False, set_grad_none=True, capturable=False, master_weights=False)``

* one step counter per parameter group;
* ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``; with ``bias_correction`` ``bc1 = 1 - b1**t``,
  ``bc2 = 1 - b2**t`` (else 1); ``denom = sqrt(v / bc2) + eps``;
* ``adam_w_mode=True`` (default): decoupled decay, ``p -= lr * (m / bc1 / denom + wd * p)``;
  ``adam_w_mode=False``: L2, ``g += wd * p`` before the moments;
* moments are kept in fp32 whatever the parameter dtype; ``weight_decay`` defaults to 0.0;
* ``amsgrad=True`` raises; ``zero_grad()`` sets grads to None when ``set_grad_none`` (default).
"""

import torch

__all__ = ["FusedAdam"]


class FusedAdam(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True, capturable=False, master_weights=False):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none

    def zero_grad(self, set_to_none=None):
        if set_to_none is None:
            set_to_none = self.set_grad_none
        super().zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            t = group["step"]
            beta1, beta2 = group["betas"]
            bc1 = 1 - beta1 ** t if group["bias_correction"] else 1.0
            bc2 = 1 - beta2 ** t if group["bias_correction"] else 1.0
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                g = p.grad.float()
                p32 = p.float()
                if self.adam_w_mode == 0 and wd != 0:
                    g = g + wd * p32
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v / bc2).sqrt().add_(eps)
                update = (m / bc1) / denom
                if self.adam_w_mode == 1 and wd != 0:
                    update = update + wd * p32
                p.copy_((p32 - lr * update).to(p.dtype))
        return loss
