"""LinkEmulator: the link proxy in its own process, behind a `with` / `async with` API.

Why a process: the emulator's timing must not depend on the caller. In the caller's
event loop, a busy load generator would delay deliveries, and asyncio's timers are only
millisecond-precise; in a thread, the GIL would hand the emulator the CPU in 5 ms slices.
Its own process gives it its own interpreter, a precise-timer loop and a core.

    async with LinkEmulator(BUILTIN_PROFILES["lte"], "127.0.0.1:8000") as address:
        ...  # point the client at address (host, port)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from servebench.netem.address import Address, parse_address
from servebench.netem.errors import EmulatorError
from servebench.netem.profiles import LinkProfile
from servebench.netem.stats import LinkStats

#: Folder that holds the `servebench` package, so the worker imports this same copy.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class LinkEmulator:
    """An emulated link in front of `target`; entering it returns the address to use."""

    def __init__(
        self,
        profile: LinkProfile,
        target: str | tuple[str, int],
        *,
        listen: str | tuple[str, int] = ("127.0.0.1", 0),
        seed: int | None = None,
        realtime: bool = True,
        start_timeout_s: float = 20.0,
    ) -> None:
        self.profile = profile
        self.target = parse_address(target, "target")
        self.listen = parse_address(listen, "listen")
        self.seed = seed
        self.want_realtime = realtime
        #: Whether the worker got a real-time scheduling class (clock.try_realtime_priority).
        self.realtime = False
        self.start_timeout_s = start_timeout_s
        self.address: Address | None = None
        #: Counters at stop(), kept so a run that ends early still has them.
        self.final_stats: LinkStats | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._buffer = b""
        self._lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> Address:
        """Start the worker process; return the address clients should connect to."""
        if self._proc is not None:
            raise EmulatorError(f"link emulator for {self.target} is already started")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        # Lives as long as the worker; closed in _kill().
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        # Its own session: a terminal's Ctrl-C (SIGINT to the whole foreground group) must
        # reach only the caller, which stops the load first and then this worker. It still
        # cannot outlive the caller: end of stdin stops it (worker.py).
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "servebench.netem.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            start_new_session=True,
        )
        config = {
            "profile": self.profile.model_dump(mode="json"),
            "target": list(self.target),
            "listen": list(self.listen),
            "seed": self.seed,
            "realtime": self.want_realtime,
        }
        try:
            self._send(config)
            reply = self._receive(self.start_timeout_s)
        except EmulatorError:
            self._kill()
            raise
        if "error" in reply:
            self._kill()
            raise EmulatorError(f"link emulator ({self.profile.name}): {reply['error']}")
        self.address = Address(*reply["address"])
        self.realtime = reply.get("realtime", False)
        return self.address

    def stats(self) -> LinkStats:
        """Counters now (totals and open connections); after stop(), the final ones."""
        if self._proc is None:
            if self.final_stats is not None:
                return self.final_stats
            raise EmulatorError("link emulator is not running")
        with self._lock:
            self._send({"op": "stats"})
            return LinkStats.from_dict(self._receive(10.0)["stats"])

    def stop(self, timeout_s: float = 10.0) -> LinkStats | None:
        """Close every connection and end the worker; return the final counters."""
        if self._proc is None:
            return self.final_stats
        try:
            with self._lock:
                self._send({"op": "stop"})
                reply = self._receive(timeout_s)
            if "stats" in reply:
                self.final_stats = LinkStats.from_dict(reply["stats"])
            self._proc.wait(timeout=timeout_s)
        except (EmulatorError, subprocess.TimeoutExpired):
            pass  # a worker that will not stop is killed below; the error is not the caller's
        finally:
            self._kill()
        return self.final_stats

    def __enter__(self) -> Address:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Address:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    async def astats(self) -> LinkStats:
        """stats() without blocking the caller's event loop."""
        return await asyncio.to_thread(self.stats)

    # -- the pipe to the worker ----------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise EmulatorError(
                f"link emulator worker is gone ({exc}){self._stderr_tail()}"
            ) from exc

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise EmulatorError(
                    f"link emulator worker did not answer within {timeout_s:.0f} s"
                    f"{self._stderr_tail()}"
                )
            data = os.read(fd, 65536)
            if not data:
                self._proc.wait(timeout=5)
                raise EmulatorError(
                    f"link emulator worker exited with status {self._proc.returncode}"
                    f"{self._stderr_tail()}"
                )
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode(errors="replace").strip()
        return f"; its stderr:\n{tail}" if tail else ""

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    # Closing flushes what a failed _send left buffered; to a dead worker
                    # that is a BrokenPipeError, which must not replace the caller's outcome.
                    with contextlib.suppress(OSError):
                        stream.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._buffer = b""
