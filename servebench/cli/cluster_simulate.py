"""`servebench cluster simulate`: measure scheduling policies on a job trace, simulated.

The `cluster` command group (servebench/cli/cluster.py) mounts `simulate`; `app` runs it
alone (tests, and `python -m` style use). See servebench.cluster.simulate for the model
and servebench.cluster.trace for the trace file format.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from servebench.cli.command import with_options
from servebench.cli.usage import fail
from servebench.cli.values import InputFile, Number, OutputFile
from servebench.cli.values import seed as seed_type
from servebench.cluster.policy import PAUSE_COST_S

if TYPE_CHECKING:
    from servebench.cluster.job import FollowerInfo
    from servebench.cluster.policy import Policy
    from servebench.cluster.trace import TraceJob

DEFAULT_POLICIES = "two-tier,two-tier-preemptive,fifo-roundrobin,fifo-leastloaded"
DEFAULT_FOLLOWERS = 100
# Two-tier's aging bound: how long a job may wait before it goes ahead of shorter ones.
MAX_WAIT = Number(float, gt=0, le=30 * 86_400, unit=" s", why="30 days")


@dataclass(frozen=True)
class SimulateOptions:
    """`servebench cluster simulate`'s options, as parsed (`cli.command`)."""

    policy: Annotated[
        str,
        typer.Option(
            help="policies to compare, comma-separated: two-tier, two-tier-preemptive, "
            "fifo-roundrobin, fifo-leastloaded"
        ),
    ] = DEFAULT_POLICIES
    synthetic: Annotated[
        bool, typer.Option("--synthetic", help="a synthetic job mix (see --jobs, --load)")
    ] = False
    trace: Annotated[
        Path | None,
        typer.Option(
            help="a trace file: CSV or JSON lines (docs/cluster-simulate.md)", parser=InputFile()
        ),
    ] = None
    store: Annotated[
        Path | None,
        typer.Option(
            help="a leader's job store: replay its finished jobs", parser=InputFile(text=False)
        ),
    ] = None
    jobs: Annotated[
        int, typer.Option(help="synthetic: jobs", parser=Number(int, ge=1, le=10_000_000))
    ] = 5000
    followers: Annotated[
        int | None,
        typer.Option(
            help=f"followers (synthetic mix; default {DEFAULT_FOLLOWERS}, or a store's own)",
            parser=Number(int, ge=1, le=1_000_000),
        ),
    ] = None
    load: Annotated[
        float,
        typer.Option(
            help="synthetic: offered work / capacity", parser=Number(float, ge=0.01, le=10)
        ),
    ] = 0.9
    batch_mean: Annotated[
        float,
        typer.Option(
            help="synthetic: mean jobs per submission", parser=Number(float, ge=1, le=1000)
        ),
    ] = 4.0
    estimate_error: Annotated[
        float,
        typer.Option(
            help="sigma of the log-normal error of estimates not given",
            parser=Number(float, ge=0, le=5),
        ),
    ] = 0.5
    gpu_share: Annotated[
        float,
        typer.Option(
            help="share of synthetic followers with GPUs", parser=Number(float, ge=0, le=1)
        ),
    ] = 0.25
    seed: Annotated[int, typer.Option(help="seed of every random draw", parser=seed_type())] = 0
    max_wait_s: Annotated[
        float | None,
        typer.Option(help="two-tier(-preemptive): the aging bound (seconds)", parser=MAX_WAIT),
    ] = None
    aging_rate: Annotated[
        float | None,
        typer.Option(
            help="two-tier(-preemptive): estimate seconds forgiven per second waited",
            parser=Number(float, ge=0, le=1e6),
        ),
    ] = None
    pause_cost_s: Annotated[
        float,
        typer.Option(
            help="two-tier-preemptive: what pausing and resuming a job costs (seconds)",
            parser=Number(float, ge=0, le=86_400, unit=" s", why="a day"),
        ),
    ] = PAUSE_COST_S
    save_trace: Annotated[
        Path | None,
        typer.Option(
            help="write the jobs simulated (with estimates) as a CSV trace", parser=OutputFile()
        ),
    ] = None
    as_json: Annotated[bool, typer.Option("--json", help="print JSON, not a table")] = False

    def source(self) -> str:
        """Where the jobs come from: --synthetic, --trace or --store (exactly one)."""
        given = (("--synthetic", self.synthetic), ("--trace", self.trace), ("--store", self.store))
        sources = [name for name, on in given if on]
        if len(sources) != 1:
            raise fail(
                "give one of --synthetic, --trace FILE, --store PATH"
                + (f" (not {' and '.join(sources)})" if sources else "")
            )
        return sources[0]

    def policies(self) -> list[str]:
        """The policies to compare, each a known one."""
        from servebench.cluster.policy import POLICIES

        names = [p.strip() for p in self.policy.split(",") if p.strip()]
        unknown = [p for p in names if p not in POLICIES]
        if unknown or not names:
            what = f"unknown policy {unknown[0]!r}" if unknown else "none given"
            raise fail(f"--policy: {what} (choices: {', '.join(POLICIES)})")
        return names

    def policy_maker(self) -> Callable[[str], Policy]:
        """Each policy made with the options it takes, checked once on the policy that
        takes them all."""
        from servebench.cluster.policy import make_policy, options_of

        given = {
            k: v
            for k, v in (("max_wait_s", self.max_wait_s), ("aging_rate", self.aging_rate))
            if v is not None
        }
        given["pause_cost_s"] = self.pause_cost_s  # the policy's belief is the simulated cost

        def make(name: str) -> Policy:
            return make_policy(name, **{k: v for k, v in given.items() if k in options_of(name)})

        try:
            make("two-tier-preemptive")
        except ValueError as err:
            message = str(err).replace("max_wait_s", "--max-wait-s")
            raise fail(message.replace("aging_rate", "--aging-rate")) from None
        return make

    def workload(self) -> tuple[list[TraceJob], list[FollowerInfo]]:
        """The jobs (with estimates) and the followers they run on; written out first
        with --save-trace."""
        from servebench.cluster.trace import TraceError, with_estimates

        try:
            work, pool = self._jobs()
        except TraceError as err:
            raise fail(str(err)) from None
        work = with_estimates(work, self.estimate_error, self.seed)
        if self.save_trace is not None:
            from servebench.cluster.trace import write_trace

            try:
                write_trace(self.save_trace, work)
            except OSError as err:
                raise fail(f"--save-trace: {self.save_trace}: {err.strerror or err}") from None
        return work, pool

    def _jobs(self) -> tuple[list[TraceJob], list[FollowerInfo]]:
        from servebench.cluster.trace import (
            SyntheticMix,
            read_trace,
            store_trace,
            synthetic_followers,
            synthetic_jobs,
        )

        if self.store is not None:
            work, pool = store_trace(self.store)
            if self.followers is not None:
                pool = synthetic_followers(self.followers, self.seed, gpu_share=self.gpu_share)
            return work, pool
        count = self.followers or DEFAULT_FOLLOWERS
        pool = synthetic_followers(count, self.seed, gpu_share=self.gpu_share)
        if self.trace is not None:
            return read_trace(self.trace), pool
        mix = SyntheticMix(
            jobs=self.jobs,
            load=self.load,
            batch_mean=self.batch_mean,
            estimate_error=self.estimate_error,
        )
        return synthetic_jobs(mix, pool, self.seed), pool


@with_options(SimulateOptions)
def simulate(options: SimulateOptions) -> None:
    """Simulate scheduling policies on a job trace: JCT, queueing, makespan, utilization."""
    from rich.console import Console

    from servebench.cluster.simulate import compare
    from servebench.cluster.simulate_report import comparison_json, comparison_table

    source = options.source().removeprefix("--")
    names = options.policies()
    make = options.policy_maker()
    work, pool = options.workload()
    results = compare(names, make, work, pool, pause_cost_s=options.pause_cost_s)
    if options.as_json:
        document = comparison_json(results, source, len(work), len(pool))
        typer.echo(json.dumps(document, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(comparison_table(results, source, len(work), len(pool)))
    unplaced = max((r.unplaced for r in results), default=0)
    if unplaced:
        console.print(
            f"warning: {unplaced:,} jobs fit no follower (GPUs or labels) and were not run",
            highlight=False,
        )


app = typer.Typer(help="Simulate cluster scheduling policies.", pretty_exceptions_enable=False)
app.command(name="simulate")(simulate)
