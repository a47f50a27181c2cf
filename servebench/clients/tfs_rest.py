"""TF Serving's REST API with aiohttp: `/v1/models/<m>[/versions/<v>]:predict`.

Both request forms are supported, as TF Serving's REST docs define them: `row` sends
`{"instances": [...]}` (one entry per batch row) and gets `{"predictions": ...}`;
`columnar` sends `{"inputs": {...}}` (whole tensors by name) and gets `{"outputs": ...}`.
With a single named output TF Serving leaves the name out of the answer; with several it
returns one object per row (row) or one object of tensors (columnar).

The JSON body is encoded once per payload; answers are parsed with the stdlib `json`
(TF Serving writes NaN/Infinity, which it accepts), turned into arrays of the signature's
dtype (refusing values that do not fit it, e.g. floats for an int32 output) and checked.
Byte counts are the HTTP body sizes, without headers.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import numpy as np
from yarl import URL

from servebench.clients.base import (
    ErrorKind,
    InferenceError,
    InferResult,
    ModelSignature,
    Payload,
    TensorSpec,
    check_batch_size,
    check_outputs,
    random_inputs,
)
from servebench.clients.endpoints import path_segment
from servebench.clients.errors import http_failure, http_status
from servebench.clients.http_model_client import TRANSPORT_ERRORS, HttpModelClient
from servebench.clients.tfs_signature import DEFAULT_SIGNATURE, tfs_signature

REQUEST_FORMATS = ("row", "columnar")
_JSON_HEADERS = {"Content-Type": "application/json"}
# Which JSON value kinds (numpy's kind of the parsed list) an output dtype accepts.
_ACCEPTED_KINDS = {"f": "fiu", "i": "iu", "u": "iu", "b": "b"}


class TfsRestClient(HttpModelClient):
    """Predict with one TF Serving model over REST from a pool of keep-alive connections.

    `request_format` is `row` or `columnar`. `timeout` bounds each request (None: the load
    engine's own timeout applies); `connect_timeout` bounds each control call in
    `connect()`. A given `signature` is trusted as the expected answer and `connect()`
    then asks the server nothing.
    """

    server = "TF Serving"
    integer_versions = True

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        request_format: str = "row",
        signature_name: str = DEFAULT_SIGNATURE,
        connections: int = 64,
        timeout: float | None = None,
        connect_timeout: float = 10.0,
        signature: ModelSignature | None = None,
    ):
        if request_format not in REQUEST_FORMATS:
            raise ValueError(
                f"request_format: {request_format!r} is not one of {', '.join(REQUEST_FORMATS)}"
            )
        super().__init__(
            url,
            model,
            version=version,
            connections=connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            signature=signature,
        )
        self.request_format = request_format
        self.signature_name = signature_name
        model_path = f"{self.base}/v1/models/{path_segment(model)}"
        if self.version:
            model_path += f"/versions/{self.version}"
        self.status_url = URL(model_path, encoded=True)
        self.metadata_url = URL(f"{model_path}/metadata", encoded=True)
        self.predict_url = URL(f"{model_path}:predict", encoded=True)

    async def connect(self) -> None:
        """Open the session and read the signature (unless given); InferenceError on failure."""
        if self._session is not None:
            return
        session = self._new_session()
        try:
            if self._signature is None:
                self._signature = await self._read_signature(session)
        except BaseException:
            await session.close()
            raise
        self._session = session

    async def _read_signature(self, session: aiohttp.ClientSession) -> ModelSignature:
        status = await self._get_json(session, self.status_url)
        check_available(status, str(self.status_url))
        metadata = await self._get_json(session, self.metadata_url)
        return signature_from_metadata(
            metadata, self.model, self.signature_name, self.version, str(self.metadata_url)
        )

    async def _get_json(self, session: aiohttp.ClientSession, url: URL) -> dict[str, Any]:
        try:
            async with session.get(
                url, timeout=aiohttp.ClientTimeout(total=self.connect_timeout)
            ) as response:
                body = await response.read()
                status = response.status
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(url)) from exc
        if status != 200:
            raise http_status(status, body, str(url))
        return json_object(body, str(url))

    def make_payload(self, batch_size: int, seed: int = 0) -> Payload:
        signature = self._require_signature()
        check_batch_size(signature, batch_size)
        arrays = random_inputs(signature.inputs, batch_size, seed)
        document: dict[str, Any] = {"signature_name": self.signature_name}
        if self.request_format == "columnar":
            document["inputs"] = {name: array.tolist() for name, array in arrays.items()}
        elif len(arrays) == 1:
            document["instances"] = next(iter(arrays.values())).tolist()
        else:
            lists = {name: array.tolist() for name, array in arrays.items()}
            document["instances"] = [
                {name: rows[i] for name, rows in lists.items()} for i in range(batch_size)
            ]
        body = json.dumps(document, separators=(",", ":")).encode()
        return Payload(batch_size=batch_size, inputs=arrays, encoded=body, request_bytes=len(body))

    async def infer(self, payload: Payload) -> InferResult:
        session = self._require_session()
        try:
            async with session.post(
                self.predict_url, data=payload.encoded, headers=_JSON_HEADERS
            ) as response:
                body = await response.read()
                status = response.status
        except TRANSPORT_ERRORS as exc:
            raise http_failure(exc, str(self.predict_url)) from exc
        if status != 200:
            raise http_status(status, body, str(self.predict_url))
        signature = self._require_signature()
        outputs = self._decode(body, signature.outputs)
        check_outputs(outputs, signature.outputs, payload.batch_size)
        return InferResult(outputs, request_bytes=len(payload.encoded), response_bytes=len(body))

    def _decode(self, body: bytes, specs: tuple[TensorSpec, ...]) -> dict[str, np.ndarray]:
        return decode_predict(body, specs, self.request_format, str(self.predict_url))


def json_object(body: bytes, where: str) -> dict[str, Any]:
    """An answer body that must be one JSON object; BAD_RESPONSE naming `where` otherwise."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: not a JSON object")
    return document


