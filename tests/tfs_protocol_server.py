"""A TEST DOUBLE for the TF Serving protocols, for the client tests only.

It answers TF Serving's REST API (predict in row and columnar form, model status, model
metadata; the paths, JSON shapes and `{"error": ...}` bodies of TF Serving's REST docs)
and its gRPC API (`PredictionService.Predict` / `GetModelMetadata`,
`ModelService.GetModelStatus`, from tensorflow-serving-api's servicer base classes), by
running exported SavedModels with TensorFlow on free loopback ports. It is not TF Serving
and not part of servebench: no batching, no version policy, no model loading lifecycle.

Both servers run on one asyncio loop in a background thread, so a session-scoped double
serves tests whose own loops come and go; model calls run in that loop's executor.
`delay` (seconds, settable at any time) holds every predict answer back, for timeouts.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tensorflow as tf
from aiohttp import web
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

LOOPBACK = "127.0.0.1"
DEFAULT_SIGNATURE = "serving_default"
# TF Serving's REST path grammar (model_servers/http_rest_api_util.cc), minus labels.
_PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?:(classify|regress|predict)")
_STATUS_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?(/metadata)?")
# How TF Serving maps the status codes used here to HTTP.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
}
_AVAILABLE = get_model_status_pb2.ModelVersionStatus.State.Value("AVAILABLE")


class Failure(Exception):
    """A request the double refuses, with the status TF Serving would use."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class _Version:
    number: int
    signatures: Any  # the loaded SavedModel's `.signatures`
    signature_defs: get_model_metadata_pb2.SignatureDefMap


def _load_version(path: Path, number: int) -> _Version:
    saved = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    defs = get_model_metadata_pb2.SignatureDefMap()
    for key, value in saved.meta_graphs[0].signature_def.items():
        defs.signature_def[key].CopyFrom(value)
    return _Version(number, tf.saved_model.load(str(path)).signatures, defs)


