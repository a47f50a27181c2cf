"""TF Serving's REST API: `/v1/models/<m>[/versions/<v>]:predict`.

Both request forms are supported, as TF Serving's REST docs define them: `row` sends
`{"instances": [...]}` (one entry per batch row) and gets `{"predictions": ...}`;
`columnar` sends `{"inputs": {...}}` (whole tensors by name) and gets `{"outputs": ...}`.
With a single named output TF Serving leaves the name out of the answer; with several it
returns one object per row (row) or one object of tensors (columnar).

`TfsRestCodec` is the protocol: the JSON body is encoded once per payload; answers are
parsed with the stdlib `json` (TF Serving writes NaN/Infinity, which it accepts), turned
into arrays of the signature's dtype (refusing values that do not fit it, e.g. floats for
an int32 output) and checked; the signature comes from the model status and metadata
endpoints. `TfsRestClient` is the codec on `http_model_client`'s transports (lean HTTP/1.1
or aiohttp); the Locust users put the same codec on geventhttpclient. Byte counts are the
HTTP body sizes, without headers.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any

import numpy as np
from yarl import URL

from servebench.clients.base import ErrorKind, InferenceError, ModelSignature, TensorSpec
from servebench.clients.codec import HttpAnswer, HttpBody, HttpCodec, json_object
from servebench.clients.errors import http_status
from servebench.clients.http_model_client import HttpModelClient
from servebench.clients.tfs_signature import DEFAULT_SIGNATURE, tfs_signature

REQUEST_FORMATS = ("row", "columnar")
_JSON_HEADERS = {"Content-Type": "application/json"}
# Which JSON value kinds (numpy's kind of the parsed list) an output dtype accepts.
_ACCEPTED_KINDS = {"f": "fiu", "i": "iu", "u": "iu", "b": "b"}
# Words of TF Serving's model-status errors ("Could not find any versions of model m",
# "Servable not found for request: Latest(m)"); Triton says only "Not Found" there.
_STATUS_ERRORS = ("could not find", "servable")


class TfsRestCodec(HttpCodec):
    """Requests to and answers from one TF Serving model over REST.

    `request_format` is `row` or `columnar`; `signature_name` the SignatureDef to call.
    """

    server = "TF Serving"
    integer_versions = True
    # A model's status: TF Serving answers it, or names the missing servable.
    probe_path = "/v1/models/{model}"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        version: str | None = None,
        request_format: str = "row",
        signature_name: str = DEFAULT_SIGNATURE,
    ) -> None:
        if request_format not in REQUEST_FORMATS:
            raise ValueError(
                f"request_format: {request_format!r} is not one of {', '.join(REQUEST_FORMATS)}"
            )
        super().__init__(url, model, version)
        self.request_format = request_format
        self.signature_name = signature_name
        model_path = self._model_path("v1")
        self.status_url = URL(model_path, encoded=True)
        self.metadata_url = URL(f"{model_path}/metadata", encoded=True)
        self._predict_url = URL(f"{model_path}:predict", encoded=True)

    @property
    def infer_url(self) -> URL:
        return self._predict_url

    @staticmethod
    def answers_probe(document: object) -> bool:
        return isinstance(document, dict) and (
            "model_version_status" in document
            or any(w in str(document.get("error", "")).lower() for w in _STATUS_ERRORS)
        )

    def read_signature(self) -> Generator[URL, HttpAnswer, ModelSignature]:
        status = _document((yield self.status_url), self.status_url)
        check_available(status, str(self.status_url))
        metadata = _document((yield self.metadata_url), self.metadata_url)
        return signature_from_metadata(
            metadata, self.model, self.signature_name, self.version, str(self.metadata_url)
        )

    def _encode(self, signature: ModelSignature, inputs: Mapping[str, np.ndarray]) -> HttpBody:
        document: dict[str, Any] = {"signature_name": self.signature_name}
        lists = {name: array.tolist() for name, array in inputs.items()}
        if self.request_format == "columnar":
            document["inputs"] = lists
        elif len(lists) == 1:
            document["instances"] = next(iter(lists.values()))
        else:  # one object per batch row, holding that row of every input
            rows = zip(*lists.values(), strict=True)
            document["instances"] = [dict(zip(lists, row, strict=True)) for row in rows]
        body = json.dumps(document, separators=(",", ":")).encode()
        return HttpBody(body, _JSON_HEADERS)

    def _read(
        self, body: bytes, headers: Mapping[str, str], specs: tuple[TensorSpec, ...]
    ) -> dict[str, np.ndarray]:
        return decode_predict(body, specs, self.request_format, str(self._predict_url))


def _document(answer: HttpAnswer, url: URL) -> dict[str, Any]:
    if answer.status != 200:
        raise http_status(answer.status, answer.body, str(url))
    return json_object(answer.body, str(url))


class TfsRestClient(HttpModelClient):
    """Predict with one TF Serving model over REST; `request_format` and `signature_name`
    go to `TfsRestCodec` (the pool and timeouts: `HttpModelClient`)."""

    codec_class = TfsRestCodec


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
    """The signature in a REST metadata answer (`{"model_spec": ..., "metadata": ...}`)."""
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
