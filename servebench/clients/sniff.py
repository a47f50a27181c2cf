"""Which inference protocol an address answers, for error messages that say what to use.

A wrong `--protocol` fails in ways that name the symptom, not the cause: gRPC on an HTTP
port sees "socket closed", HTTP on a gRPC port sees bytes that are not HTTP/1.1, TF
Serving's REST paths on Triton get 404 and a raw POST to a Triton model gets 400. After
such a failure, `guess_protocol` asks the address the cheapest question each server
answers and returns the servebench protocol name that fits, so the message can say
"this looks like triton-http".

Each protocol's codec names its question (`probe_path`), asked in the registry's order;
each is harmless (no inference, no model load) and bounded by `timeout_s`:
- over HTTP, a GET whose JSON answer the codec recognizes (`answers_probe`): Triton's
  `/v2` server metadata lists `extensions`; TF Serving's `/v1/models/<model>` answers a
  model status or an `{"error": ...}` that names the servable;
- over gRPC, an empty request to a method (Triton's `ServerLive`, TF Serving's
  `GetModelStatus`); a server without that service answers UNIMPLEMENTED, anything else
  means it has it.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import suppress
from typing import Any

import aiohttp
import grpc

from servebench.clients.endpoints import grpc_target, http_base, path_segment
from servebench.clients.grpc_calls import CHANNEL_OPTIONS
from servebench.clients.registry import PROTOCOLS, model_protocols


def _codecs(transport: str) -> list[tuple[str, Any]]:
    """(name, codec class) of every model protocol over `transport`, in registry order."""
    return [
        (name, PROTOCOLS[name].codec_class())
        for name in model_protocols()
        if PROTOCOLS[name].transport == transport
    ]


async def guess_protocol(url: str, model: str = "", timeout_s: float = 2.0) -> str | None:
    """The model protocol (a registry name, e.g. `triton-http`) `url` answers.

    None when nothing answers or the answers fit none of them. Only the host and port of
    `url` are used, so an endpoint URL (`http://h:8000/v2/models/m/infer`) works too.
    """
    address = _host_port(url)
    if address is None:
        return None
    found = await _http_guess(f"http://{address}", model, timeout_s)
    if found is None:
        found = await _grpc_guess(address, timeout_s)
    return found


def _host_port(url: str) -> str | None:
    with suppress(ValueError):
        base = http_base(url)
        host = f"[{base.host}]" if base.host and ":" in base.host else base.host
        return f"{host}:{base.port}"
    with suppress(ValueError):
        return grpc_target(url)
    return None


async def _http_guess(base: str, model: str, timeout_s: float) -> str | None:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            for name, codec in _codecs("http"):
                path = codec.probe_path.format(model=path_segment(model or "_"))
                if codec.answers_probe(await _get_json(session, f"{base}{path}")):
                    return name
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None  # not HTTP/1.1 (a gRPC port), or nothing there
    return None


async def _get_json(session: aiohttp.ClientSession, url: str) -> object:
    async with session.get(url) as response:
        body = await response.read()
    try:
        return json.loads(body)
    except ValueError:
        return None


async def _grpc_guess(target: str, timeout_s: float) -> str | None:
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        for name, codec in _codecs("grpc"):
            call = channel.unary_unary(
                codec.probe_path, request_serializer=None, response_deserializer=lambda data: data
            )
            try:
                await asyncio.wait_for(call(b"", timeout=timeout_s), timeout_s + 1.0)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    continue  # a gRPC server, without this service
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return None  # no gRPC server: asking for the next service cannot help
            except TimeoutError:
                return None
            return name  # answered, even if only to say the empty request was wrong
    return None
