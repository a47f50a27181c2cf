"""What one Locust user sends, read from Locust's parsed options (command line or web form).

The web UI's form writes into the same `parsed_options` namespace the command line filled,
so every user reads its settings from there when it starts: a swarm started from the form
with another model, batch size, protocol or link needs no restart.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from servebench.clients.base import ModelSignature, TensorSpec
from servebench.clients.endpoints import grpc_target, http_base
from servebench.clients.registry import PROTOCOLS as REGISTRY
from servebench.clients.registry import model_protocols
from servebench.clients.tfs_rest import REQUEST_FORMATS
from servebench.common.textfile import TextFileError, read_json_object
from servebench.locust.mix import mix_members
from servebench.netem import LinkProfile, resolve_link

# What a Locust user can speak: every registered protocol with a model format.
PROTOCOLS = model_protocols()
DEFAULT_PROTOCOL = "triton-http"
DEFAULT_LINK = "direct"
DEFAULT_TIMEOUT_S = 10.0
# Without input data, every user of a process sends the same pre-encoded payload, built
# from this seed.
PAYLOAD_SEED = 0


@functools.lru_cache(maxsize=64)
def _resolved(link: str, folder: Path) -> LinkProfile:
    return resolve_link(link, folder)


def link_profile(link: str) -> LinkProfile:
    """The profile a `--link` value names, resolved once per process and working folder.

    Every user asks when it starts, and every trial row of a swarm: a profile file is read
    on the first ask only. (A file edited during a session is read again by a new Locust
    process; the form can name another file meanwhile.) Raises netem's ProfileError.
    """
    return _resolved(link, Path.cwd())


@dataclass(frozen=True)
class UserSettings:
    """One user's target and request; `url` is the server's own address (before any link)."""

    protocol: str
    url: str
    model: str
    version: str = ""
    batch_size: int = 1
    link: str = DEFAULT_LINK
    timeout_s: float = DEFAULT_TIMEOUT_S
    signature_file: str = ""
    request_format: str = "row"
    input_data: str = ""  # a file of samples to send (`clients.input_data`); "" for random
    seed: int = 0  # a mix's draw of models (`locust.mix`)

    @property
    def members(self) -> tuple[tuple[str, float], ...]:
        """The (model, weight) pairs requests go to: a mix's, or the one model's."""
        return mix_members(self.model) or ((self.model, 1.0),)

    @property
    def is_mix(self) -> bool:
        return mix_members(self.model) is not None

    def for_model(self, model: str) -> UserSettings:
        """These settings for one model of the mix (its transport and payloads)."""
        return replace(self, model=model)

    @property
    def api(self) -> str:
        """The API the protocol speaks (trials.csv's `api`)."""
        return REGISTRY[self.protocol].server or ""

    @property
    def is_grpc(self) -> bool:
        return REGISTRY[self.protocol].transport == "grpc"

    @property
    def request_name(self) -> str:
        """The name Locust's statistics table shows: model, batch size and protocol."""
        version = f" v{self.version}" if self.version else ""
        return f"{self.model}{version} b{self.batch_size} {self.protocol}"


def option_json(option: str, path: str | Path) -> dict[str, Any]:
    """The JSON object in the file `option` names; a ValueError starting with the option."""
    try:
        return read_json_object(path)
    except TextFileError as exc:
        raise ValueError(f"{option} {exc}") from None


def _text(options: Any, name: str) -> str:
    value = getattr(options, name, None)
    return "" if value is None else str(value).strip()


def _check(option: str, parse: Any, url: str) -> None:
    try:
        parse(url)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def user_settings(options: Any, host: str | None, protocol: str | None = None) -> UserSettings:
    """Settings from `options` (Locust's parsed options, None for all defaults).

    `protocol` pins the protocol (the protocol-specific user classes); None takes
    `--protocol`. Raises ValueError naming the option and what is wrong with it.
    """
    protocol = protocol or _text(options, "protocol") or DEFAULT_PROTOCOL
    if protocol not in PROTOCOLS:
        raise ValueError(f"--protocol: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    model = _text(options, "model")
    if not model:
        raise ValueError("--model: the name of the served model is required")
    mix_members(model)  # a malformed mix is refused before any user connects
    batch_text = _text(options, "batch_size") or "1"
    try:
        batch_size = int(batch_text)
    except ValueError:
        raise ValueError(f"--batch-size: {batch_text!r} is not a whole number") from None
    if batch_size < 1:
        raise ValueError(f"--batch-size: must be >= 1, got {batch_size}")
    timeout_text = _text(options, "request_timeout") or str(DEFAULT_TIMEOUT_S)
    try:
        timeout_s = float(timeout_text)
    except ValueError:
        raise ValueError(f"--request-timeout: {timeout_text!r} is not a number") from None
    if not timeout_s > 0:
        raise ValueError(f"--request-timeout: must be > 0 s, got {timeout_s}")
    seed_text = _text(options, "seed") or "0"
    try:
        seed = int(seed_text)
    except ValueError:
        raise ValueError(f"--seed: {seed_text!r} is not a whole number") from None
    request_format = _text(options, "tfs_request_format") or "row"
    if request_format not in REQUEST_FORMATS:
        raise ValueError(
            f"--tfs-request-format: {request_format!r} is not one of {', '.join(REQUEST_FORMATS)}"
        )
    http_host = (host or "").strip()
    if REGISTRY[protocol].transport == "grpc":
        url = _text(options, "grpc_host") or http_host
        if not url:
            raise ValueError(f"--grpc-host: {protocol} needs the server's gRPC host:port")
        _check("--grpc-host", grpc_target, url)
    else:
        url = http_host
        if not url:
            raise ValueError(f"--host: {protocol} needs the server's base URL")
        _check("--host", http_base, url)
    return UserSettings(
        protocol=protocol,
        url=url,
        model=model,
        version=_text(options, "model_version"),
        batch_size=batch_size,
        link=_text(options, "link") or DEFAULT_LINK,
        timeout_s=timeout_s,
        signature_file=_text(options, "signature"),
        request_format=request_format,
        input_data=_text(options, "input_data"),
        seed=seed,
    )


def read_signature_file(path: str) -> ModelSignature:
    """A signature given as JSON, trusted as the expected answer (the server is not asked).

    `{"inputs": [{"name": "input", "dtype": "float32", "shape": [8]}], "outputs": [...],
    "max_batch_size": 0}`; shapes leave out the batch dimension, -1 marks a dynamic one.
    Raises ValueError naming the file and the field.
    """
    where = f"--signature {path}"
    document = option_json("--signature", path)

    def tensors(key: str) -> tuple[TensorSpec, ...]:
        entries = document.get(key)
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"{where}: {key}: a non-empty list of tensors is required")
        specs = []
        for i, entry in enumerate(entries):
            try:
                specs.append(
                    TensorSpec(
                        name=str(entry["name"]),
                        dtype=np.dtype(entry["dtype"]).name,
                        shape=tuple(int(d) for d in entry["shape"]),
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{where}: {key}[{i}]: needs name, a numpy dtype and a shape list ({exc})"
                ) from None
        return tuple(specs)

    return ModelSignature(
        name=str(document.get("name", "")),
        inputs=tensors("inputs"),
        outputs=tensors("outputs"),
        version=str(document.get("version", "")),
        max_batch_size=int(document.get("max_batch_size", 0) or 0),
    )
