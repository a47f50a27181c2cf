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

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
)
from servebench.clients.codec import HttpAnswer, HttpBody, HttpCodec, drive_async
from servebench.clients.errors import http_failure
from servebench.clients.lean_http import (
    LeanHttpPool,
    choose_transport,
    encode_request,
    host_header,
    pool_for,
)
from servebench.clients.model_client import ModelClient
from servebench.clients.timing import TimedBody

# What a request can fail with below HTTP; `errors.http_failure` classifies them.
TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)
# The answer headers the codecs read; the lean transport keeps only these.
ANSWER_HEADERS = ("Content-Encoding", "Inference-Header-Content-Length")
# Servers compress answers when asked, and aiohttp asks by default. A benchmark should not
# pay for (or count) compression nobody chose.
IDENTITY = {"Accept-Encoding": "identity"}


class HttpModelClient(ModelClient):
    """A model client over HTTP: a codec, a connection pool, session open and close.

    A protocol's client names its codec (`codec_class`); `options` go to the codec. From
    `connections` keep-alive connections; `timeout` bounds each request (None: the load
    engine's own timeout applies); `connect_timeout` bounds each control call in
    `connect()`. A given `signature` is trusted as the expected answer and `connect()`
    then asks the server nothing. `transport`: `auto` (lean on http://, aiohttp on
    https://), `lean` or `aiohttp`.
    """

    codec_class: ClassVar[type[HttpCodec]]
    codec: HttpCodec

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        connections: int = 64,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
        transport: str = "auto",
        **options: Any,
    ) -> None:
        codec = self.codec_class(url, model, version=version, **options)
        chosen = choose_transport(transport, codec.base)
        super().__init__(
            pool_field="connections",
            pool_size=connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.codec = codec
        self.connections = connections
        self.transport = chosen
        self._session: aiohttp.ClientSession | None = None
        self._pool: LeanHttpPool | None = None
        self._host = host_header(codec.base)
        self._infer_where = str(codec.infer_url)
        # Each payload's request as it goes on the wire, by the payload's encoded body
        # (kept here too, so its id cannot be reused while the entry lives).
        self._wire: dict[int, tuple[HttpBody, bytes]] = {}

    async def connect(self) -> None:
        """Open the pool and read the signature (unless given); InferenceError on failure."""
        if self._session is not None or self._pool is not None:
            return
        if self.transport == "lean":
            pool = pool_for(self.codec.base, self.connections, ANSWER_HEADERS)
            try:
                if self._signature is None:
                    self._signature = await drive_async(
                        self.codec.read_signature(), lambda url: self._get_lean(pool, url)
                    )
            except BaseException:
                await pool.close()
                raise
            self._pool = pool
            return
        session = self._new_session()
        try:
            if self._signature is None:
                self._signature = await drive_async(
                    self.codec.read_signature(), lambda url: self._get(session, url)
                )
        except BaseException:
            await session.close()
            raise
        self._session = session

    def _new_session(self) -> aiohttp.ClientSession:
        """A pool of `connections` keep-alive connections with `timeout` on each request."""
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=self.connections, limit_per_host=self.connections, ttl_dns_cache=None
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers=IDENTITY,
            auto_decompress=False,
            trust_env=False,
        )

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
        request = encode_request("GET", url.raw_path_qs, self._host, None, IDENTITY)
        status, body, headers, _, _ = await pool.request(request, str(url), self.connect_timeout)
        return HttpAnswer(status, body, headers)

    def _encoded(self, request: HttpBody) -> bytes:
        """The wire bytes of a payload's request, encoded on its first send only."""
        entry = self._wire.get(id(request))
        if entry is None or entry[0] is not request:
            headers = {**IDENTITY, **request.headers}
            url = self.codec.infer_url
            entry = (
                request,
                encode_request("POST", url.raw_path_qs, self._host, request.data, headers),
            )
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
        return InferResult(
            outputs,
            request_bytes=len(request.data),
            response_bytes=len(body),
            send_s=sent_at - start,
            receive_s=perf_counter() - arrived,
        )

    async def infer(self, payload: Payload) -> InferResult:
        pool = self._pool
        if pool is not None:
            return await self._infer_lean(pool, payload)
        session = self._session
        if session is None:
            raise InferenceError(ErrorKind.CLIENT_ERROR, "connect() was not called")
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
        return InferResult(
            outputs,
            request_bytes=len(request.data),
            response_bytes=len(answer.body),
            send_s=body.sent_at - start,
            receive_s=perf_counter() - arrived,
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self._wire.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
