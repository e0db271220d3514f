"""Test double of xformers (only ``xformers.ops`` is provided). Pure torch, CPU."""

__version__ = "0.0.22.post7"
