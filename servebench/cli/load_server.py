"""Where `servebench load` (cli/load.py) finds what it asks the server besides the load:
the checks and hints are `servebench.clients.probe`, the server's counters
`servebench.telemetry.server_metrics`. Only these names, for cli/load.py, which is being
rewritten; it imports them from their own modules then, and this module goes.
"""

from servebench.clients.probe import (
    checked_connect,
    default_metrics_url,
    explain,
    probed_protocol,
    protocol_hint,
)
from servebench.telemetry.server_metrics import ServerMetrics

__all__ = [
    "ServerMetrics",
    "checked_connect",
    "default_metrics_url",
    "explain",
    "probed_protocol",
    "protocol_hint",
]
