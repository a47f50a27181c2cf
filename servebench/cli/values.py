"""The values `servebench` options and arguments take, checked where they are parsed.

Every parameter that holds a number, a port, an address or a path declares one of these
types as its typer parser (`typer.Option(parser=Number(int, ge=1, le=MAX_CONCURRENCY))`), so
a bad value is refused before the command does anything, by one rule for every command:

- a number is finite and within its range; the ranges are the ones a scenario file gets
  (`servebench.common.limits`), so `load --rate 1e12` is refused as `rates: [1e12]` is;
- a port is 1-65535; a URL has one of its schemes and a host; an address is host:port;
- an output path can be written: no folder where a file goes (or the reverse), nothing
  under a file, and its folder takes a new file (tried, not read off the permission bits,
  which root passes);
- an input path exists and is a file, or a folder, as asked.

A refusal is a `BadValue` naming the value and why; typer attaches the option, and
`servebench.cli.usage` prints it as one line (`error: --rate 1e12: must be <= ...`), exit 2.
Each type keeps its bounds as attributes, so a test can derive the values just outside them.
"""

from __future__ import annotations

import codecs
import math
import re
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import typer

from servebench.common.errors import ServebenchError
from servebench.common.limits import LIMITS_DOC


class BadValue(typer.BadParameter, ServebenchError):
    """A value a parameter's type refused: `value` as typed and `reason`, one line."""

    def __init__(self, value: Any, reason: str) -> None:
        super().__init__(f"{value}: {reason}")
        self.value = str(value)
        self.reason = reason


class Value:
    """A parameter's type: called with the text typed (or the default), returns the value."""

    kind: ClassVar[str]

    def __call__(self, text: Any) -> Any:
        raise NotImplementedError


def _fmt(number: float) -> str:
    """1,000,000 rather than 1e+06; 0.001 and 1.5e+12 as they are."""
    if isinstance(number, int) or (number.is_integer() and abs(number) < 1e15):
        return f"{int(number):,}"
    return f"{number:,g}"


