"""The billing-month tick, rule by rule, on a manual ``now`` and a real ledger file.

The executor is the real metering (``meter_month``) unless a rule needs a run
to fail, in which case a failing executor records a failed run through the
same ``Periods`` bookkeeping the real one uses.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime, timedelta

import pytest

from ledger.metering import meter_month
from ledger.periods import Month
from ledger.runs import LOCK_TTL_S, Periods
from ledger.store import Ledger
from ledger.tick import (
    MAX_TICK_MONTHS,
    TRANSITION_TO_GRACE,
    Action,
    Decision,
    MonthState,
    Options,
    RunFailed,
    backoff,
    decide,
    tick,
)
from messages.ledger import WithdrawalRecorded
from runtime.clock import ManualClock, utc

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
FEB = Month(2026, 2)
MAR = Month(2026, 3)
GRACE = 24


class Wall:
    """Wall-clock seconds for run-lock heartbeats, moved by hand."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Executor:
    """Meters for real, or fails (recording a failed run) while ``failing`` says so."""

    def __init__(self, ledger: Ledger, periods: Periods) -> None:
        self.ledger = ledger
        self.periods = periods
        self.calls: list[tuple[str, datetime]] = []
        self.failing: set[str] = set()
        self.on_call = None

    def __call__(self, month: Month, now: datetime):
        self.calls.append((str(month), now))
        if self.on_call is not None:
            self.on_call(month)
        if str(month) in self.failing:
            run_id = self.periods.start_run(month, now, only_if_unmetered=True)
            self.periods.fail(month, run_id, now, "no price for sku-9")
            raise RunFailed(run_id, f"run {run_id} failed: no price for sku-9")
        return meter_month(self.ledger, month, now, periods=self.periods, only_if_unmetered=True)


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def ledger(tmp_path, wall):
    lg = Ledger.open(tmp_path / "ledger.sqlite", PROVIDER, wall=wall)
    fact(lg, MAR.start)  # the books begin in March: the walk starts there
    yield lg
    lg.close()


def fact(ledger: Ledger, at: datetime) -> None:
    """A fact of the books at ``at`` that no statement line comes from (an empty withdraw page)."""
    ledger.record(WithdrawalRecorded(at, 1, 1, f"TX-{at.isoformat()}", (), 0))


@pytest.fixture
def periods(ledger) -> Periods:
    return Periods(ledger)


@pytest.fixture
def execute(ledger, periods) -> Executor:
    return Executor(ledger, periods)


def options(execute, auto_finalize: bool = False, grace_hours: int = GRACE) -> Options:
    return Options(grace_hours=grace_hours, auto_finalize=auto_finalize, execute=execute)


def only(report):
    assert len(report) == 1, report.as_dict()
    return report[0]


# -- the walk and the first steps -----------------------------------------------------------
def test_first_month_of_a_fresh_deployment_moves_into_grace(periods, execute, ledger):
    fact(ledger, FEB.start + timedelta(days=3))
    clock = ManualClock(utc(2026, 3, 15, 9))
    report = tick(periods, clock.now(), options(execute))
    row = only(report)
    assert row.month == "2026-02"
    assert row.transition == TRANSITION_TO_GRACE
    assert periods.status(FEB) == "grace"
    assert execute.calls == []  # moved into grace on this tick, metered on a later one
    assert not report.failed


def test_a_month_that_just_ended_is_not_metered_in_the_tick_that_moves_it_to_grace(periods, execute):
    # Even with no grace at all: the two steps are taken against the stored status.
    report = tick(periods, MAR.end, options(execute, grace_hours=0))
    assert only(report).transition == TRANSITION_TO_GRACE
    assert execute.calls == []
    report = tick(periods, MAR.end + timedelta(hours=1), options(execute, grace_hours=0))
    assert only(report).run_id
    assert execute.calls == [("2026-03", MAR.end + timedelta(hours=1))]


def test_grace_not_yet_passed_leaves_the_month_alone(periods, execute):
    clock = ManualClock(MAR.end + timedelta(minutes=5))
    tick(periods, clock.now(), options(execute))
    clock.advance_to(MAR.end + timedelta(hours=GRACE) - timedelta(seconds=1))
    row = only(tick(periods, clock.now(), options(execute)))
    assert (row.transition, row.run_id, row.error) == ("", "", "")
    assert row.status == "grace"
    assert execute.calls == []


