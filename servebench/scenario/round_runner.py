"""Measure trials as replicates in rounds: the loop at the heart of `scenario run`.

`RoundRunner.run(trials)` measures each trial `workload.repeats` times, one replicate per
round, in the rounds `scenario.rounds` draws (or the ones a resumed run recorded), server
group by server group (`scenario.serving.ServerPool`), and writes a trials.csv row per
replicate as it ends. A configuration search asks instead for so many more rounds of the
settings it is comparing (`RoundRunner.more`), its replicates numbered on. A failing replicate is a failed row with its reason and the run goes
on; a server that died is restarted for the next replicate; a replicate disturbed by
something outside the measurement (`telemetry.interference`) is measured again at the end
of the next round, at most twice, the first kept and marked `remeasured`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress, TaskID

from servebench.load import LoadControl
from servebench.load.events import Subscriber
from servebench.pricing import InstancePrice
from servebench.results import RunDirectory, TrialRow, no_space
from servebench.scenario.deploy import ServerGroup, server_groups
from servebench.scenario.plan import Plan, Trial
from servebench.scenario.rounds import (
    ROUNDS_KEY,
    Replicate,
    draw_rounds,
    rounds_from_json,
    rounds_to_json,
)
from servebench.scenario.serving import ServerPool, alive, log_tail_note
from servebench.scenario.trial import TrialContext, coordinates, model_columns, run_trial
from servebench.telemetry import rows_to_table
from servebench.telemetry.interference import InterferenceSampler
from servebench.trial_row import disturbed, failed_row


@dataclass
class RunControl:
    """What the scenario runner lends the loop: whether it is stopping, the control its
    Ctrl-C stops every load through, and its subscriber to every load's events."""

    interrupted: Callable[[], str | None]  # the reason, once stopped by a signal
    left_out: Callable[[], bool]  # stopping: the next replicate is left out (noted)
    load: LoadControl
    on_load_event: Subscriber


