"""GPU utilization, memory and power per GPU, read through NVML (nvidia-ml-py).

Machines without an NVIDIA driver are normal here (CPU runs, laptops): NVML failing to
initialise becomes `SamplerUnavailable("no GPU telemetry: ...")`, reported once.
"""

from __future__ import annotations

from servebench.telemetry.rows import Reading
from servebench.telemetry.sampler import SamplerUnavailable

NO_GPU = "no GPU telemetry"


class NvmlSampler:
    """Per GPU: `gpu_utilization` (0-1, busy fraction of the driver's last sample period),
    `gpu_memory_used_bytes`, `gpu_power_watts` (where the board reports it)."""

    source = "gpu"

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
            raise SamplerUnavailable(f"{NO_GPU}: NVML is not usable here ({err})") from None
        self._nvml = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            pynvml.nvmlShutdown()
            raise SamplerUnavailable(f"{NO_GPU}: NVML reports no GPU")
        self._gpus = []
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            self._gpus.append((handle, {"gpu": str(index), "name": name}))
        self._power_supported = True

    def sample(self) -> list[Reading]:
        nvml = self._nvml
        readings = []
        for handle, labels in self._gpus:
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            readings.append(Reading("gpu_utilization", util.gpu / 100.0, labels))
            readings.append(Reading("gpu_memory_used_bytes", float(memory.used), labels))
            if self._power_supported:
                try:
                    milliwatts = nvml.nvmlDeviceGetPowerUsage(handle)
                except nvml.NVMLError_NotSupported:
                    self._power_supported = False  # some boards never report power
                else:
                    readings.append(Reading("gpu_power_watts", milliwatts / 1000.0, labels))
        return readings

    def close(self) -> None:
        if self._gpus:
            self._gpus = []
            self._nvml.nvmlShutdown()