def test_metered_once_grace_has_passed_then_left_alone(periods, execute):
    clock = ManualClock(MAR.end + timedelta(minutes=5))
    tick(periods, clock.now(), options(execute))
    clock.advance_to(MAR.end + timedelta(hours=GRACE))
    row = only(tick(periods, clock.now(), options(execute)))
    assert row.run_id and not row.finalized and not row.error
    assert [r.status for r in periods.runs(MAR)] == ["completed"]
    assert periods.status(MAR) == "metered" and row.status == "metered"  # finalized only when asked

    clock.advance(timedelta(hours=1))
    row = only(tick(periods, clock.now(), options(execute)))
    assert row.run_id == "" and len(execute.calls) == 1  # already metered: left alone
    assert len(periods.runs(MAR)) == 1


def test_finalize_only_when_asked(periods, execute):
    clock = ManualClock(MAR.end)
    tick(periods, clock.now(), options(execute))
    clock.advance(timedelta(hours=GRACE))
    metered = only(tick(periods, clock.now(), options(execute))).run_id
    clock.advance(timedelta(hours=1))
    assert not only(tick(periods, clock.now(), options(execute))).finalized
    assert periods.status(MAR) == "metered"

    # auto_finalize turned on later: finalized over the run that is there, no new run.
    clock.advance(timedelta(hours=1))
    row = only(tick(periods, clock.now(), options(execute, auto_finalize=True)))
    assert row.finalized and row.run_id == metered
    assert periods.status(MAR) == "finalized"
    assert [r.status for r in periods.runs(MAR)] == ["finalized"]
    assert len(execute.calls) == 1


def test_auto_finalize_meters_and_finalizes_in_one_step(periods, execute):
    tick(periods, MAR.end, options(execute, auto_finalize=True))
    row = only(tick(periods, MAR.end + timedelta(hours=GRACE), options(execute, auto_finalize=True)))
    assert row.run_id and row.finalized
    assert periods.status(MAR) == "finalized"


def test_a_finalized_month_never_changes(periods, execute, ledger):
    tick(periods, MAR.end, options(execute, auto_finalize=True))
    tick(periods, MAR.end + timedelta(hours=GRACE), options(execute, auto_finalize=True))
    runs_before = periods.runs(MAR)
    for hours in (GRACE + 1, GRACE + 500):
        row = only(tick(periods, MAR.end + timedelta(hours=hours), options(execute, auto_finalize=True)))
        assert (row.transition, row.run_id, row.finalized, row.error) == ("", "", False, "")
        assert row.status == "finalized"
    assert periods.runs(MAR) == runs_before
    assert len(execute.calls) == 1
    from ledger.runs import MonthFinalized

    with pytest.raises(MonthFinalized, match="2026-03 is finalized"):
        meter_month(ledger, MAR, MAR.end + timedelta(days=30))


# -- failures -----------------------------------------------------------------------------------
def test_a_failed_month_is_reported_and_the_walk_goes_on(periods, execute, ledger):
    fact(ledger, FEB.start)
    execute.failing.add("2026-02")
    tick(periods, FEB.end, options(execute))  # Feb -> grace
    feb, mar = tick(periods, MAR.end, options(execute))  # Feb is due and fails; March still moves
    assert feb.error and mar.transition == TRANSITION_TO_GRACE
    report = tick(periods, MAR.end + timedelta(hours=GRACE), options(execute))
    feb, mar = report
    assert feb.month == "2026-02" and "no price for sku-9" in feb.error
    assert feb.run_id  # the failed run is named
    assert mar.month == "2026-03" and mar.run_id and not mar.error
    assert report.failed
    assert report.error.startswith("2026-02: ") and "sku-9" in report.error
    assert [c[0] for c in execute.calls] == ["2026-02", "2026-02", "2026-03"]


