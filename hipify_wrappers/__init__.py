"""Adapters around HIPify engines (installed as ``porter.hipify_wrappers``)."""
