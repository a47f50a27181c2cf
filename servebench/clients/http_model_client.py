"""The aiohttp edge of both HTTP model protocols (Triton HTTP, TF Serving REST).

One keep-alive pool per client, built the same way for both, so that a difference in
their figures comes from the servers and the encodings, not from how the pool was set up.
What goes on the wire and how answers are read is the codec's (`codec.HttpCodec`); this
class only moves bytes.
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
from servebench.clients.model_client import ModelClient
from servebench.clients.timing import TimedBody

# What a request can fail with below HTTP; `errors.http_failure` classifies them.
TRANSPORT_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)


class HttpModelClient(ModelClient):
    """A model client over HTTP: a codec, a connection pool, session open and close.

    A protocol's client names its codec (`codec_class`); `options` go to the codec. From
    `connections` keep-alive connections; `timeout` bounds each request (None: the load
    engine's own timeout applies); `connect_timeout` bounds each control call in
    `connect()`. A given `signature` is trusted as the expected answer and `connect()`
    then asks the server nothing.
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
        **options: Any,
    ) -> None:
        codec = self.codec_class(url, model, version=version, **options)
        super().__init__(
            pool_field="connections",
            pool_size=connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.codec = codec
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def connect(self) -> None:
        """Open the session and read the signature (unless given); InferenceError on failure."""
        if self._session is not None:
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
            # Servers compress answers when asked, and aiohttp asks by default. A benchmark
            # should not pay for (or count) compression nobody chose.
            headers={"Accept-Encoding": "identity"},
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

    async def infer(self, payload: Payload) -> InferResult:
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
        if self._session is not None:
            await self._session.close()
            self._session = None
