"""The leader's durable job store: SQLite in WAL mode, one row per job, one per transition.

Every state change is one transaction, committed (and synced) before the leader acts on
it, so a leader killed at any instant restarts from a store that says exactly what it had
decided: `recover` then re-queues what was lost. `synchronous=FULL` because a job lost
after its submitter was told "queued" is the failure this store exists to prevent, and a
job's few commits cost nothing next to its minutes of benchmark.

One connection, guarded by a lock, serves the leader's threads (the API handlers, the
dispatch loop, Dask callbacks): writes are serialized anyway, and reads are quick.
`BEGIN IMMEDIATE` takes SQLite's write lock at the start of a transition, so even two
processes opening one store cannot both move a job from the same state.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.cluster.errors import ClusterError
from servebench.cluster.job import IllegalTransition, Job, JobState, Needs, check_transition

SCHEMA_VERSION = 2
# What each older schema lacks, added in place when a store of that version is opened.
_MIGRATIONS = {
    1: "ALTER TABLE jobs ADD COLUMN run_s REAL NOT NULL DEFAULT 0; "
    "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    scenario_name TEXT NOT NULL,
    scenario_text TEXT NOT NULL,
    submitter TEXT NOT NULL,
    priority INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    labels TEXT NOT NULL,
    estimate_s REAL NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    follower TEXT,
    result_path TEXT,
    reason TEXT,
    started_at REAL,
    finished_at REAL,
    run_s REAL NOT NULL DEFAULT 0,
    preemptions INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL,
    follower TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions (job_id);
CREATE TABLE IF NOT EXISTS ratios (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    follower TEXT NOT NULL,
    key TEXT NOT NULL,
    measured_s REAL NOT NULL,
    estimate_s REAL NOT NULL,
    at REAL NOT NULL
);
"""

_COLUMNS = (
    "id", "scenario_name", "scenario_text", "submitter", "priority", "gpus", "labels",
    "estimate_s", "state", "submitted_at", "attempts", "follower", "result_path", "reason",
    "started_at", "finished_at", "run_s", "preemptions",
)  # fmt: skip

#: What `transition` may change besides the state and reason.
TRANSITION_FIELDS = frozenset(
    {
        "follower", "result_path", "attempts", "started_at", "finished_at", "estimate_s",
        "run_s", "preemptions",
    }
)  # fmt: skip


class StoreError(ClusterError, RuntimeError):
    """The store file cannot be used (another program's database, a newer schema)."""


@dataclass(frozen=True)
class Transition:
    job_id: str
    from_state: JobState | None  # None: the job's submission
    to_state: JobState
    at: float
    reason: str
    follower: str | None


@dataclass(frozen=True)
class Ratio:
    """One finished job's measured duration against its (uncorrected) estimate."""

    follower: str
    key: str
    measured_s: float
    estimate_s: float
    at: float


