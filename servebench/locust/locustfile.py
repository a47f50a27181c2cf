"""The locustfile `servebench ui` runs: one user class whose protocol is `--protocol`.

Run it directly too: `locust -f <path of this file> --host http://127.0.0.1:8000
--model my-model` (Locust picks up every user class this module's namespace holds, so it
imports exactly one).
"""

from servebench.locust.users import ServebenchUser

__all__ = ["ServebenchUser"]