class Number(Value):
    """A finite int or float within bounds (`ge`/`gt`, `le`/`lt`; every number has an
    upper one). For the message: `limit` names the scenario limit the upper bound is, `why`
    says what else it stands for, `unit` follows the number."""

    kind = "number"

    def __init__(
        self,
        type_: type[int] | type[float] = float,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        lt: float | None = None,
        nonzero: bool = False,
        limit: str | None = None,
        why: str = "",
        unit: str = "",
    ) -> None:
        assert (ge is None or gt is None) and (le is None or lt is None)
        self.integer = type_ is int
        self.low = ge if gt is None else gt
        self.low_open = gt is not None
        self.high = le if lt is None else lt
        self.high_open = lt is not None
        self.nonzero = nonzero
        self.limit = limit
        self.why = why
        self.unit = unit

    def __call__(self, text: Any) -> int | float:
        value = self._parse(text)
        shown = text if isinstance(text, str) else _fmt(value)
        if not math.isfinite(value):
            raise BadValue(shown, "must be a finite number")
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise BadValue(shown, f"must be {'>' if self.low_open else '>='} {_fmt(self.low)}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            bound = f"must be {'<' if self.high_open else '<='} {_fmt(self.high)}{self.unit}"
            if self.limit:
                bound += f", as a scenario's limits.{self.limit} ({LIMITS_DOC})"
            elif self.why:
                bound += f" ({self.why})"
            raise BadValue(shown, bound)
        if self.nonzero and value == 0:
            raise BadValue(shown, "must not be 0")
        return value

    def _parse(self, text: Any) -> int | float:
        if isinstance(text, bool):
            raise BadValue(text, "must be a number")
        if isinstance(text, int | float):
            return int(text) if self.integer and float(text).is_integer() else text
        raw = str(text).strip()
        try:
            return int(raw) if self.integer else float(raw)
        except ValueError:
            pass
        try:
            number = float(raw)
        except ValueError:
            kind = "whole number" if self.integer else "number"
            raise BadValue(text, f"must be a {kind}") from None
        if self.integer and math.isfinite(number):
            if not number.is_integer():
                raise BadValue(text, "must be a whole number")
            return int(number)
        return number


class Timespan(Value):
    """A duration as Locust writes it (`90`, `30s`, `2m`, `1h30m`), kept as typed; at most
    a scenario's trial length."""

    kind = "timespan"
    _FORM = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")

    def __call__(self, text: Any) -> str:
        from servebench.common.limits import MAX_TRIAL_S

        raw = str(text).strip()
        found = self._FORM.match(raw) if not raw.isdigit() else None
        if raw.isdigit():
            seconds = int(raw)
        elif found and raw:
            hours, minutes, secs = (int(part or 0) for part in found.groups())
            seconds = hours * 3600 + minutes * 60 + secs
        else:
            raise BadValue(text, "not a duration; write it like 30s, 2m or 1h30m")
        if seconds <= 0:
            raise BadValue(text, "must be longer than 0 s")
        if seconds > MAX_TRIAL_S:
            raise BadValue(
                text,
                f"must be <= {_fmt(MAX_TRIAL_S)} s, as a scenario's limits.max_trial_s "
                f"({LIMITS_DOC})",
            )
        return raw


class Port(Number):
    """A TCP port a server listens on or a client connects to: 1-65535."""

    kind = "port"

    def __init__(self) -> None:
        super().__init__(int, ge=1, le=65535)

    def __call__(self, text: Any) -> int:
        number = self._parse(text)
        if not 1 <= number <= 65535:
            raise BadValue(text, "is outside 1-65535")
        return int(number)


def seed() -> Number:
    """A random seed: numpy's generators take 0 to 2**64 - 1."""
    from servebench.common.limits import MAX_SEED

    return Number(int, ge=0, le=MAX_SEED)


# A host name: letters, digits, '.', '-', '_' (what else yarl takes would fail at connect).
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


class Host(Value):
    """A host name or IP address to listen on (no scheme, no port)."""

    kind = "host"

    def __call__(self, text: Any) -> str:
        host = str(text).strip()
        if not is_host(host):
            raise BadValue(text, "not a host name or IP address (like 127.0.0.1 or 0.0.0.0)")
        return host


def is_host(host: str) -> bool:
    """A host name, an IPv4 address or an IPv6 one (bare or in brackets)."""
    import ipaddress

    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        return _HOST_NAME.match(host) is not None
    return True


class Url(Value):
    """A URL with one of `schemes`, a host and, if `port`, an explicit port ('' is taken
    where `empty` says it means "none")."""

    kind = "url"

    def __init__(
        self,
        schemes: tuple[str, ...] = ("http", "https"),
        *,
        port: bool = False,
        empty: bool = False,
    ) -> None:
        self.schemes = schemes
        self.port = port
        self.empty = empty

    def __call__(self, text: Any) -> str:
        from yarl import URL

        raw = str(text).strip()
        if not raw and self.empty:
            return raw
        like = f"like {self.schemes[0]}://127.0.0.1:8000"
        scheme, sep, _ = raw.partition("://")
        if not sep:
            raise BadValue(text, f"needs a scheme ({'/'.join(self.schemes)}://), {like}")
        if scheme.lower() not in self.schemes:
            raise BadValue(text, f"scheme {scheme}:// is not {' or '.join(self.schemes)}; {like}")
        try:
            parsed = URL(raw)
            port = parsed.explicit_port
        except ValueError as err:
            raise BadValue(text, f"not a URL ({err}); {like}") from None
        host = parsed.raw_host or ""
        if not host or not is_host(host):
            raise BadValue(text, f"needs a host name or IP address, {like}")
        if port is not None and not 1 <= port <= 65535:
            raise BadValue(text, f"port {port} is outside 1-65535")
        if self.port and port is None:
            raise BadValue(text, f"needs a port, {like}")
        return raw


class Endpoint(Value):
    """A server's address as `servebench load --url` takes it for any protocol: an
    http(s) URL (a bare host:port is http) or a gRPC host:port (grpc:// optional)."""

    kind = "endpoint"

    def __call__(self, text: Any) -> str:
        raw = str(text).strip()
        scheme, sep, rest = raw.partition("://")
        if not sep:
            scheme, rest = "http", raw
        if scheme.lower() not in ("http", "https", "grpc"):
            raise BadValue(text, f"scheme {scheme}:// is not http, https or grpc")
        Url((scheme.lower(),))(f"{scheme.lower()}://{rest}")
        return raw


class Address(Value):
    """host:port (a gRPC target, a proxy's peer), read by netem's one host:port parser;
    the host must be a host name or IP address; `listen`: port 0 means a free one."""

    kind = "address"

    def __init__(self, *, listen: bool = False) -> None:
        self.listen = listen

    def __call__(self, text: Any) -> str:
        from servebench.netem import AddressError, parse_address

        raw = str(text).strip()
        if "://" in raw:
            raise BadValue(text, "give host:port, without a scheme")
        try:
            address = parse_address(raw, "address")
        except AddressError as err:
            raise BadValue(text, str(err).removeprefix("address: ")) from None
        if not is_host(address.host):
            raise BadValue(text, f"host {address.host!r} is not a host name or IP address")
        if address.port == 0 and not self.listen:
            raise BadValue(text, "port 0 is no server's port")
        return raw


# -- paths --------------------------------------------------------------------------------


def _nearest_existing(path: Path) -> Path:
    """`path` or the closest folder above it that exists (what a mkdir -p starts from)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _writable(folder: Path, value: Any) -> None:
    """Refuse a folder that takes no new file: tried, since root passes every mode check."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise BadValue(value, f"cannot write in {folder} ({err.strerror})") from None


def _folder_for(path: Path, value: Any, *, make: bool) -> Path:
    """The existing folder `path` would be created in (refused if it is a file)."""
    start = _nearest_existing(path) if make else path
    if not start.exists():
        raise BadValue(value, f"folder {path} does not exist")
    if not start.is_dir():
        raise BadValue(value, f"{start} is a file, not a folder")
    return start


class OutputFile(Value):
    """A file a command writes; `make_parents`: its folder may not exist yet (created)."""

    kind = "out_file"

    def __init__(self, *, make_parents: bool = False) -> None:
        self.make_parents = make_parents

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        if path.is_dir():
            raise BadValue(text, "is a folder; give a file name")
        folder = _folder_for(path.parent, text, make=self.make_parents)
        _writable(folder, text)
        return path


class OutputDir(Value):
    """A folder a command writes into (created, with its parents, if missing)."""

    kind = "out_dir"

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        if path.exists() and not path.is_dir():
            raise BadValue(text, "is a file, not a directory")
        _writable(_folder_for(path, text, make=True), text)
        return path


class OutputPath(Value):
    """A file or a folder a command writes (which one, the command decides)."""

    kind = "out_path"

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        _writable(path if path.is_dir() else _folder_for(path.parent, text, make=True), text)
        return path


class InputFile(Value):
    """A file a command reads: it exists, is a file and opens; a `text` file starts as
    UTF-8 text (its content is the command's to judge, but garbage is refused here)."""

    kind = "in_file"

    def __init__(self, *, text: bool = True) -> None:
        self.text = text

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        if not path.exists():
            raise BadValue(text, "no such file")
        if path.is_dir():
            raise BadValue(text, "is a folder; give a file")
        try:
            with path.open("rb") as handle:
                start = handle.read(_SNIFF_BYTES)
        except OSError as err:
            raise BadValue(text, f"cannot read it ({err.strerror})") from None
        if self.text:
            try:  # a character cut at the end of the sample is not an error (final=False)
                codecs.getincrementaldecoder("utf-8")().decode(start, final=False)
            except UnicodeDecodeError as err:
                raise BadValue(text, f"not a text file (byte {err.start} is not UTF-8)") from None
        return path


_SNIFF_BYTES = 64 * 1024


class InputPath(Value):
    """A file or a folder a command reads (which one, the command decides)."""

    kind = "in_path"

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        if not path.exists():
            raise BadValue(text, "no such file or folder")
        return path


class ScenarioFile(Value):
    """A scenario file: checked by the scenario validator, not here. It reports every
    problem of every file given in one pass (a missing file, bytes that are not text, a
    field), each as `file:line field: why`; a check at parsing would stop at the first."""

    kind = "scenario"

    def __call__(self, text: Any) -> Path:
        return Path(text)


class InputDir(Value):
    """A folder a command reads: it exists and is a folder."""

    kind = "in_dir"
    what: ClassVar[str] = "folder"

    def __call__(self, text: Any) -> Path:
        path = Path(text)
        if not path.exists():
            raise BadValue(text, f"no such {self.what}")
        if not path.is_dir():
            raise BadValue(text, "is a file, not a directory")
        return path


class RunDir(InputDir):
    """A run directory (results/<run-id>); what is in it is the loader's to judge."""

    kind = "run_dir"
    what = "run directory"
