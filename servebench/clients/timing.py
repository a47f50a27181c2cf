"""When an HTTP request's body has left the client: the "client send" end of the split.

aiohttp gives no return value or event for the moment a request is written; it writes a
body by calling its payload's `write_with_length`, in the task that sends the request.
`TimedBody` is that payload plus the time its write returned, one object per request (as
aiohttp makes one `BytesPayload` per request from bytes anyway, this costs nothing more
for the model clients). aiohttp's writer hands bytes to the transport and waits for it to
drain only past its buffer limit, so the time is when the kernel took the last bytes, or
— for a body larger than the socket's buffers — close to it: what perf_analyzer's HTTP
client times as send (libcurl having read the whole body) too.
"""

from __future__ import annotations

import math
from time import perf_counter
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import BytesPayload


class TimedBody(BytesPayload):
    """Bytes to send, and `sent_at` (perf_counter) once written; NaN until then."""

    def __init__(self, value: bytes, *args: Any, **kwargs: Any) -> None:
        super().__init__(value, *args, **kwargs)
        self.sent_at = math.nan

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        await super().write_with_length(writer, content_length)
        self.sent_at = perf_counter()

    async def write(self, writer: AbstractStreamWriter) -> None:
        await super().write(writer)
        self.sent_at = perf_counter()
