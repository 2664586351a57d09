"""The billing-month tick: walk the months that have ended and move each one step.

It is the whole of what ``run.py tick`` (and the ``LedgerActor`` on the hourly
``BillingTickDue``) does. A month goes ``open -> grace -> metered ->
finalized``:

- a month that has ended and is stored ``open`` (or not stored yet) moves to
  ``grace``, reported as the transition ``"open -> grace"``;
- in ``grace``, once ``now >= end + grace_hours`` it is metered (a
  completed run stores it ``metered``), unless it already has a completed
  or finalized run; with ``auto_finalize`` it is then finalized over its
  latest completed run;
- ``metered`` (by the tick, or by ``run.py meter`` by hand), once its grace
  has passed, it is finalized with ``auto_finalize`` and left for the
  operator's review without;
- a finalized month never changes.

Both steps are taken against the status a month is *stored* with, so a month
that has just ended moves into grace on one tick and is metered on a later
one (at an hourly tick that costs an hour), and a tick meters a month at most
once.

The walk starts at the earliest stored billing period and ends at the last
month that has ended. With none stored it starts at the month of the
ledger's first fact, and with no fact at all it walks nothing: a month
before anything the books hold would be a period of nothing (a ``--now``
years back once wrote one that every later tick walked from). It is capped
at ``MAX_TICK_MONTHS``: nothing bounds how old the earliest row is, and a
walk of thousands of months is a tick that never ends. The months left out
are counted on the oldest month walked, so they are never dropped without a
trace (``run.py meter --period`` bills them).

A month whose runs keep failing waits (``backoff``) and one failing month does
not stop the walk: one month nothing prices must not keep the rest from
being billed. A stopped tick stops between months.

This module decides; it touches the database only through the ``PeriodBook``
it is given (``ledger.runs.Periods``) and meters only through the
``Options.execute`` it is given (``ledger.metering``), so the state machine
runs in tests on a manual ``now`` with nothing else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol

from ledger.periods import Month, iso

__all__ = [
    "MAX_TICK_MONTHS",
    "FIRST_RETRY_WAIT",
    "MAX_RETRY_WAIT",
    "TRANSITION_TO_GRACE",
    "Options",
    "MonthState",
    "Metered",
    "MonthBusy",
    "AlreadyMetered",
    "RunFailed",
    "PeriodBook",
    "Action",
    "Decision",
    "backoff",
    "decide",
    "finalize_refusal",
    "MonthReport",
    "Report",
    "tick",
]

#: The longest walk one tick makes. Three years: an installation down longer
#: than that has its older months billed by hand (``meter --period``).
MAX_TICK_MONTHS = 36
#: Wait after the second failure in a row of a month's runs; doubles per
#: further failure (2, 4, 8, 16 h, then the cap), as the billing seed's
#: engine waits. The first failure is retried at the next tick: most
#: failures (a locked database, a crash mid-run) are gone by then.
FIRST_RETRY_WAIT = timedelta(hours=2)
#: A month that keeps failing is still tried once a day, so it is billed as
#: soon as what broke it is fixed, without an operator re-arming it.
MAX_RETRY_WAIT = timedelta(hours=24)

TRANSITION_TO_GRACE = "open -> grace"


# -- what the tick is given --------------------------------------------------------
@dataclass(frozen=True)
class Metered:
    """What ``Options.execute`` returns: the completed run, and what went wrong beside it."""

    run_id: str
    #: What went wrong beside the run, e.g. it could not give its month's
    #: lock back: the run and its lines stand, the next tick clears the lock.
    warning: str = ""
    #: False when the run could not give its month's lock back. The month is
    #: then not finalized on this tick (finalizing would meet the run's own
    #: lock and fail a month that was billed): the next tick clears the lock
    #: and finalizes it, as the seed's engine does.
    lock_released: bool = True
    #: Leases the run held back (no known price): a month that holds any is not
    #: finalized by the tick (see ``decide``).
    held: int = 0


class MonthBusy(Exception):
    """Another process is metering this month now: this tick leaves it alone."""


class AlreadyMetered(Exception):
    """The month got a completed run between the tick's look and its step."""


