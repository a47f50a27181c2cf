"""`servebench scenario run`: the whole study, setting by setting, trial by trial.

For each server setting: start (or attach), time the cold start, load the models, then run
its trials. A failing trial is marked failed with its reason and the run goes on; a server
that dies is restarted for the next trial; Ctrl-C stops the current load cleanly, keeps
everything measured and marks the run `interrupted`; SIGUSR1 (a pause: what a cluster
leader sends to make room for a shorter job) lets the current trial finish, then ends the
run `interrupted` the same way. `--resume RUN_DIR` repairs what a killed run left and skips
the trials it already completed, if the scenario is the same; a server setting whose cold
start the run already measured is started without timing it again, so cold_start.csv
holds each setting's `cold_start.repeats` starts once, however often the run resumed.

The run's status says how it went: `complete` (every trial ok), `partial` (some trials
failed), `failed` (every trial failed, or the run stopped on an error such as a full disk)
or `interrupted`; the reason says why.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from servebench.common.quantiles import CONFIDENCE
from servebench.load import LoadControl, LoadEvent, PartLost, run_in_loop
from servebench.pricing import InstancePrice, estimate_cost
from servebench.results import (
    ResultDirError,
    RunDirectory,
    RunStatus,
    TrialRow,
    new_run_id,
    no_space,
    no_space_reason,
    read_setting_rows,
)
from servebench.scenario.deploy import export_models
from servebench.scenario.plan import Plan, Trial, expand
from servebench.scenario.round_runner import RoundRunner, RunControl
from servebench.scenario.rounds import ROUNDS_KEY, replicate_id, rounds_from_json
from servebench.scenario.schema import Scenario, ServerSection, TuneSection
from servebench.scenario.tune import tune_server
from servebench.scenario.validate import load_scenario
from servebench.setting_row import build_setting_row
from servebench.telemetry.host_peak import record_host_peaks
from servebench.trial_row import disturbed


@dataclass
class RunOutcome:
    directory: RunDirectory
    status: str
    reason: str | None
    failed: int = 0
    completed: int = 0
    # Paused (SIGUSR1) with trials left: the run will be resumed, and the resumed run's
    # report is the one anybody reads.
    paused: bool = False


@dataclass
class _State:
    # Stops the load running (and any after it) on the first Ctrl-C, keeping its records.
    control: LoadControl = field(default_factory=LoadControl)
    interrupted: str | None = None
    paused: str | None = None  # SIGUSR1: stop after the current trial
    # A trial the run meant to measure was left out because it was stopping: a pause
    # that left nothing out came after the last trial and does not interrupt the run.
    left_out: bool = False


class ScenarioRunner:
    def __init__(
        self,
        scenario_path: Path,
        *,
        output: Path | None = None,
        resume: Path | None = None,
        force: bool = False,
        console: Console | None = None,
    ) -> None:
        self.path = Path(scenario_path)
        self.scenario: Scenario = load_scenario(self.path)
        self.scenario_hash = scenario_hash(self.scenario)
        self.plan: Plan = expand(self.scenario, self.path.parent)
        self.output = output or self.scenario.output
        self.resume = resume
        self.force = force
        self.console = console or Console()
        self.state = _State()
        self.price = self._price()  # validation made sure the instance is known

    # -- the run ------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        """Run the missing trials; a `ResultDirError` (bad --output or --resume) comes
        before anything is started or changed."""
        directory = self._directory()
        repeats = self.scenario.workload.repeats
        planned = [replicate_id(t.id, k) for t in self.plan.trials for k in range(1, repeats + 1)]
        directory.run.update(trials_planned=len(planned), status="running", reason=None)
        directory.write_run()
        done = directory.completed_trials()
        todo = [trial_id for trial_id in planned if trial_id not in done]
        tune = self.scenario.tune
        searched = (
            f" (a {tune.method} search runs only those it asks for)"
            if tune is not None and tune.method != "brute"
            else ""
        )
        replicated = (
            f" ({len(self.plan.trials)} settings × {repeats} replicates, in rounds)"
            if repeats > 1
            else ""
        )
        self.console.print(
            f"run {directory.path}: {len(todo)} of {len(planned)} trials to run"
            + replicated
            + searched,
            highlight=False,
        )
        status, reason = RunStatus.COMPLETE, None
        try:
            run_in_loop(self._run(directory, todo))
            if self.state.paused and not self.state.interrupted and not self.state.left_out:
                self.state.paused = None  # it came during the last trial
            if self.state.interrupted or self.state.paused:
                status, reason = RunStatus.INTERRUPTED, self.state.interrupted or self.state.paused
        except KeyboardInterrupt:
            status, reason = RunStatus.INTERRUPTED, "interrupted by a second Ctrl-C"
        except Exception as err:  # the run cannot go on; what it measured stays
            status, reason = RunStatus.FAILED, _reason(err, directory.path)
        finally:
            status, reason = self._close(directory, status, reason)
        failed = sum(1 for r in directory.rows if r.get("status") == "failed")
        paused = (
            status == RunStatus.INTERRUPTED
            and self.state.paused is not None
            and self.state.interrupted is None
        )
        return RunOutcome(
            directory, status, reason, failed, len(directory.rows) - failed, paused=paused
        )

    def _directory(self) -> RunDirectory:
        """A new run directory (unique id), or the one to resume once it is known to hold a
        run of the same scenario and repaired after a kill."""
        if self.resume is None:
            directory = RunDirectory.create(
                self.output,
                new_run_id(self.scenario.name),
                self.path.read_text(),
                self.path,
                unique=True,
            )
            directory.run["scenario_hash"] = self.scenario_hash
            for note in self.scenario.notes:  # an old field name: kept where jobs are read
                directory.warn(note)
            return directory
        directory = RunDirectory.open(self.resume)
        earlier = directory.run.get("scenario_hash")
        if earlier != self.scenario_hash:
            was = f"hash {earlier[:12]}" if earlier else "no scenario hash in its run.json"
            differs = (
                f"{self.resume} holds a run of a different scenario than {self.path} "
                f"({was}, this one {self.scenario_hash[:12]}): its trials would be mixed"
            )
            if not self.force:
                raise ResultDirError(f"{differs}; --force resumes it anyway")
            directory.warn(f"{differs}; resumed by --force")
            directory.run["scenario_hash"] = self.scenario_hash
        for note in directory.recover():
            self.console.print(f"[yellow]warning:[/yellow] {note}", highlight=False)
        return directory

    def _close(
        self, directory: RunDirectory, status: RunStatus, reason: str | None
    ) -> tuple[RunStatus, str | None]:
        """Settle the status (failed trials make a finished run partial or failed) and
        close the run directory; return the final status and reason."""
        failed = [r for r in directory.rows if r.get("status") == "failed"]
        if status == RunStatus.COMPLETE and failed:
            status, reason = _failures(directory.rows, failed)
        try:
            self._add_slo_costs(directory)
        except OSError as err:
            if no_space(err) is None:
                raise
            if status != RunStatus.FAILED:
                status, reason = RunStatus.FAILED, _reason(err, directory.path)
        directory.finish(status, reason)
        return directory.run["status"], directory.run["reason"]

    async def _run(self, directory: RunDirectory, todo: list[str]) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._interrupt, signum)
        loop.add_signal_handler(signal.SIGUSR1, self._pause)
        try:
            if not todo and not self._replicates_left(directory):
                return
            with self._progress() as progress:
                progress.console.print("exporting models …")
                await asyncio.to_thread(
                    export_models,
                    self.plan,
                    directory.path,
                    lambda m: progress.console.print(f"  exported {m.spec_id}", highlight=False),
                )
                peak = await asyncio.to_thread(record_host_peaks, directory.run)
                directory.write_run()
                measuring = RoundRunner(
                    self.plan,
                    self.path.parent,
                    directory,
                    peak_flops=peak.value,
                    price=self.price,
                    progress=progress,
                    control=RunControl(
                        interrupted=lambda: self.state.interrupted,
                        left_out=self._left_out,
                        load=self.state.control,
                        on_load_event=self._on_load_event,
                    ),
                )
                try:
                    if self.scenario.tune is None:
                        await measuring.run(self.plan.trials)
                    else:
                        await self._tune(directory, measuring.more)
                finally:
                    await measuring.pool.stop()
                    self._write_settings(directory)
                    self._note_interference(directory, progress.console)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(signum)
            # A pause that comes while the run closes is moot, and must not end it (the
            # default action of SIGUSR1).
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    def _on_load_event(self, event: LoadEvent) -> None:
        """Every load's events (from the thread that runs it): a lost generator is said at
        once, beside the progress bars; the trial's row names it again."""
        if isinstance(event, PartLost):
            self.console.print(
                f"[yellow]generator {event.index} lost[/yellow]: {escape(event.why)}",
                highlight=False,
            )

    def _replicates_left(self, directory: RunDirectory) -> bool:
        """Whether a resumed run still has replicates to measure (its plan trials all have
        a first replicate, but later rounds may be missing)."""
        done = directory.completed_trials()
        rounds = rounds_from_json(directory.run.get(ROUNDS_KEY), self.plan.trials) or []
        return any(r.id not in done for one in rounds for r in one)

    def _write_settings(self, directory: RunDirectory) -> None:
        """settings.csv: each measured setting's row over its replicates."""
        by_trial: dict[str, list[TrialRow]] = defaultdict(list)
        for row in directory.rows:
            by_trial[row.replicate_of or row.trial_id].append(row)
        repeats = self.scenario.workload.repeats
        level = (
            self.scenario.workload.stop.confidence if self.scenario.workload.stop else CONFIDENCE
        )
        directory.write_settings(
            [
                build_setting_row(trial_id, rows, planned=repeats, level=level)
                for trial_id, rows in by_trial.items()
            ]
        )

    def _note_interference(self, directory: RunDirectory, console: Console) -> None:
        """Say (and keep in run.json) how many replicates something outside disturbed:
        measured again, or kept flagged where the run measures each setting once."""
        rows = [r for r in directory.rows if r.remeasure_of is None]
        flagged = [r for r in directory.rows if disturbed(r)]
        again = [r for r in directory.rows if r.remeasured]
        if not flagged:
            return
        if again:
            line = f"{len(again)} of {len(rows)} replicates re-measured for interference"
        else:
            line = (
                f"{len(flagged)} of {len(rows)} trials measured under interference (flagged in "
                "trials.csv's warnings; measured again only with repeats > 1)"
            )
        directory.run["interference"] = {
            "flagged": len(flagged), "remeasured": len(again), "replicates": len(rows)
        }  # fmt: skip
        directory.warn(line)
        console.print(f"[yellow]{line}[/yellow]", highlight=False)

    async def _tune(
        self,
        directory: RunDirectory,
        more_rounds: Callable[[list[Trial], int], Awaitable[None]],
    ) -> None:
        """The configuration search (`tune:`), server by server: each ask — so many more
        rounds of these settings — is measured (`RoundRunner.more`; a resumed run's
        replicates are not measured again: the same asks give the same ids) and read back
        from its rows; every step goes to tune.json as the search ends."""
        tune = self.scenario.tune
        assert tune is not None
        searches: dict[str, Any] = {}

        async def run_settings(indices: list[int], rounds: int) -> None:
            if self._left_out():
                return
            wanted = {id(self.plan.settings[i]) for i in indices}
            await more_rounds([t for t in self.plan.trials if id(t.setting) in wanted], rounds)
            self._write_settings(directory)

        for server in self.scenario.servers:
            search = await tune_server(
                self.plan,
                server,
                tune,
                run_settings,
                rows=lambda: {r.trial_id: r for r in directory.rows},
                setting_rows=lambda: {r["trial_id"]: r for r in read_setting_rows(directory.path)},
                repeats=self.scenario.workload.repeats,
                usd_per_hour=self.price.usd_per_hour if self.price else None,
                stopped=lambda: self._left_out() and (self.state.interrupted or self.state.paused),
            )
            searches[server.name] = search
            best = search["best"] or {"setting": "none usable", "value": None}
            shown = "" if best["value"] is None else f" ({tune.objective} {best['value']:,.6g})"
            tied = search.get("finalists") if tune.method == "race" else None
            among = f", tied with {len(tied) - 1} more" if tied and len(tied) > 1 else ""
            self.console.print(
                f"tune {server.name}: {tune.method} search, best {best['setting']}{shown}"
                f"{among} after {search['trials_spent']} of {search['settings']} settings "
                f"({search['replicate_trials']} replicate trials); {search['stop_reason']}",
                highlight=False,
            )
            directory.write_tune(_tune_json(tune, searches))

    def _interrupt(self, signum: int) -> None:
        """First Ctrl-C: stop the current load, keep its records, end after this trial."""
        name = signal.Signals(signum).name
        self.state.interrupted = f"stopped by {name}"
        self.state.control.stop(f"stopped by {name}")
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C interrupts at once
        self.console.print(f"[yellow]{name}[/yellow]: finishing the current trial's records …")

    def _pause(self) -> None:
        """SIGUSR1: let the current trial finish, then end the run as interrupted
        (`--resume` runs the rest)."""
        if self.state.paused is None:
            self.state.paused = "paused by SIGUSR1 after a trial; --resume runs the rest"
            self.console.print("[yellow]SIGUSR1[/yellow]: pausing after the current trial …")

    def _stopping(self) -> bool:
        return self.state.interrupted is not None or self.state.paused is not None

    def _left_out(self) -> bool:
        """Whether the run is stopping, called where that leaves a trial out (noted)."""
        if self._stopping():
            self.state.left_out = True
        return self.state.left_out

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )

    def _price(self) -> InstancePrice | None:
        cost = self.scenario.cost
        return cost.price() if cost is not None else None

    # -- after the trials -------------------------------------------------------------------

    def _add_slo_costs(self, directory: RunDirectory) -> None:
        """Cost per million at the highest measured throughput that met the SLO (as each
        row's `slo_met` says: the judge's word on the SLO's own percentile), per group of
        trials that differ only in load level."""
        slo, price = self.scenario.slo, self.price
        if slo is None or price is None or not directory.rows:
            return
        groups: dict[tuple[str, str, int, str], list[TrialRow]] = defaultdict(list)
        for row in directory.rows:
            if row.status == "ok" and (row.throughput_ips or 0) > 0:
                groups[(row.setting, row.model, row.batch_size, row.link)].append(row)
        for rows in groups.values():
            points = [(r.throughput_ips, r.slo_met) for r in rows]
            estimate = estimate_cost(points, price, slo.latency_ms / 1e3)
            for row in rows:
                row.update(
                    slo_throughput_ips=estimate.slo_throughput,
                    cost_per_million_at_slo=estimate.cost_at_slo,
                )
        directory.write_trials()


