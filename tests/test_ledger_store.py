"""The ledger's facts: deduplication, which time wins, reconciles, tenant state, migrations."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from ledger.periods import from_us, to_us
from ledger.schema import MIGRATIONS, SCHEMA_VERSION, Migration, NewerSchemaError, NotALedgerError, current_version
from ledger.store import Ledger, LedgerError, Precision
from messages.chain import Lease, LeaseItem
from messages.coins import Coin
from messages.credit import TenantSnapshot
from messages.lease_events import LeaseEvent
from messages.ledger import (
    ClosureRecorded,
    LeaseEventRecorded,
    LeaseObserved,
    LeasesObserved,
    LeasesReconciled,
    LeaseSettled,
    SettlementsRecorded,
    TenantForgotten,
    TenantStateChanged,
    WithdrawalRecorded,
    WithdrawLookupClosed,
    WithdrawLookupOpened,
)
from runtime.clock import utc

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"
T = utc(2026, 3, 5, 12)
TENANT = "manifest1tenant"


def lease(uuid: str, *, ack=T, state: str = "ACTIVE", closed_at=None, reason: str = "", provider: str = PROVIDER) -> Lease:
    return Lease(
        uuid,
        TENANT,
        provider,
        (LeaseItem("sku-1", 2, Coin("umfx", 3)),),
        state=state,
        acknowledged_at=ack,
        closed_at=closed_at,
        closure_reason=reason,
    )


def event(kind: str, uuid: str, reason: str = "", provider: str = PROVIDER) -> LeaseEvent:
    return LeaseEvent(kind, uuid, TENANT, provider, reason=reason, height=7)


@pytest.fixture
def ledger(tmp_path):
    lg = Ledger.open(tmp_path / "state" / "ledger.sqlite", PROVIDER)
    yield lg
    lg.close()


def times(ledger: Ledger, uuid: str):
    row = ledger.lease(uuid)
    assert row is not None, uuid
    af = from_us(row["active_from_us"]) if row["active_from_us"] is not None else None
    ca = from_us(row["closed_at_us"]) if row["closed_at_us"] is not None else None
    return af, ca, row["closure_reason"]


# -- opening ----------------------------------------------------------------------------------
def test_open_creates_the_file_in_wal_mode_at_the_current_version(tmp_path, ledger):
    assert (tmp_path / "state" / "ledger.sqlite").exists()
    assert ledger.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert current_version(ledger.conn) == SCHEMA_VERSION


def test_a_database_from_a_newer_version_is_refused_naming_file_and_versions(tmp_path):
    path = tmp_path / "ledger.sqlite"
    Ledger.open(path, PROVIDER).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, 'from the future', '2030-01-01')", (SCHEMA_VERSION + 3,))
    conn.commit()
    conn.close()
    with pytest.raises(NewerSchemaError) as err:
        Ledger.open(path, PROVIDER)
    text = str(err.value)
    assert str(path) in text
    assert f"version {SCHEMA_VERSION + 3}" in text and f"version {SCHEMA_VERSION}," in text


def test_migrations_upgrade_an_older_database_keeping_its_data(tmp_path):
    path = tmp_path / "ledger.sqlite"
    lg = Ledger.open(path, PROVIDER)
    lg.record(LeasesObserved(T, (lease("l1"),)))
    lg.close()
    v2 = Migration(
        SCHEMA_VERSION + 1,
        "leases remember a note",
        ("ALTER TABLE leases ADD COLUMN note TEXT NOT NULL DEFAULT 'none'",),
    )
    lg = Ledger.open(path, PROVIDER, migrations=MIGRATIONS + (v2,))
    assert current_version(lg.conn) == SCHEMA_VERSION + 1
    row = lg.lease("l1")
    assert row["note"] == "none" and row["items"] == '[["sku-1",2,"umfx","3"]]'
    lg.close()
    # The build without that migration now refuses the file.
    with pytest.raises(NewerSchemaError):
        Ledger.open(path, PROVIDER)


def test_a_version_9_ledger_keeps_its_lease_issues_and_may_then_hold_a_close_being_sought(tmp_path):
    from messages.ledger import LeaseIssue

    path = tmp_path / "ledger.sqlite"
    lg = Ledger.open(path, PROVIDER, migrations=MIGRATIONS[:9])  # as the build before close_sought wrote it
    lg.record(LeaseIssue(T, "l1", "unread", "1 failed read(s)", TENANT))
    with pytest.raises(sqlite3.IntegrityError):
        lg.record(LeaseIssue(T, "l2", "close_sought", "being looked for", TENANT))
    lg.close()
    lg = Ledger.open(path, PROVIDER)
    assert current_version(lg.conn) == SCHEMA_VERSION >= 10
    lg.record(LeaseIssue(T, "l2", "close_sought", "being looked for", TENANT))
    assert [(i.lease_uuid, i.kind, i.since) for i in lg.lease_issues()] == [("l1", "unread", T), ("l2", "close_sought", T)]
    lg.close()


def test_a_version_10_ledgers_refused_settlement_stays_under_its_month_and_a_later_months_gets_its_own(tmp_path):
    from messages.ledger import LeaseIssue

    path = tmp_path / "ledger.sqlite"
    lg = Ledger.open(path, PROVIDER, migrations=MIGRATIONS[:10])  # as the build keyed by lease and kind wrote it
    with lg.transaction() as c:  # the row that build wrote
        c.execute("INSERT INTO lease_issues VALUES ('l1', 'settlement_refused', ?, '2026-03', "
                  "'tx MARCH: too much: not booked', 0, 0)", (TENANT,))
    lg.close()
    lg = Ledger.open(path, PROVIDER)
    assert current_version(lg.conn) == SCHEMA_VERSION >= 11
    lg.record(LeaseIssue(T + timedelta(days=40), "l1", "settlement_refused", "tx APRIL: too much: not booked", TENANT))
    assert [(i.period, i.detail) for i in lg.lease_issues()] == [
        ("2026-03", "tx MARCH: too much: not booked"), ("2026-04", "tx APRIL: too much: not booked")]
    lg.close()


def test_a_version_1_ledger_gains_the_withdraw_lookups_and_keeps_them_until_closed(tmp_path):
    path = tmp_path / "ledger.sqlite"
    lg = Ledger.open(path, PROVIDER, migrations=MIGRATIONS[:1])  # as the build before lookups wrote it
    with lg.transaction() as c:  # a lease row in version 1's columns
        c.execute(
            "INSERT INTO leases (uuid, tenant, provider_uuid, first_seen_us, updated_us) VALUES (?, ?, ?, 0, 0)",
            ("l1", "t", PROVIDER),
        )
    lg.close()
    lg = Ledger.open(path, PROVIDER)
    assert current_version(lg.conn) == SCHEMA_VERSION >= 2 and lg.lease("l1") is not None
    opened = WithdrawLookupOpened("AB12", 4, 2, T)
    lg.record(opened)
    lg.record(opened)  # recorded twice (a replayed capture): one lookup
    assert lg.withdraw_lookups() == [opened]
    lg.record(WithdrawLookupClosed("AB12"))
    assert lg.withdraw_lookups() == []


def test_a_version_6_ledger_gains_the_close_lookups_and_keeps_each_until_closed(tmp_path):
    from messages.ledger import CloseLookupClosed, CloseLookupOpened

    path = tmp_path / "ledger.sqlite"
    Ledger.open(path, PROVIDER, migrations=MIGRATIONS[:6]).close()  # as the build before write-ahead closes
    lg = Ledger.open(path, PROVIDER)
    opened = CloseLookupOpened("CD34", "credit depleted", (("t1", ("l1", "l2")), ("t2", ("l3",))), T)
    lg.record_all([opened, opened])  # twice (a replayed capture): one entry
    lg.close()
    lg = Ledger.open(path, PROVIDER)  # a restart reads it back whole
    assert lg.close_lookups() == [opened]
    lg.record(CloseLookupClosed("CD34"))
    assert lg.close_lookups() == []
    lg.close()


def test_a_failing_migration_leaves_the_database_at_the_previous_version(tmp_path):
    path = tmp_path / "ledger.sqlite"
    Ledger.open(path, PROVIDER).close()
    broken = Migration(
        SCHEMA_VERSION + 1,
        "half a migration",
        ("ALTER TABLE leases ADD COLUMN note TEXT", "ALTER TABLE no_such_table ADD COLUMN x TEXT"),
    )
    with pytest.raises(sqlite3.OperationalError):
        Ledger.open(path, PROVIDER, migrations=MIGRATIONS + (broken,))
    lg = Ledger.open(path, PROVIDER)
    assert current_version(lg.conn) == SCHEMA_VERSION
    assert "note" not in {c[1] for c in lg.conn.execute("PRAGMA table_info(leases)")}
    lg.close()


def test_files_that_are_not_ledgers_are_refused(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(NotALedgerError, match="junk.sqlite"):
        Ledger.open(junk, PROVIDER)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(NotALedgerError, match="other.sqlite.*not a leasewarden ledger"):
        Ledger.open(other, PROVIDER)


# -- deduplication -------------------------------------------------------------------------------
def test_the_same_event_twice_changes_nothing(ledger):
    ledger.record(LeaseEventRecorded(T, event("acknowledged", "l1")))
    ledger.record(LeaseEventRecorded(T + timedelta(hours=1), event("closed", "l1", "bye")))
    before = (ledger.lease("l1"), ledger.count("lease_events"))
    # The same events again, received later (a resubscribe, a replayed capture).
    ledger.record(LeaseEventRecorded(T + timedelta(hours=5), event("acknowledged", "l1")))
    ledger.record(LeaseEventRecorded(T + timedelta(hours=6), event("closed", "l1", "bye")))
    assert (ledger.lease("l1"), ledger.count("lease_events")) == before
    assert before[1] == 2


def test_settlements_withdrawals_and_closures_are_deduplicated(ledger):
    settled = LeaseSettled(T, "TX1", "l1", (Coin("umfx", 5), Coin("upwr", 2)))
    withdrawal = WithdrawalRecorded(T, 3, 1, "TX1", (Coin("umfx", 5),), 1)
    closure = ClosureRecorded(T, TENANT, ("l1", "l2"), "credit depleted", ("TX2",))
    for _ in range(3):
        ledger.record_all([settled, withdrawal, closure])
    assert ledger.count("settlements") == 2  # one row per denom
    assert ledger.count("withdrawals") == 1
    assert ledger.count("closures") == 1


def test_a_settlement_without_a_tx_hash_is_refused(ledger):
    with pytest.raises(LedgerError, match="no tx hash"):
        ledger.record(LeaseSettled(T, "", "l1", (Coin("umfx", 5),)))


# -- which time wins ---------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["event first", "chain first"])
def test_the_chains_own_times_win_over_event_arrival_times_in_any_order(ledger, order):
    ack_chain = T
    ack_event_seen = T + timedelta(seconds=3, microseconds=120)
    close_chain = T + timedelta(days=2, microseconds=500_000)
    facts = [
        LeaseEventRecorded(ack_event_seen, event("acknowledged", "l1")),
        LeaseEventRecorded(close_chain + timedelta(seconds=2), event("closed", "l1", "tenant left")),
    ]
    chain = [LeaseObserved(close_chain + timedelta(minutes=1),
                           lease("l1", ack=ack_chain, state="CLOSED", closed_at=close_chain, reason="tenant left"))]
    ledger.record_all(facts + chain if order == "event first" else chain + facts)
    assert times(ledger, "l1") == (ack_chain, close_chain, "tenant left")
    row = ledger.lease("l1")
    assert (row["active_from_rank"], row["closed_at_rank"]) == (Precision.CHAIN, Precision.CHAIN)


def test_a_lease_event_is_kept_as_a_hint_and_books_nothing(ledger):
    ledger.record(LeasesObserved(T - timedelta(days=1), (lease("l1", ack=T - timedelta(days=1)),)))
    before = ledger.lease("l1")
    ledger.record(LeaseEventRecorded(T + timedelta(seconds=1), event("closed", "l1", "credit depleted")))
    ledger.record(LeaseEventRecorded(T, event("acknowledged", "l9")))  # one the books never read
    assert ledger.lease("l1") == before and ledger.lease("l9") is None
    assert ledger.count("lease_events") == 2
    # Our own closure, from its tx's answer, is a fact; the chain's own close beats it.
    ledger.record(ClosureRecorded(T + timedelta(seconds=9), TENANT, ("l1",), "credit depleted", ("TX",)))
    assert times(ledger, "l1")[1] == T + timedelta(seconds=9)
    exact = T + timedelta(seconds=5, microseconds=3)
    ledger.record(LeaseObserved(T + timedelta(minutes=1), lease("l1", state="CLOSED", closed_at=exact, reason="credit depleted")))
    assert times(ledger, "l1")[1] == exact


def test_leases_observed_says_nothing_about_other_leases(ledger):
    ledger.record(LeasesObserved(T, (lease("l1"), lease("l2"))))
    ledger.record(LeasesObserved(T + timedelta(hours=1), (lease("l3"),)))  # only the new one
    assert all(times(ledger, u)[1] is None for u in ("l1", "l2", "l3"))


def test_a_reconcile_never_closes_a_lease_missing_from_it_the_leases_own_read_does(ledger):
    ledger.record(LeasesReconciled(T, (lease("l1"), lease("l2"))))
    read_at = T + timedelta(hours=1)
    ledger.record(LeasesReconciled(read_at, (lease("l1"),)))
    assert times(ledger, "l2")[1] is None and times(ledger, "l1")[1] is None  # a listing alone ends nothing
    # The chain's own closed_at, read for the vanished lease, closes it.
    exact = T + timedelta(minutes=17, microseconds=5)
    ledger.record(LeaseObserved(read_at, lease("l2", state="CLOSED", closed_at=exact, reason="tenant left")))
    assert times(ledger, "l2") == (T, exact, "tenant left")


def _older_builds_event_close(ledger, uuid: str, at) -> None:  # type: ignore[no-untyped-def]
    """A lease closed at an event's time, as builds before events were hints booked it (rank EVENT)."""
    with ledger.transaction() as c:
        c.execute("UPDATE leases SET closed_at_us = ?, closed_at_rank = ?, closure_reason = 'bye' WHERE uuid = ?",
                  (to_us(at), int(Precision.EVENT), uuid))


