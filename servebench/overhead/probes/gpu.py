"""GPU kernels with torch: GEMM TFLOP/s per precision, host↔device copy bandwidth, and
the GPU's utilization (NVML) while the GEMM runs.

The seed paper ran GPU kernels on the host and in a container to show that the GPU
passes through without loss; a container that reaches the GPU through a slower path, or
not at all, shows up here. GPU work is timed with CUDA events (kernels run
asynchronously, so a host clock would time the launch). Without a CUDA device this probe
raises ProbeUnavailable, saying what torch and NVML each reported, and the report says
so; the CPU GEMM probe (`cpu_gemm`) runs everywhere.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from servebench.common.background import BackgroundThread
from servebench.overhead.measure import Measurement
from servebench.overhead.probes import ProbeContext, ProbeUnavailable

PROBE = "gpu"
QUICK_SIZES = (1024, 2048)
FULL_SIZES = (1024, 4096, 8192)
QUICK_COPY_BYTES = 64 << 20
FULL_COPY_BYTES = 256 << 20
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}

# Dense FLOP per clock per SM by compute capability, from NVIDIA's datasheet peaks
# (peak TFLOP/s / (SMs × boost clock)): FP32 on the CUDA cores, FP16/BF16 on the tensor
# cores. V100 and T4 (7.x) have no BF16. An architecture not listed gets no bound.
_FLOP_PER_CLOCK_PER_SM: dict[tuple[int, int], dict[str, int]] = {
    (7, 0): {"fp32": 128, "fp16": 1024},
    (7, 5): {"fp32": 128, "fp16": 1024},
    (8, 0): {"fp32": 128, "fp16": 2048, "bf16": 2048},
    (8, 6): {"fp32": 256, "fp16": 1024, "bf16": 1024},
    (8, 9): {"fp32": 256, "fp16": 1024, "bf16": 1024},
    (9, 0): {"fp32": 256, "fp16": 4096, "bf16": 4096},
    (10, 0): {"fp32": 256, "fp16": 8192, "bf16": 8192},
}


def _nvml() -> tuple[Any | None, str]:
    """pynvml, initialised, or None and why not (NVML_LibraryNotFound without a driver)."""
    try:
        import pynvml  # nvidia-ml-py; only this probe and telemetry need it

        pynvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
        return None, f"is not usable ({err})"
    return pynvml, f"sees {pynvml.nvmlDeviceGetCount()} GPU(s)"


def _torch_cuda_problem() -> str | None:
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no device"


@dataclass(frozen=True)
class Gpu:
    """The device the probe measures and what it knows about it for the peak bound."""

    index: int
    name: str
    capability: tuple[int, int]
    sms: int
    clock_mhz: float | None
    nvml_handle: Any | None
    nvml_state: str  # what NVML said, so a missing utilization figure is explained

    def peak_tflops(self, dtype: str) -> float | None:
        per_sm = _FLOP_PER_CLOCK_PER_SM.get(self.capability, {}).get(dtype)
        if per_sm is None or not self.clock_mhz:
            return None
        return self.sms * self.clock_mhz * 1e6 * per_sm / 1e12


def _open_gpu(nvml: Any | None, nvml_state: str) -> Gpu:
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    handle = _nvml_handle(nvml, str(props.uuid)) if nvml else None
    if nvml is not None and handle is None:
        nvml_state += f", none with torch's device UUID {props.uuid}"
    clock_mhz = None
    if handle is not None:
        clock_mhz = float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
    elif props.clock_rate:
        clock_mhz = props.clock_rate / 1000.0  # kHz
    return Gpu(
        index,
        props.name,
        (props.major, props.minor),
        props.multi_processor_count,
        clock_mhz,
        handle,
        f"NVML {nvml_state}",
    )


def _nvml_handle(nvml: Any, torch_uuid: str) -> Any | None:
    """NVML's handle for torch's device, matched by UUID (NVML numbers all GPUs, torch
    only those CUDA_VISIBLE_DEVICES shows, so the indices may differ)."""
    wanted = torch_uuid.removeprefix("GPU-").lower()
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        if uuid.removeprefix("GPU-").lower() == wanted:
            return handle
    return None


def _timed(work: Callable[[], None], repeats: int) -> float:
    """Seconds of GPU time for `repeats` calls of `work`, between two CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        work()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def _repeats_for(work: Callable[[], None], seconds: float) -> int:
    """How many calls of `work` take about `seconds`, from one timed call (after a warm-up
    that pays for cuBLAS's handle and heuristics)."""
    work()
    one = max(_timed(work, 1), 1e-6)
    return max(3, min(10_000, math.ceil(seconds / one)))


