"""Metering a month matches the chain model's own accrual to the last unit.

The chain model is driven directly on a manual clock through February and
March 2026: leases acknowledged before and during the month at sub-second
offsets, closed mid-month by the provider and by the tenant, one auto-closed
when its tenant's credit runs out during a withdrawal, another provider's
lease drawing on a shared tenant, paged withdrawals. The ledger is fed the
same facts the sidecar would record (lease events, the leases as read from
the chain, per-lease settlements from the transactions' events).

The chain accrues only when it settles, so the model's accrual *for March*
is read by settling every lease at both ends of the month (a provider-wide
withdraw at 00:00:00 on March 1 and April 1): ``accrued_total`` after the
April settlement minus after the March one. What was withdrawn in March is
``paid_total`` just before the April settlement minus just before the March
one.
"""

from __future__ import annotations

from datetime import timedelta

import random

import pytest

from chain.errors import ChainError
from chain.events import lease_events_from_tx
from chain.model import BillingModel, TxEvents
from chain.settlements import settlements_in_withdraw
from ledger.facts import settlements_from_tx
from ledger.metering import accrued_seconds, meter_month
from ledger.periods import Month, to_us
from ledger.runs import Periods
from ledger.statements import tenant_totals
from ledger.store import Ledger
from messages.chain import Lease, LeaseItem
from messages.coins import Coin
from messages.ledger import (
    LeaseObserved,
    LeasesReconciled,
    LeaseSettled,
)
from runtime.clock import ManualClock, utc
from tests.support import addr, chain_model, settle_all

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
PROVIDER_ADDRESS = addr("provider")
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"
OTHER_ADDRESS = addr("other")
FEB, MAR, APR = Month(2026, 2), Month(2026, 3), Month(2026, 4)

RICH, POOR, SHARED = addr("rich"), addr("poor"), addr("shared")


def item(price: int, quantity: int = 1, denom: str = "umfx") -> LeaseItem:
    return LeaseItem("sku-1", quantity, Coin(denom, price))


class Feed:
    """What the sidecar records, taken from the model's transactions as they happen."""

    def __init__(self, model: BillingModel, provider: str, provider_address: str = "") -> None:
        self.model = model
        self.provider = provider
        self.provider_address = provider_address
        self.facts: list[object] = []
        model.subscribe(self._on_tx)

    def withdraw(self, sender: str, **kw):  # type: ignore[no-untyped-def]
        """``model.withdraw``, booking what the tx's total says beyond its events, as the sidecar's client
        does (a v2.1.0 named withdraw's auto-close event says amount 0: ``settlements_in_withdraw``)."""
        result = self.model.withdraw(sender, **kw)
        tx = self._last
        if sender == self.provider_address:
            events = [(e.type, dict(e.attributes)) for e in tx.events]
            self.facts.extend(
                settlements_in_withdraw(tx.tx_hash, tx.time, events, result.total_amounts, provider_uuid=self.provider)
            )
        return result

    def _on_tx(self, tx: TxEvents) -> None:
        self._last = tx
        pairs = [(e.type, dict(e.attributes)) for e in tx.events]
        for ev in lease_events_from_tx(pairs, tx.height):
            if ev.provider_uuid == self.provider and ev.kind != "created":
                # An event is a hint: the sidecar reads the lease (its price, the chain's own times).
                self.facts.append(LeaseObserved(tx.time, self.model.lease(ev.lease_uuid)))
        self.facts.extend(settlements_from_tx(tx.tx_hash, tx.time, pairs, self.provider))

    def reconcile(self) -> None:
        at = self.model.clock.now()
        self.facts.append(LeasesReconciled(at, self.model.active_leases_by_provider(self.provider)))