def test_a_stale_listing_never_reopens_our_own_close_but_a_read_reopens_what_the_chain_did_not_close(ledger):
    ledger.record(LeasesReconciled(T, (lease("l1"), lease("l2"))))
    ledger.record(LeasesReconciled(T + timedelta(hours=1), ()))  # a read that missed them
    assert times(ledger, "l1")[1] is None
    # Our close, from its tx's answer: a listing taken before it never reopens it.
    ledger.record(ClosureRecorded(T + timedelta(hours=3), TENANT, ("l1",), "credit depleted", ("TX",)))
    ledger.record(LeasesReconciled(T + timedelta(hours=2), (lease("l1"),)))
    assert times(ledger, "l1")[1] == T + timedelta(hours=3)
    # A close an older build took from a (maybe forged) event: the chain still says ACTIVE, so it is not closed.
    _older_builds_event_close(ledger, "l2", T + timedelta(hours=3))
    ledger.record(LeaseObserved(T + timedelta(hours=4), lease("l2")))
    assert times(ledger, "l2")[1] is None


def test_the_leases_to_read_are_the_unpriced_and_those_closed_at_a_time_the_chain_did_not_give(ledger):
    ledger.record(LeasesReconciled(T, (lease("l1"), lease("l2"))))
    with ledger.transaction() as c:  # an older build's rows from events: no price yet
        for uuid, ack in (("short", T + timedelta(minutes=5)), ("pending", None)):
            c.execute(
                "INSERT INTO leases (uuid, tenant, provider_uuid, active_from_us, active_from_rank, first_seen_us, updated_us) "
                "VALUES (?, ?, ?, ?, ?, 0, 0)",
                (uuid, TENANT, PROVIDER, to_us(ack) if ack else None, int(Precision.EVENT) if ack else 0),
            )
    ledger.record(LeasesReconciled(T + timedelta(hours=1), (lease("l1"),)))  # l2 is read by the scheduler
    ledger.record(ClosureRecorded(T + timedelta(hours=2), TENANT, ("l2",), "bye", ("TX",)))  # closed, at our tx's time
    assert ledger.leases_to_read() == ["pending", "short", "l2"]  # unpriced first
    expired = Lease("pending", TENANT, PROVIDER, (LeaseItem("sku-1", 1, Coin("umfx", 3)),), state="EXPIRED")
    ledger.record(LeaseObserved(T + timedelta(hours=1), expired))  # the chain gives it no closed_at
    ledger.record(LeaseObserved(T + timedelta(hours=1), lease("short", state="CLOSED", closed_at=T + timedelta(minutes=7))))
    ledger.record(LeaseObserved(T + timedelta(hours=1), lease("l2", state="CLOSED", closed_at=T + timedelta(minutes=30))))
    assert ledger.leases_to_read() == []  # read once: not listed at every start for ever


