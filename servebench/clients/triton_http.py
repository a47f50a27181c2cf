"""Triton over HTTP (the KServe v2 protocol), with the binary tensor extension as an option.

The control plane (readiness, metadata, config) goes through `tritonclient.http.aio`. The
hot path does not call its `infer()`: that re-encodes the request on every call and gives
no per-request timeout or wire sizes. Instead the body is encoded once per payload with
tritonclient's own `generate_request_body` (the documented way to use it with another
HTTP transport), POSTed as bytes from one aiohttp session, and answers are decoded here
(`decode_answer`, a quarter of tritonclient's parse cost) and checked against the
signature.

Byte counts are HTTP body sizes (JSON header plus binary tensors), without HTTP headers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import tritonclient.http as triton_http
import tritonclient.http.aio as triton_http_aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype
from yarl import URL

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
    check_batch_size,
    check_outputs,
    random_inputs,
)
from servebench.clients.endpoints import path_segment
from servebench.clients.errors import http_failure, http_status
from servebench.clients.http_model_client import TRANSPORT_ERRORS, HttpModelClient
from servebench.clients.triton_signature import triton_signature


@dataclass(frozen=True)
class _Request:
    body: bytes
    headers: Mapping[str, str]


class TritonHttpClient(HttpModelClient):
    """Infer on one Triton model over HTTP from a pool of keep-alive connections.

    `binary_data` sends inputs and asks for outputs as raw bytes after a JSON header
    (Triton's binary tensor extension); False sends and receives JSON number lists.
    `timeout` bounds each request (None: the load engine's own timeout applies);
    `connect_timeout` bounds each control call in `connect()`. A given `signature` is
    trusted as the expected answer and `connect()` then asks the server nothing.
    """

    server = "Triton"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        binary_data: bool = True,
        connections: int = 64,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
    ):
        super().__init__(
            url,
            model,
            version=version,
            connections=connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.binary_data = binary_data
        model_path = f"{self.base}/v2/models/{path_segment(model)}"
        if self.version:
            model_path += f"/versions/{path_segment(self.version)}"
        self.infer_url = URL(f"{model_path}/infer", encoded=True)
        self._where = f"{self.base} model {model!r}"

    async def connect(self) -> None:
        """Read the signature (unless given) and open the session; InferenceError on failure."""
        if self._session is not None:
            return
        if self._signature is None:
            self._signature = await self._read_signature()
        self._session = self._new_session()

    async def _read_signature(self) -> ModelSignature:
        host = self.base.host or ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 literal
        address = f"{host}:{self.base.port}{self.base.path}"
        control = triton_http_aio.InferenceServerClient(
            address, conn_timeout=self.connect_timeout, ssl=self.base.scheme == "https"
        )
        try:
            # Metadata first: for an unknown model it carries Triton's message naming it.
            metadata = await control.get_model_metadata(self.model, self.version)
            config = await control.get_model_config(self.model, self.version)
            if not await control.is_model_ready(self.model, self.version):
                raise InferenceError(ErrorKind.SERVER_ERROR, f"{self._where}: not ready")
        except InferenceServerException as exc:
            status = exc.status()
            code = int(status) if status and status.isdigit() else None
            raise InferenceError(
                ErrorKind.HTTP_STATUS, f"{self._where}: HTTP {status}: {exc.message()}", status=code
            ) from exc
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(self.base)) from exc
        finally:
            await control.close()
        return triton_signature(metadata, config, self.version)

    def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
        signature = self._require_signature()
        check_batch_size(signature, batch_size)
        arrays = random_inputs(signature.inputs, batch_size, seed)
        inputs = []
        for spec in signature.inputs:
            array = arrays[spec.name]
            tensor = triton_http.InferInput(
                spec.name, list(array.shape), np_to_triton_dtype(array.dtype)
            )
            tensor.set_data_from_numpy(array, binary_data=self.binary_data)
            inputs.append(tensor)
        outputs = [
            triton_http.InferRequestedOutput(spec.name, binary_data=self.binary_data)
            for spec in signature.outputs
        ]
        body, json_size = triton_http_aio.InferenceServerClient.generate_request_body(
            inputs, outputs=outputs
        )
        headers = {"Content-Type": "application/json"}
        if json_size is not None:
            headers = {
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(json_size),
            }
        return Payload(
            batch_size=batch_size,
            inputs=arrays,
            encoded=_Request(body, headers),
            request_bytes=len(body),
        )

    async def infer(self, payload: Payload) -> InferResult:
        session = self._require_session()
        request: _Request = payload.encoded
        try:
            async with session.post(
                self.infer_url, data=request.body, headers=request.headers
            ) as response:
                body = await response.read()
                status = response.status
                header_length = response.headers.get("Inference-Header-Content-Length")
                encoding = response.headers.get("Content-Encoding")
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(self.infer_url)) from exc
        if status != 200:
            raise http_status(status, body, str(self.infer_url))
        if encoding not in (None, "identity"):
            raise InferenceError(
                ErrorKind.BAD_RESPONSE, f"{self.infer_url}: {encoding}-encoded answer to identity"
            )
        outputs = decode_answer(body, header_length, str(self.infer_url))
        check_outputs(outputs, self._require_signature().outputs, payload.batch_size)
        return InferResult(outputs, request_bytes=len(request.body), response_bytes=len(body))


def decode_answer(body: bytes, header_length: str | None, where: str) -> dict[str, np.ndarray]:
    """Every output of a v2 HTTP answer: a JSON header, then binary tensors in its order.

    This replaces tritonclient's `parse_response_body`, which defines two classes on every
    call: 60-70 µs per answer against about 18 µs here (measured on a 16x4 FP32 answer).
    """
    try:
        end = len(body) if header_length is None else int(header_length)
        document = json.loads(body[:end])
        error = document.get("error")
        if error is not None:
            raise InferenceError(ErrorKind.SERVER_ERROR, f"{where}: {error}")
        outputs: dict[str, np.ndarray] = {}
        offset = end
        for output in document["outputs"]:
            dtype = _np_dtype(output["datatype"])
            size = (output.get("parameters") or {}).get("binary_data_size")
            if size is None:
                array = np.array(output["data"], dtype=dtype)
            else:
                if size % dtype.itemsize or offset + size > len(body):
                    raise ValueError(f"output {output['name']!r}: {size} bytes do not fit")
                array = np.frombuffer(body, dtype, count=size // dtype.itemsize, offset=offset)
                offset += size
            outputs[output["name"]] = array.reshape(output["shape"])
    except InferenceError:
        raise
    except Exception as exc:  # a header or tensor that does not parse, whatever the way
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: unreadable answer ({exc})") from exc
    return outputs


@functools.cache
def _np_dtype(datatype: str) -> np.dtype:
    dtype = triton_to_np_dtype(datatype)
    if dtype is None or np.dtype(dtype).kind == "O":
        raise ValueError(f"datatype {datatype} is not a numeric tensor")
    return np.dtype(dtype)
