"""servebench's options as Locust command-line arguments, the web UI's form fields included.

Registered through Locust's own hook (`init_command_line_parser`), so they work with
`locust -f`, in config files and `LOCUST_*` environment variables, and those marked
`include_in_web_ui` appear in the form that starts a swarm: the place people change
model, version, batch size, protocol, link, gRPC address and input-data file between
swarms. Defaults
are strings where the form may leave a field empty (Locust keeps a form value's type
from the default).
"""

from __future__ import annotations

from typing import Any

from locust import events

from servebench.locust.settings import (
    DEFAULT_LINK,
    DEFAULT_PROTOCOL,
    DEFAULT_TIMEOUT_S,
    PROTOCOLS,
    REQUEST_FORMATS,
)
from servebench.netem import BUILTIN_PROFILES


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any, **_: Any) -> None:
    """The options the web UI's start form shows, to change between swarms."""
    parser.add_argument(
        "--model",
        default="",
        is_required=True,
        help="Name of the served model (as the server knows it), or a weighted mix of "
        "models as a scenario names it: mix(MODEL*WEIGHT+MODEL*WEIGHT...)",
    )
    parser.add_argument(
        "--model-version",
        default="",
        help="Model version; empty means the server's default (latest)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=1, help="Samples per request (the payload's batch)"
    )
    parser.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        choices=PROTOCOLS,
        help="Protocol of ServebenchUser (the protocol-specific user classes keep their own)",
    )
    parser.add_argument(
        "--link",
        default=DEFAULT_LINK,
        help=f"Emulated network link: {', '.join(BUILTIN_PROFILES)}, or a profile YAML file",
    )
    parser.add_argument(
        "--grpc-host",
        default="",
        help="The server's gRPC host:port for the gRPC protocols (default: --host)",
    )
    parser.add_argument(
        "--input-data",
        default="",
        help="Send the samples of this file (.npz, or perf_analyzer's JSON) in order instead "
        "of random data; expected outputs in it are checked (wrong_answer). Empty: random",
    )


@events.init_command_line_parser.add_listener
def add_run_arguments(parser: Any, **_: Any) -> None:
    """The options the start form leaves out: set once per Locust process."""
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="Seed of a mix's draw of models (each swarm draws the same sequence)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        include_in_web_ui=False,
        help="Seconds before a request counts as a timeout failure",
    )
    parser.add_argument(
        "--tfs-request-format",
        default="row",
        choices=REQUEST_FORMATS,
        include_in_web_ui=False,
        help="TF Serving REST body: row (instances) or columnar (inputs)",
    )
    parser.add_argument(
        "--signature",
        default="",
        include_in_web_ui=False,
        help="JSON file with the model's inputs and outputs, trusted as the expected answer "
        "instead of asking the server",
    )
    parser.add_argument(
        "--results-dir",
        default="results",
        include_in_web_ui=False,
        help="Folder for servebench's result directory of this Locust run (empty: none)",
    )
    parser.add_argument(
        "--run-id",
        default="",
        include_in_web_ui=False,
        help="Name of the result directory (default locust-<UTC time>)",
    )
    parser.add_argument(
        "--scenario-file",
        default="",
        include_in_web_ui=False,
        help="Scenario this run was configured from, copied into the result directory",
    )
    parser.add_argument(
        "--trial-facts",
        default="",
        include_in_web_ui=False,
        help="JSON file with the scenario's cost instance and price, SLO and model FLOP "
        "counts, added to every trial row (servebench ui writes it)",
    )


# The options recorded in run.json (Locust's own plus servebench's), as the run started.
RECORDED_OPTIONS = (
    "host",
    "grpc_host",
    "model",
    "model_version",
    "batch_size",
    "protocol",
    "link",
    "request_timeout",
    "tfs_request_format",
    "signature",
    "input_data",
    "seed",
    "locustfile",
    "num_users",
    "spawn_rate",
    "run_time",
    "headless",
    "processes",
)


def recorded_options(options: Any) -> dict[str, Any]:
    return {name: getattr(options, name, None) for name in RECORDED_OPTIONS}