def check_available(status: dict[str, Any], where: str) -> None:
    """Raise SERVER_ERROR unless a model status answer lists a version AVAILABLE."""
    states = {
        str(entry.get("version")): str(entry.get("state"))
        for entry in status.get("model_version_status", ())
    }
    if "AVAILABLE" not in states.values():
        listed = ", ".join(f"{v}: {s}" for v, s in states.items()) or "no versions"
        raise InferenceError(ErrorKind.SERVER_ERROR, f"{where}: no version AVAILABLE ({listed})")


def signature_from_metadata(
    metadata: dict[str, Any], model: str, signature_name: str, version: str, where: str
) -> ModelSignature:
    """The signature in a REST metadata answer (`{"model_spec": ..., "metadata": ...}`).

    This and `check_available` / `decode_predict` / `json_object` are functions so that callers with
    another HTTP transport (the Locust users' gevent client) read answers the same way.
    """
    try:
        signature_map = metadata["metadata"]["signature_def"]
        answered = str(metadata.get("model_spec", {}).get("version", version))
    except (KeyError, TypeError) as exc:
        raise InferenceError(
            ErrorKind.BAD_RESPONSE, f"{where}: no signature_def in the answer"
        ) from exc
    return tfs_signature(model, signature_map, signature_name, answered)


def decode_predict(
    body: bytes, specs: tuple[TensorSpec, ...], request_format: str, where: str
) -> dict[str, np.ndarray]:
    """The outputs of a predict answer to a `row` or `columnar` request, as arrays."""
    document = json_object(body, where)
    if "error" in document:
        raise InferenceError(ErrorKind.SERVER_ERROR, f"{where}: {document['error']}")
    answer_key = "predictions" if request_format == "row" else "outputs"
    if answer_key not in document:
        raise InferenceError(ErrorKind.BAD_RESPONSE, f"{where}: answer has no {answer_key!r}")
    values = _by_name(document[answer_key], specs, request_format)
    return {
        spec.name: _as_array(values[spec.name], spec, where)
        for spec in specs
        if spec.name in values
    }


def _by_name(answer: Any, specs: tuple[TensorSpec, ...], request_format: str) -> dict[str, Any]:
    """The answer's value per output name, for the shapes TF Serving's answer can take."""
    if request_format == "columnar":
        if isinstance(answer, dict):
            return answer
        return {specs[0].name: answer} if len(specs) == 1 else {}
    if isinstance(answer, list) and answer and all(isinstance(row, dict) for row in answer):
        return {spec.name: [row.get(spec.name) for row in answer] for spec in specs}
    return {specs[0].name: answer} if len(specs) == 1 else {}


def _as_array(values: Any, spec: TensorSpec, where: str) -> np.ndarray:
    try:
        array = np.asarray(values)
    except ValueError as exc:  # ragged nesting
        raise InferenceError(
            ErrorKind.BAD_RESPONSE, f"{where}: output {spec.name!r} is not a tensor ({exc})"
        ) from exc
    dtype = np.dtype(spec.dtype)
    if array.dtype.kind not in _ACCEPTED_KINDS.get(dtype.kind, dtype.kind):
        raise InferenceError(
            ErrorKind.BAD_RESPONSE,
            f"{where}: output {spec.name!r} holds {array.dtype.name} values, expected {spec.dtype}",
        )
    return array.astype(dtype, copy=False)
