"""Link profiles: what a link looks like (bandwidth, RTT, jitter, loss), built-in and custom.

Every built-in profile records where its numbers come from, or says they are our
assumption, because a benchmark result is only as credible as the link it assumed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from servebench.common.textfile import TextFileError, load_yaml
from servebench.netem.errors import ProfileError, UnknownLinkError
from servebench.netem.trace import MahimahiTrace

Direction = Literal["up", "down"]
JitterDistribution = Literal["normal", "uniform"]

#: Linux never lets the retransmission timeout drop below this (TCP_RTO_MIN, 200 ms).
LINUX_RTO_MIN_S = 0.2
#: Smallest bottleneck queue we allow by default, so tiny links still hold a few segments.
MIN_QUEUE_BYTES = 64 * 1024


class LinkProfile(BaseModel):
    """One emulated link. `down` is server → client, `up` is client → server.

    Bandwidth is either a fixed rate (`*_mbps`) or a Mahimahi trace (`*_trace`); neither
    means that direction is not rate-limited. `jitter_s` is the standard deviation of the
    round-trip time (each direction gets 1/√2 of it), so it is what a ping user measures.
    `loss` is the probability that a TCP segment (1460 bytes) is lost, in each direction.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    source: str = Field("custom profile", description="Where the numbers come from.")
    down_mbps: float | None = Field(None, gt=0, description="Server → client rate, Mbit/s.")
    up_mbps: float | None = Field(None, gt=0, description="Client → server rate, Mbit/s.")
    down_trace: Path | None = Field(None, description="Mahimahi trace for server → client.")
    up_trace: Path | None = Field(None, description="Mahimahi trace for client → server.")
    rtt_s: float = Field(0.0, ge=0, le=60, description="Round-trip propagation delay.")
    jitter_s: float = Field(0.0, ge=0, le=10, description="Standard deviation of the RTT.")
    jitter_distribution: JitterDistribution = "normal"
    loss: float = Field(0.0, ge=0, lt=0.5, description="Segment loss probability, per direction.")
    queue_bytes: int | None = Field(
        None, gt=0, description="Bottleneck queue; default max(64 KiB, bandwidth × RTT)."
    )
    rto_s: float | None = Field(
        None,
        gt=0,
        le=120,
        description="Retransmission timeout; default RTT + max(4×jitter, 0.2 s).",
    )

    @field_validator("down_trace", "up_trace")
    @classmethod
    def _trace_must_parse(cls, path: Path | None) -> Path | None:
        if path is not None:
            try:
                load_trace(path)
            except ProfileError as exc:
                raise ValueError(str(exc)) from None
        return path

    @model_validator(mode="after")
    def _one_bandwidth_source(self) -> LinkProfile:
        for direction in ("down", "up"):
            if getattr(self, f"{direction}_mbps") is not None and getattr(
                self, f"{direction}_trace"
            ):
                raise ValueError(
                    f"{direction}_mbps and {direction}_trace both set; give one bandwidth "
                    f"source for the {direction} direction"
                )
        return self

    def trace(self, direction: Direction) -> MahimahiTrace | None:
        """The parsed trace of one direction, if it is trace-driven."""
        path = getattr(self, f"{direction}_trace")
        return None if path is None else load_trace(path)

    def rate_bps(self, direction: Direction) -> float | None:
        """Mean capacity of one direction in bit/s (a trace's average), None if unlimited."""
        trace = self.trace(direction)
        if trace is not None:
            return trace.mean_bps
        mbps = getattr(self, f"{direction}_mbps")
        return None if mbps is None else mbps * 1e6

    @property
    def effective_rto_s(self) -> float:
        """Linux computes RTO = SRTT + max(4·RTTVAR, TCP_RTO_MIN) (RFC 6298 with a 200 ms floor)."""
        if self.rto_s is not None:
            return self.rto_s
        return self.rtt_s + max(4 * self.jitter_s, LINUX_RTO_MIN_S)

    def effective_queue_bytes(self, direction: Direction) -> int | None:
        """One bandwidth-delay product is the classic router buffer; None if unlimited."""
        rate = self.rate_bps(direction)
        if rate is None:
            return None
        if self.queue_bytes is not None:
            return self.queue_bytes
        return max(MIN_QUEUE_BYTES, int(rate / 8 * self.rtt_s))

    @property
    def shapes_traffic(self) -> bool:
        """False for a pure forwarder (no delay, no rate limit, no loss)."""
        return bool(
            self.rtt_s
            or self.jitter_s
            or self.loss
            or self.rate_bps("down") is not None
            or self.rate_bps("up") is not None
        )


@functools.lru_cache(maxsize=64)
def load_trace(path: Path) -> MahimahiTrace:
    """Parse a trace once per process: profiles are validated and used many times."""
    return MahimahiTrace.load(path)


_OUR_ASSUMPTION = "our assumption"

