"""Billing periods, metering runs, and the lock that lets one process meter a month.

``Periods`` is the stored side of the tick (it implements ``tick.PeriodBook``)
and the bookkeeping of a run: start it under the month's lock, beat its
heart while it commits lines, complete or fail it, finalize the month.

Only one process meters a month at a time. A run takes the month's row in
``run_locks`` in the same transaction that records it as ``running``; SQLite's
write lock makes that take atomic across processes. A second process finding
the row held by a live owner skips the month.

How "dead" is known, and why two signals:

- the owner's host and pid: on the same host a pid that no longer runs is
  dead *now*, which is the common case (the sidecar crashed or was killed and
  restarted on the same machine), so its month is reclaimed at once rather
  than after a timeout;
- a heartbeat: the run refreshes ``heartbeat`` (wall-clock seconds) with every
  batch of lines it commits, well under a second apart. A lock whose
  heartbeat is older than ``LOCK_TTL`` is dead whatever its pid says. This
  covers an owner on another host (a ledger on shared storage), a pid reused
  by an unrelated process, and a process that is alive but hung.

The heartbeat is wall-clock time on purpose: liveness is a question about real
processes, while ``now`` (the billing clock) can be a ``--now`` in 2030.

A run found ``running`` whose owner is dead is marked failed (its partial
lines deleted) before the month's failures are counted, so a crash counts as
one failure, and the lock goes with it.
"""

from __future__ import annotations

import os
import socket
import uuid as uuidlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from ledger.periods import Month, from_us, iso, parse_month, to_us
from ledger.store import Ledger, LedgerError
from ledger.tick import AlreadyMetered, MonthBusy, MonthState

__all__ = [
    "LOCK_TTL_S",
    "Periods",
    "PeriodInfo",
    "RunInfo",
    "LockInfo",
    "MonthFinalized",
    "MonthNotEnded",
    "BeforeTheBooks",
    "lock_is_live",
    "pid_running",
]

#: A lock whose owner has not beaten its heart for this long is dead. Runs
#: beat it with every batch commit (well under a second apart on 100,000
#: leases), so five minutes never steals a live run, even through a stalled
#: disk, and bounds how long a crashed owner on another host holds a month.
LOCK_TTL_S = 300.0


class MonthFinalized(LedgerError):
    """The month is finalized: its statement never changes again."""


class MonthNotEnded(LedgerError):
    """A month that has not ended cannot be metered."""


class BeforeTheBooks(LedgerError):
    """A month before the ledger's first fact: nothing of it is in these books."""


@dataclass(frozen=True)
class LockInfo:
    period: str
    run_id: str
    host: str
    pid: int
    token: str
    heartbeat: float

    def owner(self) -> str:
        return f"{self.host}:{self.pid}"


@dataclass(frozen=True)
class RunInfo:
    id: str
    period: str
    status: str
    started: datetime
    completed: datetime | None
    error: str
    owner: str
    leases: int


@dataclass(frozen=True)
class PeriodInfo:
    period: str
    status: str
    finalized_run: str | None
    runs: int
    latest_run: RunInfo | None

    @property
    def stage(self) -> str:
        """open, grace, metered (in grace with a completed run, awaiting its finalize) or finalized."""
        if self.status == "grace" and self.latest_run is not None and self.latest_run.status == "completed":
            return "metered"
        return self.status


