"""The async edge of both HTTP model protocols (Triton HTTP, TF Serving REST).

One keep-alive pool per client, built the same way for both, so that a difference in
their figures comes from the servers and the encodings, not from how the pool was set up.
What goes on the wire and how answers are read is the codec's (`codec.HttpCodec`); this
class only moves bytes, on one of two transports: `lean_http` (the default for http://:
each payload's whole request encoded once, answers parsed by llhttp, issue 16) or aiohttp
(https://, or `transport="aiohttp"`).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, ClassVar

import aiohttp
from yarl import URL

from servebench.clients.base import InferResult, Payload
from servebench.clients.codec import HttpAnswer, HttpBody, HttpCodec
from servebench.clients.errors import http_failure
from servebench.clients.http_edge import HttpEdge, wire_request
from servebench.clients.lean_http import LeanHttpPool, choose_transport, pool_for
from servebench.clients.model_client import ModelClient
from servebench.clients.timing import TimedBody

# What a request can fail with below HTTP; `errors.http_failure` classifies them.
TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)
# The answer headers the codecs read; the lean transport keeps only these.
ANSWER_HEADERS = ("Content-Encoding", "Inference-Header-Content-Length")
# Servers compress answers when asked, and aiohttp asks by default. A benchmark should not
# pay for (or count) compression nobody chose.
IDENTITY = {"Accept-Encoding": "identity"}


class HttpModelClient(ModelClient, HttpEdge):
    """A model client over HTTP: a codec on `connections` keep-alive connections.

    `transport`: `auto` (lean on http://, aiohttp on https://), `lean` or `aiohttp`; the
    other settings (timeouts, signature, the codec's options) are `ModelClient`'s.
    """

    codec_class: ClassVar[type[HttpCodec]]
    codec: HttpCodec

    def __init__(self, url: str, model: str, *, connections: int = 64, **settings: Any) -> None:
        super().__init__(url, model, pool_field="connections", pool_size=connections, **settings)
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._pool: LeanHttpPool | None = None
        self._infer_where = str(self.codec.infer_url)
        # Each payload's request as it goes on the wire, by the payload's encoded body
        # (kept here too, so its id cannot be reused while the entry lives).
        self._wire: dict[int, tuple[HttpBody, bytes]] = {}

    def _choose_transport(self, transport: str) -> str:
        return choose_transport(transport, self.codec.base)

    async def connect(self) -> None:
        """Open the pool and read the signature (unless given); InferenceError on failure."""
        if self._session is not None or self._pool is not None:
            return
        if self.transport == "lean":
            pool = pool_for(self.codec.base, self.connections, ANSWER_HEADERS)
            await self._read_signature(lambda url: self._get_lean(pool, url), pool.close)
            self._pool = pool
            return
        session = self._new_session(IDENTITY)
        await self._read_signature(lambda url: self._get(session, url), session.close)
        self._session = session

    async def _get(self, session: aiohttp.ClientSession, url: URL) -> HttpAnswer:
        """A control read, bounded by `connect_timeout`."""
        try:
            async with session.get(
                url, timeout=aiohttp.ClientTimeout(total=self.connect_timeout)
            ) as response:
                return HttpAnswer(response.status, await response.read(), response.headers)
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(url)) from exc

    async def _get_lean(self, pool: LeanHttpPool, url: URL) -> HttpAnswer:
        """A control read on the lean transport, bounded by `connect_timeout`."""
        request = wire_request("GET", url, None, IDENTITY)
        status, body, headers, _, _ = await pool.request(request, str(url), self.connect_timeout)
        return HttpAnswer(status, body, headers)

    def _encoded(self, request: HttpBody) -> bytes:
        """The wire bytes of a payload's request, encoded on its first send only."""
        entry = self._wire.get(id(request))
        if entry is None or entry[0] is not request:
            headers = {**IDENTITY, **request.headers}
            entry = (request, wire_request("POST", self.codec.infer_url, request.data, headers))
            self._wire[id(request)] = entry
        return entry[1]

    async def _infer_lean(self, pool: LeanHttpPool, payload: Payload) -> InferResult:
        request: HttpBody = payload.encoded
        wire = self._encoded(request)
        start = perf_counter()
        status, body, headers, sent_at, arrived = await pool.request(
            wire, self._infer_where, self.timeout
        )
        answer = HttpAnswer(status, body, headers)
        outputs = self.codec.outputs(answer, self._require_signature().outputs, payload.batch_size)
        return InferResult.timed(start, sent_at, arrived, len(request.data), len(body), outputs)

    async def _infer_aiohttp(self, session: aiohttp.ClientSession, payload: Payload) -> InferResult:
        request: HttpBody = payload.encoded
        url = self.codec.infer_url
        body = TimedBody(request.data)
        start = perf_counter()
        try:
            async with session.post(url, data=body, headers=request.headers) as response:
                arrived = perf_counter()
                answer = HttpAnswer(response.status, await response.read(), response.headers)
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(url)) from exc
        outputs = self.codec.outputs(answer, self._require_signature().outputs, payload.batch_size)
        return InferResult.timed(
            start, body.sent_at, arrived, len(request.data), len(answer.body), outputs
        )

    async def close(self) -> None:
        self._wire.clear()
        await super().close()
