"""The serving APIs servebench talks to, named once: Triton's and TF Serving's.

A name here is what a scenario's server `api` says, what trials.csv's `api` column
holds, what a protocol's `ProtocolSpec.server` refers to and what each server kind in
`servers.kinds` serves. It sits at the bottom, beside the well-known ports, because layers
that may not import one another all need it: the server kinds, the protocols, and the
readers of result files (which know a run only by its files).

Only what those layers share lives here; how servebench asks a server of each API whether
it is up is `servers.control`'s, and how each kind starts is `servers.kinds`'.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServingApi:
    """One serving system's API.

    `stage_times`: its metrics split each request's time into queue and compute input /
    infer / output, the split perf_analyzer shows as its server columns (Triton's
    `nv_inference_*_duration_us`; TF Serving reports a compute total at most).
    """

    name: str
    title: str
    stage_times: bool


TRITON = ServingApi("triton", "Triton", stage_times=True)
TFS = ServingApi("tfs", "TF Serving", stage_times=False)

SERVING_APIS: dict[str, ServingApi] = {api.name: api for api in (TRITON, TFS)}


def serving_api(name: str) -> ServingApi | None:
    """The API called `name`, None for a name servebench does not know (a raw HTTP
    endpoint's empty `api`, a file written by another tool)."""
    return SERVING_APIS.get(name)