class JobStore:
    """Jobs, their transitions and the learned-estimate samples, in one SQLite file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE ... COMMIT).
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        try:
            self._setup()
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise StoreError(f"{self.path}: not a servebench job store ({err})") from None

    def _setup(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: store schema {version} is newer than this servebench's "
                f"({SCHEMA_VERSION})"
            )
        # One script, one transaction (executescript commits anything pending first). A
        # store of an older schema gets what it lacks (its jobs table exists, so the
        # CREATE TABLE of the current one does not run).
        migrate = "".join(_MIGRATIONS[v] for v in range(version, SCHEMA_VERSION) if version)
        self._db.executescript(
            f"BEGIN IMMEDIATE; {_SCHEMA} {migrate} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;"
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, committed on success and rolled back on any error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ jobs

    def add(self, job: Job, now: float | None = None) -> None:
        """Store a new job and its submission as the first transition."""
        with self._write() as db:
            db.execute(
                f"INSERT INTO jobs ({', '.join(_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_COLUMNS))})",
                _row(job),
            )
            db.execute(
                "INSERT INTO transitions (job_id, from_state, to_state, at, reason, follower) "
                "VALUES (?, NULL, ?, ?, ?, ?)",
                (job.id, str(job.state), job.submitted_at if now is None else now,
                 job.reason or "submitted", job.follower),
            )  # fmt: skip

    def get(self, job_id: str) -> Job:
        """The job; KeyError if the store has none with that id."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    def list(self, states: Iterable[JobState] | None = None) -> list[Job]:
        """Jobs in submission order, all or those in `states`."""
        query = f"SELECT {', '.join(_COLUMNS)} FROM jobs"
        args: list[str] = []
        if states is not None:
            args = [str(JobState(s)) for s in states]
            if not args:
                return []
            query += f" WHERE state IN ({', '.join('?' * len(args))})"
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq", args).fetchall()
        return [_job(r) for r in rows]

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, zeros included)."""
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        found = {JobState(s): n for s, n in rows}
        return {s: found.get(s, 0) for s in JobState}

    def transition(
        self, job_id: str, to: JobState, *, reason: str, now: float | None = None, **fields: Any
    ) -> Job:
        """Move a job to `to`, if `LEGAL` allows it from its current state, and return it.

        `fields` (TRANSITION_FIELDS: follower, result_path, attempts, started_at,
        finished_at, estimate_s, run_s, preemptions) change in the same transaction. KeyError for an unknown
        job, IllegalTransition for a move that is not allowed (nothing changes then).
        """
        unknown = set(fields) - TRANSITION_FIELDS
        if unknown:
            raise TypeError(f"transition cannot set {', '.join(sorted(unknown))}")
        to = JobState(to)
        at = time.time() if now is None else now
        with self._write() as db:
            row = db.execute("SELECT state, follower FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise KeyError(job_id)
            old = JobState(row[0])
            # The transition names the follower the job goes to, or (re-queued, finished)
            # the one it was on.
            follower = fields.get("follower") or row[1]
            check_transition(job_id, old, to)
            changes = {"state": str(to), "reason": reason, **fields}
            db.execute(
                f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in changes)} WHERE id = ?",
                [*changes.values(), job_id],
            )
            db.execute(
                "INSERT INTO transitions (job_id, from_state, to_state, at, reason, follower) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, str(old), str(to), at, reason, follower),
            )
        return self.get(job_id)

    def note(self, job_id: str, reason: str) -> Job:
        """Change a waiting (queued) job's reason without moving it, e.g. to say that no
        follower can run it; no transition is recorded (the job did not move)."""
        with self._write() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise KeyError(job_id)
            if JobState(row[0]) is JobState.QUEUED:
                db.execute("UPDATE jobs SET reason = ? WHERE id = ?", (reason, job_id))
        return self.get(job_id)

    def record_result(self, job_id: str, result_path: str) -> None:
        """Note that a running job's result is on the leader's disk, before it is marked
        done: a leader killed in between finds it in `recover` and does not run it again."""
        with self._write() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise KeyError(job_id)
            if row[0] != JobState.RUNNING:
                raise IllegalTransition(f"job {job_id}: {row[0]}, not running; no result to record")
            db.execute("UPDATE jobs SET result_path = ? WHERE id = ?", (result_path, job_id))

    def history(self, job_id: str) -> list[Transition]:
        """The job's transitions, oldest first (its submission included); KeyError if
        the job is unknown."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, from_state, to_state, at, reason, follower FROM transitions "
                "WHERE job_id = ? ORDER BY seq",
                (job_id,),
            ).fetchall()
        if not rows:
            self.get(job_id)  # KeyError for an unknown job; a known one always has rows
        return [
            Transition(r[0], JobState(r[1]) if r[1] else None, JobState(r[2]), r[3], r[4], r[5])
            for r in rows
        ]

    def recover(
        self, live_followers: Collection[str], now: float | None = None, lost: Collection[str] = ()
    ) -> list[Job]:
        """After a leader restart: put back in the queue every placed or running job whose
        follower is not in `live_followers` or whose id is in `lost` (a running job the
        leader cannot reattach to); each keeps its attempt count. A running job whose
        result was already stored (`result_path`) is marked done instead, so it never runs
        twice. Returns the re-queued jobs.
        """
        now = time.time() if now is None else now
        live = set(live_followers)
        lost = set(lost)
        requeued = []
        for job in self.list([JobState.PLACED, JobState.RUNNING]):
            if job.result_path is not None and job.state is JobState.RUNNING:
                self.transition(
                    job.id, JobState.DONE, now=now,
                    reason="its result was stored before the leader restarted",
                    finished_at=job.finished_at if job.finished_at is not None else now,
                )  # fmt: skip
                continue
            if job.follower in live and job.id not in lost:
                continue
            why = (
                f"follower {job.follower} is gone"
                if job.follower not in live
                else f"its run on {job.follower} was lost"
            )
            requeued.append(
                self.transition(
                    job.id,
                    JobState.QUEUED,
                    now=now,
                    reason=f"re-queued after a leader restart: {why}",
                    follower=None,
                    started_at=None,
                )
            )
        return requeued

    # ------------------------------------------------------------------ learning

    def record_ratio(
        self,
        follower: str,
        key: str,
        measured_s: float,
        estimate_s: float,
        now: float | None = None,
    ) -> None:
        """Keep one measured-vs-estimate sample, so a restarted leader relearns it."""
        with self._write() as db:
            db.execute(
                "INSERT INTO ratios (follower, key, measured_s, estimate_s, at) "
                "VALUES (?, ?, ?, ?, ?)",
                (follower, key, measured_s, estimate_s, time.time() if now is None else now),
            )

    def ratios(self) -> list[Ratio]:
        """Every sample, oldest first (the order a policy must replay them in)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT follower, key, measured_s, estimate_s, at FROM ratios ORDER BY seq"
            ).fetchall()
        return [Ratio(*r) for r in rows]


def _row(job: Job) -> list[Any]:
    """`job` as values of `_COLUMNS` (what `_job` reads back): its fields as they are, but
    its needs as `gpus` and JSON `labels` and its state as text."""
    stored = {
        "gpus": job.needs.gpus,
        "labels": json.dumps(dict(job.needs.labels), sort_keys=True),
        "state": str(job.state),
    }
    return [stored[c] if c in stored else getattr(job, c) for c in _COLUMNS]


def _job(row: tuple[Any, ...]) -> Job:
    data = dict(zip(_COLUMNS, row, strict=True))
    needs = Needs(gpus=data.pop("gpus"), labels=json.loads(data.pop("labels")))
    data["state"] = JobState(data["state"])
    return Job(needs=needs, **data)