def test_a_tick_meters_a_month_at_most_once_even_when_it_fails(periods, execute):
    execute.failing.add("2026-03")
    tick(periods, MAR.end, options(execute))
    tick(periods, MAR.end + timedelta(hours=GRACE), options(execute))
    assert len(execute.calls) == 1
    assert [r.status for r in periods.runs(MAR)] == ["failed"]


def test_backoff_schedule():
    assert backoff(1) == timedelta(0)
    # The billing seed's engine: 2, 4, 8, 16, 24 h after 2 to 6 failures in a row.
    assert [backoff(n) for n in range(2, 8)] == [timedelta(hours=h) for h in (2, 4, 8, 16, 24, 24)]
    assert backoff(8) == timedelta(hours=24)
    assert backoff(10_000) == timedelta(hours=24)  # no overflow


def test_failing_month_waits_by_the_backoff_schedule(periods, execute):
    execute.failing.add("2026-03")
    due = MAR.end + timedelta(hours=GRACE)
    tick(periods, MAR.end, options(execute))
    clock = ManualClock(due)
    tick(periods, clock.now(), options(execute))  # failure 1 at `due`
    # No wait after the first failure: the very next tick tries again.
    clock.advance(timedelta(minutes=1))
    row = only(tick(periods, clock.now(), options(execute)))
    assert row.error and row.retry_after is None  # failure 2, tried at once
    second_failure = clock.now()

    expected_waits = [2, 4, 8, 16, 24, 24, 24]
    for n, hours in enumerate(expected_waits, start=2):
        retry_at = periods.runs(MAR)[-1].completed + timedelta(hours=hours)
        clock.advance(timedelta(minutes=1))
        row = only(tick(periods, clock.now(), options(execute)))
        assert row.retry_after == retry_at, n
        assert row.failures == n
        assert row.error == "" and row.run_id == ""
        calls = len(execute.calls)
        clock.advance_to(retry_at - timedelta(seconds=1))
        assert only(tick(periods, clock.now(), options(execute))).retry_after == retry_at
        assert len(execute.calls) == calls  # still held back
        clock.advance_to(retry_at)
        row = only(tick(periods, clock.now(), options(execute)))
        assert row.error and len(execute.calls) == calls + 1  # retried, failed again
    assert second_failure < clock.now()

    # Fixed: the next try completes, and the streak is over.
    execute.failing.clear()
    clock.advance(timedelta(hours=24))
    row = only(tick(periods, clock.now(), options(execute)))
    assert row.run_id and not row.error
    assert periods.runs(MAR)[-1].status == "completed"


# -- stale runs and the lock -------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _leave_running(ledger: Ledger, month: Month, now: datetime, *, host: str, pid: int, heartbeat: float) -> str:
    """What a process that died mid-run leaves behind: a running run holding the month's lock."""
    other = Periods(ledger, host=host, pid=pid, pid_alive=lambda p: True)
    run_id = other.start_run(month, now)
    ledger.conn.execute("UPDATE run_locks SET heartbeat = ? WHERE run_id = ?", (heartbeat, run_id))
    ledger.conn.execute(
        "INSERT INTO statement_lines VALUES (?, 'manifest1t', 'lease-1', 'umfx', 1, '1', '0')", (run_id,)
    )
    return run_id


def test_a_run_left_running_by_a_dead_process_is_reclaimed_and_counted(periods, execute, ledger, wall):
    tick(periods, MAR.end, options(execute))
    due = MAR.end + timedelta(hours=GRACE)
    stale = _leave_running(ledger, MAR, due, host=periods.host, pid=_dead_pid(), heartbeat=wall())
    row = only(tick(periods, due + timedelta(minutes=5), options(execute)))
    assert f"run {stale} left running" in row.warning and "marked failed" in row.warning
    # It counted as one failure (no wait after the first), so the month was metered at once.
    runs = periods.runs(MAR)
    assert [r.status for r in runs] == ["failed", "completed"]
    assert runs[0].id == stale and runs[0].error.startswith("abandoned:")
    assert row.run_id == runs[1].id
    assert ledger.conn.execute("SELECT COUNT(*) FROM statement_lines WHERE run_id = ?", (stale,)).fetchone()[0] == 0
    assert periods.lock(MAR) is None


