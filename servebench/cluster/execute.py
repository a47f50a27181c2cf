"""What a follower runs for one job: `servebench scenario run` in a child process, its
result directory packed and handed back through Dask.

The child is the ordinary command, not a re-implementation: Triton subprocesses, the
run's signal handling (a first SIGINT/SIGTERM finishes the current trial's records and
marks the run interrupted, a second SIGINT ends it at once), exit codes and report.html
stay exactly as a local run has them. The child shares the follower's process group, so
Ctrl-C in a follower's terminal reaches it as it would reach a local run; it is also
told to receive SIGTERM if the follower dies (Linux's parent-death signal), so killing a
follower never leaves a run and its Triton serving on with nobody to read the result.

A paused job (`pause`: SIGUSR1, the runner ends after its current trial) comes back as
`interrupted` with what it measured; the leader keeps that archive and hands it to the
job's next attempt (`partial`), which unpacks it and runs `scenario run --resume` on it,
so only the missing trials run, on whichever follower that is.

The scenario travels as text and is written to a fresh working folder; paths in it
resolve against that folder, so a scenario that names files (models.repository, a trace,
a link profile file) must name them absolutely, on a path every follower has.

This module imports only the standard library and `servebench.common.linux` at import time: the
child wrapper (`python -m servebench.cluster.execute`) runs it before exec'ing the real
command.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from servebench.cluster.archive import pack, unpack
from servebench.common.linux import set_parent_death_signal
from servebench.results import RUN_FILE, ResultDirError, RunStatus, read_run_json

SCENARIO_FILE = "scenario.yaml"
LOG_FILE = "job.log"
OUTPUT_DIR = "results"
# How long a stopped run may take to finish its current trial before a second interrupt
# ends it at once (the runner's "second Ctrl-C").
STOP_GRACE_S = 30.0
_TAIL_CHARS = 2000
# run.json's status when the child wrote no run directory (bad input, a crash at start).
NO_RUN = "error"
# Where a resumed attempt unpacks the partial result it continues.
RESUMED_DIR = "resumed"
# How often a pause is signalled again until the run ends: one sent while the runner
# starts (before its handler is in place; the wrapper ignores SIGUSR1 until then) is lost.
PAUSE_REPEAT_S = 1.0


@dataclass(frozen=True)
class JobRun:
    """What one attempt of a job produced; it travels back to the leader through Dask.

    `status` is the run's own (run.json: complete, partial, failed, interrupted), or
    `NO_RUN` when the child left no run directory; `archive` is the packed run directory
    (`archive.pack`), present whenever a run directory exists, whatever its status."""

    job_id: str
    attempt: int
    follower: str
    exit_code: int
    status: str
    reason: str | None
    run_id: str | None
    archive: bytes | None
    measured_s: float
    output_tail: str
    # What its trials' verdicts say where some were INVALID (`invalid_note`): a run that
    # ran every trial is `complete`, whatever its trials measured.
    invalid: str | None = None


@dataclass
class _Child:
    process: subprocess.Popen[bytes] | None = None
    stop_reason: str | None = None
    stop_at: float | None = None
    escalated: bool = False
    pause_reason: str | None = None
    paused_at: float | None = None  # when SIGUSR1 was last sent


_RUNNING: dict[str, _Child] = {}
_STOPPED_EARLY: dict[str, str] = {}  # job id → why: stopped before its run started
_LOCK = threading.Lock()


def execute(
    job_id: str,
    scenario_text: str,
    attempt: int,
    *,
    grace_s: float = STOP_GRACE_S,
    partial: bytes | None = None,
) -> JobRun:
    """Run one attempt of a job here and return its result (never raises for a failed
    run: a failure is a result with its status and reason). `partial`: the archive of
    the run an earlier attempt paused, which this one resumes."""
    follower, base = _where()
    with _LOCK:
        early = _STOPPED_EARLY.pop(job_id, None)
        if early is None:
            child = _RUNNING[job_id] = _Child()
    if early is not None:  # stopped before it started: nothing ran, nothing to send
        return JobRun(job_id, attempt, follower, 128 + signal.SIGTERM, "interrupted", early,
                      None, None, 0.0, "")  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix=f"servebench-job-{job_id}-{attempt}-", dir=base))
    try:
        scenario = workdir / SCENARIO_FILE
        scenario.write_text(scenario_text, encoding="utf-8")
        output = workdir / OUTPUT_DIR
        command = [sys.executable, "-m", "servebench.cli", "scenario", "run", str(scenario)]
        if partial is not None:
            command += ["--resume", str(unpack(partial, output / RESUMED_DIR))]
        else:
            command += ["--output", str(output)]
        started = time.monotonic()
        code = _run_child(child, command, workdir / LOG_FILE, grace_s)
        measured = time.monotonic() - started
        tail = _tail(workdir / LOG_FILE)
        run_dir = _run_dir(output)
        if run_dir is None:
            reason = _last_line(tail) or f"the run exited with status {code} and wrote nothing"
            return JobRun(
                job_id, attempt, follower, code, NO_RUN, reason, None, None, measured, tail
            )
        meta = _read_run_json(run_dir)
        status = str(meta.get("status", NO_RUN))
        reason = meta.get("reason")
        if status == RunStatus.INTERRUPTED and (child.stop_reason or child.pause_reason):
            reason = child.stop_reason or child.pause_reason
        return JobRun(
            job_id, attempt, follower, code, status, reason, run_dir.name, pack(run_dir),
            measured, tail, invalid_note(run_dir),
        )  # fmt: skip
    finally:
        with _LOCK:
            _RUNNING.pop(job_id, None)
        shutil.rmtree(workdir, ignore_errors=True)


def stop(job_id: str, reason: str) -> bool:
    """Interrupt the job's run in this process (the leader calls this on the job's
    follower through `Client.run`): the run finishes its current trial's records and
    returns as `interrupted`. A job not started yet is remembered, so it returns at once
    when it starts. Whether the job's run was here."""
    with _LOCK:
        child = _RUNNING.get(job_id)
        if child is None:
            _STOPPED_EARLY[job_id] = reason
            return False
        if child.stop_at is not None:
            return True
        child.stop_reason, child.stop_at = reason, time.monotonic()
        process = child.process
    if process is not None:
        process.send_signal(signal.SIGTERM)
    return True


