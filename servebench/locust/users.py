"""Locust user classes that send servebench's pre-encoded inference requests.

`ServebenchUser` speaks the protocol named by `--protocol` (what `servebench ui` runs, so
the web form can switch protocols); `TritonHttpUser`, `TritonGrpcUser`, `TfsRestUser` and
`TfsGrpcUser` each speak one, for locustfiles that want a fixed protocol:

    from servebench.locust import TritonGrpcUser   # in a locustfile
    locust -f that_file.py --host 127.0.0.1:8001 --model my-model --headless -u 8 -t 30s

Each user is closed loop (it sends again as soon as an answer is in) and fires one
Locust request event per request, named `<model> b<batch> <protocol>`, whose context
carries servebench's per-request record. With a mix of models (`--model 'mix(a*3+b*1)'`,
`locust.mix`) each request goes to the model the process's seeded draw picks, is named
by that model, and its record carries the model's code in the mix. A wrong answer (outputs missing, wrong shape or
dtype) is a failure, never a success. With `--input-data FILE` the users send the file's
samples in order, sharing one cycle per process (`transport.Prepared`), and an answer
whose values differ from the file's expected outputs (`input_data.answer_matches`, the
load engine's comparison) is a `wrong_answer` failure. Everything a user needs before its
first request (link, signature, payloads) it gets from its process's caches
(`hooks.process_state`, on the Environment), so a swarm of a hundred users reads the
signature once and starts one link emulator; when that fails (server down, unknown model,
bad option, an input-data file that does not fit the model) the user reports the reason
as a failure and retries after a second, so the reason shows in the web UI's failures tab.

Importing this module imports Locust (gevent's monkey-patching) and makes grpcio
cooperate with gevent: only locustfiles and Locust processes import it.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import gevent
from grpc.experimental import gevent as grpc_gevent
from locust import User, constant, task

from servebench.clients.base import ErrorKind, InferenceError
from servebench.clients.input_data import ATOL, RTOL, answer_matches
from servebench.locust import options as _options  # noqa: F401  (registers the arguments)
from servebench.locust.hooks import RECORD_KEY, process_state
from servebench.locust.mix import ModelChoice
from servebench.locust.records import Coordinates
from servebench.locust.settings import UserSettings, user_settings
from servebench.locust.transport import PayloadCache, Prepared, Transport, open_transport
from servebench.netem import NetemError

# grpcio's blocking calls must yield to gevent, or one user's call stalls every user.
# Must run after monkey-patching (importing locust did it) and before any channel exists.
grpc_gevent.init_gevent()

SETUP_RETRY_S = 1.0

__all__ = ["ServebenchUser", "TfsGrpcUser", "TfsRestUser", "TritonGrpcUser", "TritonHttpUser"]


class ServebenchUser(User):
    """A closed-loop user sending pre-encoded requests to one model, or to each model of a
    mix by its seeded draw (protocol: `--protocol`)."""

    #: The protocol this class speaks; None reads `--protocol` (the web form's field).
    protocol: str | None = None
    wait_time = constant(0)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._settings: UserSettings | None = None
        self._coordinates: Coordinates | None = None
        self._transports: dict[str, Transport] = {}  # by model: kept over set-up retries
        self._targets: tuple[ModelTarget, ...] | None = None  # one per model of the mix
        self._choice: ModelChoice | None = None  # a mix's draw; None for one model

    @task
    def infer(self) -> None:
        if self._targets is None and not self._set_up():
            return
        assert self._targets is not None
        index = self._choice.next() if self._choice is not None else 0
        settings, transport, prepared = self._targets[index]
        payload = prepared.next_payload()
        send = time.time()
        started = time.perf_counter()
        error: InferenceError | None = None
        response_bytes = 0
        try:
            answer = transport.infer(payload, prepared.signature.outputs)
        except InferenceError as exc:
            error = exc
        latency = time.perf_counter() - started  # the comparison below is not the server's
        if error is None:
            response_bytes = answer.response_bytes
            if payload.expected is not None and not answer_matches(
                answer.outputs, payload.expected
            ):
                error = _wrong_answer(prepared.source)
        model = index + 1 if self._choice is not None else 0  # the records' mix code
        self._fire(send, latency, error, payload.request_bytes, response_bytes, settings, model)

    def on_stop(self) -> None:
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()

    def _set_up(self) -> bool:
        """Settings, link, and per model a signature and payloads; on failure report it and
        wait a second."""
        send = time.time()
        started = time.perf_counter()
        try:
            settings = self._settings = user_settings(
                self.environment.parsed_options, self.host, self.protocol
            )
            self._coordinates = Coordinates(
                server=settings.url,
                api=settings.api,
                protocol=settings.protocol,
                model=settings.model,
                version=settings.version,
                batch_size=settings.batch_size,
                link=settings.link,
            )
            shared = process_state(self.environment)
            url = shared.links.connect_url(settings)  # one link for every model of a mix
            self._targets = tuple(
                self._target(settings.for_model(model), url, shared.payloads)
                for model, _ in settings.members
            )
            self._choice = shared.choice(settings) if settings.is_mix else None
            return True
        except (InferenceError, ValueError, NetemError) as exc:
            error = exc if isinstance(exc, InferenceError) else _client_error(exc)
            self._fire(send, time.perf_counter() - started, error, 0, 0)
            gevent.sleep(SETUP_RETRY_S)
            return False

    def _target(self, settings: UserSettings, url: str, payloads: PayloadCache) -> ModelTarget:
        """One model's connection and what it sends (read once per process and settings)."""
        transport = self._transports.get(settings.model)
        if transport is None:
            transport = self._transports[settings.model] = open_transport(settings, url)
        return ModelTarget(settings, transport, payloads.get(settings, url, transport))

    def _fire(
        self,
        send: float,
        latency: float,
        error: InferenceError | None,
        request_bytes: int,
        response_bytes: int,
        settings: UserSettings | None = None,
        model: int = 0,
    ) -> None:
        """One Locust request event, named by the model sent to, with its record."""
        settings = settings or self._settings
        coordinates = self._coordinates
        context = {}
        if coordinates is not None:
            context[RECORD_KEY] = (
                coordinates,
                send,
                send + latency,
                None if error is None else error.kind.value,
                request_bytes,
                response_bytes,
                model,
            )
        self.environment.events.request.fire(
            request_type=settings.protocol if settings else (self.protocol or "servebench"),
            name=settings.request_name if settings else "setup",
            response_time=latency * 1e3,
            response_length=response_bytes,
            response=None,
            context=context,
            exception=error,
            start_time=send,
            url=settings.url if settings else None,
        )