def test_a_lease_read_as_expired_or_rejected_ends_at_the_chains_own_time_and_is_never_active(ledger):
    """No tx ends it and its event is a hint: its read ends it, at the chain's expired_at or rejected_at."""
    item = (LeaseItem("sku-1", 1, Coin("umfx", 3)),)
    ledger.record(LeaseObserved(T, Lease("p1", TENANT, PROVIDER, item, state="PENDING")))
    expiry = T + timedelta(minutes=10, microseconds=1)
    ledger.record(LeaseObserved(T + timedelta(hours=1), Lease("p1", TENANT, PROVIDER, item, state="EXPIRED", ended_at=expiry)))
    ledger.record(LeaseObserved(T + timedelta(hours=1), Lease("p2", TENANT, PROVIDER, item, state="REJECTED", ended_at=T)))
    for uuid, at, reason in (("p1", expiry, "expired"), ("p2", T, "rejected")):
        row = ledger.lease(uuid)
        assert (row["closed_at_us"], row["closed_at_rank"], row["closure_reason"]) == (to_us(at), int(Precision.CHAIN), reason)
        assert row["active_from_us"] is None
    assert ledger.leases_to_read() == []


def test_other_providers_leases_are_kept_as_events_only(ledger):
    ledger.record(LeaseEventRecorded(T, event("auto_closed", "o1", "credit_exhausted", provider=OTHER)))
    ledger.record(LeasesReconciled(T, (lease("o2", provider=OTHER),)))
    assert ledger.count("lease_events") == 1
    assert ledger.lease("o1") is None and ledger.lease("o2") is None


