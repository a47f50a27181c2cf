"""One Parquet file written a row group at a time as data arrives.

Per-request records (`load.records`) and telemetry (`telemetry.rows`) both stream into
Parquet this way. A Parquet file is readable only once its footer is written, so closing
it is what keeps what was measured: here closing is idempotent and a `with` block closes
the file whatever ends it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq


class ParquetFile:
    """An open `pq.ParquetWriter` of `schema` at `path` (`options` go to it) until closed.

    Subclasses write through `_writer`, which is None once the file is closed.
    """

    def __init__(self, path: str | Path, schema: pa.Schema, **options: Any) -> None:
        self.path = Path(path)
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self.path, schema, **options)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
