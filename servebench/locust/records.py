"""Per-request records of a Locust run, kept per trial until a swarm ends.

A trial here is one swarm × one kind of request (server, protocol, model, batch size,
link): a swarm normally has one, a locustfile mixing user classes has several. A mix of
models (`locust.mix`) is one trial, as in a scenario run: each request's model is kept as
its code in the mix (1 + its index; 0 for one model), the records' `model` column. Rows go
into `servebench.load.records.RecordBuffer`s (machine values in `array`s, no object per
request), one per trial, and leave as the same `Chunk`s the load engine produces, so the
records file has exactly `RECORD_SCHEMA`.

Locust users are closed loop: a request is sent when the previous answer came back, so
there is no schedule and the intended send time is the actual one.

With Locust's `--processes`/workers, each worker drains its rows into the report it sends
the master (`drain` → plain lists, which Locust's msgpack messages carry) and the master
`extend`s its own collector with them.
"""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from servebench.load.records import OK, Chunk, RecordBuffer, kind_code


@dataclass(frozen=True)
class Coordinates:
    """What a request was; requests with equal coordinates in one swarm form one trial."""

    server: str
    api: str
    protocol: str
    model: str
    version: str
    batch_size: int
    link: str


class RecordCollector:
    """Rows per trial, added from request events (one gevent thread: no lock needed)."""

    def __init__(self) -> None:
        self._buffers: dict[Coordinates, RecordBuffer] = {}
        self._kept: dict[Coordinates, list[Chunk]] = {}
        self._next_seq: dict[Coordinates, int] = {}
        self._models: dict[Coordinates, array] = {}  # each buffered request's model code

    def __len__(self) -> int:
        kept = sum(len(chunk) for chunks in self._kept.values() for chunk in chunks)
        return kept + sum(len(buffer) for buffer in self._buffers.values())

    def add(
        self,
        coordinates: Coordinates,
        send_time: float,
        completion_time: float,
        error_kind: str | None,
        request_bytes: int,
        response_bytes: int,
        model: int = 0,
    ) -> None:
        """One request; times are wall-clock seconds, `error_kind` None for a success,
        `model` the code of its model in a mix (0: one model)."""
        buffer = self._buffer(coordinates)
        seq = self._next_seq.get(coordinates, 0)
        self._next_seq[coordinates] = seq + 1
        code = OK if error_kind is None else kind_code(error_kind)
        buffer.add(seq, send_time, send_time, completion_time, code, request_bytes, response_bytes)
        self._models[coordinates].append(model)

    def _buffer(self, coordinates: Coordinates) -> RecordBuffer:
        buffer = self._buffers.get(coordinates)
        if buffer is None:
            buffer = self._buffers[coordinates] = RecordBuffer()
            self._models[coordinates] = array("b")
        return buffer

    def snapshot(self) -> list[tuple[Coordinates, Chunk]]:
        """Every trial's rows so far, in first-seen order; the collector keeps them."""
        for coords, buffer in self._buffers.items():
            if len(buffer):
                models = np.array(self._models[coords], np.int8)
                self._models[coords] = array("b")
                chunk = replace(buffer.take(), model=models)
                self._kept.setdefault(coords, []).append(chunk)
        return [(coords, concat(chunks)) for coords, chunks in self._kept.items()]

    def take(self) -> list[tuple[Coordinates, Chunk]]:
        """`snapshot()`, after which the collector starts empty again."""
        taken = self.snapshot()
        self.clear()
        return taken

    def clear(self) -> None:
        self._buffers.clear()
        self._kept.clear()
        self._next_seq.clear()
        self._models.clear()

    def drain(self) -> list[dict[str, Any]]:
        """`take()` as plain lists, for a worker's report to the master."""
        return [
            {
                "coordinates": asdict(coords),
                "send": chunk.send.tolist(),
                "completion": chunk.completion.tolist(),
                "code": chunk.code.tolist(),
                "request_bytes": chunk.request_bytes.tolist(),
                "response_bytes": chunk.response_bytes.tolist(),
                "model": chunk.model.tolist() if chunk.model is not None else [],
            }
            for coords, chunk in self.take()
        ]

    def extend(self, drained: list[dict[str, Any]]) -> None:
        """Add what a worker drained (sequence numbers continue this collector's own)."""
        for part in drained:
            coords = Coordinates(**part["coordinates"])
            buffer = self._buffer(coords)
            seq = self._next_seq.get(coords, 0)
            rows = zip(
                part["send"],
                part["completion"],
                part["code"],
                part["request_bytes"],
                part["response_bytes"],
                strict=True,
            )
            for send, completion, code, request_bytes, response_bytes in rows:
                buffer.add(seq, send, send, completion, code, request_bytes, response_bytes)
                seq += 1
            self._next_seq[coords] = seq
            self._models[coords].extend(part["model"])


def concat(chunks: list[Chunk]) -> Chunk:
    """One chunk holding the rows of several, in order."""
    if len(chunks) == 1:
        return chunks[0]
    return Chunk(
        **{f.name: np.concatenate([getattr(c, f.name) for c in chunks]) for f in fields(Chunk)}
    )