class RunFailed(Exception):
    """A run was recorded and failed; ``run_id`` names it."""

    def __init__(self, run_id: str, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id


@dataclass(frozen=True)
class Options:
    """How one tick treats the months it walks."""

    #: How long a month that has ended waits before it is metered, so that
    #: facts which arrive late (a reconcile after a websocket gap, a sidecar
    #: that was down over the month's end) are still billed into it.
    grace_hours: int
    #: Finalize a month over its completed run without an operator. Off where
    #: the numbers are reviewed before the month becomes immutable.
    auto_finalize: bool
    #: Meters one month at ``now``; called at most once per month per tick.
    #: Returns ``Metered``, raises ``MonthBusy``, ``AlreadyMetered`` or
    #: ``RunFailed``.
    execute: Callable[[Month, datetime], Metered]

    def __post_init__(self) -> None:
        if self.grace_hours < 0:
            raise ValueError(f"grace_hours must not be negative, got {self.grace_hours}")


@dataclass(frozen=True)
class MonthState:
    """A month as stored, reduced to what the step decision reads."""

    month: Month
    #: ``open``, ``grace``, ``metered``, ``finalized``; None when the month has no row yet.
    status: str | None
    #: The latest completed (or finalized) run, None if there is none.
    completed_run: str | None = None
    #: Failed runs in a row, counting back from the latest run.
    failures: int = 0
    #: When the latest of those failed.
    last_failure_at: datetime | None = None
    #: A run of this month that a live process is executing now (its id and who).
    running_elsewhere: str | None = None
    #: Leases ``completed_run`` held back (no known price, or unread) while it is not finalized,
    #: and how many of them the books have priced since.
    held: int = 0
    held_priced: int = 0


class PeriodBook(Protocol):
    """The stored billing periods and runs, as the tick reads and moves them."""

    def earliest(self) -> Month | None: ...

    def first_fact(self) -> Month | None:
        """The month of the ledger's first fact, None when it holds none."""
        ...

    def reclaim_stale(self, month: Month, now: datetime) -> list[str]:
        """Mark runs of ``month`` left running by a dead process failed; describe each."""
        ...

    def state(self, month: Month) -> MonthState: ...

    def to_grace(self, month: Month, now: datetime) -> bool:
        """Store ``month`` as grace if it is open or missing; True if this call moved it."""
        ...

    def finalize(self, month: Month, now: datetime, run_id: str | None = None) -> str:
        """Finalize ``month`` over ``run_id`` (default: its latest completed run)."""
        ...


# -- the decision ---------------------------------------------------------------------
class Action(enum.Enum):
    NOTHING = "nothing"
    TO_GRACE = "to grace"
    WAIT_GRACE = "in grace"
    HELD_BACK = "held back"
    AWAIT_LEASES = "awaiting leases"
    BUSY = "busy"
    METER = "meter"
    FINALIZE = "finalize"


@dataclass(frozen=True)
class Decision:
    action: Action
    #: METER: finalize over the new run once it completes.
    then_finalize: bool = False
    retry_after: datetime | None = None
    failures: int = 0
    #: AWAIT_LEASES: the leases the month's run held back.
    held: int = 0


def backoff(failures: int) -> timedelta:
    """How long after its latest failure a month that failed ``failures`` times in a row waits.

    None after the first, then 2 h doubling with each further failure, capped at 24 h:
    2, 4, 8, 16, 24 h after 2 to 6 failures (the billing seed's schedule).
    """
    if failures <= 1:
        return timedelta(0)
    # 2**(failures - 2) outgrows the cap after a handful: stop doubling there
    # rather than build an enormous timedelta (which overflows).
    wait = FIRST_RETRY_WAIT
    for _ in range(failures - 2):
        wait *= 2
        if wait >= MAX_RETRY_WAIT:
            return MAX_RETRY_WAIT
    return min(wait, MAX_RETRY_WAIT)


def decide(state: MonthState, now: datetime, grace: timedelta, auto_finalize: bool) -> Decision:
    """The one step ``state`` takes at ``now``: pure, against the stored status."""
    if state.status == "finalized":
        return Decision(Action.NOTHING)
    if state.status in (None, "open"):
        return Decision(Action.TO_GRACE)
    if state.status not in ("grace", "metered"):
        raise ValueError(f"billing period {state.month} has unknown status {state.status!r}")
    if now < state.month.end + grace:
        return Decision(Action.WAIT_GRACE)
    if state.running_elsewhere is not None:
        return Decision(Action.BUSY)
    if state.completed_run is not None and not state.held_priced:
        if state.held and auto_finalize:
            # A statement never changes once finalized: a month whose run left a lease out waits
            # for that lease's price (or an operator's ``run.py finalize``), or the lease is billed
            # in no month at all.
            return Decision(Action.AWAIT_LEASES, held=state.held)
        return Decision(Action.FINALIZE if auto_finalize else Action.NOTHING)
    # Not metered yet, or a lease its run held back has been priced since: metered (again, with it).
    if state.failures and state.last_failure_at is not None:
        retry_after = state.last_failure_at + backoff(state.failures)
        if now < retry_after:
            return Decision(Action.HELD_BACK, retry_after=retry_after, failures=state.failures)
    return Decision(Action.METER, then_finalize=auto_finalize)


def finalize_refusal(month: Month, now: datetime, grace: timedelta) -> str:
    """Why ``month`` may not be finalized at ``now``: "" once it has ended and its grace has passed.

    The tick never finalizes before (``decide``); an operator may, after a
    month has ended, with a reason (``run.py finalize --force``).
    """
    if now < month.end:
        return f"{month} has not ended: it ends {iso(month.end)}"
    if now < month.end + grace:
        return (
            f"{month} is in its grace window until {iso(month.end + grace)}: facts that arrive late (a "
            f"reconcile after a websocket gap, the settlement of its last hour) would miss its statement, "
            f"which never changes once finalized"
        )
    return ""


# -- the report -------------------------------------------------------------------------
@dataclass
class MonthReport:
    """What one tick did with one month."""

    #: The billing month, as YYYY-MM.
    month: str
    #: The status change this tick wrote ("open -> grace"), empty where none.
    transition: str = ""
    #: The run this tick metered or finalized the month over, empty where neither.
    run_id: str = ""
    #: This tick finalized the month over a completed run.
    finalized: bool = False
    #: When a month whose runs failed is metered again, and how many failed in
    #: a row; set only where this tick held the month back.
    retry_after: datetime | None = None
    failures: int = 0
    #: How many months older than this one the walk left out (on the oldest
    #: month walked only).
    skipped_before: int = 0
    #: What went wrong beside the month's step (the month got where it was
    #: going): a lock not given back, a stale run reclaimed, a month skipped
    #: because another process is metering it.
    warning: str = ""
    #: Leases the month's run (``run_id``) held back, no known price: it is not finalized by the
    #: tick until they are priced and the month metered again with them.
    held: int = 0
    #: What went wrong with this month; the fields above still say what it got to.
    error: str = ""
    #: The month's stored status after this tick.
    status: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "month": self.month,
            "status": self.status,
            "transition": self.transition,
            "run_id": self.run_id,
            "finalized": self.finalized,
            "retry_after": iso(self.retry_after) or None,
            "failures": self.failures,
            "skipped_before": self.skipped_before,
            "warning": self.warning,
            "held": self.held,
            "error": self.error,
        }