class RoundRunner:
    def __init__(
        self,
        plan: Plan,
        base_dir: Path,
        directory: RunDirectory,
        *,
        peak_flops: float | None,
        price: InstancePrice | None,
        progress: Progress,
        control: RunControl,
    ) -> None:
        self.plan = plan
        self.scenario = plan.scenario
        self.base_dir = base_dir
        self.directory = directory
        self.peak_flops = peak_flops
        self.price = price
        self.progress = progress
        self.control = control
        self.repeats = self.scenario.workload.repeats
        self.pool = ServerPool(plan, directory)
        self.group_of: dict[str, ServerGroup] = {}  # each setting's, for the trials run now
        self.rounds: list[list[Replicate]] = []  # every round drawn so far, in order
        self.interference = InterferenceSampler()
        for note in self.interference.notes:
            progress.console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
        self.overall = progress.add_task("trials", total=0)
        self.current = progress.add_task("current load", total=1.0)

    async def run(self, trials: list[Trial]) -> None:
        """Measure every replicate of `trials` not measured yet (a resumed run's are)."""
        self._serve(trials)
        await self._measure_rounds(self._draw(trials), last=None)

    async def more(self, trials: list[Trial], count: int) -> None:
        """Measure `count` more rounds of `trials`, what a configuration search asks for:
        each trial's replicates numbered on from those drawn for it so far (R + 1, R + 2,
        …), the rounds drawn after every round so far and recorded in run.json like the
        others. The same asks in the same order — a resumed search replaying its path —
        draw the same replicates, and those measured are not measured again. A replicate
        disturbed in the last round asked is measured again at the end of that round
        (not in a round of its own after it), so that the next ask's rounds are numbered
        the same whether or not a resumed run meets the disturbance again."""
        self._serve(trials)
        before: dict[str, int] = {}
        for replicate in (r for one in self.rounds for r in one):
            before[replicate.trial.id] = max(before.get(replicate.trial.id, 0), replicate.replicate)
        ended = next((one[-1].trial for one in reversed(self.rounds) if one), None)
        drawn = draw_rounds(
            trials,
            count,
            self.scenario.seed,
            lambda t: id(self.group_of[t.setting.id]),
            first=len(self.rounds) + 1,
            before=before,
            after=ended,
            shuffled=self.repeats > 1,
        )
        self._record(drawn)
        await self._measure_rounds(drawn, last=len(self.rounds))

    def _serve(self, trials: list[Trial]) -> None:
        """The server groups that serve `trials`: only theirs are started."""
        groups = server_groups(self.plan, trials, side_by_side=self.repeats > 1)
        self.group_of = {setting.id: group for group in groups for setting in group.settings}

    async def _measure_rounds(self, rounds: list[list[Replicate]], last: int | None) -> None:
        """Measure the replicates of `rounds` not measured yet, in order; a disturbed one
        again at the end of the next round, at most round `last` (None: a round of its own
        after the last, if need be)."""
        done = self.directory.completed_trials()
        pending = [r for one in rounds for r in one if r.id not in done]
        # The bar counts every replicate this runner measured, over a search's asks too.
        finished = int(next(t for t in self.progress.tasks if t.id == self.overall).completed)
        self.progress.update(self.overall, total=finished + len(pending))
        while pending:
            replicate = pending.pop(0)
            if self.control.left_out():
                return
            row = await self._measure(replicate)
            self.directory.add_trial(row)
            self.progress.advance(self.overall)
            again = self._again(replicate, row, last)
            if again is not None:
                row.update(remeasured=True)
                self.directory.write_trials()
                pending.insert(_after_round(pending, again.round), again)
                self.progress.update(self.overall, total=finished + 1 + len(pending))
            finished += 1

    def _again(self, replicate: Replicate, row: TrialRow, last: int | None) -> Replicate | None:
        """The re-measurement of a replicate disturbed from outside, placed at the end of
        the next round (a round of its own after the last; with `last`, at most that
        round), recorded in run.json; None where it stands: undisturbed, not ok, one round
        only, or measured again enough (`workload.remeasure`)."""
        if (
            row.status != "ok"
            or not disturbed(row)
            or self.repeats == 1
            or replicate.attempt >= self.scenario.workload.remeasure
        ):
            return None
        number = replicate.round + 1 if last is None else min(replicate.round + 1, last)
        while len(self.rounds) < number:
            self.rounds.append([])
        target = self.rounds[number - 1]
        again = Replicate(
            replicate.trial, replicate.replicate, number, len(target) + 1, replicate.attempt + 1
        )
        target.append(again)
        self._record([])
        return again

    def _draw(self, trials: list[Trial]) -> list[list[Replicate]]:
        """The rounds of the plan's `trials`: those a resumed run recorded, else drawn and
        recorded in run.json."""
        recorded = rounds_from_json(self.directory.run.get(ROUNDS_KEY), self.plan.trials)
        covered = {r.trial.id for one in recorded or [] for r in one}
        if recorded and covered == {t.id for t in trials}:
            self.rounds = recorded
            return recorded
        drawn = draw_rounds(
            trials,
            self.repeats,
            self.scenario.seed,
            lambda t: id(self.group_of[t.setting.id]),
            first=len(self.rounds) + 1,
        )
        self._record(drawn)
        return drawn

    def _record(self, drawn: list[list[Replicate]]) -> None:
        """Add `drawn` to the rounds so far and keep them all in run.json."""
        self.rounds += drawn
        self.directory.run[ROUNDS_KEY] = rounds_to_json(self.rounds)
        self.directory.write_run()

    async def _measure(self, replicate: Replicate) -> TrialRow:
        trial = replicate.trial
        group = self.group_of[trial.setting.id]
        server = await self.pool.serve(group)
        if server is None or trial.setting.id in self.pool.dead:
            return failed_replicate_row(replicate, self.pool.dead[trial.setting.id])
        self.progress.reset(
            self.current,
            total=trial.estimated_s,
            description=f"{trial.setting.id} · {trial.model.id} · {trial.link.name} · "
            f"b{trial.batch_size} · {trial.level.label}"
            + (
                f" · round {_round_label(replicate.round, self.repeats)}"
                if self.repeats > 1
                else ""
            ),
        )
        ticker = asyncio.create_task(_tick(self.progress, self.current))
        try:
            row = await self._one(replicate, group, server)
        finally:
            ticker.cancel()
        self.progress.update(self.current, completed=trial.estimated_s)
        return row

    async def _one(self, replicate: Replicate, group: ServerGroup, server) -> TrialRow:
        trial, directory = replicate.trial, self.directory
        ctx = TrialContext(
            scenario=self.scenario,
            base_dir=self.base_dir,
            server=server,
            records_path=directory.trial_records_path,
            host_peak_flops=self.peak_flops,
            price=self.price,
            control=self.control.load,
            subscribers=(self.control.on_load_event,),
            model_names=group.names(trial.setting),
            interference=self.interference,
        )
        try:
            await self.pool.revive(group, server)
            outcome = await run_trial(trial, ctx, trial_id=replicate.id)
        except Exception as err:
            full = no_space(err)
            if full is not None:  # a full disk ends the run; writers name no file
                where = full.filename or str(directory.trial_records_path(replicate.id))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), where) from err
            reason = f"{type(err).__name__}: {err}"
            if server.owns_process and not await asyncio.to_thread(alive, server):
                reason += log_tail_note(server)
            return failed_replicate_row(replicate, reason)
        await asyncio.to_thread(
            directory.write_trial_telemetry, replicate.id, rows_to_table(outcome.telemetry)
        )
        row = outcome.row
        row.update(**_replicate_columns(replicate))
        interrupted = self.control.interrupted()
        if interrupted:
            # Cut short: its records stay, but it is not a result; --resume runs it again.
            row.update(status="interrupted", reason=interrupted)
        if server.owns_process and not await asyncio.to_thread(alive, server):
            # The records show what the clients saw; the trial cannot stand as a result.
            row.update(
                status="failed",
                reason="the server stopped answering during the trial" + log_tail_note(server),
            )
        return row


