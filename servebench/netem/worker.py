"""The emulator's own process (`python -m servebench.netem.worker`), driven by LinkEmulator.

Protocol: JSON lines. stdin's first line is the configuration
{"profile": {...}, "target": [host, port], "listen": [host, port], "seed": int|null,
"realtime": bool}; stdout answers {"address": [host, port], "realtime": bool} or
{"error": "..."}. Then each stdin line is
{"op": "stats"} (answer {"stats": {...}}) or {"op": "stop"} (answer {"stats": final} and
exit). End of stdin also stops it, so the worker never outlives its parent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from servebench.netem.address import parse_address
from servebench.netem.errors import NetemError
from servebench.netem.profiles import profile_from_mapping
from servebench.netem.proxy import LinkProxy
from servebench.netem.serve import run_proxy


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _read_commands(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str]) -> None:
    """stdin is read in a thread: a blocking readline is the simplest portable pipe reader."""
    for line in sys.stdin:
        loop.call_soon_threadsafe(queue.put_nowait, line)
    loop.call_soon_threadsafe(queue.put_nowait, "")


async def _serve_commands(proxy: LinkProxy) -> None:
    _reply({"address": list(proxy.address), "realtime": proxy.realtime})  # type: ignore[arg-type]
    queue: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=_read_commands, args=(loop, queue), daemon=True).start()
    while line := await queue.get():
        op = json.loads(line).get("op")
        if op == "stats":
            _reply({"stats": proxy.stats().to_dict()})
        elif op == "stop":
            return
        else:
            _reply({"error": f"unknown op {op!r}"})


def main() -> int:
    try:
        config = json.loads(sys.stdin.readline())
        profile = profile_from_mapping(config["profile"], "profile")
        target = parse_address(tuple(config["target"]), "target")
        listen = parse_address(tuple(config["listen"]), "listen")
        proxy = run_proxy(
            profile,
            target,
            listen,
            seed=config.get("seed"),
            until=_serve_commands,
            realtime=config.get("realtime", True),
        )
    except (NetemError, OSError, ValueError, KeyError) as exc:
        _reply({"error": str(exc)})
        return 1
    _reply({"stats": proxy.stats().to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
