"""Lightweight GPU telemetry for the training logs (memory, power, utilization).

We read NVML directly instead of torch.cuda.max_memory_allocated() because the number we care
about on shared nodes is what nvidia-smi shows (allocator cache + CUDA context + other ranks).
"""

import logging
import os

import pynvml

logger = logging.getLogger(__name__)


class GPUMonitor:
    def __init__(self, device_index=None):
        pynvml.nvmlInit()
        if device_index is None:
            device_index = int(os.environ.get("LOCAL_RANK", 0))
        self.device_index = device_index
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        if isinstance(self.name, bytes):  # pynvml < 11.5 returns bytes
            self.name = self.name.decode()

    def snapshot(self):
        mem = pynvml.nvmlDeviceGetMemoryInfo(self.handle)
        util = pynvml.nvmlDeviceGetUtilizationRates(self.handle)
        power_mw = pynvml.nvmlDeviceGetPowerUsage(self.handle)
        return {
            "gpu/mem_used_gb": mem.used / 1024 ** 3,
            "gpu/mem_total_gb": mem.total / 1024 ** 3,
            "gpu/power_w": power_mw / 1000.0,
            "gpu/util_pct": util.gpu,
            "gpu/mem_util_pct": util.memory,
            "gpu/temp_c": pynvml.nvmlDeviceGetTemperature(self.handle, pynvml.NVML_TEMPERATURE_GPU),
        }

    def log(self, step):
        stats = self.snapshot()
        logger.info("step %d | %s | mem %.1f/%.1f GB | %.0f W | util %d%%", step, self.name,
                    stats["gpu/mem_used_gb"], stats["gpu/mem_total_gb"], stats["gpu/power_w"],
                    stats["gpu/util_pct"])
        return stats

    def close(self):
        pynvml.nvmlShutdown()
