"""Per-request records: the hot-path buffer and the Parquet sink.

One row per measured request, with exactly the columns DESIGN.md names
(`servebench.results.RECORD_SCHEMA`, the contract every reader shares). Times are wall
clock seconds (epoch) as float64; latency is seconds. The generator appends to `array`
columns (no per-request objects kept) and hands full chunks to a sink off the event
loop; the Parquet sink writes each chunk as a row group, so memory stays flat and a run
that fails keeps every chunk written before it failed.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.clients.base import ErrorKind
from servebench.common.parquet import ParquetFile
from servebench.results import RECORD_SCHEMA, conform_records

# Error kinds travel through the hot path as small ints; code 0 means success.
ERROR_KINDS: tuple[ErrorKind, ...] = tuple(ErrorKind)
ERROR_CODE: dict[ErrorKind, int] = {kind: i + 1 for i, kind in enumerate(ERROR_KINDS)}
OK = 0
TIMEOUT_CODE = ERROR_CODE[ErrorKind.TIMEOUT]
CLIENT_ERROR_CODE = ERROR_CODE[ErrorKind.CLIENT_ERROR]
WRONG_ANSWER_CODE = ERROR_CODE[ErrorKind.WRONG_ANSWER]
_KIND_BY_CODE = np.array([None, *(k.value for k in ERROR_KINDS)], dtype=object)
# Codes index this dictionary (code 0 is masked to null), so the string column is built in
# Arrow's C++ instead of from Python objects while the event loop waits for the GIL.
_KIND_DICTIONARY = pa.array(["", *(k.value for k in ERROR_KINDS)], type=pa.string())


def kind_name(code: int) -> str | None:
    return _KIND_BY_CODE[code]


def kind_code(name: str | None) -> int:
    return OK if name is None else ERROR_CODE[ErrorKind(name)]


@dataclass
class Chunk:
    """A block of records in raw form: perf_counter times, error codes.

    `latency_from_send` says which definition of latency applies (closed loop) so the
    conversion to records computes it once for the whole block.
    """

    seq: np.ndarray
    intended: np.ndarray
    send: np.ndarray
    completion: np.ndarray
    code: np.ndarray
    request_bytes: np.ndarray
    response_bytes: np.ndarray
    # The client-side split (clients.base.InferResult), seconds; NaN where not timed.
    # A chunk built without them (Locust, older callers) has NaN throughout.
    client_send: np.ndarray | None = None
    client_recv: np.ndarray | None = None
    # The model of a mix each request went to: 1 + its index in the mix, 0 where the
    # load has one model. Not buffered per request: the engine fills it from `seq` when it
    # hands the chunk over (`Mix.codes`). A chunk built without it has 0 throughout.
    model: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("client_send", "client_recv"):
            if getattr(self, name) is None:
                setattr(self, name, np.full(self.seq.size, np.nan))
        if self.model is None:
            self.model = np.zeros(self.seq.size, np.int8)

    def __len__(self) -> int:
        return int(self.seq.size)


# RecordBuffer's columns: seq, intended, send, completion, code, request and response
# bytes, client send and client receive.
_DTYPES = (np.int64, *(np.float64,) * 3, np.int8, np.int64, np.int64, np.float64, np.float64)


class RecordBuffer:
    """Append-only columns for the hot path; `take()` hands them over as a `Chunk`.

    `array.array` appends store machine values (no Python object survives the call) and
    convert to numpy without copying, which is why they are used instead of lists.
    """

    __slots__ = ("_cols",)

    def __init__(self) -> None:
        self._cols = self._fresh()

    @staticmethod
    def _fresh() -> tuple[array, ...]:
        return (
            array("q"),
            array("d"),
            array("d"),
            array("d"),
            array("b"),
            array("q"),
            array("q"),
            array("d"),
            array("d"),
        )

    def add(
        self,
        seq: int,
        intended: float,
        send: float,
        completion: float,
        code: int,
        request_bytes: int,
        response_bytes: int,
        client_send: float = math.nan,
        client_recv: float = math.nan,
    ) -> int:
        """Append one record; returns the number buffered so the caller can flush."""
        c = self._cols
        c[0].append(seq)
        c[1].append(intended)
        c[2].append(send)
        c[3].append(completion)
        c[4].append(code)
        c[5].append(request_bytes)
        c[6].append(response_bytes)
        c[7].append(client_send)
        c[8].append(client_recv)
        return len(c[0])

    def __len__(self) -> int:
        return len(self._cols[0])

    def take(self) -> Chunk:
        cols, self._cols = self._cols, self._fresh()
        seq, intended, send, completion, code, req, resp, client_send, client_recv = (
            np.frombuffer(col, dtype=dtype) if len(col) else np.empty(0, dtype)
            for col, dtype in zip(
                cols,
                _DTYPES,
                strict=True,
            )
        )
        return Chunk(seq, intended, send, completion, code, req, resp, client_send, client_recv)


@dataclass(frozen=True)
class Clock:
    """Maps perf_counter readings to wall-clock seconds, fixed once per run."""

    wall0: float
    perf0: float

    def wall(self, perf: np.ndarray) -> np.ndarray:
        return perf - self.perf0 + self.wall0


def chunk_to_batch(
    chunk: Chunk,
    *,
    trial_id: str,
    batch_size: int,
    clock: Clock,
    latency_from_send: bool,
    models: Sequence[str] = (),
) -> pa.RecordBatch:
    """Build the Arrow record batch for a chunk (vectorised; runs off the event loop).

    `models` names a mix's models in the order of its codes (`Chunk.model`); a load of one
    model leaves the `model` column null."""
    n = len(chunk)
    start = chunk.send if latency_from_send else chunk.intended
    latency = chunk.completion - start
    ok = chunk.code == OK
    kinds = pa.DictionaryArray.from_arrays(chunk.code, _KIND_DICTIONARY, mask=ok)
    trial = pa.DictionaryArray.from_arrays(np.zeros(n, np.int8), pa.array([trial_id]))
    assert chunk.model is not None
    model = pa.DictionaryArray.from_arrays(
        chunk.model, pa.array(["", *models], type=pa.string()), mask=chunk.model == 0
    )
    return pa.RecordBatch.from_arrays(
        [
            trial.cast(pa.string()),
            pa.array(chunk.seq),
            pa.array(clock.wall(chunk.intended)),
            pa.array(clock.wall(chunk.send)),
            pa.array(clock.wall(chunk.completion)),
            pa.array(latency),
            pa.array(ok),
            kinds.cast(pa.string()),
            pa.array(np.full(n, batch_size, dtype=np.int32)),
            pa.array(chunk.request_bytes),
            pa.array(chunk.response_bytes),
            # NaN (not timed) is written as null: "not measured", not a number.
            pa.array(chunk.client_send, from_pandas=True),
            pa.array(chunk.client_recv, from_pandas=True),
            model.cast(pa.string()),
            pa.nulls(n, pa.int32()),  # generator: a gang's coordinator fills it (`load.gang`)
        ],
        schema=RECORD_SCHEMA,
    )


class RecordSink(Protocol):
    """Where record batches go; `write` is called from one writer thread, in order."""

    def write(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None: ...


class ParquetRecordWriter(ParquetFile):
    """Streams record batches into one Parquet file, one row group per batch.

    The file is valid once closed; `close` runs in the engine's `finally`, so an
    exception or a stop still leaves a readable file with everything measured so far.
    A hard kill (SIGKILL, power loss) loses the footer and with it the file: Parquet has
    no partial-file recovery, which is the price of the format DESIGN.md chose.
    """

    def __init__(self, path: str | Path, *, compression: str = "zstd"):
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise ValueError(f"records file {self.path}: is a directory")
        if not self.path.parent.is_dir():
            raise ValueError(f"records file {self.path}: folder {self.path.parent} does not exist")
        super().__init__(self.path, RECORD_SCHEMA, compression=compression)
        self._lock = threading.Lock()
        self.rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        with self._lock:
            if self._writer is None:
                raise RuntimeError(f"records file {self.path}: already closed")
            if batch.num_rows:
                self._writer.write_batch(batch)
                self.rows += batch.num_rows

    def close(self) -> None:
        with self._lock:
            super().close()


class MemoryRecordSink:
    """Keeps batches in memory: for tests and short runs that want a table back."""

    def __init__(self) -> None:
        self.batches: list[pa.RecordBatch] = []

    def write(self, batch: pa.RecordBatch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        pass

    def table(self) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=RECORD_SCHEMA)


def read_records(path: str | Path, trial_id: str | None = None) -> pa.Table:
    """Read a records file (optionally one trial) and check it has the record columns."""
    path = Path(path)
    filters = [("trial_id", "==", trial_id)] if trial_id is not None else None
    table = pq.read_table(path, filters=filters)
    return conform_records(table, f"records file {path}")
