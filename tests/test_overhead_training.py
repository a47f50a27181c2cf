"""The training probe: real training from files, cold first epoch, and eviction that works."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from servebench.common.linux import cached_pages
from servebench.overhead.pagecache import Eviction, cached_fraction, evict
from servebench.overhead.probes import ProbeContext
from servebench.overhead.probes.training import (
    MODEL,
    QUICK,
    FileSamples,
    Plan,
    ensure_dataset,
    measurements,
    run,
    train,
)

METRICS = {
    "epoch1_s": "lower",
    "epoch_rest_median_s": "lower",
    "first_epoch_ratio": "lower",
    "batch_median_s": "lower",
    "batch_p90_s": "lower",
    "load_share_epoch1_pct": "lower",
    "load_share_rest_pct": "lower",
    "samples_per_s": "higher",
}


def test_quick_run_trains_from_evicted_files_and_reports_every_figure(tmp_path: Path) -> None:
    context = ProbeContext(scratch=tmp_path / "scratch", overlay=tmp_path / "overlay", quick=True)
    figures = {m.metric: m for m in run(context)}
    assert {name: m.better for name, m in figures.items()} == METRICS
    for m in figures.values():
        assert m.probe == "training"
        assert math.isfinite(m.value) and m.value > 0, m
    assert figures["batch_median_s"].value <= figures["batch_p90_s"].value
    assert 0 < figures["load_share_rest_pct"].value < 100
    epoch1 = figures["epoch1_s"]
    assert epoch1.cpu_s is not None and epoch1.cpu_s > 0
    assert epoch1.wall_s == epoch1.value
    detail = epoch1.detail
    print(f"training quick: { ({k: round(m.value, 4) for k, m in figures.items()}) } {detail}")
    # Training really happened: the loss fell from chance level (ln 10 = 2.30).
    assert detail["loss_last_epoch"] < 0.8 * detail["loss_first_batch"]
    # The first epoch started cold: none of the dataset's pages were cached.
    assert detail["eviction"] == "fadvise"
    assert detail["cached_fraction_after_eviction"] == 0.0
    assert detail["torch_threads"] >= 1
    assert (detail["samples"], detail["epochs"]) == (QUICK.samples, QUICK.epochs)


def test_the_dataset_is_written_once_and_rewritten_when_incomplete(tmp_path: Path) -> None:
    files = ensure_dataset(tmp_path, 100, MODEL)
    assert files.inputs.stat().st_size == 100 * 32 * 32 * 3 * 4
    assert files.labels.stat().st_size == 100 * 8
    written = files.inputs.stat().st_mtime_ns
    assert ensure_dataset(tmp_path, 100, MODEL) == files
    assert files.inputs.stat().st_mtime_ns == written  # reused, not rewritten
    with files.inputs.open("r+b") as handle:
        handle.truncate(1000)  # a write cut short
    ensure_dataset(tmp_path, 100, MODEL)
    assert files.inputs.stat().st_size == 100 * 32 * 32 * 3 * 4
    bigger = ensure_dataset(tmp_path, 200, MODEL)
    assert bigger.labels.stat().st_size == 200 * 8


def test_samples_are_read_from_the_files_at_their_offsets(tmp_path: Path) -> None:
    files = ensure_dataset(tmp_path, 50, MODEL)
    inputs = np.fromfile(files.inputs, dtype=np.float32).reshape(50, 32, 32, 3)
    labels = np.fromfile(files.labels, dtype=np.int64)
    assert set(labels) <= set(range(MODEL.num_outputs)) and len(set(labels)) > 1
    samples = FileSamples(files)
    try:
        for index in (0, 17, 49):
            x, y = samples[index]
            np.testing.assert_array_equal(x.numpy(), inputs[index])
            assert int(y) == labels[index]
    finally:
        samples.close()


def test_a_plan_of_one_epoch_has_nothing_to_compare(tmp_path: Path) -> None:
    files = ensure_dataset(tmp_path, 64, MODEL)
    plan = Plan(samples=64, batch_size=32, epochs=1)
    batches, epochs = train(files, plan)
    assert len(batches) == 2 and len(epochs) == 1
    with pytest.raises(ValueError, match="at least two epochs"):
        measurements(batches, epochs, plan, files, Eviction("none", "not tried", math.nan))


def _cached_file(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.write(os.urandom(size))
        handle.flush()
        os.fsync(handle.fileno())  # dirty pages cannot be evicted; clean ones can
    path.read_bytes()  # in the page cache now
    return path


def test_mincore_sees_which_pages_are_cached(tmp_path: Path) -> None:
    path = _cached_file(tmp_path / "data", 64 * 4096)
    assert cached_pages(path) == (64, 64)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert cached_pages(path) == (0, 64)
        os.pread(fd, 4096, 10 * 4096)
    finally:
        os.close(fd)
    cached, pages = cached_pages(path)
    assert pages == 64 and 1 <= cached < 64
    assert cached_pages(_cached_file(tmp_path / "empty", 0)) == (0, 0)
    assert math.isnan(cached_fraction([tmp_path / "empty"]))


def test_files_are_evicted_with_fadvise_without_touching_drop_caches(tmp_path: Path) -> None:
    """Both sides evict the same way (a container's /proc/sys is read-only): fadvise
    alone must empty the files' pages, and drop_caches (here a folder, which cannot be
    written) is never needed."""
    paths = [_cached_file(tmp_path / name, 256 * 1024) for name in ("a", "b")]
    assert cached_fraction(paths) == 1.0
    result = evict(paths, drop_caches=tmp_path)  # a folder: writing it fails
    assert result.method == "fadvise"
    assert result.note == ""
    assert result.cached_fraction == 0.0


def test_when_no_method_works_the_eviction_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _cached_file(tmp_path / "a", 4096)

    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    result = evict([path], drop_caches=tmp_path)
    assert result.method == "none"
    assert "posix_fadvise: Operation not permitted" in result.note
    assert str(tmp_path) in result.note
    assert result.cached_fraction == 1.0