def _tune_json(tune: TuneSection, searches: dict[str, Any]) -> dict[str, Any]:
    """tune.json: the search's options, then each server's search."""
    options: dict[str, Any] = {
        "method": tune.method, "objective": tune.objective, "qps": tune.qps,
        "budget_trials": tune.budget_trials,
    }  # fmt: skip
    if tune.method != "brute":
        options["level"] = tune.level
    if tune.method == "race":
        options.update(first_rounds=tune.first_rounds, over=tune.over)
    return {**options, "servers": searches}


def scenario_hash(scenario: Scenario) -> str:
    """A digest of what the scenario measures: the validated scenario dumped canonically.

    Comments, formatting, key order and defaults spelled out do not change it, nor does
    `output` (where results go); any change to models, servers, workload, links, SLO or
    cost does, which is what --resume must not mix. Values equal to their defaults are
    left out, so a field a newer servebench adds does not make earlier runs unresumable; a
    renamed field is hashed under its old name (`ServerSection.RENAMED`), for the same
    reason."""
    data = scenario.model_dump(mode="json", exclude={"output"}, exclude_defaults=True)
    old_names = {new: old for old, new in ServerSection.RENAMED.items()}
    data["servers"] = [
        {old_names.get(name, name): value for name, value in server.items()}
        for server in data["servers"]
    ]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _failures(rows: list[TrialRow], failed: list[TrialRow]) -> tuple[RunStatus, str]:
    """A run that went through with failed trials: `partial`, or `failed` if none was ok."""
    if len(failed) < len(rows):
        return RunStatus.PARTIAL, f"{len(failed)} of {len(rows)} trials failed (see trials.csv)"
    why = failed[0].get("reason")
    first = why.splitlines()[0] if isinstance(why, str) and why.strip() else "no reason given"
    return RunStatus.FAILED, f"all {len(rows)} trials failed (first: {first})"


def _reason(err: BaseException, run_dir: Path) -> str:
    """Why the run stopped, for run.json and the last line."""
    full = no_space(err)
    if full is not None:
        return no_space_reason(full.filename or run_dir)
    return f"{type(err).__name__}: {err}"