def test_an_unknown_fact_is_refused_and_the_batch_rolls_back(ledger):
    with pytest.raises(LedgerError, match="does not record str"):
        ledger.record_all([LeaseEventRecorded(T, event("acknowledged", "l1")), "not a fact"])
    assert ledger.count("lease_events") == 0


# -- tenant state ---------------------------------------------------------------------------------------
def test_tenant_snapshots_survive_a_reopen_and_forgetting_drops_them(tmp_path):
    path = tmp_path / "ledger.sqlite"
    a = TenantSnapshot(
        "manifest1a",
        lease_uuids=("l1", "l2"),
        last_balances=(Coin("umfx", 10**40),),
        last_sample_at=T,
        consecutive_errs=2,
        zero_since=T - timedelta(minutes=3),
        closing=("l2",),
    )
    b = TenantSnapshot("manifest1b", lease_uuids=("l9",), recheck_at=T + timedelta(seconds=30))
    lg = Ledger.open(path, PROVIDER)
    lg.record_all([TenantStateChanged(a), TenantStateChanged(b), TenantStateChanged(TenantSnapshot("manifest1c"))])
    newer_a = TenantSnapshot("manifest1a", lease_uuids=("l1", "l2"), consecutive_errs=3, zero_since=a.zero_since)
    lg.record_all([TenantStateChanged(newer_a), TenantForgotten("manifest1c")])
    lg.close()
    lg = Ledger.open(path, PROVIDER)
    assert lg.tenant_snapshots() == [newer_a, b]
    lg.close()


