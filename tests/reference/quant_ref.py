"""Pure-torch references of bitsandbytes' documented semantics, for the parity suite.

Written from bnb's documentation and documented kernel math, not from bnb's code:

- the 32-bit Adam kernel (every bnb Adam class, ``"adam"`` optimizer id): fp32 moments whatever the
  parameter dtype, ``u = -lr·√bc2/bc1 · m/(√v + eps·√bc2)``, *decoupled* decay ``p·(1 - lr·wd)``
  when ``wd > 0`` — applied after the update by the CUDA/HIP kernel, before it by the CPU
  ("default") backend (``DECAY_AFTER`` selects which),
- LLM.int8 (``Linear8bitLt`` with fp16 weights): row-wise absmax int8 quantization of activations and
  weights, integer matmul, outlier activation columns (``|x| > threshold``) kept in high precision,
- ``bnb.nn.Embedding``: ``torch.nn.Embedding`` with xavier-uniform init and a zeroed padding row.

:func:`fake_modules` returns ``sys.modules`` entries so an *original* snippet (``import bitsandbytes
as bnb``) runs against these references.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable

import torch

DECAY_AFTER = True  # CUDA/HIP kernel placement (set False for bnb's CPU backend)


class BnbAdam32(torch.optim.Optimizer):
    """bnb's 32-bit ``adam`` kernel: fp32 state, decoupled decay (before or after the update)."""

    default_wd = 0.0

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | None = None, amsgrad: bool = False,
                 optim_bits: int = 32, args: object = None, min_8bit_size: int = 4096,
                 percentile_clipping: int = 100, block_wise: bool = True, is_paged: bool = False) -> None:
        assert optim_bits == 32 and not amsgrad and args is None and percentile_clipping == 100
        wd = self.default_wd if weight_decay is None else weight_decay
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=wd))

    @torch.no_grad()
    def step(self, closure: object = None) -> None:
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["m"] = torch.zeros_like(p, dtype=torch.float32)
                    st["v"] = torch.zeros_like(p, dtype=torch.float32)
                st["step"] += 1
                t = st["step"]
                g = p.grad.float()
                x = p.float()
                st["m"].mul_(b1).add_(g, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
                c1 = 1 - b1**t
                c2 = math.sqrt(1 - b2**t)
                update = -lr * c2 / c1 * st["m"] / (st["v"].sqrt() + eps * c2)
                if wd > 0 and not DECAY_AFTER:
                    x = x * (1 - lr * wd)
                x = x + update
                if wd > 0 and DECAY_AFTER:
                    x = x * (1 - lr * wd)
                p.copy_(x.to(p.dtype))


class BnbAdamW32(BnbAdam32):
    default_wd = 1e-2


def int8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise absmax int8 quantization: (int8 values as float, per-row scale)."""
    scale = t.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127.0
    return torch.round(t / scale).clamp(-127, 127), scale


def llm_int8_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, threshold: float = 0.0
                    ) -> torch.Tensor:
    """LLM.int8 forward: int8 × int8 for regular columns, high precision for outlier columns."""
    x2 = x.reshape(-1, x.shape[-1]).float()
    w = w.float()
    outliers = torch.zeros(x2.shape[-1], dtype=torch.bool)
    if threshold > 0:
        outliers = (x2.abs() > threshold).any(dim=0)
    xr = x2.masked_fill(outliers, 0.0)
    qx, sx = int8_rowwise(xr)
    qw, sw = int8_rowwise(w.masked_fill(outliers, 0.0))
    out = (qx @ qw.T) * sx * sw.T
    if outliers.any():
        out = out + x2[:, outliers] @ w[:, outliers].T
    if b is not None:
        out = out + b.float()
    return out.reshape(*x.shape[:-1], w.shape[0])


def int8_weight_only_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """Per-row int8 weights, full-precision activations (what torchao's Int8WeightOnlyConfig computes)."""
    qw, sw = int8_rowwise(w.float())
    out = x.float() @ (qw * sw).T
    return out + b.float() if b is not None else out


class Linear8bitLt(torch.nn.Linear):
    """``bnb.nn.Linear8bitLt`` with trainable weights (has_fp16_weights=True): LLM.int8 forward."""

    def __init__(self, input_features: int, output_features: int, bias: bool = True,
                 has_fp16_weights: bool = True, threshold: float = 0.0, index: object = None,
                 device: object = None) -> None:
        assert has_fp16_weights
        super().__init__(input_features, output_features, bias=bias, device=device)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return llm_int8_linear(x, self.weight, self.bias, self.threshold).to(x.dtype)


class Embedding(torch.nn.Embedding):
    """``bnb.nn.Embedding``: torch's forward, xavier-uniform init, zeroed padding row."""

    def reset_parameters(self) -> None:
        torch.nn.init.xavier_uniform_(self.weight)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].fill_(0)


def fake_modules(decay_after: bool = True) -> dict[str, types.ModuleType]:
    """``sys.modules`` entries that make ``import bitsandbytes as bnb`` load these references."""
    global DECAY_AFTER
    DECAY_AFTER = decay_after
    optim = types.ModuleType("bitsandbytes.optim")
    for name in ("Adam", "Adam32bit", "PagedAdam", "PagedAdam32bit"):
        setattr(optim, name, BnbAdam32)
    for name in ("AdamW", "AdamW32bit", "PagedAdamW", "PagedAdamW32bit"):
        setattr(optim, name, BnbAdamW32)
    nn = types.ModuleType("bitsandbytes.nn")
    nn.Linear8bitLt = Linear8bitLt  # type: ignore[attr-defined]
    nn.Embedding = Embedding  # type: ignore[attr-defined]
    bnb = types.ModuleType("bitsandbytes")
    bnb.optim = optim  # type: ignore[attr-defined]
    bnb.nn = nn  # type: ignore[attr-defined]
    return {"bitsandbytes": bnb, "bitsandbytes.optim": optim, "bitsandbytes.nn": nn}