@dataclass
class Report:
    """One entry per month walked, in walk order; a month where nothing was due has one too."""

    months: list[MonthReport] = field(default_factory=list)
    #: The tick was stopped before it had walked every month.
    stopped: bool = False

    @property
    def failed(self) -> bool:
        return any(m.error for m in self.months)

    @property
    def error(self) -> str:
        """Every month's failure, joined ("" when none): what the exit status reports."""
        return "; ".join(f"{m.month}: {m.error}" for m in self.months if m.error)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.months)

    def __len__(self) -> int:
        return len(self.months)

    def __getitem__(self, i: int) -> MonthReport:
        return self.months[i]

    def as_dict(self) -> dict[str, Any]:
        return {
            "months": [m.as_dict() for m in self.months],
            "stopped": self.stopped,
            "error": self.error,
        }


# -- the walk ------------------------------------------------------------------------------
class _Stop(Protocol):
    def is_set(self) -> bool: ...


def walk(earliest: Month | None, first_fact: Month | None, now: datetime) -> tuple[list[Month], int]:
    """The months a tick at ``now`` walks, oldest first, and how many older ones it leaves out.

    ``earliest``: the earliest stored period; ``first_fact``: the month of the ledger's first fact.
    """
    last = Month.of(now).previous()
    first = earliest if earliest is not None else first_fact
    if first is None:  # no period, no fact: nothing to bill
        return [], 0
    # Empty where the first month has not ended (a period or a first fact of
    # the month under way): the month before it is never walked.
    months = list(first.until(last))
    skipped = max(0, len(months) - MAX_TICK_MONTHS)
    return months[skipped:], skipped