class Month2026:
    """The model driven through February and March 2026, with the boundary readings."""

    def __init__(self) -> None:
        self.clock = ManualClock(utc(2026, 2, 20))
        self.model = m = chain_model(self.clock)
        m.register_provider(PROVIDER, PROVIDER_ADDRESS)
        m.register_provider(OTHER, OTHER_ADDRESS)
        self.feed = Feed(m, PROVIDER, PROVIDER_ADDRESS)

        def drain(model: BillingModel, sender: str, provider: str) -> None:
            settle_all(model, sender, provider, withdraw=self.feed.withdraw)

        big = 10**15
        m.fund_credit(RICH, [Coin("umfx", big), Coin("upwr", big)])
        m.fund_credit(SHARED, [Coin("umfx", big)])
        ours = self.ours = []

        def lease(tenant: str, items: list[LeaseItem], provider: str = PROVIDER) -> str:
            uuid = m.create_lease(tenant, provider, items).uuid
            if provider == PROVIDER:
                ours.append(uuid)
            return uuid

        clock = self.clock
        self.l1 = lease(RICH, [item(3, 2), item(5, 1, "upwr")])
        clock.advance_to(utc(2026, 2, 25, 12) + timedelta(microseconds=400_000))
        self.l2 = lease(SHARED, [item(7)])
        self.o1 = lease(SHARED, [item(11)], provider=OTHER)
        self.feed.reconcile()  # the sidecar starts and reads the active leases

        # -- March 1, 00:00:00: settle everything (the month's starting line) --
        clock.advance_to(MAR.start)
        self.paid_before_from = self._paid()
        drain(m, PROVIDER_ADDRESS, PROVIDER)
        self.accrued_at_from = self._accrued()

        # Withdraw every 6 hours through the month; these happen between withdrawals.
        t = utc(2026, 3, 1, 6)

        def poor_tenant_opens() -> None:
            m.fund_credit(POOR, [Coin("umfx", 1000 * 86_400 * 5 // 2)])  # ~2.5 days of its lease
            self.l3 = lease(POOR, [item(1000)])

        events = [
            (utc(2026, 3, 3, 10, 20, 30) + timedelta(microseconds=250_000), poor_tenant_opens),
            (utc(2026, 3, 10, 8) + timedelta(microseconds=700_000),
             lambda: setattr(self, "l4", lease(RICH, [item(4, 3)]))),
            (utc(2026, 3, 15, 9), lambda: drain(m, OTHER_ADDRESS, OTHER)),
            (utc(2026, 3, 20, 17, 45, 12) + timedelta(microseconds=300_000),
             lambda: m.close_leases(PROVIDER_ADDRESS, [self.l4], "operator closed")),
            (utc(2026, 3, 28, 23, 59, 59) + timedelta(microseconds=900_000),
             lambda: m.close_leases(SHARED, [self.l2], "tenant left")),
            (utc(2026, 3, 31, 23, 59, 59) + timedelta(microseconds=500_000),
             lambda: setattr(self, "l5", lease(RICH, [item(9, 1, "upwr")]))),
        ]
        while t < MAR.end:
            while events and events[0][0] <= t:
                when, action = events.pop(0)
                clock.advance_to(max(when, clock.now()))
                action()
            if clock.now() < t:
                clock.advance_to(t)
            drain(m, PROVIDER_ADDRESS, PROVIDER)
            t += timedelta(hours=6)
        for when, action in events:
            clock.advance_to(when)
            action()

        # -- April 1, 00:00:00: settle everything again (the month's finish line) --
        clock.advance_to(MAR.end)
        self.paid_before_to = self._paid()
        drain(m, PROVIDER_ADDRESS, PROVIDER)
        self.accrued_at_to = self._accrued()
        self.feed.reconcile()

    def _totals(self, index: int) -> dict[str, dict[str, int]]:
        return {u: self.model.lease_totals(u)[index] for u in self.ours}

    def _accrued(self) -> dict[str, dict[str, int]]:
        return self._totals(0)

    def _paid(self) -> dict[str, dict[str, int]]:
        return self._totals(1)

    def expected(self, later: dict, earlier: dict) -> dict[str, dict[str, int]]:
        """Per tenant, per denom: ``later - earlier`` over our leases."""
        out: dict[str, dict[str, int]] = {}
        for uuid in self.ours:
            tenant = self.model.lease(uuid).tenant
            for denom, amount in later.get(uuid, {}).items():
                diff = amount - earlier.get(uuid, {}).get(denom, 0)
                out.setdefault(tenant, {})
                out[tenant][denom] = out[tenant].get(denom, 0) + diff
        return {t: {d: a for d, a in v.items() if a} for t, v in out.items()}


@pytest.fixture(scope="module")
def world(chain_version) -> Month2026:
    return Month2026()


@pytest.fixture
def ledger(tmp_path, world):
    lg = Ledger.open(tmp_path / "ledger.sqlite", PROVIDER)
    lg.record_all(world.feed.facts)
    yield lg
    lg.close()


def test_the_world_exercises_what_it_claims(world):
    m = world.model
    assert m.lease(world.l3).closure_reason == "credit exhausted"  # stored with a space (2.5)
    assert utc(2026, 3, 5) < m.lease(world.l3).closed_at < utc(2026, 3, 7)  # ran dry in ~2.5 days
    assert m.lease(world.l4).closed_at.microsecond == 300_000
    accrued, paid = m.lease_totals(world.l3)
    assert accrued["umfx"] > paid["umfx"]  # the poor tenant's credit ran out before settlement
    assert world.l5 in world.ours



def test_march_statement_equals_the_models_accrual_to_the_last_unit(world, ledger):
    result = meter_month(ledger, MAR, utc(2026, 4, 2))
    assert result.leases == 5  # l1..l5 of ours; the other provider's lease is not ours
    totals = tenant_totals(ledger, MAR)
    accrued = {t: {d: a for d, (a, _w) in v.items() if a} for t, v in totals.items()}
    withdrawn = {t: {d: w for d, (_a, w) in v.items() if w} for t, v in totals.items()}
    assert accrued == world.expected(world.accrued_at_to, world.accrued_at_from)
    assert withdrawn == world.expected(world.paid_before_to, world.paid_before_from)
    # The poor tenant's shortfall is what its credit did not cover.
    a, w = totals[POOR]["umfx"]
    model_accrued, model_paid = world.model.lease_totals(world.l3)
    assert a - w == model_accrued["umfx"] - model_paid["umfx"] > 0



def test_february_and_march_add_up_to_each_leases_whole_accrual(world, ledger):
    meter_month(ledger, FEB, utc(2026, 4, 2))
    meter_month(ledger, MAR, utc(2026, 4, 2))
    feb = tenant_totals(ledger, FEB)
    assert {t: {d: a for d, (a, _) in v.items()} for t, v in feb.items()} == world.expected(world.accrued_at_from, {})
    # Leases closed in March have accrued everything they ever will: Feb + Mar is their life.
    rows = ledger.conn.execute(
        "SELECT lease_uuid, denom, SUM(CAST(accrued AS INTEGER)) FROM statement_lines GROUP BY lease_uuid, denom"
    ).fetchall()
    by_lease = {(u, d): a for u, d, a in rows}
    for uuid in (world.l2, world.l3, world.l4):
        model_accrued, _ = world.model.lease_totals(uuid)
        for denom, amount in model_accrued.items():
            assert by_lease[(uuid, denom)] == amount, (uuid, denom)


def test_a_lease_acknowledged_half_a_second_before_the_months_end_accrues_nothing_in_it(world, ledger):
    meter_month(ledger, MAR, utc(2026, 4, 2))
    n = ledger.conn.execute("SELECT COUNT(*) FROM statement_lines WHERE lease_uuid = ?", (world.l5,)).fetchone()[0]
    assert n == 0
    assert world.model.lease_totals(world.l5)[0].get("upwr", 0) == 0


def test_replaying_every_fact_changes_nothing(world, ledger, tmp_path):
    def dump() -> list:
        out = []
        for table in ("leases", "lease_events", "settlements", "withdrawals", "closures", "tenant_state"):
            out.append(sorted(ledger.conn.execute(f"SELECT * FROM {table}").fetchall()))
        return out

    before = dump()
    assert ledger.count("leases") > 0 and ledger.count("settlements") > 0
    ledger.record_all(world.feed.facts)  # the whole capture again
    ledger.record_all(reversed(world.feed.facts))  # and out of order
    assert dump() == before


# -- the seconds, alone ---------------------------------------------------------------------------
def test_accrued_seconds_count_whole_seconds_like_the_chain():
    s = 1_000_000
    start, end = to_us(MAR.start), to_us(MAR.end)
    month = (end - start) // s
    assert accrued_seconds(start - 10 * s, None, start, end) == month
    # Acknowledged 0.4 s into the month: the last whole second ends 0.4 s into April.
    assert accrued_seconds(start + 400_000, None, start, end) == month - 1
    # ... and that second is April's.
    assert accrued_seconds(start + 400_000, None, end, to_us(APR.end)) == (to_us(APR.end) - end) // s
    # Closed 0.9 s after a whole second: the fraction is never accrued.
    assert accrued_seconds(start + 400_000, start + 10 * s + 300_000, start, end) == 9
    assert accrued_seconds(start - 5 * s, start - s, start, end) == 0
    assert accrued_seconds(end - 500_000, None, start, end) == 0


def test_on_v2_1_each_settlement_drops_its_fraction_of_a_second():
    s = 1_000_000
    start, end = to_us(MAR.start), to_us(MAR.end)
    active = start + 100 * s
    # Settled 10.6 s and 20.6 s after it started: v2.1.0 counts 10 + 10 + what follows,
    # the current chain (which carries the fraction) 10.6 + 10 + ... whole.
    instants = [active + 10 * s + 600_000, active + 20 * s + 600_000]
    closed = active + 30 * s + 500_000
    assert accrued_seconds(active, closed, start, end) == 30
    assert accrued_seconds(active, closed, start, end, instants) == 10 + 10 + 9
    # No settlement: the same as the current chain.
    assert accrued_seconds(active, closed, start, end, []) == 30
    # A settlement after the close changes nothing; one before the start of the lease neither.
    assert accrued_seconds(active, closed, start, end, [active - s, *instants, closed + s]) == 29


def unpriced(lg: Ledger, uuid: str, acknowledged) -> None:  # type: ignore[no-untyped-def]
    """A lease the books hold as active from ``acknowledged`` without its price (an older build's row from an event)."""
    with lg.transaction() as c:
        c.execute(
            "INSERT INTO leases (uuid, tenant, provider_uuid, active_from_us, active_from_rank, first_seen_us, updated_us) "
            "VALUES (?, ?, ?, ?, 3, ?, ?)",
            (uuid, RICH, PROVIDER, to_us(acknowledged), to_us(acknowledged), to_us(acknowledged)),
        )


def test_a_lease_the_books_cannot_price_holds_back_only_itself(tmp_path):
    from messages.ledger import LeaseIssue

    lg = Ledger.open(tmp_path / "l.sqlite", PROVIDER)
    at = utc(2026, 3, 5)
    unpriced(lg, "lease-x", at)  # active from March 5, its price never read
    lg.record(LeaseSettled(utc(2026, 3, 9), "TXX", "lease-x", (Coin("umfx", 7),), tenant=RICH))
    # One whose every read failed: no row at all, but a withdraw page settled it.
    lg.record(LeaseIssue(at, "lease-y", "unread", "3 failed read(s)", POOR))
    lg.record(LeaseSettled(utc(2026, 3, 9), "TXY", "lease-y", (Coin("umfx", 9),), tenant=POOR))
    lg.record(LeasesReconciled(at, (Lease("lease-z", RICH, PROVIDER, (item(2),), acknowledged_at=utc(2026, 3, 1)),)))
    result = meter_month(lg, MAR, utc(2026, 4, 2))
    assert [r.status for r in Periods(lg).runs(MAR)] == ["completed"] and result.leases == 1
    # The rest of the month is billed; the held leases are named with the run, their settlements held with them.
    assert tenant_totals(lg, MAR) == {RICH: {"umfx": (2 * 31 * 86_400, 0)}}
    held = lg.conn.execute("SELECT lease_uuid, tenant, reason FROM run_held_leases").fetchall()
    assert [(u, t) for u, t, _ in held] == [("lease-x", RICH), ("lease-y", POOR)]
    assert "no known price" in held[0][2] and "keeps failing" in held[1][2]
    lg.close()


def test_a_settlement_of_a_lease_the_ledger_never_saw_active_is_still_shown(tmp_path):
    lg = Ledger.open(tmp_path / "l.sqlite", PROVIDER)
    lg.record(LeaseSettled(utc(2026, 3, 9), "TX1", "lease-unknown", (Coin("umfx", 42),), tenant=RICH))
    meter_month(lg, MAR, utc(2026, 4, 2))
    assert tenant_totals(lg, MAR) == {RICH: {"umfx": (0, 42)}}
    lg.close()


def test_withdrawn_amounts_beyond_64_bits_are_summed_exactly(tmp_path):
    at = utc(2026, 3, 9)
    # A 256-bit-sized amount beside a small one: SQLite sums the small, Python adds the big.
    big = 10**60 + 7
    lg = Ledger.open(tmp_path / "a.sqlite", PROVIDER)
    lg.record_all(
        [
            LeaseSettled(at, "TXB", "lease-a", (Coin("umfx", big),), tenant=RICH),
            LeaseSettled(at, "TXA", "lease-a", (Coin("umfx", 5),), tenant=RICH),
        ]
    )
    meter_month(lg, MAR, utc(2026, 4, 2))
    assert tenant_totals(lg, MAR) == {RICH: {"umfx": (0, big + 5)}}
    lg.close()
    # 18-digit amounts whose sum overflows a 64-bit integer: summed row by row instead.
    near = 10**18 - 1
    lg = Ledger.open(tmp_path / "b.sqlite", PROVIDER)
    lg.record_all([LeaseSettled(at, f"TX{i}", "lease-b", (Coin("upwr", near),), tenant=POOR) for i in range(12)])
    meter_month(lg, MAR, utc(2026, 4, 2))
    assert tenant_totals(lg, MAR) == {POOR: {"upwr": (0, 12 * near)}}
    lg.close()


def test_a_lease_the_chain_upgrade_finds_active_drops_the_fraction_before_it_and_carries_it_after(tmp_path):
    """v2.1.0 drops a settlement's fraction of a second, the current chain carries it. The books kept one
    flag a lease, overwritten by every read: a read after the upgrade made the whole month count as the
    current chain does, the part before it included (173,000 umfx too much at 1,000/s over half a month
    of hourly settlements, in a reviewer's run). A later read without field 16 (a node lagging behind
    the upgrade) changes nothing."""
    from datetime import datetime

    lg = Ledger.open(tmp_path / "l.sqlite", PROVIDER)
    rate = 1000
    start = utc(2026, 2, 27, 12)
    upgrade = utc(2026, 3, 15, 12)

    def lease(reservation):  # type: ignore[no-untyped-def]
        return Lease("la", RICH, PROVIDER, (item(rate),), acknowledged_at=start, reservation=reservation)

    lg.record(LeaseObserved(start, lease(None)))  # read on v2.1.0: no field 16
    rnd = random.Random(5)
    cursor, total, t, n = start, 0, start, 0
    chain: list[tuple[datetime, int]] = []  # (settled at, whole seconds accrued in all), as the chain counts
    read_after_upgrade = False
    while t < utc(2026, 4, 1, 2):
        t += timedelta(hours=1, microseconds=rnd.randrange(-400_000, 400_000))
        if t >= upgrade and not read_after_upgrade:
            lg.record(LeaseObserved(upgrade + timedelta(seconds=1), lease(())))  # the first read after it
            read_after_upgrade = True
        seconds = (t - cursor) // timedelta(seconds=1)
        total += seconds
        cursor = t if t < upgrade else cursor + timedelta(seconds=seconds)  # dropped before, carried after
        chain.append((t, total))
        lg.record(LeaseSettled(t, f"TX{n}", "la", (Coin("umfx", rate * seconds),), tenant=RICH))
        n += 1
        if t > upgrade + timedelta(days=3) and n % 24 == 0:
            lg.record(LeaseObserved(t, lease(None if n % 48 == 0 else ())))  # now and then a lagging node's read

    def chain_accrued(at: datetime) -> int:
        """What the chain has accrued at ``at``: its count at the last settlement, and whole seconds since."""
        c, settled = start, 0
        for when, so_far in chain:
            if when > at:
                break
            c = when if when < upgrade else c + timedelta(seconds=so_far - settled)
            settled = so_far
        return settled + (at - c) // timedelta(seconds=1)

    meter_month(lg, MAR, utc(2026, 4, 2, 3))
    accrued, _ = tenant_totals(lg, MAR)[RICH]["umfx"]
    assert accrued == rate * (chain_accrued(MAR.end) - chain_accrued(MAR.start))
    lg.close()