@contextmanager
def _fp32_precision() -> Iterator[None]:
    """FP32 matmuls in full precision (no TF32), so the FP32 figure is FP32 arithmetic."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _gemm(gpu: Gpu, dtype: str, n: int, seconds: float) -> Measurement:
    device = torch.device("cuda", gpu.index)
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    out = torch.empty(n, n, device=device, dtype=DTYPES[dtype])

    def work() -> None:
        torch.matmul(a, b, out=out)

    repeats = _repeats_for(work, seconds)
    cpu_start = time.process_time()
    elapsed = _timed(work, repeats)
    cpu = time.process_time() - cpu_start
    peak = gpu.peak_tflops(dtype)
    return Measurement(
        PROBE,
        f"gemm_{dtype}_n{n}_tflops",
        2.0 * n**3 * repeats / elapsed / 1e12,
        "TFLOP/s",
        "higher",
        cpu_s=cpu,
        wall_s=elapsed,
        detail={
            "gpu": gpu.name,
            "n": n,
            "repeats": repeats,
            "peak_bound_tflops": peak if peak is not None else math.nan,
            "capability": f"{gpu.capability[0]}.{gpu.capability[1]}",
            "sms": gpu.sms,
            "clock_mhz": gpu.clock_mhz or math.nan,
            "nvml": gpu.nvml_state,
        },
    )


def _copies(gpu: Gpu, size: int, seconds: float) -> list[Measurement]:
    """H2D and D2H bandwidth from pinned and from pageable host memory."""
    device_buffer = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", gpu.index))
    figures = []
    for memory in ("pinned", "pageable"):
        host = torch.empty(size, dtype=torch.uint8, pin_memory=memory == "pinned")
        host.fill_(1)  # touch every page, so the first copy does not pay for faulting
        for direction in ("h2d", "d2h"):
            work = _copy(host, device_buffer, direction, asynchronous=memory == "pinned")
            repeats = _repeats_for(work, seconds)
            elapsed = _timed(work, repeats)
            figures.append(
                Measurement(
                    PROBE,
                    f"copy_{direction}_{memory}_gbps",
                    size * repeats / elapsed / 1e9,
                    "GB/s",
                    "higher",
                    wall_s=elapsed,
                    detail={"gpu": gpu.name, "bytes": size, "repeats": repeats},
                )
            )
    return figures


def _copy(
    host: torch.Tensor, device: torch.Tensor, direction: str, asynchronous: bool
) -> Callable[[], None]:
    """One copy between the buffers; pinned memory lets it run as a DMA without staging."""
    source, target = (host, device) if direction == "h2d" else (device, host)

    def work() -> None:
        target.copy_(source, non_blocking=asynchronous)

    return work


class _UtilizationSampler(BackgroundThread):
    """Polls NVML's GPU utilization from a thread while the main thread keeps the GPU
    busy (NVML's figure is the busy share of the driver's last sample period)."""

    def __init__(self, nvml: Any, handle: Any, interval_s: float = 0.05) -> None:
        super().__init__("nvml-utilization")
        self._nvml, self._handle, self._interval_s = nvml, handle, interval_s
        self.samples: list[float] = []

    def run(self) -> None:
        while True:  # at least one sample, however short the work
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(float(rates.gpu))
            if self.stop.wait(self._interval_s):
                return


def _utilization(gpu: Gpu, nvml: Any, n: int, seconds: float) -> Measurement:
    """NVML utilization while FP16 GEMMs of size n run back to back for `seconds`."""
    device = torch.device("cuda", gpu.index)
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    out = torch.empty_like(a)

    def work() -> None:
        torch.matmul(a, b, out=out)

    repeats = _repeats_for(work, seconds)
    with _UtilizationSampler(nvml, gpu.nvml_handle) as sampler:
        _timed(work, repeats)
    return Measurement(
        PROBE,
        "gemm_utilization_pct",
        statistics.median(sampler.samples),
        "%",
        "higher",
        detail={"gpu": gpu.name, "samples": len(sampler.samples), "max": max(sampler.samples)},
    )


def run(context: ProbeContext) -> list[Measurement]:
    """GEMM per precision and size, copies, and NVML utilization (where NVML works)."""
    nvml, nvml_state = _nvml()
    try:
        problem = _torch_cuda_problem()
        if problem is not None:
            raise ProbeUnavailable(
                f"no GPU: torch sees no CUDA device ({problem}) and NVML {nvml_state}"
            )
        gpu = _open_gpu(nvml, nvml_state)
        sizes = QUICK_SIZES if context.quick else FULL_SIZES
        seconds = 0.1 if context.quick else 0.5
        native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        dtypes = [d for d in DTYPES if d != "bf16" or native_bf16]
        figures = []
        with _fp32_precision():
            for dtype in dtypes:
                figures += [_gemm(gpu, dtype, n, seconds) for n in sizes]
        figures += _copies(gpu, QUICK_COPY_BYTES if context.quick else FULL_COPY_BYTES, seconds)
        if nvml is not None and gpu.nvml_handle is not None:
            figures.append(_utilization(gpu, nvml, sizes[-1], 2 * seconds + 1.0))
        return figures
    finally:
        if nvml is not None:
            nvml.nvmlShutdown()
