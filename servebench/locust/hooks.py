"""Locust event listeners: per-request records in, servebench's result directory out.

Locust's own statistics are aggregates; servebench wants one record per request (its
latency distribution, error kinds and wire sizes are computed from them). The users put
each request's record in the request event's context; here it is collected:

- local runner: records collect in this process; each swarm's trials are written when
  it stops (`test_stop`), and the run is closed when Locust quits (`quit`, which comes
  after the last `test_stop`, even on Ctrl-C);
- `--processes` / workers: each worker sends its records with its periodic report to the
  master (`report_to_master`, including the final one a stopping worker sends) and the
  master collects them (`worker_report`) and writes the results. A worker's final report
  can arrive after the master's `test_stop` (a headless master quits before it asks the
  workers to), so the master writes the swarm again with them: a few seconds later, or
  when the next swarm starts or Locust quits, whichever comes first.

Everything here is per process and lives on Locust's `Environment` (as Locust keeps its
own run state there: `parsed_options`, `runner`), not in a module global: the `init`
listener puts a `ProcessState` (one collector, one link pool, one payload cache, one draw
per mix of models, the run directory) on `environment.servebench` and subscribes its listeners to that
environment's events; users reach it as `process_state(self.environment)`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from servebench.locust.facts import read_facts
from servebench.locust.links import LinkPool
from servebench.locust.mix import ModelChoice
from servebench.locust.options import recorded_options
from servebench.locust.records import RecordCollector
from servebench.locust.results import LocustRun
from servebench.locust.settings import DEFAULT_PROTOCOL, UserSettings
from servebench.locust.transport import PayloadCache, preload

logger = logging.getLogger("servebench.locust")

# Key of a servebench record in a request event's context, and of records in a report.
RECORD_KEY = "servebench_record"
REPORT_KEY = "servebench_records"
# The Environment attribute that holds this process's ProcessState.
STATE_ATTRIBUTE = "servebench"
# A master writes a stopped swarm again this long after it stopped, with the records of
# workers' final reports (Locust's master waits 0.5 s for them when quitting).
LATE_REPORT_S = 3.0


@dataclass
class ProcessState:
    """What one Locust process shares between its users and its event listeners."""

    collector: RecordCollector = field(default_factory=RecordCollector)
    links: LinkPool = field(default_factory=LinkPool)
    payloads: PayloadCache = field(default_factory=PayloadCache)
    choices: dict[UserSettings, ModelChoice] = field(default_factory=dict)
    run: LocustRun | None = None
    swarm: int = 0
    users: int = 0
    recording: bool = False  # a swarm is running: requests are recorded
    cpu_at_start: float = 0.0  # this process's CPU time when the swarm started
    client_cpu_s: float | None = None  # its CPU time during the swarm (local runner only)
    late: bool = False  # records came (from workers) after the swarm's results were written

    def listen(self, environment: Environment) -> None:
        """Subscribe to the environment's events (the ones that carry no environment too)."""
        on = environment.events
        on.test_start.add_listener(self.on_test_start)
        on.request.add_listener(self.on_request)
        on.report_to_master.add_listener(self.on_report_to_master)
        on.worker_report.add_listener(self.on_worker_report)
        on.test_stop.add_listener(self.on_test_stop)
        on.quit.add_listener(self.on_quit)

    def on_test_start(self, environment: Environment, **_: Any) -> None:
        if not isinstance(environment.runner, MasterRunner):
            preload(_protocols(environment))  # the form may have switched protocols
        self.write_late()
        self.payloads.clear()
        self.choices.clear()  # each swarm draws a mix's models from the seed again
        self.collector.clear()
        self.recording = True
        self.cpu_at_start = time.process_time()
        if self.run is not None:
            self.swarm = self.run.start_swarm()

    def choice(self, settings: UserSettings) -> ModelChoice:
        """The draw of `settings`' mix that every user of this process sending it shares."""
        choice = self.choices.get(settings)
        if choice is None:
            weights = tuple(weight for _, weight in settings.members)
            choice = self.choices[settings] = ModelChoice(weights, settings.seed)
        return choice

    def on_request(self, context: Any = None, **_: Any) -> None:
        record = context.get(RECORD_KEY) if context else None
        if record is not None and self.recording:
            self.collector.add(*record)

    def on_report_to_master(self, data: dict[str, Any], **_: Any) -> None:
        drained = self.collector.drain()
        if drained:
            data[REPORT_KEY] = drained

    def on_worker_report(self, data: dict[str, Any], **_: Any) -> None:
        if data.get(REPORT_KEY) and self.swarm:
            self.collector.extend(data[REPORT_KEY])
            self.late = not self.recording

    def on_test_stop(self, environment: Environment, **_: Any) -> None:
        self.links.stop_all()
        if _is_worker(environment):
            return  # the final report to the master carries what is left
        self.recording = False
        runner = environment.runner
        self.users = sum((getattr(runner, "final_user_classes_count", None) or {}).values())
        # Whether the generator itself was busy; a master's own CPU says nothing about its
        # workers.
        is_local = isinstance(runner, LocalRunner)
        self.client_cpu_s = time.process_time() - self.cpu_at_start if is_local else None
        self.write_swarm()
        if isinstance(runner, MasterRunner):
            gevent.spawn_later(LATE_REPORT_S, self.write_late)

    def on_quit(self, **_: Any) -> None:
        self.links.stop_all()
        self.write_late()
        if self.run is not None:
            self.run.finish()
            logger.info(
                "servebench: results in %s (servebench report %s)", self.run.path, self.run.path
            )

    def write_late(self) -> None:
        if self.late:
            self.late = False
            self.write_swarm()

    def write_swarm(self) -> None:
        """Write the current swarm's trials (again, when late records came in)."""
        trials = self.collector.snapshot()
        if self.run is None or self.run.finished or not trials:
            return
        try:
            rows = self.run.add_swarm(self.swarm, trials, self.users, self.client_cpu_s)
        except OSError as exc:
            logger.error("servebench: cannot write swarm %d's results: %s", self.swarm, exc)
            return
        for row in rows:
            logger.info(
                "servebench: swarm %d, %s: %d requests, %d failed, %.1f req/s, p50 %.2f ms -> %s",
                self.swarm,
                row["model"],
                row["count"],
                row["errors"],
                row["throughput_rps"],
                (row["latency_p50"] or float("nan")) * 1e3,
                self.run.path,
            )