def test_what_the_books_lack_of_a_lease_is_kept_until_it_is_resolved(ledger):
    from messages.ledger import LeaseIssue, LeaseIssueResolved

    ledger.record(LeaseIssue(T, "l1", "unread", "1 failed read(s)", TENANT))
    ledger.record(LeaseIssue(T + timedelta(minutes=5), "l1", "unread", "2 failed read(s)"))  # a repeat: one row
    ledger.record(LeaseIssue(T + timedelta(days=40), "l2", "close_not_found", "no tx"))
    [unread] = ledger.lease_issues("2026-03")
    assert (unread.lease_uuid, unread.tenant, unread.detail, unread.since, unread.updated) == (
        "l1", TENANT, "2 failed read(s)", T, T + timedelta(minutes=5))
    assert [i.period for i in ledger.lease_issues()] == ["2026-03", "2026-04"]
    assert ledger.leases_to_read() == ["l1"]  # read again at the next start
    ledger.record(LeaseObserved(T + timedelta(hours=1), lease("l1")))  # read at last
    ledger.record(LeaseIssueResolved("l2", "close_not_found"))
    assert ledger.lease_issues() == [] and ledger.leases_to_read() == []
    # A search for a closing tx a stop cut short: the lease is read again at the next start, searched anew.
    ledger.record(LeaseIssue(T, "l3", "close_sought", "being looked for", TENANT))
    ledger.record(LeaseObserved(T, lease("l3", state="CLOSED", closed_at=T)))
    assert ledger.leases_to_read() == ["l3"]
    ledger.record(LeaseIssueResolved("l3", "close_sought"))
    assert ledger.lease_issues() == [] and ledger.leases_to_read() == []