def test_a_lock_whose_heartbeat_stopped_is_dead_even_on_another_host(periods, execute, ledger, wall):
    tick(periods, MAR.end, options(execute))
    due = MAR.end + timedelta(hours=GRACE)
    stale = _leave_running(ledger, MAR, due, host="other-host", pid=4242, heartbeat=wall())
    # Heartbeat fresh: the other host's run is live and this tick skips the month.
    row = only(tick(periods, due + timedelta(minutes=1), options(execute)))
    assert "being metered elsewhere" in row.warning and "other-host:4242" in row.warning
    assert row.run_id == "" and execute.calls == []
    # Its heartbeat stops for longer than the lock's TTL: reclaimed, metered here.
    wall.t += LOCK_TTL_S + 1
    row = only(tick(periods, due + timedelta(minutes=2), options(execute)))
    assert f"run {stale} left running by other-host" in row.warning
    assert row.run_id and [r.status for r in periods.runs(MAR)] == ["failed", "completed"]


def test_only_one_process_meters_a_month(periods, ledger, wall):
    tick(periods, MAR.end, Options(GRACE, False, lambda m, n: meter_month(ledger, m, n)))
    due = MAR.end + timedelta(hours=GRACE)
    # Another live process (this pid is alive) holds the month.
    other = Periods(ledger, host=periods.host, pid=periods.pid)
    other.start_run(MAR, due)
    from ledger.tick import MonthBusy

    with pytest.raises(MonthBusy):
        meter_month(ledger, MAR, due, periods=periods)
    assert [r.status for r in periods.runs(MAR)] == ["running"]


# -- the cap and stopping ------------------------------------------------------------------------
def test_the_walk_is_capped_and_counts_the_months_left_out(periods, execute, ledger):
    now = utc(2026, 3, 10)
    oldest = Month(2022, 10)  # 41 months before February 2026, February included
    periods.to_grace(oldest, now)
    report = tick(periods, now, options(execute))
    months = [m.month for m in report]
    assert len(months) == MAX_TICK_MONTHS
    assert months[-1] == "2026-02"
    assert months[0] == str(Month.from_index(Month(2026, 2).index() - MAX_TICK_MONTHS + 1))
    total = Month(2026, 2).index() - oldest.index() + 1
    assert report[0].skipped_before == total - MAX_TICK_MONTHS == 5
    assert all(m.skipped_before == 0 for m in report.months[1:])


def test_the_walk_starts_at_the_earliest_stored_period(periods, execute):
    now = utc(2026, 3, 10)
    periods.to_grace(Month(2025, 11), now)
    assert [m.month for m in tick(periods, now, options(execute))] == ["2025-11", "2025-12", "2026-01", "2026-02"]


def test_a_stopped_tick_stops_between_months(periods, execute, ledger):
    fact(ledger, utc(2025, 11, 2))
    now = utc(2026, 3, 10)
    periods.to_grace(Month(2025, 11), now - timedelta(days=100))
    stop = threading.Event()
    execute.on_call = lambda month: stop.set()  # stop arrives while 2025-11 is being metered
    report = tick(periods, now, options(execute), stop)
    assert [m.month for m in report] == ["2025-11"]
    assert report[0].run_id  # the month in progress finished its step
    assert report.stopped
    assert periods.status(Month(2025, 12)) is None  # never reached

    stop.set()
    assert len(tick(periods, now, options(execute), stop)) == 0


