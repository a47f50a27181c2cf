"""The settings each server kind takes, as a scenario's `settings:` spells them.

One class per kind of server configuration (Triton's model config, TF Serving's flags and
batching parameters); a list value means "try each", so one class is a settings matrix and
`combinations()` lists the server settings a scenario runs. Each kind in `servers.kinds`
names its class; the scenario schema validates a server's `settings:` with it, and the
kind's builder turns one combination into what `model_zoo` writes and the server is
started with.

Every number is bounded by `common.limits`' ceilings: beyond them a value is a slip (an
extra zero), refused at `scenario validate` time rather than discovered as an hour-long or
memory-filling run.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field

from servebench.common.limits import MAX_BATCH, MAX_DELAY_US, MAX_THREADS
from servebench.common.validation import OnePassModel

if TYPE_CHECKING:
    from model_zoo.export.tfs_batching import TfsBatching
    from model_zoo.export.triton import TritonSettings

Batch = Annotated[int, Field(gt=0, le=MAX_BATCH)]
DelayUs = Annotated[int, Field(ge=0, le=MAX_DELAY_US)]
Threads = Annotated[int, Field(ge=0, le=MAX_THREADS)]
Instances = Annotated[int, Field(gt=0, le=MAX_THREADS)]

# A setting to try: one value, or a non-empty list of them ("try each").
BoolEach = bool | Annotated[list[bool], Field(min_length=1)]
BatchEach = Batch | Annotated[list[Batch], Field(min_length=1)]
DelayEach = DelayUs | Annotated[list[DelayUs], Field(min_length=1)]
ThreadsEach = Threads | Annotated[list[Threads], Field(min_length=1)]
InstancesEach = Instances | Annotated[list[Instances], Field(min_length=1)]


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


class SettingsMatrix(OnePassModel):
    """A kind's settings, each one value or a list to try; strict like a scenario section.

    Every matrix has `max_batch_size`: the scenario keeps each batch size to the
    combinations that serve it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def combinations(self) -> list[dict[str, Any]]:
        """Each distinct setting to run, in field order (those that mean the same, once)."""
        return _unique(self.normalized(c) for c in _combinations(self))

    def normalized(self, combo: dict[str, Any]) -> dict[str, Any]:
        """`combo` as the setting it means: values a switched-off feature ignores are set to
        one value, so combinations that differ only there are one setting."""
        return combo

    def axes(self) -> dict[str, list[Any]]:
        """The settings this matrix varies and their values in the order given: the
        dimensions a configuration search (`scenario.tune`) moves along, one neighbour
        being the next or previous value in a list."""
        return {name: values for name, values in _choices(self).items() if len(values) > 1}

    def at(self, choice: Mapping[str, Any]) -> dict[str, Any]:
        """The setting (normalized) whose varied settings take the values in `choice` and
        every other setting its one value."""
        fixed = {name: values[0] for name, values in _choices(self).items()}
        return self.normalized({**fixed, **choice})


class TritonSettingsMatrix(SettingsMatrix):
    """Triton model-config settings; a list means "try each" (the settings matrix)."""

    max_batch_size: BatchEach = 32
    dynamic_batching: BoolEach = True
    max_queue_delay_us: DelayEach = 0
    preferred_batch_sizes: list[Batch] = Field(default_factory=list)
    instance_count: InstancesEach = 1
    instance_kind: Literal["KIND_CPU", "KIND_GPU"] = "KIND_CPU"

    def normalized(self, combo: dict[str, Any]) -> dict[str, Any]:
        # Queue delay and preferred sizes mean nothing without the dynamic batcher, so
        # "batching off" is one setting, not one per delay.
        if combo["dynamic_batching"]:
            return combo
        return {**combo, "max_queue_delay_us": 0, "preferred_batch_sizes": []}

    @staticmethod
    def model_config_of(values: Mapping[str, Any]) -> TritonSettings:
        """One combination as the model config `model_zoo` writes for every model."""
        from model_zoo.export.triton import TritonSettings

        return TritonSettings(
            max_batch_size=values["max_batch_size"],
            dynamic_batching=values["dynamic_batching"],
            preferred_batch_sizes=tuple(values["preferred_batch_sizes"]),
            max_queue_delay_microseconds=values["max_queue_delay_us"],
            instance_count=values["instance_count"],
            instance_kind=values["instance_kind"],
        )


class TfsSettingsMatrix(SettingsMatrix):
    """TF Serving flags and batching parameters; a list means "try each"."""

    enable_batching: BoolEach = False
    max_batch_size: BatchEach = 32
    batch_timeout_us: DelayEach = 1000
    num_batch_threads: InstancesEach = 2
    max_enqueued_batches: Annotated[int, Field(gt=0, le=1_000_000)] = 100
    rest_api_num_threads: Instances | None = None
    intra_op_threads: ThreadsEach = 0
    inter_op_threads: ThreadsEach = 0

    def normalized(self, combo: dict[str, Any]) -> dict[str, Any]:
        # Batching parameters mean nothing with batching off: one setting, at the defaults.
        if combo["enable_batching"]:
            return combo
        defaults = {k: TfsSettingsMatrix.model_fields[k].default for k in _TFS_BATCHING}
        return {**combo, **defaults}

    @staticmethod
    def batching_of(values: Mapping[str, Any]) -> TfsBatching | None:
        """One combination's batching parameters (None: batching off)."""
        from model_zoo.export.tfs_batching import TfsBatching

        if not values["enable_batching"]:
            return None
        return TfsBatching(
            max_batch_size=values["max_batch_size"],
            batch_timeout_micros=values["batch_timeout_us"],
            num_batch_threads=values["num_batch_threads"],
            max_enqueued_batches=values["max_enqueued_batches"],
        )


_TFS_BATCHING = ("max_batch_size", "batch_timeout_us", "num_batch_threads", "max_enqueued_batches")


def _unique(combos: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for combo in combos:
        seen.setdefault(json.dumps(combo, sort_keys=True), combo)
    return list(seen.values())


def _choices(settings: SettingsMatrix) -> dict[str, list[Any]]:
    """Each setting's values to try (a list is "try each"; preferred sizes are one value)."""
    return {
        n: as_list(getattr(settings, n)) if n != "preferred_batch_sizes" else [getattr(settings, n)]
        for n in type(settings).model_fields
    }


def _combinations(settings: SettingsMatrix) -> list[dict[str, Any]]:
    """The cartesian product of list-valued settings, in field order."""
    choices = _choices(settings)
    names = list(choices)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices.values())]


def matrix_size(settings: SettingsMatrix) -> int:
    """Combinations before collapsing the ones that mean the same, counted without listing."""
    return math.prod(len(values) for values in _choices(settings).values())
