"""End-to-end training, as in the seed paper: a few epochs of a model_zoo model read from
a file-backed dataset, per-batch and per-epoch time, and the first epoch against the rest.

The paper found MXNet's first epoch up to 77 % faster in the container, an effect of I/O
and caching rather than of compute. To measure it, the dataset lives in files (written
once under the bind-mounted scratch folder, so both sides read the same bytes), the page
cache is emptied before the first epoch, and every sample is read from its file with a
positioned read while the DataLoader runs in the training process (num_workers=0), so a
batch's time splits exactly into loading and computing.

The data are learnable (Gaussian noise images, each class tinted by its own colour: a
fixed offset per channel, which a conv net with global pooling can see), so the loss falls
and a probe that stopped training would show it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from model_zoo.spec import ModelSpec
from model_zoo.torch_builder import build_torch
from servebench.common.quantiles import percentile
from servebench.overhead.measure import Better, Measurement
from servebench.overhead.pagecache import Eviction, evict
from servebench.overhead.probes import ProbeContext

PROBE = "training"
SEED = 0
#: A small conv net on 32x32 RGB images: enough compute per sample that a batch is not
#: all Python overhead, little enough that reading the data is a visible share of it.
MODEL = ModelSpec(layer_type="conv", depth=2, width=16, input_shape=(32, 32, 3), num_outputs=10)
DATASET_FORMAT = 1  # bump when the files' layout changes, so old copies are rewritten


@dataclass(frozen=True)
class Plan:
    """How much to train: dataset size, batch size, epochs (at least two: first + rest)."""

    samples: int
    batch_size: int
    epochs: int


QUICK = Plan(samples=1024, batch_size=64, epochs=3)
FULL = Plan(samples=8192, batch_size=64, epochs=4)


@dataclass(frozen=True)
class DatasetFiles:
    """The dataset on disk: float32 samples (raw, C order) and int64 labels, one file each."""

    inputs: Path
    labels: Path
    samples: int
    shape: tuple[int, ...]

    @property
    def sample_bytes(self) -> int:
        return math.prod(self.shape) * 4

    @property
    def paths(self) -> list[Path]:
        return [self.inputs, self.labels]


def ensure_dataset(folder: Path, samples: int, spec: ModelSpec, seed: int = SEED) -> DatasetFiles:
    """The dataset under `folder`, written only if no complete copy of this size is there.

    The manifest is written last, so a write cut short is rewritten on the next run
    instead of being read as data.
    """
    shape = tuple(spec.served_input_shape)
    files = DatasetFiles(folder / "inputs.f32", folder / "labels.i64", samples, shape)
    manifest = {
        "format": DATASET_FORMAT,
        "samples": samples,
        "shape": list(shape),
        "classes": spec.num_outputs,
        "seed": seed,
    }
    manifest_path = folder / "manifest.json"
    if _complete(manifest_path, manifest, files):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)
    _write_samples(files, spec.num_outputs, seed)
    manifest_path.write_text(json.dumps(manifest) + "\n")
    return files


def _complete(manifest_path: Path, manifest: dict, files: DatasetFiles) -> bool:
    try:
        on_disk = json.loads(manifest_path.read_text())
        sizes = (files.inputs.stat().st_size, files.labels.stat().st_size)
    except (OSError, ValueError):
        return False
    return on_disk == manifest and sizes == (files.samples * files.sample_bytes, files.samples * 8)


def _write_samples(files: DatasetFiles, classes: int, seed: int, chunk: int = 1024) -> None:
    rng = np.random.default_rng(seed)
    # One colour per class (channels last), broadcast over every pixel of its images.
    colours = rng.normal(0.0, 0.5, size=(classes, 1, 1, files.shape[-1])).astype(np.float32)
    with files.inputs.open("wb") as inputs, files.labels.open("wb") as labels:
        for start in range(0, files.samples, chunk):
            count = min(chunk, files.samples - start)
            label = rng.integers(0, classes, size=count)
            noise = rng.normal(0.0, 1.0, size=(count, *files.shape)).astype(np.float32)
            inputs.write((noise + colours[label]).tobytes())
            labels.write(label.astype(np.int64).tobytes())
        for handle in (inputs, labels):
            handle.flush()
            os.fsync(handle.fileno())


class FileSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Sample i read from the files at its offset on every access: no copy of the data
    is kept in the process, so what the epoch reads comes from the page cache or disk."""

    def __init__(self, files: DatasetFiles) -> None:
        self.files = files
        self._fds: tuple[int, int] | None = None

    def __len__(self) -> int:
        return self.files.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._fds is None:
            self._fds = (_open(self.files.inputs), _open(self.files.labels))
        inputs_fd, labels_fd = self._fds
        size = self.files.sample_bytes
        sample = _read(inputs_fd, size, index * size)
        label = _read(labels_fd, 8, index * 8)
        x = torch.frombuffer(sample, dtype=torch.float32).view(self.files.shape)
        return x, torch.frombuffer(label, dtype=torch.int64)[0]

    def close(self) -> None:
        if self._fds is not None:
            for fd in self._fds:
                os.close(fd)
            self._fds = None


