"""Pure-torch references of Transformer Engine's documented module semantics (including its
initialisation, which differs from torch.nn's).

Written from TE's documentation, not from TE's code:

- ``Linear``: ``y = x @ W.T + b``; weight ~ N(0, 0.023) (TE's default ``init_method``) or the given
  ``init_method(weight)``, bias zero; parameters ``weight``/``bias``; allocated on ``device``
  (TE's default is ``"cuda"``; :data:`DEFAULT_DEVICE` lets CPU tests run).
- ``LayerNorm``: ``(x - E[x]) / sqrt(Var[x] + eps) * γ + β`` in fp32, returned in the input dtype;
  ``zero_centered_gamma=True`` multiplies by ``(1 + γ)`` and initialises γ to 0.
- ``RMSNorm``: ``x / sqrt(mean(x²) + eps) * γ``, same zero-centred option; eps defaults to 1e-5.
- ``LayerNormLinear``: norm then linear, parameters ``layer_norm_weight``, ``layer_norm_bias``
  (LayerNorm only), ``weight``, ``bias``; ``return_layernorm_output=True`` also returns the norm output.
- ``fp8_autocast(enabled=False)``: no effect.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import torch

TE_INIT_STD = 0.023
DEFAULT_DEVICE = "cpu"  # TE's real default is "cuda"; the parity tests run on CPU


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float,
               zero_centered_gamma: bool = False) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    var = xf.var(dim=-1, unbiased=False, keepdim=True)
    gamma = weight.float() + 1 if zero_centered_gamma else weight.float()
    return ((xf - mean) / torch.sqrt(var + eps) * gamma + bias.float()).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered_gamma: bool = False
             ) -> torch.Tensor:
    xf = x.float()
    gamma = weight.float() + 1 if zero_centered_gamma else weight.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma).to(x.dtype)


class Linear(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, *, bias: bool = True,
                 init_method: Callable[[torch.Tensor], object] | None = None,
                 params_dtype: torch.dtype | None = None, device: str | None = None, **_: object) -> None:
        super().__init__()
        dev = DEFAULT_DEVICE if device is None else device
        dtype = params_dtype or torch.get_default_dtype()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=dev, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(out_features, device=dev, dtype=dtype)) if bias else None
        with torch.no_grad():
            if init_method is None:
                self.weight.normal_(0.0, TE_INIT_STD)
            else:
                init_method(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight.T
        return out + self.bias if self.bias is not None else out


class _Norm(torch.nn.Module):
    has_bias = True

    def __init__(self, normalized_shape: int, eps: float = 1e-5, *, zero_centered_gamma: bool = False,
                 params_dtype: torch.dtype | None = None, device: str | None = None, **_: object) -> None:
        super().__init__()
        dev = DEFAULT_DEVICE if device is None else device
        dtype = params_dtype or torch.get_default_dtype()
        self.eps = eps
        self.zero_centered_gamma = zero_centered_gamma
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = torch.nn.Parameter(init(normalized_shape, device=dev, dtype=dtype))
        if self.has_bias:
            self.bias = torch.nn.Parameter(torch.zeros(normalized_shape, device=dev, dtype=dtype))


class LayerNorm(_Norm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps, self.zero_centered_gamma)


class RMSNorm(_Norm):
    has_bias = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.zero_centered_gamma)


class LayerNormLinear(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, eps: float = 1e-5, *, bias: bool = True,
                 normalization: str = "LayerNorm", return_layernorm_output: bool = False,
                 device: str | None = None, **_: object) -> None:
        super().__init__()
        dev = DEFAULT_DEVICE if device is None else device
        self.eps = eps
        self.return_layernorm_output = return_layernorm_output
        self.normalization = normalization
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(in_features, device=dev))
        if normalization == "LayerNorm":
            self.layer_norm_bias = torch.nn.Parameter(torch.zeros(in_features, device=dev))
        lin = Linear(in_features, out_features, bias=bias, device=dev)
        self.weight = lin.weight
        self.bias = lin.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.normalization == "LayerNorm":
            h = layer_norm(x, self.layer_norm_weight, self.layer_norm_bias, self.eps)
        else:
            h = rms_norm(x, self.layer_norm_weight, self.eps)
        out = h @ self.weight.T
        out = out + self.bias if self.bias is not None else out
        return (out, h) if self.return_layernorm_output else out


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: object = None,
                 fp8_group: object = None) -> Iterator[None]:
    assert not enabled, "the reference only models enabled=False"
    yield


def fake_modules() -> dict[str, types.ModuleType]:
    """``sys.modules`` entries that make ``import transformer_engine.pytorch as te`` load these."""
    pt = types.ModuleType("transformer_engine.pytorch")
    for name, obj in (("Linear", Linear), ("LayerNorm", LayerNorm), ("RMSNorm", RMSNorm),
                      ("LayerNormLinear", LayerNormLinear), ("fp8_autocast", fp8_autocast)):
        setattr(pt, name, obj)
    te = types.ModuleType("transformer_engine")
    te.pytorch = pt  # type: ignore[attr-defined]
    return {"transformer_engine": te, "transformer_engine.pytorch": pt}
