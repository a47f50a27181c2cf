"""What a load generator asks a server before (and after) the load itself, on the client
side: `servebench load` and `servebench ui` check their target with it.

- `preflight`: one connect before the load, so that a wrong address, model, version or
  protocol is one sentence naming it (exit 2) instead of a traceback or a run of failures
  (`checked_connect`: the same, as a ValueError; `servebench ui` checks its target so);
- `explain`: that sentence, with the protocol the address seems to speak when it is not
  the one asked for (`servebench.clients.sniff`); `probed_protocol`: that protocol, for a
  load that names a model and no protocol;
- `protocol_hint`: for a load whose every request got an HTTP error status, the options
  that talk to what the address is; `default_metrics_url`: the server's metrics page.

The server's own counters over a load are `servebench.telemetry.server_metrics`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

from servebench.clients.base import (
    ErrorKind,
    InferenceClient,
    InferenceError,
    ModelSignature,
    request_bytes,
)
from servebench.clients.endpoints import grpc_target, http_base
from servebench.clients.payloads import check_data, random_payload
from servebench.clients.registry import PROTOCOLS, model_protocols
from servebench.clients.sniff import guess_protocol
from servebench.common.limits import LIMITS_DOC, MAX_REQUEST_MB

if TYPE_CHECKING:
    from servebench.clients.input_data import InputData

_REACH_TIMEOUT_S = 5.0
_MIB = 2**20
# A model named in a Triton (/v2/models/m/...) or TF Serving (/v1/models/m:predict) path.
_MODEL_IN_PATH = re.compile(r"/v[12]/models/([^/:]+)")


async def preflight(
    factory: Callable[[], InferenceClient],
    protocol: str,
    url: str,
    batch_size: int,
    seed: int,
    input_data: InputData | None = None,
) -> None:
    """Connect, check the payloads and close; raises InferenceError or ValueError.

    Model clients read the model's metadata on connect, which checks address, model,
    version and protocol at once; then the request's size (`check_request_size`), the
    batch and `input_data` are checked against the signature, before any inference is
    sent, without encoding a file's cycle of requests (the run encodes it, once). The raw
    `http` client connects lazily, so for it the address is tried with a TCP connect.
    """
    client = factory()
    try:
        await client.connect()
        signature = await client.signature()
        check_request_size(signature, batch_size)
        if input_data is None:
            random_payload(client.encode, signature, batch_size, seed)
        else:
            check_data(signature, batch_size, input_data)
        if protocol == "http":
            await _reachable(url)
    finally:
        await client.close()


def check_request_size(signature: ModelSignature, batch_size: int) -> None:
    """Refuse, before any payload is built, a request over a scenario's default
    `limits.max_request_mb` for the signature the server reports: `scenario validate`'s
    bound on the models it knows (`base.request_bytes`), here on what a server serves
    (a model whose input declares 1e9 elements would be allocated, 7.45 GiB of it)."""
    size = request_bytes(signature.inputs, batch_size)
    if size <= MAX_REQUEST_MB * _MIB:
        return
    largest = max(signature.inputs, key=lambda t: request_bytes((t,), 1))
    raise ValueError(
        f"model {signature.name!r}: a request of batch {batch_size} is {size / _MIB:,.0f} MiB "
        f"(input {largest.name!r} is {list(largest.shape)} {largest.dtype} per sample); must be "
        f"<= {MAX_REQUEST_MB:,g} MiB, as a scenario's limits.max_request_mb ({LIMITS_DOC})"
    )


async def checked_connect(
    factory: Callable[[], InferenceClient],
    protocol: str,
    url: str,
    model: str,
    batch_size: int,
    seed: int,
    input_data: InputData | None = None,
) -> None:
    """`preflight`, with a failed connect turned into a ValueError carrying the sentence
    (`servebench load` and `servebench ui` check their target with it before they start)."""
    try:
        await preflight(factory, protocol, url, batch_size, seed, input_data)
    except InferenceError as exc:
        raise ValueError(await explain(exc, protocol, url, model)) from None


async def _reachable(url: str) -> None:
    base = http_base(url)
    port = base.port or (443 if base.scheme == "https" else 80)
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(base.host, port), _REACH_TIMEOUT_S
        )
    except ConnectionRefusedError:
        raise InferenceError(
            ErrorKind.CONNECTION_REFUSED, f"{url}: connection refused by {base.host}:{port}"
        ) from None
    except (OSError, TimeoutError) as exc:
        raise InferenceError(
            ErrorKind.CLIENT_ERROR, f"{url}: cannot connect ({exc or 'timed out'})"
        ) from None
    writer.close()


async def explain(exc: InferenceError, protocol: str, url: str, model: str) -> str:
    """One sentence for a failed connect: the client's detail (it names the address and
    model) and, when the address answers another protocol, which one to use."""
    message = exc.detail or str(exc)
    if exc.kind is ErrorKind.CONNECTION_REFUSED:
        return f"{message}; is the server running, and is this its {_port_kind(protocol)} port?"
    guess = await guess_protocol(url, model)
    if guess is not None and guess != protocol:
        return f"{message}; the address answers like {guess}: try --protocol {guess}"
    return message


async def protocol_hint(url: str, protocol: str, model: str) -> str | None:
    """For a load whose every request got an HTTP error status: what the endpoint is, and
    the command-line options that talk to it (base URL and model read from the path)."""
    guess = await guess_protocol(url, model)
    if guess is None or guess == protocol:
        return None
    base = http_base(url)
    found = _MODEL_IN_PATH.search(base.path)
    options = f"--protocol {guess} --url {base.origin()}"
    options += f" --model {unquote(found.group(1))}" if found else " --model MODEL"
    return f"every request got an HTTP error status, and {url} answers like {guess}: try {options}"


async def probed_protocol(url: str, model: str) -> str:
    """The model protocol `url` answers (`sniff.guess_protocol`: one harmless question per
    protocol, no inference); a ValueError naming `--protocol` when the answers fit none,
    before anything is sent."""
    found = await guess_protocol(url, model)
    if found is None:
        raise ValueError(
            f"--protocol: {url} answers none of the model protocols' questions "
            f"({', '.join(model_protocols())}): is the server running there? "
            "Give --protocol (http for any other endpoint)"
        )
    return found


def _port_kind(protocol: str) -> str:
    return "gRPC" if PROTOCOLS[protocol].transport == "grpc" else "HTTP"


def default_metrics_url(protocol: str, url: str) -> str | None:
    """The server's default metrics page on its host (Triton's :8002), for protocols whose
    server has one; tried when no --metrics-url is given."""
    spec = PROTOCOLS[protocol]
    if spec.metrics_port is None:
        return None
    try:
        if spec.transport == "grpc":
            host = grpc_target(url).rsplit(":", 1)[0]
        else:
            host = http_base(url).host or ""
            host = f"[{host}]" if ":" in host else host
    except ValueError:
        return None
    return f"http://{host}:{spec.metrics_port}/metrics"


def chosen_protocol(protocol: str | None, url: str, model: str) -> tuple[str, bool]:
    """`--protocol`; else, for a named model, the model protocol `url` answers (asked
    once), as perf_analyzer's users expect of a model; else plain `http` to the URL as an
    endpoint. With whether it was asked (the load says so once its checks pass, so that a
    refusal stays one line). ValueError naming `--protocol` when the answers fit none."""
    if protocol is not None:
        return protocol, False
    if not model:
        return "http", False
    return asyncio.run(probed_protocol(url, model)), True
