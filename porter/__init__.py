"""porter: port PyTorch codebases off NVIDIA lock-in (CUDA -> ROCm, vendor-neutral).

The engine lives in :mod:`porter`; the rule families in :mod:`porter.codemods` (shipped
from the top-level ``codemods/`` folder) and the HIPify adapters in
:mod:`porter.hipify_wrappers` (from ``hipify_wrappers/``).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
