"""``LedgerActor``: the one writer, batching facts, running the tick on ``BillingTickDue``."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

from actors.ledger_writer import BATCH_MAX, LedgerActor, start_ledger_writer
from ledger.periods import Month
from ledger.runs import Periods
from ledger.settings import LedgerSettings
from ledger.store import Ledger
from messages.chain import Lease, LeaseItem
from messages.coins import Coin
from messages.credit import TenantSnapshot
from messages.ledger import BillingTickDue, LeasesReconciled, LeaseSettled, TenantStateChanged
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher, ThreadedDispatcher
from messages.health import BooksTicked, LedgerWriteFailed, LedgerWritesResumed, MonthStage
from runtime.router import HEALTH, LEDGER, Router
from tests.support import probe

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
MAR = Month(2026, 3)


class CountingLedger(Ledger):
    """Counts write transactions (each is a commit: an fsync)."""

    commits = 0

    def record_all(self, facts):  # type: ignore[no-untyped-def]
        CountingLedger.commits += 1
        return super().record_all(facts)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(utc(2026, 3, 31, 22))


def open_ledger(path) -> Ledger:  # type: ignore[no-untyped-def]
    lg = Ledger.open(path, PROVIDER)
    lg.__class__ = CountingLedger
    CountingLedger.commits = 0
    return lg


def test_ten_thousand_tenant_states_are_written_in_a_few_transactions(tmp_path, clock):
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    ledger = open_ledger(tmp_path / "l.sqlite")
    writer = start_ledger_writer(router, clock, ledger, LedgerSettings(), dispatcher=dispatcher)
    for i in range(10_000):
        router.tell(LEDGER, TenantStateChanged(TenantSnapshot(f"manifest1t{i:05d}", consecutive_errs=i % 4)))
    dispatcher.run_until_idle()
    assert ledger.count("tenant_state") == 10_000
    assert CountingLedger.commits <= 10_000 // BATCH_MAX + 1
    assert writer.actor.written == 10_000
    writer.close()
    dispatcher.run_until_idle()
    assert router.get(LEDGER) is None


def test_a_fact_arriving_alone_is_written_at_once(tmp_path, clock):
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    ledger = open_ledger(tmp_path / "l.sqlite")
    start_ledger_writer(router, clock, ledger, LedgerSettings(), dispatcher=dispatcher)
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1alone")))
    dispatcher.run_until_idle()
    assert [s.tenant for s in ledger.tenant_snapshots()] == ["manifest1alone"]


def test_a_bad_fact_does_not_lose_the_rest_of_its_batch(tmp_path, clock, caplog):
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    ledger = open_ledger(tmp_path / "l.sqlite")
    start_ledger_writer(router, clock, ledger, LedgerSettings(), dispatcher=dispatcher)
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1a")))
    router.tell(LEDGER, LeaseSettled(clock.now(), "", "lease-1", (Coin("umfx", 1),)))  # no tx hash
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1b")))
    with caplog.at_level(logging.ERROR, logger="actors.ledger_writer"):
        dispatcher.run_until_idle()
    assert [s.tenant for s in ledger.tenant_snapshots()] == ["manifest1a", "manifest1b"]
    assert any("could not record" in r.message and "lease-1" in r.message for r in caplog.records)


def test_a_database_that_refuses_a_write_for_a_while_loses_no_fact(tmp_path, clock, caplog):
    """Locked past the busy timeout, disk full: the facts are held and written first next time."""
    import sqlite3

    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    health = probe(router, dispatcher, HEALTH)
    ledger = open_ledger(tmp_path / "l.sqlite")
    writer = start_ledger_writer(router, clock, ledger, LedgerSettings(), dispatcher=dispatcher)
    real = ledger.record_all
    refusals = [sqlite3.OperationalError("database is locked")] * 2

    def record_all(facts):  # type: ignore[no-untyped-def]
        if refusals:
            raise refusals.pop()
        return real(facts)

    ledger.record_all = record_all  # type: ignore[method-assign]
    router.tell(LEDGER, LeaseSettled(clock.now(), "TX1", "lease-1", (Coin("umfx", 123456),)))
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1a")))
    with caplog.at_level(logging.ERROR, logger="actors.ledger_writer"):
        dispatcher.run_until_idle()
    assert writer.actor.held == 2 and ledger.count("settlements") == 0
    assert any("2 fact(s) held for the next write" in r.message for r in caplog.records)
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1b")))  # the next write: still locked
    dispatcher.run_until_idle()
    assert writer.actor.held == 3
    router.tell(LEDGER, TenantStateChanged(TenantSnapshot("manifest1c")))  # unlocked: all four, in order
    dispatcher.run_until_idle()
    assert writer.actor.held == 0 and ledger.count("settlements") == 1
    assert [s.tenant for s in ledger.tenant_snapshots()] == ["manifest1a", "manifest1b", "manifest1c"]
    # health heard each refusal with what was held, then the write that went through
    assert health.received == [
        LedgerWriteFailed("database is locked", 2), LedgerWriteFailed("database is locked", 3), LedgerWritesResumed(3)
    ]


def test_billing_tick_due_runs_the_tick_at_its_time(tmp_path, clock, caplog):
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    health = probe(router, dispatcher, HEALTH)
    ledger = open_ledger(tmp_path / "l.sqlite")
    writer = start_ledger_writer(router, clock, ledger, LedgerSettings(grace_hours=2), dispatcher=dispatcher)
    lease = Lease("l1", "manifest1t", PROVIDER, (LeaseItem("s", 1, Coin("umfx", 5)),), acknowledged_at=utc(2026, 3, 30))
    router.tell(LEDGER, LeasesReconciled(clock.now(), (lease,)))
    with caplog.at_level(logging.INFO, logger="leasewarden.decisions"):
        router.tell(LEDGER, BillingTickDue(MAR.end))
        dispatcher.run_until_idle()
        assert writer.actor.last_report[0].transition == "open -> grace"
        router.tell(LEDGER, BillingTickDue(MAR.end + timedelta(hours=2)))
        dispatcher.run_until_idle()
    row = writer.actor.last_report[0]
    assert row.month == "2026-03" and row.run_id
    assert [r.status for r in Periods(ledger).runs(MAR)] == ["completed"]
    texts = [r.getMessage() for r in caplog.records]
    assert "billing month 2026-03: open -> grace" in texts
    assert f"billing month 2026-03: metered: run {row.run_id}" in texts
    # health heard each tick's month stages: into grace, then metered (awaiting its finalize)
    assert health.received == [
        BooksTicked(MAR.end, (MonthStage("2026-03", "grace"),)),
        BooksTicked(MAR.end + timedelta(hours=2), (MonthStage("2026-03", "metered"),)),
    ]


def test_on_its_own_thread_a_stop_writes_what_it_holds(tmp_path, clock):
    router = Router()
    path = tmp_path / "l.sqlite"
    ledger = Ledger.open(path, PROVIDER)
    writer = start_ledger_writer(router, clock, ledger, LedgerSettings())
    assert isinstance(writer.dispatcher, ThreadedDispatcher) and writer.owns_dispatcher
    seen_on: list[str] = []
    actor: LedgerActor = writer.actor
    original = actor.on_receive

    def spy(message):  # type: ignore[no-untyped-def]
        seen_on.append(threading.current_thread().name)
        return original(message)

    actor.on_receive = spy  # type: ignore[method-assign]
    for i in range(3_000):
        router.tell(LEDGER, TenantStateChanged(TenantSnapshot(f"manifest1t{i:05d}")))
    writer.close(timeout=30)
    assert not writer.ref.is_alive()
    assert set(seen_on) == {"dispatcher-0"}  # its own single worker, not the caller's thread
    reopened = Ledger.open(path, PROVIDER)
    assert reopened.count("tenant_state") == 3_000
    reopened.close()