# -- the decision alone -----------------------------------------------------------------------
def test_decide_is_pure_and_follows_the_stored_status():
    now = MAR.end + timedelta(hours=30)
    grace = timedelta(hours=GRACE)
    assert decide(MonthState(MAR, None), now, grace, False).action is Action.TO_GRACE
    assert decide(MonthState(MAR, "open"), now, grace, False).action is Action.TO_GRACE
    assert decide(MonthState(MAR, "grace"), now, grace, True).then_finalize
    assert decide(MonthState(MAR, "grace"), MAR.end, grace, False).action is Action.WAIT_GRACE
    assert decide(MonthState(MAR, "grace", completed_run="r"), now, grace, False).action is Action.NOTHING
    assert decide(MonthState(MAR, "grace", completed_run="r"), now, grace, True).action is Action.FINALIZE
    assert decide(MonthState(MAR, "grace", running_elsewhere="x"), now, grace, False).action is Action.BUSY
    assert decide(MonthState(MAR, "finalized", completed_run="r"), now, grace, True).action is Action.NOTHING
    held = decide(MonthState(MAR, "grace", failures=3, last_failure_at=now - timedelta(hours=1)), now, grace, False)
    assert held.action is Action.HELD_BACK and held.retry_after == now + timedelta(hours=3)  # 4 h after the third
    assert decide(MonthState(MAR, "metered", completed_run="r"), now, grace, True).action is Action.FINALIZE
    assert decide(MonthState(MAR, "metered", completed_run="r"), now, grace, False).action is Action.NOTHING
    # Metered by hand inside the grace window: not finalized before the window has passed.
    assert decide(MonthState(MAR, "metered", completed_run="r"), MAR.end, grace, True).action is Action.WAIT_GRACE
    with pytest.raises(ValueError, match="unknown status"):
        decide(MonthState(MAR, "reviewed"), now, grace, False)


# -- never before the books ---------------------------------------------------------------------
def test_a_tick_years_in_the_past_writes_no_period(periods, execute):
    report = tick(periods, utc(2020, 1, 1), options(execute))
    assert len(report) == 0
    assert periods.earliest() is None  # no 2019-12 row for every later tick to walk from


def test_no_fact_no_walk(tmp_path, wall):
    lg = Ledger.open(tmp_path / "empty.sqlite", PROVIDER, wall=wall)
    try:
        assert len(tick(Periods(lg), utc(2026, 4, 10), options(Executor(lg, Periods(lg))))) == 0
    finally:
        lg.close()


def test_a_period_stored_before_the_first_fact_is_left_as_it_is(periods, execute):
    periods.to_grace(FEB, MAR.start)  # an older build's tick, before the first fact (March)
    feb, mar = tick(periods, MAR.end + timedelta(hours=GRACE), options(execute))
    assert "before the ledger's first fact (2026-03)" in feb.warning and not feb.error
    assert periods.status(FEB) == "grace" and periods.runs(FEB) == []
    assert mar.transition == TRANSITION_TO_GRACE


def test_a_month_before_the_first_fact_is_never_metered(ledger):
    from ledger.runs import BeforeTheBooks

    with pytest.raises(BeforeTheBooks, match=r"2026-02 is before anything in the ledger .* \(its first fact is of 2026-03-01T00:00:00Z\)"):
        meter_month(ledger, FEB, MAR.end)
    assert Periods(ledger).status(FEB) is None


def test_an_earliest_period_in_the_month_under_way_walks_nothing_before_it(periods, execute, ledger):
    """The seed's walk starts at the earliest stored row: one of the month under way has not ended,
    so there is nothing to walk, and the month before it is not walked in its place."""
    fact(ledger, FEB.start)
    periods.to_grace(MAR, utc(2026, 3, 10))  # a row of March, written in March
    assert len(tick(periods, utc(2026, 3, 15), options(execute))) == 0
    assert periods.status(FEB) is None


def test_a_run_that_cannot_give_its_lock_back_is_finalized_on_the_next_tick(periods, execute, monkeypatch):
    """The seed's engine: the run and its lines stand, the tick warns, and finalizes on its next walk."""
    tick(periods, MAR.end, options(execute, auto_finalize=True))
    real_release = Periods.release

    def stuck(self, month, run_id):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk I/O error")

    monkeypatch.setattr(Periods, "release", stuck)
    report = tick(periods, MAR.end + timedelta(hours=GRACE), options(execute, auto_finalize=True))
    row = only(report)
    assert row.run_id and not row.finalized and row.error == "" and not report.failed
    assert "could not give the lock of 2026-03 back" in row.warning and "finalized on the next tick" in row.warning
    assert periods.status(MAR) == "metered" and periods.lock(MAR) is not None

    monkeypatch.setattr(Periods, "release", real_release)
    row = only(tick(periods, MAR.end + timedelta(hours=GRACE + 1), options(execute, auto_finalize=True)))
    assert row.finalized and not row.error and periods.status(MAR) == "finalized"
    assert periods.lock(MAR) is None and len(execute.calls) == 1


