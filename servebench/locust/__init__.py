"""servebench inside Locust: user classes on servebench's clients, and their event hooks.

The adapter (DESIGN.md layering: this package sits above `clients`, `netem` and
`load.records`, and knows nothing of scenarios or servers), and the running of Locust as
a child process on this package's locustfile (`launch`). `servebench ui`, which reads a
scenario and starts a server first, is application work: `servebench.cli.ui_launcher`.

Importing Locust monkey-patches the standard library with gevent, so the modules split in
two:

- Locust-free, safe in any process: `settings` (the options a user reads), `records` (the
  per-request record collector), `results` (servebench's result directory for a Locust
  run), `launch` (a Locust child process: its command line, run and exit).
- Loaded only inside a Locust process: `options` (the custom command-line arguments),
  `hooks` (the event listeners that record requests and write results, and the
  per-process state they share with the users, kept on Locust's Environment),
  `transport`, `links` and `users` (the user classes), and `locustfile` (what
  `servebench ui` runs).

`from servebench.locust import TritonHttpUser` works in a locustfile: the user classes
are loaded on first access (PEP 562), so importing this package alone patches nothing.
"""

from __future__ import annotations

from typing import Any

USER_CLASSES = ("ServebenchUser", "TritonHttpUser", "TritonGrpcUser", "TfsRestUser", "TfsGrpcUser")

__all__ = list(USER_CLASSES)


def __getattr__(name: str) -> Any:
    if name in USER_CLASSES:
        from servebench.locust import users

        return getattr(users, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