def test_a_settlement_more_than_the_lease_could_have_accrued_or_negative_is_refused_and_said(ledger):
    ledger.record(LeasesReconciled(T, (lease("l1"),)))  # 2 x 3umfx a second, from T
    hour = T + timedelta(hours=1)
    for tx, amount in (("TXNEG", -1_000_000), ("TXBIG", 10**26), ("TXOVER", 6 * 3601 + 1)):
        ledger.record(SettlementsRecorded((LeaseSettled(hour, tx, "l1", (Coin("umfx", amount),), kind="close"),)))
    assert ledger.count("settlements") == 0
    [issue] = ledger.lease_issues()
    assert (issue.lease_uuid, issue.kind, issue.tenant) == ("l1", "settlement_refused", TENANT)
    # Every refusal of the month is kept in its row, once each, however often it is recorded.
    assert [tx in issue.detail for tx in ("TXNEG", "TXBIG", "TXOVER")] == [True] * 3
    ledger.record(LeaseSettled(hour, "TXBIG", "l1", (Coin("umfx", 10**26),), kind="close"))
    assert ledger.lease_issues()[0].detail == issue.detail
    # A refusal in a later month is that month's, and leaves March's as it was.
    ledger.record(LeaseSettled(T + timedelta(days=40), "TXAPRIL", "l1", (Coin("umfx", -1),)))
    assert [(i.period, "TXAPRIL" in i.detail) for i in ledger.lease_issues()] == [("2026-03", False), ("2026-04", True)]
    ledger.conn.execute("DELETE FROM lease_issues WHERE period = '2026-04'")
    # What it did accrue passes (a second more than the whole seconds, for the fraction the chain carries).
    ledger.record(LeaseSettled(hour, "TXOK", "l1", (Coin("umfx", 6 * 3601),)))
    later = hour + timedelta(seconds=10)
    ledger.record(LeaseSettled(later, "TXNEXT", "l1", (Coin("umfx", 6 * 11),)))  # bounded from the previous one
    ledger.record(LeaseSettled(later, "TXNEXT2", "l1", (Coin("upwr", 1),)))  # a denom it is not priced in
    assert sorted(r[0] for r in ledger.conn.execute("SELECT tx_hash FROM settlements")) == ["TXNEXT", "TXOK"]
    # A lease the books cannot price yet: only the sign is known.
    ledger.record(LeaseSettled(hour, "TXU", "unread", (Coin("umfx", 10**20),)))
    assert ledger.conn.execute("SELECT amount FROM settlements WHERE tx_hash = 'TXU'").fetchone() == ("100000000000000000000",)


def test_the_bound_of_a_settlement() -> None:
    from ledger.settlement_bounds import refusal

    s = 1_000_000
    assert refusal(-1, "umfx", None, None, 0).startswith("a negative amount")
    assert refusal(10**30, "umfx", None, None, 0) == ""  # nothing known of the lease
    assert refusal(31, "umfx", {"umfx": 3}, 0, 10 * s) == ""  # 10 whole seconds, and one more
    assert refusal(34, "umfx", {"umfx": 3}, 0, 10 * s + 500_000) != ""
    assert refusal(1, "upwr", {"umfx": 3}, 0, 10 * s) != "" and refusal(0, "upwr", {"umfx": 3}, 0, 10 * s) == ""


class _InterruptedAfterCommit:
    """A connection whose COMMIT goes through and then the operator's Ctrl-C lands (KeyboardInterrupt)."""

    def __init__(self, conn, commits_before: int) -> None:
        self._conn, self._left = conn, commits_before

    def execute(self, sql, *args):
        result = self._conn.execute(sql, *args)
        if sql == "COMMIT":
            self._left -= 1
            if self._left < 0:
                raise KeyboardInterrupt
        return result

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("commits_before", [0, 1])
def test_a_ctrl_c_just_after_a_migrations_commit_is_the_interrupt_not_a_rollback_error(tmp_path, commits_before) -> None:
    import sqlite3

    from ledger.schema import migrate

    path = tmp_path / "ledger.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(KeyboardInterrupt):  # before: "cannot rollback - no transaction is active"
        migrate(_InterruptedAfterCommit(conn, commits_before), str(path), lambda: "now")
    assert not conn.in_transaction
    assert migrate(conn, str(path), lambda: "now") == SCHEMA_VERSION  # what was committed stands; the rest follows
