"""servebench's result directory for a Locust run, so `servebench report` reads it.

One directory per Locust process that drives load (the local runner, or the master):
`run.json` (status, machine, versions, `"source": "locust"` and Locust's options),
`records/<trial>.parquet` and `trials.csv` written when each swarm stops, and
`records.parquet` merged when Locust quits. Trial rows come from the scenario runner's
row builder (`servebench.trial_row`) with the load given as `users N`: each swarm is a
closed-loop load level, not a rate. `client_cpu_s` is the Locust process's own
CPU time during the swarm (local runner), to tell a busy generator from a slow server.

A run directory is created when Locust starts, so a session that quits before any swarm
still says so (status "interrupted", reason "no swarm ran"); a Locust process that dies
leaves "running", which `servebench ui` turns into "interrupted" with the exit status.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servebench.clients.registry import PROTOCOLS
from servebench.load.records import Chunk, Clock, ParquetRecordWriter, chunk_to_batch
from servebench.load.stats import columns_from_table, mix_figures, summarize
from servebench.load.summary import LATE_THRESHOLD, MAX_ERROR_SHARE, judge
from servebench.locust.facts import TrialFacts
from servebench.locust.mix import mix_members
from servebench.locust.records import Coordinates
from servebench.locust.settings import link_profile
from servebench.netem import NetemError
from servebench.results import RunDirectory, RunStatus, TrialRow, new_run_id
from servebench.trial_row import TrialCoordinates, WireBytes, build_row

SOURCE = "locust"
_NO_SCENARIO = (
    "# A live Locust session: no scenario file. Each swarm's settings are in trials.csv,\n"
    "# Locust's options in run.json under 'locust'.\n"
)
_CLOSED_LOOP = Clock(wall0=0.0, perf0=0.0)  # records already hold wall-clock times


class LocustRun:
    """The run directory of one Locust process, written as swarms start and stop."""

    def __init__(
        self,
        root: Path,
        run_id: str | None = None,
        *,
        options: dict[str, Any] | None = None,
        scenario: Path | None = None,
        facts: TrialFacts | None = None,
    ):
        run_id = check_run_id(run_id) if run_id else new_run_id(SOURCE)
        text = Path(scenario).read_text() if scenario else _NO_SCENARIO
        self.directory = RunDirectory.create(
            Path(root), run_id, text, Path(scenario) if scenario else Path("-")
        )
        if scenario is None:
            self.directory.run["scenario"] = None
        self.directory.run.pop("trials_planned", None)  # swarms are not planned ahead
        self.directory.run["source"] = SOURCE
        self.directory.run["locust"] = options or {}
        self.facts = facts or TrialFacts()
        if self.facts.instance:
            self.directory.run["instance"] = self.facts.instance  # what the run stands for
        self.directory.write_run()
        self.swarms = 0
        self.finished = False

    @property
    def path(self) -> Path:
        return self.directory.path

    def start_swarm(self) -> int:
        self.swarms += 1
        return self.swarms

    def add_swarm(
        self,
        swarm: int,
        trials: list[tuple[Coordinates, Chunk]],
        users: int,
        client_cpu_s: float | None = None,
    ) -> list[TrialRow]:
        """Write each trial's records file and summary row; returns the rows.

        Called again for the same swarm with more records (a worker's last report came
        after the swarm stopped), it replaces that swarm's files and rows.
        """
        rows = []
        for coords, chunk in trials:
            trial_id = _trial_id(swarm, coords)
            members = mix_members(coords.model) or ()
            batch = chunk_to_batch(
                chunk,
                trial_id=trial_id,
                batch_size=coords.batch_size,
                clock=_CLOSED_LOOP,
                latency_from_send=True,
                models=[model for model, _ in members],
            )
            with ParquetRecordWriter(self.directory.trial_records_path(trial_id)) as writer:
                writer.write(batch)
            earlier = [r for r in self.directory.rows if r.trial_id == trial_id]
            index = earlier[0].index if earlier else len(self.directory.rows) + 1
            # client_cpu_s is the whole swarm's, on every trial of it.
            row = trial_row(trial_id, index, swarm, coords, batch, users, self.facts, client_cpu_s)
            self.directory.add_trial(row)
            rows.append(row)
        return rows

    def finish(self, reason: str | None = None) -> None:
        """Close the run: complete when some swarm recorded requests, else interrupted."""
        if self.finished:
            return
        self.finished = True
        if self.directory.rows:
            self.directory.finish(RunStatus.COMPLETE, reason)
        else:
            self.directory.finish(RunStatus.INTERRUPTED, reason or "no swarm ran")


def check_run_id(run_id: str) -> str:
    """A run id names one folder in the results folder; refuse anything that is a path.

    `--run-id ../../X` would otherwise create (and a later run overwrite) a directory
    anywhere the user can write, outside the results folder the run was given.
    """
    if run_id in ("", ".", "..") or any(c in run_id for c in "/\\\0") or run_id != run_id.strip():
        raise ValueError(
            f"--run-id {run_id!r}: a run id is a folder name inside the results folder, "
            "not a path (no '/', '\\', '..' or surrounding spaces)"
        )
    return run_id


def _trial_id(swarm: int, coords: Coordinates) -> str:
    digest = hashlib.sha256(json.dumps(asdict(coords), sort_keys=True).encode()).hexdigest()
    return f"s{swarm:02d}-{digest[:8]}"


def trial_row(
    trial_id: str,
    index: int,
    swarm: int,
    coords: Coordinates,
    batch: pa.RecordBatch,
    users: int,
    facts: TrialFacts | None = None,
    client_cpu_s: float | None = None,
) -> TrialRow:
    """A swarm's trial row from its records, by the one row builder (`servebench.trial_row`)
    with Locust's coordinates: a closed loop of `users`; `facts` add the scenario's cost,
    SLO and model columns. A mix's row has each model's figures (`mix_json`), as a scenario
    run's has."""
    table = pa.Table.from_batches([batch])
    columns = columns_from_table(table)
    summary = summarize(columns, mode="closed", target_rate=None)
    members = mix_members(coords.model)
    if members:
        models = [model for model, _ in members]
        # 1 + the model's index; 0 for a set-up failure, which went to no model
        codes = pc.fill_null(pc.index_in(table["model"], value_set=pa.array(models)), -1)
        columns.model = codes.to_numpy().astype(np.int8) + 1
        summary.mix = mix_figures(columns, models, [weight for _, weight in members])
    judge(
        summary,
        late_threshold=LATE_THRESHOLD,
        late_limit=1.0,  # closed loop: no schedule to fall behind
        max_error_share=MAX_ERROR_SHARE,
    )
    try:
        profile = link_profile(coords.link)
    except NetemError:
        profile = None  # a profile file that went away since the swarm: the path is enough
    facts = facts or TrialFacts()
    where = TrialCoordinates(
        trial_id=trial_id,
        index=index,
        server=coords.server,
        api=coords.api,
        setting=f"swarm {swarm}",
        model=coords.model,
        batch_size=coords.batch_size,
        link=profile.name if profile is not None else coords.link,  # a file's own name
        load_kind="users",
        load_level=users,
        launch=SOURCE,
        protocol=PROTOCOLS[coords.protocol].transport,
        client_protocol=coords.protocol,
        model_version=coords.version,
        swarm=swarm,
    )
    wire = WireBytes(
        batch.num_rows,
        int(pc.sum(batch.column("request_bytes")).as_py() or 0),
        int(pc.sum(batch.column("response_bytes")).as_py() or 0),
    )
    return build_row(
        where,
        summary,
        model=facts.model(coords.model),
        link=profile,
        wire=wire,
        price=facts.price,
        slo=facts.slo,
        client_cpu_s=client_cpu_s,
    )