def pause(job_id: str, reason: str) -> bool:
    """Ask the job's run in this process to stop after its current trial (SIGUSR1,
    repeated until it ends): it returns as `interrupted` with every finished trial, for
    a later attempt to resume. Whether the job's run was here (one not started yet is
    left alone: it has nothing to pause)."""
    with _LOCK:
        child = _RUNNING.get(job_id)
        if child is None:
            return False
        if child.pause_reason is None:
            child.pause_reason = reason
        process, child.paused_at = child.process, time.monotonic()
    if process is not None:
        process.send_signal(signal.SIGUSR1)
    return True


def stop_all(reason: str) -> list[str]:
    """Interrupt every run in this process: a restarted leader's first call, for runs
    the previous leader started and can no longer collect. The ids interrupted."""
    with _LOCK:
        ids = list(_RUNNING)
    for job_id in ids:
        stop(job_id, reason)
    return ids


def running() -> list[str]:
    """The ids of the jobs whose runs are in this process now."""
    with _LOCK:
        return list(_RUNNING)


def _run_child(child: _Child, command: list[str], log: Path, grace_s: float) -> int:
    """Start the run, wait for it, escalate a stop that outlasts `grace_s`."""
    wrapper = [sys.executable, "-m", __name__, str(os.getpid()), "--", *command]
    with log.open("wb") as out:
        # cwd is the work folder so that nothing the run writes lands in the follower's
        # own working directory.
        process = subprocess.Popen(
            wrapper, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent
        )
    with _LOCK:
        child.process = process
        stopped = child.stop_at is not None
    if stopped:  # stop() came while the process was starting
        process.send_signal(signal.SIGTERM)
    while True:
        try:
            return process.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        with _LOCK:
            now = time.monotonic()
            late = (
                child.stop_at is not None and not child.escalated and now - child.stop_at > grace_s
            )
            if late:
                child.escalated = True
            remind = child.pause_reason is not None and (
                child.paused_at is None or now - child.paused_at > PAUSE_REPEAT_S
            )
            if remind:
                child.paused_at = now
        if late:
            process.send_signal(signal.SIGINT)  # the runner's "second Ctrl-C": end now
        if remind:
            process.send_signal(signal.SIGUSR1)


def _where() -> tuple[str, str | None]:
    """This follower's name and the folder for job work: the Dask worker's own local
    directory when called in a worker, else the system's temp folder."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return socket.gethostname(), None
    return str(worker.name), worker.local_directory


def _run_dir(output: Path) -> Path | None:
    if not output.is_dir():
        return None
    runs = sorted(p for p in output.iterdir() if p.is_dir() and not p.name.startswith("."))
    return runs[0] if runs else None


def _read_run_json(run_dir: Path) -> dict:
    """The run's run.json through its one reader ({}: none, or not readable as one)."""
    try:
        return read_run_json(run_dir / RUN_FILE)
    except (OSError, ResultDirError):
        return {}


def invalid_note(run_dir: Path) -> str | None:
    """'INVALID: its only trial was INVALID (generator fell behind: …)', '3 of 12 trials
    INVALID (first: …)', or None where no finished trial of the run is INVALID (or its
    trials.csv cannot be read): what a job's line says beside the run's status, so a
    finished job that measured nothing valid is not shown as done and complete."""
    try:
        with (run_dir / "trials.csv").open(newline="", encoding="utf-8") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("status") == "ok"]
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    invalid = [r for r in rows if r.get("verdict") == "INVALID"]
    if not invalid:
        return None
    why = invalid[0].get("verdict_reasons") or "no reason recorded"
    if len(invalid) < len(rows):
        return f"{len(invalid)} of {len(rows)} trials INVALID (first: {why})"
    if len(rows) == 1:
        return f"INVALID: its only trial was INVALID ({why})"
    return f"INVALID: all {len(rows)} trials were INVALID (first: {why})"


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-_TAIL_CHARS:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _child_main(argv: list[str]) -> None:
    """`python -m servebench.cluster.execute PARENT_PID -- COMMAND...`: ask the kernel for
    SIGTERM when the follower dies, then become COMMAND (the setting survives exec).

    Set in the child itself rather than in a `preexec_fn`, which is unsafe in the
    follower's threaded process. SIGTERM, not SIGKILL: the run then stops its own Triton
    and closes its result directory as for Ctrl-C."""
    parent, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m servebench.cluster.execute PARENT_PID -- COMMAND...")
    set_parent_death_signal(signal.SIGTERM)
    # A pause (SIGUSR1) before the runner handles it must not end the run (its default
    # action); `_run_child` repeats it until the runner has taken it.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if os.getppid() != int(parent):  # the follower died before the setting took hold
        raise SystemExit(128 + signal.SIGTERM)
    os.execv(command[0], command)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
