"""Test double of bitsandbytes (``bitsandbytes.optim`` only). Pure torch, CPU."""

from . import optim

__version__ = "0.41.1"
__all__ = ["optim"]