def tick(book: PeriodBook, now: datetime, options: Options, stop: _Stop | None = None) -> Report:
    """Walk the months that have ended and move each one step. ``now`` is an argument."""
    if now.tzinfo is None:
        raise ValueError("tick: now must be timezone-aware (UTC)")
    first_fact = book.first_fact()
    months, skipped = walk(book.earliest(), first_fact, now)
    report = Report()
    grace = timedelta(hours=options.grace_hours)
    for i, month in enumerate(months):
        if stop is not None and stop.is_set():
            report.stopped = True
            break
        row = MonthReport(month=str(month), skipped_before=skipped if i == 0 else 0)
        report.months.append(row)
        if first_fact is None or month < first_fact:
            # A period stored before the books' first fact (an older build's
            # tick): nothing of it is in the ledger, so nothing is written.
            row.status = book.state(month).status or "open"
            _warn(row, f"before the ledger's first fact ({first_fact or 'none yet'}): nothing to meter, left as it is")
            continue
        try:
            _step(book, month, now, grace, options, row)
        except Exception as exc:  # one month's failure must not end the walk
            row.error = row.error or f"{type(exc).__name__}: {exc}"
    return report


def _warn(row: MonthReport, text: str) -> None:
    row.warning = f"{row.warning}; {text}" if row.warning else text


def _step(book: PeriodBook, month: Month, now: datetime, grace: timedelta, options: Options, row: MonthReport) -> None:
    for note in book.reclaim_stale(month, now):
        _warn(row, note)
    state = book.state(month)
    row.status = state.status or "open"
    decision = decide(state, now, grace, options.auto_finalize)
    action = decision.action
    if action is Action.TO_GRACE:
        if book.to_grace(month, now):
            row.transition = TRANSITION_TO_GRACE
        row.status = "grace"
    elif action is Action.HELD_BACK:
        row.retry_after = decision.retry_after
        row.failures = decision.failures
    elif action is Action.BUSY:
        _warn(row, f"being metered elsewhere ({state.running_elsewhere}): skipped by this tick")
    elif action is Action.AWAIT_LEASES:
        row.held = decision.held
    elif action is Action.FINALIZE:
        row.run_id = book.finalize(month, now, state.completed_run)
        row.finalized = True
        row.status = "finalized"
    elif action is Action.METER:
        try:
            metered = options.execute(month, now)
        except MonthBusy as exc:
            _warn(row, f"being metered elsewhere ({exc}): skipped by this tick")
            return
        except AlreadyMetered:
            return
        except RunFailed as exc:
            row.run_id = exc.run_id
            row.error = str(exc)
            return
        row.run_id = metered.run_id
        row.status = "metered"
        if metered.warning:
            _warn(row, metered.warning)
        row.held = metered.held
        # Finalized at once where asked, but not over a run that held a lease back (``decide``).
        if decision.then_finalize and not metered.held:
            if not metered.lock_released:
                _warn(row, "finalized on the next tick, once the lock is cleared")
            else:
                book.finalize(month, now, metered.run_id)
                row.finalized = True
                row.status = "finalized"
