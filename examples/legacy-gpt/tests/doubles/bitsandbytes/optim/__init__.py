"""Test double of ``bitsandbytes.optim.Adam8bit`` / ``AdamW8bit``.

Documented semantics (bitsandbytes ``optim/adam.py``, ``csrc/kernels.cu`` "adam" branch):

``Adam8bit(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, optim_bits=32,
args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True, is_paged=False)``;
``AdamW8bit`` is the same class with ``weight_decay=1e-2``.

* ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``, per-parameter step ``t``;
* ``p -= lr * sqrt(bc2) / bc1 * m / (sqrt(v) + eps * sqrt(bc2))`` (the same Adam step as torch);
* weight decay is **always decoupled** (bnb's "adam" kernel): ``p *= 1 - lr * wd`` after the step,
  so ``Adam8bit(weight_decay > 0)`` behaves like AdamW, not like torch's coupled-L2 Adam.

Not modelled: bnb stores ``m`` and ``v`` for tensors with at least ``min_8bit_size`` elements in
8-bit blockwise dynamic quantization (block 256); this double keeps every state in fp32, which is
exactly what bnb does for the smaller tensors of the tiny test model.
"""

import math

import torch

__all__ = ["Adam8bit", "AdamW8bit"]


class Adam8bit(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True,
                 is_paged=False):
        if amsgrad:
            raise NotImplementedError("amsgrad is not supported by bitsandbytes' 8-bit Adam")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.min_8bit_size = min_8bit_size

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                    state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                t = state["step"]
                m, v = state["state1"], state["state2"]
                g = p.grad.float()
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                c1 = 1 - beta1 ** t
                c2 = math.sqrt(1 - beta2 ** t)
                p32 = p.float() - (lr * c2 / c1) * m / (v.sqrt() + eps * c2)
                if wd > 0:
                    p32 = p32 * (1 - lr * wd)
                p.copy_(p32.to(p.dtype))
        return loss


class AdamW8bit(Adam8bit):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True,
                 is_paged=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, is_paged)
