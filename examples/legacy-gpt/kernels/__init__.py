"""Python entry points for the custom CUDA kernels (built by ``python setup.py develop``).

Falls back to eager PyTorch when the extension is not built (CPU debugging, CI).
"""

import torch

try:
    import legacy_gpt_kernels as _C  # compiled from kernels/fused_softmax.cu
except ImportError:
    _C = None


def scaled_softmax(x, scale=1.0):
    """softmax(x * scale) over the last dim; the fused kernel handles rows of up to 1024 columns."""
    if _C is not None and x.is_cuda and x.dtype == torch.float32 and x.size(-1) <= 1024:
        return _C.scaled_softmax_forward(x.contiguous(), float(scale))
    return torch.softmax(x * scale, dim=-1)


def transpose_tiled(x):
    """2-D transpose through shared-memory tiles (used by the logit-lens tooling)."""
    if _C is not None and x.is_cuda and x.dtype == torch.float32:
        return _C.transpose_forward(x.contiguous())
    return x.t().contiguous()
