"""Turning transport failures into classified `InferenceError`s, one rule for every client.

- no answer in time → TIMEOUT; the peer refused the connection → CONNECTION_REFUSED; it
  closed or reset the connection mid-request → CONNECTION_RESET;
- an HTTP answer with a non-2xx status → HTTP_STATUS (`status` = the code); a gRPC call that
  ended with a non-OK code → GRPC_STATUS (`status` = the code's name). The server's own
  message (Triton's and TF Serving's `{"error": ...}` body, the gRPC details) goes into the
  detail, so "unknown model 'x'" reaches the user;
- a success status whose body nevertheless reports an error → SERVER_ERROR;
- an answer that does not decode, or does not match the signature → BAD_RESPONSE (one
  that is not HTTP/1.1 at all is said to be so: usually a gRPC port);
- anything else the client library raises → CLIENT_ERROR.

Every detail names where the request went (URL or `host:port`), so a failed run says what
it was pointed at. The functions return the error for the caller to `raise ... from exc`.
"""

from __future__ import annotations

import errno
import json

import aiohttp

from servebench.clients.base import ErrorKind, InferenceError

_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}
# Phrases gRPC core puts in UNAVAILABLE details when the TCP connection failed or broke.
_GRPC_REFUSED = ("connection refused",)
_GRPC_RESET = ("connection reset", "socket closed", "broken pipe", "connection aborted", "eof")


def http_failure(exc: BaseException, where: str) -> InferenceError:
    """Classify an exception raised by aiohttp (or its timeout) while talking to `where`."""
    if isinstance(exc, TimeoutError):  # asyncio's total timeout and aiohttp's ServerTimeoutError
        return InferenceError(ErrorKind.TIMEOUT, f"{where}: no answer in time")
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return InferenceError(
                ErrorKind.CONNECTION_REFUSED,
                f"{where}: connection refused by {exc.host}:{exc.port}",
            )
        return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: cannot connect ({exc.os_error})")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return InferenceError(ErrorKind.CONNECTION_RESET, f"{where}: server closed the connection")
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError):
        kind = ErrorKind.CONNECTION_RESET if exc.errno in _RESET_ERRNOS else ErrorKind.CLIENT_ERROR
        return InferenceError(kind, f"{where}: {exc}")
    if isinstance(exc, aiohttp.ClientResponseError) and "bad status line" in exc.message.lower():
        # aiohttp quotes the raw bytes it could not parse (binary HTTP/2 frames from a
        # gRPC port): say what they mean instead.
        return InferenceError(
            ErrorKind.BAD_RESPONSE, f"{where}: the answer is not HTTP/1.1 (a gRPC port?)"
        )
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: {exc}")
    return InferenceError(ErrorKind.CLIENT_ERROR, f"{where}: {type(exc).__name__}: {exc}")


def http_status(status: int, body: bytes, where: str) -> InferenceError:
    """A non-2xx answer; carries the server's `{"error": ...}` message when there is one."""
    message = server_message(body) or body[:200].decode("utf-8", "replace").strip()
    detail = f"{where}: HTTP {status}" + (f": {message}" if message else "")
    return InferenceError(ErrorKind.HTTP_STATUS, detail, status=status)


def server_message(body: bytes) -> str | None:
    """The `error` field of a JSON error body (Triton and TF Serving both use it), if any."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if isinstance(document, dict) and "error" in document:
        return str(document["error"])
    return None


def grpc_failure(code: str, details: str, where: str) -> InferenceError:
    """Classify a gRPC status by its code name (`"UNAVAILABLE"`, `"StatusCode.NOT_FOUND"`)."""
    code = code.removeprefix("StatusCode.")
    details = details or ""
    if code == "DEADLINE_EXCEEDED":
        return InferenceError(ErrorKind.TIMEOUT, f"{where}: no answer in time", status=code)
    if code == "UNAVAILABLE":
        lowered = details.lower()
        if any(phrase in lowered for phrase in _GRPC_REFUSED):
            return InferenceError(
                ErrorKind.CONNECTION_REFUSED,
                f"{where}: connection refused ({details})",
                status=code,
            )
        if any(phrase in lowered for phrase in _GRPC_RESET):
            return InferenceError(
                ErrorKind.CONNECTION_RESET, f"{where}: connection lost ({details})", status=code
            )
    return InferenceError(ErrorKind.GRPC_STATUS, f"{where}: {code}: {details}", status=code)