class ModelTarget(NamedTuple):
    """What a user sends one model of its mix to: its settings, connection and payloads."""

    settings: UserSettings
    transport: Transport
    prepared: Prepared


def _wrong_answer(source: str) -> InferenceError:
    """One message for every wrong answer of a file (Locust's failures table groups by it)."""
    return InferenceError(
        ErrorKind.WRONG_ANSWER,
        f"the answer differs from {source}'s expected outputs for the samples sent "
        f"(|got - want| > {ATOL:g} + {RTOL:g}*|want|, or another shape)",
    )


def _client_error(exc: Exception) -> InferenceError:
    """A bad option or link: counted as the client's failure, with the message that names it."""
    return InferenceError(ErrorKind.CLIENT_ERROR, str(exc))


class TritonHttpUser(ServebenchUser):
    """Triton's KServe v2 HTTP API, binary tensors (`--host http://host:8000`)."""

    protocol = "triton-http"


class TritonGrpcUser(ServebenchUser):
    """Triton's KServe v2 gRPC API (`--grpc-host host:8001`, or `--host host:8001`)."""

    protocol = "triton-grpc"


class TfsRestUser(ServebenchUser):
    """TF Serving's REST predict API, row or columnar (`--host http://host:8501`)."""

    protocol = "tfs-rest"


class TfsGrpcUser(ServebenchUser):
    """TF Serving's gRPC PredictionService (`--grpc-host host:8500`, or `--host`)."""

    protocol = "tfs-grpc"