def process_state(environment: Environment) -> ProcessState:
    """This process's state, from the environment the `init` listener put it on.

    Locust used as a library fires `init` only if its caller does; the users then get a
    state here, without a run directory, whose links still stop with the swarm.
    """
    state = getattr(environment, STATE_ATTRIBUTE, None)
    if state is None:
        state = _attach(environment)
    return state


def _attach(environment: Environment) -> ProcessState:
    state = ProcessState()
    setattr(environment, STATE_ATTRIBUTE, state)
    state.listen(environment)
    return state


def _is_worker(environment: Environment) -> bool:
    return isinstance(environment.runner, WorkerRunner)


def _protocols(environment: Environment) -> set[str]:
    """The protocols this process's servebench users will speak (fixed or `--protocol`)."""
    chosen = getattr(environment.parsed_options, "protocol", None) or DEFAULT_PROTOCOL
    return {
        getattr(cls, "protocol", None) or chosen
        for cls in environment.user_classes
        if hasattr(cls, "protocol")
    }


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    state = process_state(environment)
    if not isinstance(environment.runner, MasterRunner):
        preload(_protocols(environment))
    options = environment.parsed_options
    if _is_worker(environment) or options is None or not getattr(options, "results_dir", ""):
        return  # a worker, or Locust used as a library without servebench's options
    scenario = getattr(options, "scenario_file", "") or None
    facts_file = getattr(options, "trial_facts", "") or None
    try:
        facts = read_facts(facts_file) if facts_file else None
    except ValueError as exc:
        logger.error("servebench: %s", exc)
        raise SystemExit(2) from exc
    try:
        state.run = LocustRun(
            Path(options.results_dir),
            getattr(options, "run_id", "") or None,
            options=recorded_options(options),
            scenario=Path(scenario) if scenario else None,
            facts=facts,
        )
    except (OSError, ValueError) as exc:  # ValueError: a --run-id that is a path
        # Locust logs and ignores exceptions from listeners; a load test that would record
        # nothing must not start, so this one ends the process.
        logger.error("servebench: cannot create the result directory (%s)", exc)
        raise SystemExit(2) from exc
    logger.info("servebench: results go to %s", state.run.path)