def pid_running(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to someone else
    return True


def lock_is_live(
    lock: LockInfo, *, host: str, wall_now: float, pid_alive: Callable[[int], bool] = pid_running
) -> bool:
    """Is the owner of ``lock`` still metering? (See the module docstring for why both signals.)"""
    if wall_now - lock.heartbeat > LOCK_TTL_S:
        return False
    if lock.host == host and not pid_alive(lock.pid):
        return False
    return True


def _run(row: tuple[Any, ...]) -> RunInfo:
    rid, period, status, started, completed, error, owner, leases = row
    return RunInfo(
        id=rid,
        period=period,
        status=status,
        started=from_us(started),
        completed=from_us(completed) if completed is not None else None,
        error=error,
        owner=owner,
        leases=leases,
    )


_RUN_COLUMNS = "id, period, status, started_us, completed_us, error, owner, leases"


def _held_leases(c: Any, run_id: str) -> tuple[int, int]:
    """(the leases run ``run_id`` held back, how many of them the books have priced since)."""
    held, priced = c.execute(
        "SELECT COUNT(*), COALESCE(SUM(EXISTS (SELECT 1 FROM leases l WHERE l.uuid = h.lease_uuid AND l.priced = 1)), 0) "
        "FROM run_held_leases h WHERE h.run_id = ?",
        (run_id,),
    ).fetchone()
    return int(held), int(priced)


class Periods:
    """The billing periods and runs of one ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        host: str | None = None,
        pid: int | None = None,
        pid_alive: Callable[[int], bool] = pid_running,
    ) -> None:
        self.ledger = ledger
        self.host = host or socket.gethostname()
        self.pid = os.getpid() if pid is None else pid
        self.pid_alive = pid_alive

    # -- reading ---------------------------------------------------------------------
    def first_fact(self) -> Month | None:
        """The month of the ledger's first fact (None: no fact yet)."""
        at = self.ledger.first_fact_at()
        return Month.of(at) if at is not None else None

    def earliest(self) -> Month | None:
        with self.ledger.read() as c:
            row = c.execute("SELECT MIN(period) FROM billing_periods").fetchone()
        return parse_month(row[0]) if row and row[0] else None

    def status(self, month: Month) -> str | None:
        with self.ledger.read() as c:
            row = c.execute("SELECT status FROM billing_periods WHERE period = ?", (str(month),)).fetchone()
        return row[0] if row else None

    def runs(self, month: Month) -> list[RunInfo]:
        """The month's runs, oldest first."""
        with self.ledger.read() as c:
            rows = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE period = ? ORDER BY seq", (str(month),)
            ).fetchall()
        return [_run(r) for r in rows]

    def run(self, run_id: str) -> RunInfo | None:
        with self.ledger.read() as c:
            row = c.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _run(row) if row else None

    def lock(self, month: Month) -> LockInfo | None:
        with self.ledger.read() as c:
            row = c.execute(
                "SELECT period, run_id, host, pid, token, heartbeat FROM run_locks WHERE period = ?", (str(month),)
            ).fetchone()
        return LockInfo(*row) if row else None

    def list(self) -> list[PeriodInfo]:
        """Every stored period, oldest first, with its run count and latest run."""
        out = []
        with self.ledger.read() as c:
            periods = c.execute(
                "SELECT period, status, finalized_run FROM billing_periods ORDER BY period"
            ).fetchall()
            for period, status, finalized_run in periods:
                count = c.execute("SELECT COUNT(*) FROM runs WHERE period = ?", (period,)).fetchone()[0]
                latest = c.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE period = ? ORDER BY seq DESC LIMIT 1", (period,)
                ).fetchone()
                out.append(PeriodInfo(period, status, finalized_run, count, _run(latest) if latest else None))
        return out

    def _live(self, lock: LockInfo) -> bool:
        return lock_is_live(lock, host=self.host, wall_now=self.ledger.wall(), pid_alive=self.pid_alive)

    def state(self, month: Month) -> MonthState:
        with self.ledger.read() as c:
            status = self.status(month)
            rows = c.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE period = ? ORDER BY seq DESC", (str(month),)
            ).fetchall()
            lock = self.lock(month)
            runs = [_run(r) for r in rows]
            completed = next((r for r in runs if r.status in ("completed", "finalized")), None)
            held = priced = 0
            if completed is not None and completed.status == "completed":  # (a finalized one is done with)
                held, priced = _held_leases(c, completed.id)
        failures = 0
        last_failure_at = None
        for r in runs:
            if r.status == "running":
                continue
            if r.status != "failed":
                break
            failures += 1
            if last_failure_at is None:
                last_failure_at = r.completed or r.started
        running = None
        if lock is not None and self._live(lock):
            owner_run = next((r for r in runs if r.id == lock.run_id and r.status == "running"), None)
            if owner_run is not None:
                running = f"run {owner_run.id} by {lock.owner()} since {iso(owner_run.started)}"
        return MonthState(
            month=month,
            status=status,
            completed_run=completed.id if completed is not None else None,
            failures=failures,
            last_failure_at=last_failure_at,
            running_elsewhere=running,
            held=held,
            held_priced=priced,
        )

    # -- moving periods ---------------------------------------------------------------------
    def _ensure(self, month: Month, now: datetime, status: str = "open") -> bool:
        cur = self.ledger.conn.execute(
            "INSERT OR IGNORE INTO billing_periods (period, period_from_us, period_to_us, status, created_us, updated_us) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (str(month), to_us(month.start), to_us(month.end), status, to_us(now), to_us(now)),
        )
        return cur.rowcount == 1

    def to_grace(self, month: Month, now: datetime) -> bool:
        with self.ledger.transaction() as c:
            if self._ensure(month, now, "grace"):
                return True
            cur = c.execute(
                "UPDATE billing_periods SET status = 'grace', updated_us = ? WHERE period = ? AND status = 'open'",
                (to_us(now), str(month)),
            )
            return cur.rowcount == 1

    def forced_reason(self, month: Month) -> str:
        """The reason ``month`` was finalized before its grace had passed ("" when it was not)."""
        with self.ledger.read() as c:
            row = c.execute("SELECT reason FROM forced_finalizations WHERE period = ?", (str(month),)).fetchone()
        return row[0] if row else ""

    def finalize(self, month: Month, now: datetime, run_id: str | None = None, *, forced_reason: str = "") -> str:
        """Finalize ``month`` over ``run_id`` (default: its latest completed run). Returns the run.

        ``forced_reason``: the operator finalizes before the grace window has
        passed (the caller has decided it may); kept with the month.
        """
        with self.ledger.transaction() as c:
            status = self.status(month)
            if status is None:
                raise LedgerError(f"no billing period {month}: meter it first (meter --period {month})")
            if status == "finalized":
                row = c.execute("SELECT finalized_run FROM billing_periods WHERE period = ?", (str(month),)).fetchone()
                raise MonthFinalized(f"{month} is already finalized over run {row[0]}: it never changes again")
            lock = self.lock(month)
            if lock is not None and self._live(lock):
                raise MonthBusy(f"{month} is being metered by run {lock.run_id} ({lock.owner()}); finalize it after")
            if run_id is None:
                row = c.execute(
                    "SELECT id FROM runs WHERE period = ? AND status = 'completed' ORDER BY seq DESC LIMIT 1",
                    (str(month),),
                ).fetchone()
                if row is None:
                    raise LedgerError(f"{month} has no completed run to finalize: meter it first (meter --period {month})")
                run_id = row[0]
            else:
                row = c.execute("SELECT period, status FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None or row[0] != str(month) or row[1] != "completed":
                    raise LedgerError(f"run {run_id} is not a completed run of {month}")
            c.execute("UPDATE runs SET status = 'finalized' WHERE id = ?", (run_id,))
            c.execute(
                "UPDATE billing_periods SET status = 'finalized', finalized_run = ?, updated_us = ? WHERE period = ?",
                (run_id, to_us(now), str(month)),
            )
            if forced_reason:
                c.execute(
                    "INSERT INTO forced_finalizations (period, reason, at_us, owner) VALUES (?, ?, ?, ?)",
                    (str(month), forced_reason, to_us(now), f"{self.host}:{self.pid}"),
                )
        return run_id

    # -- runs and their lock -------------------------------------------------------------------
    def _reclaim(self, month: Month, now: datetime) -> list[str]:
        """Inside a transaction: fail runs of ``month`` whose owner is dead; drop a dead lock."""
        c = self.ledger.conn
        notes = []
        lock = self.lock(month)
        live_run = None
        if lock is not None:
            row = c.execute("SELECT status FROM runs WHERE id = ?", (lock.run_id,)).fetchone()
            if row is not None and row[0] == "running" and self._live(lock):
                live_run = lock.run_id
            else:
                # A dead owner's lock, or one a finished run could not give back.
                c.execute("DELETE FROM run_locks WHERE period = ?", (str(month),))
        for (rid, owner) in c.execute(
            "SELECT id, owner FROM runs WHERE period = ? AND status = 'running'", (str(month),)
        ).fetchall():
            if rid == live_run:
                continue
            who = owner.rsplit(":", 1)[0] if owner else "an unknown process"
            error = f"abandoned: {who} stopped while metering (marked failed {iso(now)})"
            c.execute(
                "UPDATE runs SET status = 'failed', completed_us = ?, error = ? WHERE id = ?",
                (to_us(now), error, rid),
            )
            c.execute("DELETE FROM statement_lines WHERE run_id = ?", (rid,))
            c.execute("DELETE FROM statement_totals WHERE run_id = ?", (rid,))
            notes.append(f"run {rid} left running by {who}, which is gone: marked failed")
        return notes

    def reclaim_stale(self, month: Month, now: datetime) -> list[str]:
        with self.ledger.transaction():
            return self._reclaim(month, now)

    def start_run(self, month: Month, now: datetime, *, only_if_unmetered: bool = False) -> str:
        """Record a new ``running`` run of ``month`` and take its lock, atomically.

        Raises ``MonthFinalized``, ``MonthNotEnded``, ``MonthBusy`` (a live
        process holds the month) or, with ``only_if_unmetered``,
        ``AlreadyMetered``.
        """
        if now < month.end:
            raise MonthNotEnded(f"{month} has not ended: it ends {iso(month.end)}; meter it after that")
        first = self.ledger.first_fact_at()
        if first is None or month < Month.of(first):
            since = f"its first fact is of {iso(first)}" if first else "it holds no fact yet"
            raise BeforeTheBooks(
                f"{month} is before anything in the ledger {self.ledger.path} ({since}): metering it would "
                f"write a statement of nothing; meter a month from {Month.of(first) if first else 'the first fact'} on"
            )
        run_id = str(uuidlib.uuid4())
        with self.ledger.transaction() as c:
            self._ensure(month, now)
            if self.status(month) == "finalized":
                row = c.execute("SELECT finalized_run FROM billing_periods WHERE period = ?", (str(month),)).fetchone()
                raise MonthFinalized(f"{month} is finalized over run {row[0]}: it is never metered again")
            self._reclaim(month, now)
            lock = self.lock(month)
            if lock is not None:  # survived the reclaim: its owner is alive
                raise MonthBusy(f"run {lock.run_id} by {lock.owner()}")
            if only_if_unmetered:
                done = c.execute(
                    "SELECT id FROM runs WHERE period = ? AND status IN ('completed', 'finalized') ORDER BY seq DESC LIMIT 1",
                    (str(month),),
                ).fetchone()
                # Metered already, unless a lease its run held back has been priced since (``tick.decide``).
                if done is not None and not _held_leases(c, done[0])[1]:
                    raise AlreadyMetered(f"{month} has run {done[0]}")
            c.execute(
                "INSERT INTO runs (id, period, status, started_us, owner) VALUES (?, ?, 'running', ?, ?)",
                (run_id, str(month), to_us(now), f"{self.host}:{self.pid}:{self.ledger.token}"),
            )
            c.execute(
                "INSERT INTO run_locks (period, run_id, host, pid, token, heartbeat) VALUES (?, ?, ?, ?, ?, ?)",
                (str(month), run_id, self.host, self.pid, self.ledger.token, self.ledger.wall()),
            )
        return run_id

    def heartbeat(self, month: Month, run_id: str) -> None:
        """Inside the caller's transaction: the run is alive. Raises if it lost its lock."""
        cur = self.ledger.conn.execute(
            "UPDATE run_locks SET heartbeat = ? WHERE period = ? AND run_id = ?",
            (self.ledger.wall(), str(month), run_id),
        )
        if cur.rowcount != 1:
            raise LedgerError(f"run {run_id} lost the lock of {month} (reclaimed as dead by another process)")

    def complete(self, month: Month, run_id: str, now: datetime, leases: int) -> None:
        """Inside the caller's transaction: the run is complete and the month metered (its lock is given back separately)."""
        self.heartbeat(month, run_id)
        if self.status(month) == "finalized":
            raise MonthFinalized(f"{month} was finalized while run {run_id} metered it")
        self.ledger.conn.execute(
            "UPDATE runs SET status = 'completed', completed_us = ?, leases = ? WHERE id = ? AND status = 'running'",
            (to_us(now), leases, run_id),
        )
        self.ledger.conn.execute(
            "UPDATE billing_periods SET status = 'metered', updated_us = ? WHERE period = ? AND status != 'metered'",
            (to_us(now), str(month)),
        )

    def fail(self, month: Month, run_id: str, now: datetime, error: str) -> None:
        """Record the run as failed, drop its partial lines and give its lock back."""
        with self.ledger.transaction() as c:
            c.execute(
                "UPDATE runs SET status = 'failed', completed_us = ?, error = ? WHERE id = ? AND status = 'running'",
                (to_us(now), error, run_id),
            )
            c.execute("DELETE FROM statement_lines WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM statement_totals WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM run_locks WHERE period = ? AND run_id = ?", (str(month), run_id))

    def release(self, month: Month, run_id: str) -> None:
        with self.ledger.transaction() as c:
            c.execute("DELETE FROM run_locks WHERE period = ? AND run_id = ?", (str(month), run_id))