class TfsProtocolDouble:
    """Serve `models` (name → base folder holding numeric version folders) on both protocols."""

    def __init__(self, models: Mapping[str, Path]):
        self.models: dict[str, dict[int, _Version]] = {}
        for name, base in models.items():
            versions = {
                int(p.name): _load_version(p, int(p.name))
                for p in Path(base).iterdir()
                if p.name.isdigit() and (p / "saved_model.pb").is_file()
            }
            if not versions:
                raise FileNotFoundError(f"{base}: no <version>/saved_model.pb for model {name!r}")
            self.models[name] = versions
        self.delay = 0.0
        self.rest_port = 0
        self.grpc_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    @property
    def rest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.rest_port}"

    @property
    def grpc_address(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> TfsProtocolDouble:
        started: Future[None] = Future()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._serve(started)),
            name="tfs-protocol-double",
            daemon=True,
        )
        self._thread.start()
        started.result(timeout=60)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._thread = self._loop = self._stop = None

    def __enter__(self) -> TfsProtocolDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, started: Future[None]) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", self._rest)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, LOOPBACK, 0)
            await site.start()
            self.rest_port = runner.addresses[0][1]
            server = grpc.aio.server(
                options=[
                    ("grpc.max_receive_message_length", -1),
                    ("grpc.max_send_message_length", -1),
                ]
            )
            prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
                _PredictionService(self), server
            )
            model_service_pb2_grpc.add_ModelServiceServicer_to_server(_ModelService(self), server)
            self.grpc_port = server.add_insecure_port(f"{LOOPBACK}:0")
            await server.start()
        except BaseException as exc:
            started.set_exception(exc)
            raise
        started.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await server.stop(grace=None)
            await runner.cleanup()

    # -- the model side, shared by both protocols ------------------------------------------

    def version(self, name: str, number: int | None) -> _Version:
        versions = self.models.get(name)
        if number is None:
            if not versions:
                raise Failure(
                    grpc.StatusCode.NOT_FOUND, f"Servable not found for request: Latest({name})"
                )
            return versions[max(versions)]
        if not versions or number not in versions:
            raise Failure(
                grpc.StatusCode.NOT_FOUND,
                f"Servable not found for request: Specific({name}, {number})",
            )
        return versions[number]

    def status(self, name: str, number: int | None) -> get_model_status_pb2.GetModelStatusResponse:
        versions = self.models.get(name)
        if not versions:
            raise Failure(grpc.StatusCode.NOT_FOUND, f"Could not find any versions of model {name}")
        if number is not None and number not in versions:
            raise Failure(
                grpc.StatusCode.NOT_FOUND, f"Could not find version {number} of model {name}"
            )
        response = get_model_status_pb2.GetModelStatusResponse()
        for v in sorted(versions) if number is None else [number]:
            entry = response.model_version_status.add(version=v, state=_AVAILABLE)
            entry.status.error_code = 0  # OK, written out as TF Serving does
        return response

    def metadata(
        self, name: str, number: int | None
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        version = self.version(name, number)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = name
        response.model_spec.version.value = version.number
        response.metadata["signature_def"].Pack(version.signature_defs)
        return response

    async def predict(
        self, name: str, number: int | None, signature_name: str, inputs: Mapping[str, Any]
    ) -> tuple[_Version, dict[str, np.ndarray]]:
        """Run one signature; `inputs` are arrays, or JSON values converted to its dtypes."""
        version = self.version(name, number)
        signature_name = signature_name or DEFAULT_SIGNATURE
        if signature_name not in version.signatures:
            raise Failure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'Serving signature name: "{signature_name}" not found in signature def',
            )
        wanted = version.signature_defs.signature_def[signature_name].inputs
        if set(inputs) != set(wanted):
            raise Failure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"input names {sorted(inputs)} do not match the signature's {sorted(wanted)}",
            )
        tensors = {}
        for key, value in inputs.items():
            dtype = tf.dtypes.as_dtype(wanted[key].dtype)
            array = np.asarray(value)
            if isinstance(value, np.ndarray) and array.dtype != dtype.as_numpy_dtype:
                raise Failure(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Expects arg {key!r} to be {dtype.name} but {array.dtype} is provided",
                )
            try:
                tensors[key] = tf.constant(array, dtype=dtype)
            except (TypeError, ValueError) as exc:
                raise Failure(grpc.StatusCode.INVALID_ARGUMENT, f"input {key!r}: {exc}") from None
        function = version.signatures[signature_name]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(None, lambda: function(**tensors))
        except (tf.errors.InvalidArgumentError, TypeError, ValueError) as exc:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, str(exc).splitlines()[0]) from None
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        return version, {key: value.numpy() for key, value in results.items()}

    # -- REST ------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.Response:
        try:
            return await self._rest_route(request)
        except Failure as failure:
            return web.json_response({"error": failure.message}, status=_HTTP_STATUS[failure.code])

    async def _rest_route(self, request: web.Request) -> web.Response:
        path = request.path
        if request.method == "POST" and (match := _PREDICT_PATH.fullmatch(path)):
            name, number, verb = match.groups()
            if verb != "predict":
                raise Failure(grpc.StatusCode.UNIMPLEMENTED, f"{verb} is not served by this double")
            return await self._rest_predict(request, name, int(number) if number else None)
        if request.method == "GET" and (match := _STATUS_PATH.fullmatch(path)):
            name, number, metadata = match.groups()
            number = int(number) if number else None
            if metadata:
                return self._rest_metadata(name, number)
            as_json = json_format.MessageToDict(
                self.status(name, number),
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            )
            return web.json_response(as_json)
        raise Failure(
            grpc.StatusCode.INVALID_ARGUMENT, f"Malformed request: {request.method} {path}"
        )

    def _rest_metadata(self, name: str, number: int | None) -> web.Response:
        """The shape TF Serving writes: model_spec, then the unpacked SignatureDefMap."""
        response = self.metadata(name, number)
        options = {
            "preserving_proto_field_name": True,
            "always_print_fields_with_no_presence": True,
        }
        document = {
            "model_spec": json_format.MessageToDict(response.model_spec, **options),
            "metadata": {
                "signature_def": json_format.MessageToDict(
                    self.version(name, number).signature_defs, **options
                )
            },
        }
        return web.json_response(document)

    async def _rest_predict(
        self, request: web.Request, name: str, number: int | None
    ) -> web.Response:
        try:
            document = json.loads(await request.read())
        except ValueError as exc:
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, f"JSON Parse error: {exc}") from None
        if not isinstance(document, dict):
            raise Failure(grpc.StatusCode.INVALID_ARGUMENT, "JSON Value is not an object")
        if ("instances" in document) == ("inputs" in document):
            raise Failure(
                grpc.StatusCode.INVALID_ARGUMENT,
                "JSON Value must have exactly one of 'instances' (row) or 'inputs' (columnar)",
            )
        signature_name = document.get("signature_name") or DEFAULT_SIGNATURE
        version = self.version(name, number)
        names = (
            list(version.signature_defs.signature_def[signature_name].inputs)
            if (signature_name in version.signature_defs.signature_def)
            else []
        )
        row = "instances" in document
        value = document["instances" if row else "inputs"]
        if row and isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            inputs = {key: [instance.get(key) for instance in value] for key in value[0]}
        elif not row and isinstance(value, dict):
            inputs = value
        elif len(names) == 1:
            inputs = {names[0]: value}
        else:
            raise Failure(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the signature has {len(names)} inputs; name them in each instance or input",
            )
        _, outputs = await self.predict(name, number, signature_name, inputs)
        if len(outputs) == 1:
            answer: Any = next(iter(outputs.values())).tolist()
        elif row:
            lists = {key: array.tolist() for key, array in outputs.items()}
            batch = len(next(iter(lists.values())))
            answer = [{key: rows[i] for key, rows in lists.items()} for i in range(batch)]
        else:
            answer = {key: array.tolist() for key, array in outputs.items()}
        return web.json_response({"predictions" if row else "outputs": answer})


# -- gRPC ------------------------------------------------------------------------------------


def _spec_version(model_spec: Any) -> int | None:
    return model_spec.version.value if model_spec.HasField("version") else None


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, double: TfsProtocolDouble):
        self.double = double

    async def Predict(self, request: predict_pb2.PredictRequest, context: grpc.aio.ServicerContext):
        spec = request.model_spec
        try:
            inputs = {key: tf.make_ndarray(proto) for key, proto in request.inputs.items()}
            version, outputs = await self.double.predict(
                spec.name, _spec_version(spec), spec.signature_name, inputs
            )
        except Failure as failure:
            await context.abort(failure.code, failure.message)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = version.number
        response.model_spec.signature_name = spec.signature_name or DEFAULT_SIGNATURE
        for key, array in outputs.items():
            response.outputs[key].CopyFrom(tf.make_tensor_proto(array))
        return response

    async def GetModelMetadata(self, request, context: grpc.aio.ServicerContext):
        if list(request.metadata_field) != ["signature_def"]:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "Metadata field other than signature_def is not supported (asked: "
                f"{list(request.metadata_field)})",
            )
        try:
            return self.double.metadata(request.model_spec.name, _spec_version(request.model_spec))
        except Failure as failure:
            await context.abort(failure.code, failure.message)


class _ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, double: TfsProtocolDouble):
        self.double = double

    async def GetModelStatus(self, request, context: grpc.aio.ServicerContext):
        try:
            return self.double.status(request.model_spec.name, _spec_version(request.model_spec))
        except Failure as failure:
            await context.abort(failure.code, failure.message)
