"""Test double of pynvml (nvidia-ml-py): a fake single-GPU machine with fixed readings.

Units follow NVML: memory in bytes, power in **milliwatts**, utilization in percent,
temperature in degrees C. Call ``nvmlInit()`` first, as with the real library.
The readings can be changed by tests through ``FAKE``.
"""

from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0

FAKE = {
    "count": 1,
    "name": "NVIDIA A100-SXM4-80GB",
    "total": 80 * 1024 ** 3,
    "used": 12 * 1024 ** 3,
    "power_mw": 287_500,
    "util_gpu": 93,
    "util_memory": 41,
    "temperature": 61,
}

_initialized = False


class NVMLError(Exception):
    pass


class NVMLError_Uninitialized(NVMLError):
    pass


def nvmlInit():
    global _initialized
    _initialized = True


def nvmlShutdown():
    global _initialized
    _initialized = False


def _check():
    if not _initialized:
        raise NVMLError_Uninitialized("Uninitialized")


def nvmlDeviceGetCount():
    _check()
    return FAKE["count"]


def nvmlDeviceGetHandleByIndex(index):
    _check()
    if not 0 <= index < FAKE["count"]:
        raise NVMLError("Invalid Argument")
    return SimpleNamespace(index=index)


def nvmlDeviceGetName(handle):
    _check()
    return FAKE["name"]


def nvmlDeviceGetMemoryInfo(handle):
    _check()
    return SimpleNamespace(total=FAKE["total"], used=FAKE["used"], free=FAKE["total"] - FAKE["used"])


def nvmlDeviceGetPowerUsage(handle):
    _check()
    return FAKE["power_mw"]


def nvmlDeviceGetUtilizationRates(handle):
    _check()
    return SimpleNamespace(gpu=FAKE["util_gpu"], memory=FAKE["util_memory"])


def nvmlDeviceGetTemperature(handle, sensor):
    _check()
    return FAKE["temperature"]