BUILTIN_PROFILES: dict[str, LinkProfile] = {
    p.name: p
    for p in (
        LinkProfile(
            name="direct",
            source="no emulation: bytes are forwarded as they come (the baseline)",
        ),
        LinkProfile(
            name="wired",
            source=f"{_OUR_ASSUMPTION} (a switched 1 GbE LAN)",
            down_mbps=1000,
            up_mbps=1000,
            rtt_s=0.002,
        ),
        LinkProfile(
            name="wifi",
            source=(
                f"{_OUR_ASSUMPTION}; no authoritative preset exists (30/15 Mbit/s match the "
                "Firefox DevTools 'Wi-Fi' throttle; RTT, jitter and loss are ours)"
            ),
            down_mbps=30,
            up_mbps=15,
            rtt_s=0.020,
            jitter_s=0.005,
            loss=0.001,
        ),
        LinkProfile(
            name="lte",
            source=(
                "WebPageTest connectivity 'LTE' (12 Mbit/s, 70 ms RTT); jitter and loss are "
                f"{_OUR_ASSUMPTION}"
            ),
            down_mbps=12,
            up_mbps=12,
            rtt_s=0.070,
            jitter_s=0.010,
            loss=0.002,
        ),
        LinkProfile(
            name="4g-slow",
            source=(
                "Chrome DevTools 'Slow 4G' (1.6 Mbit/s × 0.9 down, 750 kbit/s × 0.9 up) with "
                "the Lighthouse target RTT of 150 ms"
            ),
            down_mbps=1.44,
            up_mbps=0.675,
            rtt_s=0.150,
        ),
        LinkProfile(
            name="3g",
            source="Lighthouse 'regular 3G' (700 kbit/s, 300 ms RTT)",
            down_mbps=0.7,
            up_mbps=0.7,
            rtt_s=0.300,
        ),
    )
}


def format_validation_error(exc: ValidationError, origin: str) -> str:
    """One line per problem, each naming the field, so a user can fix a file in one pass."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or "(profile)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = ", ".join(LinkProfile.model_fields)
            msg = f"unknown field (known fields: {known})"
        elif (
            "input" in err
            and err["type"] not in ("missing",)
            and not isinstance(err["input"], dict)
        ):
            msg = f"{msg} (got {err['input']!r})"
        lines.append(f"{origin}: field '{field}': {msg}")
    return "\n".join(lines)


def profile_from_mapping(data: Any, origin: str, base_dir: Path | None = None) -> LinkProfile:
    """Validate a mapping (from YAML or a scenario) into a profile, raising ProfileError."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a link profile must be a mapping of fields, got {data!r}")
    data = dict(data)
    if base_dir is not None:
        for key in ("down_trace", "up_trace"):
            value = data.get(key)
            if isinstance(value, str) and not Path(value).is_absolute():
                data[key] = str(base_dir / value)
    try:
        return LinkProfile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(exc, origin)) from None


def _read_profile_file(path: Path) -> LinkProfile:
    """Read a custom profile from YAML; trace paths are relative to the file's folder.

    The bounded reader shared by every user file (`servebench.common.textfile`, a leaf that imports
    nothing of servebench) turns bad bytes, bad YAML and alias bombs into one line
    (`file:line: what`).
    """
    try:
        data = load_yaml(path)
    except TextFileError as exc:
        raise ProfileError(f"profile file {exc}") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    return profile_from_mapping(data, f"profile file {path}", base_dir=path.resolve().parent)


#: The ends of a link reference that names a profile file rather than a built-in profile.
PROFILE_FILE_SUFFIXES = (".yaml", ".yml")

LinkKind = Literal["builtin", "file", "inline"]


def link_kind(reference: str | LinkProfile) -> LinkKind:
    """What a link reference means, decided without reading anything.

    The one place that decides it, so a scenario's schema, `servebench ui`, the CLI's
    `--link`/`--profile` options and a cluster job (which refuses files) cannot disagree:
    a `LinkProfile` (a scenario's inline mapping) is `inline`, a built-in name `builtin`,
    a name ending in .yaml/.yml a profile `file`; anything else is an UnknownLinkError
    naming it.
    """
    if isinstance(reference, LinkProfile):
        return "inline"
    if reference in BUILTIN_PROFILES:
        return "builtin"
    if reference.endswith(PROFILE_FILE_SUFFIXES):
        return "file"
    names = ", ".join(BUILTIN_PROFILES)
    raise UnknownLinkError(reference, f"not a built-in link ({names}) nor a .yaml profile file")


def is_profile_file(entry: Any) -> bool:
    """Whether an entry of a scenario's raw `links` (any YAML value) names a profile file,
    as `link_kind` decides; for checks that look at files before the schema has run."""
    if not isinstance(entry, str):
        return False
    try:
        return link_kind(entry) == "file"
    except UnknownLinkError:
        return False


def resolve_link(reference: str | LinkProfile, base_dir: Path | None = None) -> LinkProfile:
    """The profile a link reference names (`link_kind`), reading a profile file.

    A relative file path is taken from `base_dir` (a scenario's folder), or from the working
    folder when None (a command-line option). Callers resolve each reference once and pass
    the profile on: a scenario when its plan is expanded, a Locust process per `--link`.
    """
    kind = link_kind(reference)
    if isinstance(reference, LinkProfile):
        return reference
    if kind == "builtin":
        return BUILTIN_PROFILES[reference]
    path = Path(reference)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    return _read_profile_file(path)