def _open(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _read(fd: int, size: int, offset: int) -> bytearray:
    buffer = bytearray(size)
    got = os.preadv(fd, [buffer], offset)
    if got != size:
        raise OSError(f"short read: {got} of {size} bytes at offset {offset}")
    return buffer


@dataclass(frozen=True)
class Batch:
    """One training step: seconds waiting for the batch, seconds computing it, its loss."""

    epoch: int
    load_s: float
    compute_s: float
    samples: int
    loss: float

    @property
    def total_s(self) -> float:
        return self.load_s + self.compute_s


@dataclass(frozen=True)
class Epoch:
    wall_s: float
    cpu_s: float


def train(files: DatasetFiles, plan: Plan, seed: int = SEED) -> tuple[list[Batch], list[Epoch]]:
    """Train `MODEL` on the files for `plan.epochs` epochs; every batch and epoch timed."""
    model = build_torch(MODEL, seed=seed).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    samples = FileSamples(files)
    order = torch.Generator().manual_seed(seed)
    loader = DataLoader(samples, batch_size=plan.batch_size, shuffle=True, generator=order)
    batches: list[Batch] = []
    epochs: list[Epoch] = []
    try:
        for epoch in range(plan.epochs):
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            batch_iter = iter(loader)
            while True:
                load_start = time.perf_counter()
                try:
                    x, y = next(batch_iter)
                except StopIteration:
                    break
                compute_start = time.perf_counter()
                loss = _step(model, optimizer, loss_fn, x, y)
                load_s, compute_s = compute_start - load_start, time.perf_counter() - compute_start
                batches.append(Batch(epoch, load_s, compute_s, len(y), loss))
            epochs.append(Epoch(time.perf_counter() - wall_start, time.process_time() - cpu_start))
    finally:
        samples.close()
    return batches, epochs


def _step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
) -> float:
    """One SGD step; returns the batch's loss (reading it waits for the step to finish)."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def run(context: ProbeContext) -> list[Measurement]:
    """Write (once) the dataset, evict it from the page cache, train, report."""
    plan = QUICK if context.quick else FULL
    files = ensure_dataset(context.scratch / "training-data", plan.samples, MODEL)
    eviction = evict(files.paths)
    batches, epochs = train(files, plan)
    return measurements(batches, epochs, plan, files, eviction)


def measurements(
    batches: list[Batch], epochs: list[Epoch], plan: Plan, files: DatasetFiles, eviction: Eviction
) -> list[Measurement]:
    """The probe's figures: the first epoch (cold cache) against the median of the rest
    (warm), per-batch time and loading share of the warm epochs, warm throughput."""
    if len(epochs) < 2:
        raise ValueError(f"training needs at least two epochs to compare, got {len(epochs)}")
    first, rest = epochs[0], epochs[1:]
    rest_wall = statistics.median(e.wall_s for e in rest)
    rest_cpu = statistics.median(e.cpu_s for e in rest)
    warm = [b for b in batches if b.epoch > 0]
    cold = [b for b in batches if b.epoch == 0]
    warm_times = np.array([b.total_s for b in warm])
    losses_last_epoch = [b.loss for b in batches if b.epoch == len(epochs) - 1]
    detail: dict[str, str | float | int] = {
        "model": MODEL.id,
        **asdict(plan),
        "dataset_bytes": files.samples * (files.sample_bytes + 8),
        "torch_threads": torch.get_num_threads(),
        "num_workers": 0,
        "eviction": eviction.method,
        "eviction_note": eviction.note,
        "cached_fraction_after_eviction": eviction.cached_fraction,
        "loss_first_batch": batches[0].loss,
        "loss_last_epoch": statistics.fmean(losses_last_epoch),
    }

    def figure(
        metric: str, value: float, unit: str, better: Better, **timing: float
    ) -> Measurement:
        return Measurement(PROBE, metric, float(value), unit, better, detail=dict(detail), **timing)

    warm_samples = sum(b.samples for b in warm)
    return [
        figure("epoch1_s", first.wall_s, "s", "lower", cpu_s=first.cpu_s, wall_s=first.wall_s),
        figure("epoch_rest_median_s", rest_wall, "s", "lower", cpu_s=rest_cpu, wall_s=rest_wall),
        figure("first_epoch_ratio", first.wall_s / rest_wall, "x", "lower"),
        figure("batch_median_s", float(np.median(warm_times)), "s", "lower"),
        figure("batch_p90_s", percentile(warm_times, 90), "s", "lower"),
        figure("load_share_epoch1_pct", _load_share(cold), "%", "lower"),
        figure("load_share_rest_pct", _load_share(warm), "%", "lower"),
        figure("samples_per_s", warm_samples / sum(e.wall_s for e in rest), "samples/s", "higher"),
    ]


def _load_share(batches: list[Batch]) -> float:
    """Percentage of the batches' time spent waiting for data."""
    return 100.0 * sum(b.load_s for b in batches) / sum(b.total_s for b in batches)
