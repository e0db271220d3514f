"""Test double of ``apex.normalization`` (FusedLayerNorm, FusedRMSNorm).

Documented semantics (apex ``normalization/fused_layer_norm.py``):

* ``FusedLayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False)``:
  same math as ``torch.nn.LayerNorm`` (apex itself falls back to ``F.layer_norm`` off-GPU);
  weight initialised to ones, bias to zeros;
* ``FusedRMSNorm(normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False)``:
  ``y = x * rsqrt(mean(x^2 over normalized dims) + eps) * weight``, computed in fp32 and returned
  in the input dtype; weight initialised to ones. Note the module default eps is 1e-5 (the
  functional forms default to 1e-6).
"""

import numbers

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FusedLayerNorm", "FusedRMSNorm"]


def _shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class FusedLayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(*self.normalized_shape))
            self.bias = nn.Parameter(torch.empty(*self.normalized_shape))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            nn.init.ones_(self.weight)
            nn.init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class FusedRMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(*self.normalized_shape))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.elementwise_affine:
            nn.init.ones_(self.weight)

    def forward(self, input):
        dims = tuple(range(-len(self.normalized_shape), 0))
        x = input.float()
        y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight.float()
        return y.to(input.dtype)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)