def failed_replicate_row(replicate: Replicate, reason: str) -> TrialRow:
    """A replicate that measured nothing usable: which one, and why. (Its model is not
    counted here: a trial may have failed on that very model.)"""
    trial = replicate.trial
    row = failed_row(coordinates(trial), reason, model_columns(trial.model, counted=False))
    row.update(**_replicate_columns(replicate))
    return row


def _after_round(pending: list[Replicate], number: int) -> int:
    """Where in `pending` the replicates of rounds up to `number` end (insert there to be
    measured last in round `number`)."""
    for index, replicate in enumerate(pending):
        if replicate.round > number:
            return index
    return len(pending)


def _replicate_columns(replicate: Replicate) -> dict[str, object]:
    return {
        "trial_id": replicate.id,
        "replicate_of": replicate.trial.id,
        "replicate": replicate.replicate,
        "round": replicate.round,
        "position": replicate.position,
        "remeasure_of": (
            None
            if replicate.attempt == 0
            else Replicate(replicate.trial, replicate.replicate, 0, 0, replicate.attempt - 1).id
        ),
    }


async def _tick(progress: Progress, task: TaskID, every_s: float = 0.25) -> None:
    """Move the current-load bar with the clock (the estimate is its total)."""
    started = time.perf_counter()
    while True:
        progress.update(task, completed=time.perf_counter() - started)
        await asyncio.sleep(every_s)


def _round_label(number: int, repeats: int) -> str:
    """ "3/5" within the planned rounds; past them (the rounds a search asks for as it goes:
    a quick climb's neighbours, a confirmation) just the round's number, since no total is
    planned for those."""
    return f"{number}/{repeats}" if number <= repeats else str(number)