# -- a lease held back from its month ---------------------------------------------------------
def held_lease(ledger: Ledger) -> None:
    """Lease B of March, whose every read failed, and a withdraw page that settled it: held back from March."""
    from messages.coins import Coin
    from messages.ledger import LeaseIssue, LeaseSettled

    ledger.record(LeaseIssue(utc(2026, 3, 10), "lease-b", "unread", "3 failed read(s)", "tenant-b"))
    ledger.record(LeaseSettled(utc(2026, 3, 20), "TX-B", "lease-b", (Coin("umfx", 500),), tenant="tenant-b"))


def price_held_lease(ledger: Ledger, at: datetime) -> None:
    """B read at last: priced, active since March 5 (10 umfx/s)."""
    from messages.chain import Lease, LeaseItem
    from messages.coins import Coin
    from messages.ledger import LeaseObserved

    lease = Lease("lease-b", "tenant-b", PROVIDER, (LeaseItem("sku", 1, Coin("umfx", 10)),),
                  acknowledged_at=utc(2026, 3, 5), reservation=())
    ledger.record(LeaseObserved(at, lease))


@pytest.mark.parametrize("auto_finalize", [False, True])
def test_a_month_whose_run_held_a_lease_back_is_metered_again_once_it_is_priced(periods, execute, ledger, auto_finalize):
    """The books promise that a month held back for a lease without a price is metered at the next
    tick: the tick left it metered without the lease for good, and with auto_finalize finalized it at
    once, so what the lease accrued and settled that month was in no statement at all."""
    from ledger.statements import tenant_totals

    held_lease(ledger)
    tick(periods, MAR.end, options(execute, auto_finalize))
    row = only(tick(periods, MAR.end + timedelta(hours=GRACE), options(execute, auto_finalize)))
    first = row.run_id
    assert first and row.held == 1 and not row.finalized  # not finalized over a run that left B out
    assert "tenant-b" not in tenant_totals(ledger, MAR)
    # An hour later B is still unread: nothing new, and still not finalized.
    row = only(tick(periods, MAR.end + timedelta(hours=GRACE + 1), options(execute, auto_finalize)))
    assert (row.run_id, row.finalized, row.held) == ("", False, 1 if auto_finalize else 0)
    assert len(execute.calls) == 1 and periods.status(MAR) == "metered"

    price_held_lease(ledger, MAR.end + timedelta(days=2))
    row = only(tick(periods, MAR.end + timedelta(days=2, hours=1), options(execute, auto_finalize)))
    assert row.run_id and row.run_id != first and row.held == 0 and not row.error
    assert row.finalized is auto_finalize
    accrued = (MAR.end - utc(2026, 3, 5)).days * 86_400 * 10
    assert tenant_totals(ledger, MAR)["tenant-b"] == {"umfx": (accrued, 500)}
    # Metered with it, the month is left alone again.
    row = only(tick(periods, MAR.end + timedelta(days=2, hours=2), options(execute, auto_finalize)))
    assert row.run_id == "" and len(execute.calls) == 2


def test_decide_waits_for_held_leases_before_finalizing():
    now = MAR.end + timedelta(hours=GRACE + 5)
    grace = timedelta(hours=GRACE)
    held = MonthState(MAR, "metered", completed_run="r1", held=2)
    assert decide(held, now, grace, True) == decide(held, now, grace, True)
    assert decide(held, now, grace, True).action is Action.AWAIT_LEASES and decide(held, now, grace, True).held == 2
    assert decide(held, now, grace, False).action is Action.NOTHING
    priced = MonthState(MAR, "metered", completed_run="r1", held=2, held_priced=1)
    assert decide(priced, now, grace, True) == Decision(Action.METER, then_finalize=True)
    # A re-run that failed waits by the backoff like any other.
    failing = MonthState(MAR, "metered", completed_run="r1", held=2, held_priced=1, failures=2, last_failure_at=now)
    assert decide(failing, now, grace, False).action is Action.HELD_BACK
