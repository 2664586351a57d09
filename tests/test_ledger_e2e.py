"""The whole sidecar on the chain model: a month billed, and a crash that loses nothing.

The sidecar (``sidecar.app.Sidecar``: scheduler, tenant monitors, chain actor,
chain-io) runs on a manual clock and a manual dispatcher with its ledger
parts: the ``LedgerActor`` (hourly ``BillingTickDue`` from the scheduler) and
the model's ledger feed. The chain model accrues only when it settles, so the
model's own accrual for March is read by settling every lease at both ends of
the month (a provider-wide withdraw at 00:00:00 on March 1 and April 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

from actors.ledger_writer import start_ledger_writer
from bench.books_audit import audit
from chain.errors import ChainError
from chain.events import lease_events_from_tx
from chain.model import BillingModel, TxEvents
from chain.model_client import ModelChainClient
from ledger.model_feed import ModelLedgerFeed
from ledger.periods import Month, to_us
from ledger.runs import Periods
from ledger.settings import LedgerSettings
from ledger.statements import tenant_totals
from ledger.store import Ledger
from messages.chain import LeaseItem, WithdrawPage
from messages.coins import Coin, parse_coins
from runtime.clock import ManualClock, utc
from runtime.config import load_config
from runtime.dispatch import ManualDispatcher
from sidecar.app import ModelEventFeed, Sidecar
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item, settle_all, withdraw_operation

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

RICH, POOR, SHARED = addr("rich"), addr("poor"), addr("shared")
FEB, MAR = Month(2026, 2), Month(2026, 3)
GRACE_HOURS = 6
# synchronous=normal: a commit survives the process being killed (what these
# tests do), without an fsync per commit (what they do not test).
LEDGER_SETTINGS = LedgerSettings(
    grace_hours=GRACE_HOURS, auto_finalize=False, tick_interval=timedelta(hours=1), synchronous="normal"
)
SCHEDULER = load_config().scheduler  # the seed's defaults: hourly withdraw, 5 min zero-balance grace


class _Vanished(BaseException):
    """A tx call that never answers: the process died while its client waited for inclusion."""


class VanishingWrites:
    """Runs each tx call at once, in the caller's thread; a call that vanishes leaves no answer at all."""

    def submit(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except _Vanished:
            pass

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


class RecordingClient(ModelChainClient):
    """The model client, remembering every withdraw page the chain answered."""

    pages: list[WithdrawPage]
    #: The next withdraw is applied (and signed) but its call never answers (with ``VanishingWrites``).
    vanish = False

    def withdraw_by_provider(self, provider_uuid: str, key: bytes, signed=None) -> WithdrawPage:
        return self._recorded(super().withdraw_by_provider(provider_uuid, key, signed=signed))

    def withdraw_leases(self, lease_uuids, signed=None) -> WithdrawPage:  # type: ignore[no-untyped-def]
        return self._recorded(super().withdraw_leases(lease_uuids, signed=signed))

    def _recorded(self, page: WithdrawPage) -> WithdrawPage:
        self.pages.append(page)
        if self.vanish:
            raise _Vanished()
        return page

    #: The next close is applied (and signed) but its call never answers (with ``VanishingWrites``).
    vanish_close = False
    #: Called just before a vanishing close goes out (the process dies: it hears none of its events).
    before_vanish: Callable[[], None] | None = None

    def close_leases(self, lease_uuids, reason, signed=None):  # type: ignore[no-untyped-def]
        if self.vanish_close and self.before_vanish is not None:
            self.before_vanish()
        outcome = super().close_leases(lease_uuids, reason, signed=signed)
        if self.vanish_close:
            raise _Vanished()
        return outcome


class Chain:
    """The chain model and what it emitted, on one manual clock."""

    def __init__(self, start: datetime) -> None:
        self.clock = ManualClock(start)
        self.model = chain_model(self.clock)
        self.model.register_provider(PROVIDER, PROVIDER_ADDRESS)
        self.model.register_provider(OTHER, OTHER_ADDRESS)
        self.ours: list[str] = []
        #: (kind, lease) of our lease events, and whether a sidecar was up to hear it
        self.events: list[tuple[str, str, bool]] = []
        self.sidecar_up = False
        self.model.subscribe(self._on_tx)

    def _on_tx(self, tx: TxEvents) -> None:
        for ev in lease_events_from_tx([(e.type, dict(e.attributes)) for e in tx.events], tx.height):
            if ev.provider_uuid == PROVIDER:
                self.events.append((ev.kind, ev.lease_uuid, self.sidecar_up))

    def lease(self, tenant: str, items: list[LeaseItem], provider: str = PROVIDER) -> str:
        uuid = self.model.create_lease(tenant, provider, items).uuid
        if provider == PROVIDER:
            self.ours.append(uuid)
        return uuid

    def drain(self) -> None:
        """Settle every lease of ours now (``tests.support.settle_all``)."""
        settle_all(self.model, PROVIDER_ADDRESS, PROVIDER)

    def totals(self, index: int) -> dict[str, dict[str, int]]:
        return {u: self.model.lease_totals(u)[index] for u in self.ours}

    def per_tenant(self, later: dict, earlier: dict) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for uuid in self.ours:
            tenant = self.model.lease(uuid).tenant
            for denom, amount in later.get(uuid, {}).items():
                diff = amount - earlier.get(uuid, {}).get(denom, 0)
                if diff:
                    out.setdefault(tenant, {})
                    out[tenant][denom] = out[tenant].get(denom, 0) + diff
        return out


@dataclass
class Life:
    """One life of the sidecar process: its dispatcher, ledger connection and parts."""

    chain: Chain
    path: Path
    #: chain-io's tx executor (default: inline)
    writes: Any = None
    #: The model's own feed of ``LeaseObserved`` and settlements to the ledger
    #: (``ModelLedgerFeed``), which only the ``model`` chain mode has; without
    #: it the sidecar runs as against a node.
    ledger_feed: bool = True
    dispatcher: ManualDispatcher = field(init=False)
    ledger: Ledger = field(init=False)
    sidecar: Sidecar = field(init=False)
    client: RecordingClient = field(init=False)

    def __post_init__(self) -> None:
        chain = self.chain
        clock = chain.clock
        self.dispatcher = ManualDispatcher(clock.now)
        self.ledger = Ledger.open(self.path, PROVIDER, synchronous=LEDGER_SETTINGS.synchronous)
        self.client = RecordingClient(chain.model, PROVIDER, PROVIDER_ADDRESS)
        self.client.pages = []
        parts: list[Callable[[Sidecar], Any]] = [
            lambda s: start_ledger_writer(s.router, clock, self.ledger, LEDGER_SETTINGS, dispatcher=self.dispatcher),
            lambda s: ModelEventFeed(chain.model, s.router, s.provider_uuid),
        ]
        if self.ledger_feed:
            parts.append(lambda s: ModelLedgerFeed(chain.model, s.router, PROVIDER, self.ledger))
        self.sidecar = Sidecar(
            clock=clock,
            dispatcher=self.dispatcher,
            client=self.client,
            settings=SCHEDULER,
            provider_uuid=PROVIDER,
            billing_tick_interval=LEDGER_SETTINGS.tick_interval,
            restored=self.ledger.tenant_snapshots(),
            restored_lookups=self.ledger.withdraw_lookups(),
            restored_close_lookups=self.ledger.close_lookups(),
            leases_to_read=self.ledger.leases_to_read(),
            writes=self.writes,
            extra=parts,
        )
        chain.sidecar_up = True
        self.sidecar.start()
        self.dispatcher.run_until_idle()

    def run_until(self, when: datetime, stop: Callable[[], bool] | None = None) -> None:
        """Advance to ``when`` timer by timer, delivering all mail after each (or until ``stop``)."""
        clock = self.chain.clock
        while True:
            nxt = clock.next_timer()
            if nxt is None or nxt > when:
                break
            clock.advance_to(nxt)
            self.dispatcher.run_until_idle()
            if stop is not None and stop():
                return
        clock.advance_to(when)
        self.dispatcher.run_until_idle()

    def kill(self) -> None:
        """The process dies: no stop, no flush, no close. It hears nothing more from the chain."""
        for part in self.sidecar.parts[1:]:
            part.active = False
        self.chain.sidecar_up = False



def test_a_month_on_the_running_sidecar_is_billed_as_the_chain_accrued_it(tmp_path):
    chain = Chain(utc(2026, 2, 27))
    m = chain.model
    m.fund_credit(RICH, [Coin("umfx", 10**15), Coin("upwr", 10**15)])
    m.fund_credit(SHARED, [Coin("umfx", 10**15)])
    l1 = chain.lease(RICH, [item(3, 2), item(5, 1, "upwr")])  # before the sidecar's first run
    chain.clock.advance_to(utc(2026, 2, 27, 6) + timedelta(microseconds=400_000))
    life = Life(chain, tmp_path / "ledger.sqlite")
    chain.lease(SHARED, [item(7)])
    chain.lease(SHARED, [item(11)], provider=OTHER)

    # March 1, 00:00:00: settle everything (the month's starting line). What was
    # paid up to just before it belongs to February.
    life.run_until(MAR.start - timedelta(microseconds=1))
    paid_before_from = chain.totals(1)
    life.run_until(MAR.start)
    chain.drain()
    accrued_at_from = chain.totals(0)

    state: dict[str, str] = {}
    script = [
        (utc(2026, 3, 3, 10, 20, 30) + timedelta(microseconds=250_000),
         lambda: (m.fund_credit(POOR, [Coin("umfx", 1000 * 86_400 * 5 // 2)]),
                  state.setdefault("l3", chain.lease(POOR, [item(1000)])))),
        (utc(2026, 3, 10, 8) + timedelta(microseconds=700_000),
         lambda: state.setdefault("l4", chain.lease(RICH, [item(4, 3)]))),
        (utc(2026, 3, 20, 17, 45, 12) + timedelta(microseconds=300_000),
         lambda: m.close_leases(RICH, [state["l4"]], "tenant closed it")),
        (utc(2026, 3, 31, 23, 59, 59) + timedelta(microseconds=500_000),
         lambda: state.setdefault("l5", chain.lease(RICH, [item(9, 1, "upwr")]))),
    ]
    for when, action in script:
        life.run_until(when)
        action()
        life.dispatcher.run_until_idle()
    life.run_until(MAR.end - timedelta(microseconds=1))
    paid_before_to = chain.totals(1)
    life.run_until(MAR.end)
    chain.drain()  # April 1, 00:00:00: the finish line
    accrued_at_to = chain.totals(0)
    life.run_until(MAR.end + timedelta(hours=GRACE_HOURS + 1, minutes=1))  # a tick after the grace window

    runs = Periods(life.ledger).runs(MAR)
    assert [r.status for r in runs] == ["completed"], [(r.status, r.error) for r in runs]
    assert m.lease(state["l3"]).state == "CLOSED"  # the poor tenant ran dry in the month
    totals = tenant_totals(life.ledger, MAR)
    accrued = {t: {d: a for d, (a, _w) in v.items() if a} for t, v in totals.items()}
    withdrawn = {t: {d: w for d, (_a, w) in v.items() if w} for t, v in totals.items()}
    assert accrued == chain.per_tenant(accrued_at_to, accrued_at_from)
    assert withdrawn == chain.per_tenant(paid_before_to, paid_before_from)
    assert set(accrued) == {RICH, SHARED, POOR}
    # February too (metered by the hourly tick on March 1, after its grace window).
    feb = tenant_totals(life.ledger, FEB)
    assert {t: {d: a for d, (a, _) in v.items() if a} for t, v in feb.items()} == chain.per_tenant(accrued_at_from, {})
    assert life.ledger.lease(l1) is not None  # the lease that began before the first run is in the books
    assert life.ledger.withdraw_lookups() == []  # every withdraw tx written ahead was settled by its answer


@dataclass
class Crash:
    """A sidecar killed two minutes into a tenant's zero-balance grace window, and restarted."""

    chain: Chain
    first: Life
    second: Life
    l1: str
    l2: str
    l3: str
    zero_since: datetime
    restarted_at: datetime
    l2_closed_at: datetime
    l3_closed_at: datetime | None
    accrued_march: dict[str, dict[str, int]]
    #: what the tenant's own close of l2 settled while no sidecar was listening
    settled_while_down: int


@pytest.fixture(scope="module")
def crash(tmp_path_factory, chain_version) -> Crash:
    path = tmp_path_factory.mktemp("crash") / "ledger.sqlite"
    chain = Chain(MAR.start)
    m = chain.model
    m.fund_credit(RICH, [Coin("umfx", 10**15)])
    m.fund_credit(SHARED, [Coin("umfx", 10**15)])
    l1 = chain.lease(RICH, [item(3, 2)])
    l2 = chain.lease(SHARED, [item(7)])
    chain.lease(SHARED, [item(11)], provider=OTHER)
    # The sidecar first runs on March 31: its leases began a month before.
    chain.clock.advance_to(utc(2026, 3, 31, 12))
    first = Life(chain, path)
    chain.clock.advance_to(utc(2026, 3, 31, 12, 30) + timedelta(microseconds=500_000))
    # The poor tenant's credit is used up in seven hours, mostly by another provider's
    # lease that nobody settles: it never runs out at one of our settlements (which
    # would have the chain auto-close it), so our tenant monitor's zero-balance grace
    # window is what closes it.
    m.fund_credit(POOR, [Coin("umfx", 1010 * 3600 * 7)])
    l3 = chain.lease(POOR, [item(10)])
    chain.lease(POOR, [item(1000)], provider=OTHER)
    first.dispatcher.run_until_idle()

    def poor_snapshot():  # type: ignore[no-untyped-def]
        return {s.tenant: s for s in first.ledger.tenant_snapshots()}.get(POOR)

    first.run_until(utc(2026, 3, 31, 22), stop=lambda: bool(poor_snapshot() and poor_snapshot().zero_since))
    zero_since = poor_snapshot().zero_since
    assert zero_since is not None, "the poor tenant's credit should have run out by 19:30"
    # Two minutes into the five-minute window, the process is killed.
    first.run_until(zero_since + timedelta(minutes=2))
    assert poor_snapshot().zero_since == zero_since
    killed_at = chain.clock.now()
    first.kill()
    assert m.lease(l3).state == "ACTIVE"
    # While it is down, a tenant closes a lease: the event reaches nobody.
    chain.clock.advance(timedelta(seconds=30) + timedelta(microseconds=123))
    paid_before = m.lease_totals(l2)[1]["umfx"]
    m.close_leases(SHARED, [l2], "tenant left")
    settled_while_down = m.lease_totals(l2)[1]["umfx"] - paid_before
    chain.clock.advance_to(killed_at + timedelta(minutes=1))

    second = Life(chain, path)  # the same database
    restarted_at = chain.clock.now()
    window = SCHEDULER.credit_check_zero_grace_period
    second.run_until(zero_since + window + SCHEDULER.credit_check_retry_interval + timedelta(seconds=1))
    l3_closed_at = m.lease(l3).closed_at
    second.run_until(MAR.end - timedelta(microseconds=1))
    second.run_until(MAR.end)
    chain.drain()  # April 1, 00:00:00: settle everything (the month's finish line)
    accrued_march = chain.totals(0)  # every lease began on or after March 1
    second.run_until(MAR.end + timedelta(hours=GRACE_HOURS + 1, minutes=1))  # a tick after the grace window
    return Crash(
        chain, first, second, l1, l2, l3, zero_since, restarted_at, m.lease(l2).closed_at, l3_closed_at, accrued_march,
        settled_while_down,
    )


def test_killed_and_restarted_the_ledger_loses_and_doubles_nothing(crash):
    chain, ledger = crash.chain, crash.second.ledger
    # Lease events are hints: none is booked; the lease's end, heard or not, is the chain's own.
    assert any(up for _, _, up in chain.events) and ledger.count("lease_events") == 0
    assert ledger.lease(crash.l2)["closed_at_us"] == to_us(crash.l2_closed_at)

    # No withdrawal lost or doubled: one row per page the chain answered, in either life.
    pages = crash.first.client.pages + crash.second.client.pages
    rows = ledger.conn.execute("SELECT tx_hash, amounts FROM withdrawals").fetchall()
    assert len(pages) > 10
    assert sorted(r[0] for r in rows) == sorted(p.tx_hash for p in pages)
    assert sum(int(json.loads(a).get("umfx", "0")) for _, a in rows) == sum(
        c.amount for p in pages for c in p.total_amounts if c.denom == "umfx"
    )
    # Every settlement the chain made on our leases is in the ledger exactly once, the
    # tenant's own close while no sidecar was up included: read as ended at the restart,
    # its closing tx was found with the node's tx search and booked at its block time.
    settled = dict(
        ledger.conn.execute(
            "SELECT lease_uuid, SUM(CAST(amount AS INTEGER)) FROM settlements GROUP BY lease_uuid"
        ).fetchall()
    )
    paid = {u: p["umfx"] for u, p in chain.totals(1).items() if p.get("umfx")}
    assert crash.settled_while_down > 0
    assert settled == paid
    (at,) = ledger.conn.execute(
        "SELECT at_us FROM settlements WHERE lease_uuid = ? AND kind = 'close'", (crash.l2,)
    ).fetchone()
    assert at == to_us(crash.l2_closed_at) and ledger.lease_issues() == []
    books = audit(ledger, chain.model, PROVIDER)
    assert books.clean and books.closes == 2, books.table()  # l2 by its tenant, l3 by us

    # The poor tenant's lease was closed by us once, and recorded once.
    assert chain.model.lease(crash.l3).state == "CLOSED"
    closures = ledger.conn.execute("SELECT lease_uuids FROM closures").fetchall()
    assert [c for c in closures if crash.l3 in c[0]] == [(f'["{crash.l3}"]',)]

    # And March is billed as the chain accrued it, across the crash.
    runs = Periods(ledger).runs(MAR)
    assert [r.status for r in runs] == ["completed"], [(r.status, r.error) for r in runs]
    totals = tenant_totals(ledger, MAR)
    by_tenant = {t: {d: a for d, (a, _) in v.items() if a} for t, v in totals.items()}
    assert by_tenant == chain.per_tenant(crash.accrued_march, {})
    assert set(by_tenant) == {RICH, SHARED, POOR} and ledger.lease(crash.l1) is not None


def test_killed_and_restarted_the_zero_balance_grace_window_keeps_its_start(crash):
    window = SCHEDULER.credit_check_zero_grace_period
    assert crash.l3_closed_at is not None, "not closed within the window that began before the crash"
    assert crash.zero_since + window <= crash.l3_closed_at < crash.restarted_at + window


def _withdraw_world(*prices: int) -> tuple[Chain, list[str]]:
    """A chain an hour into a rich tenant's leases at ``prices``, and the hashes of the withdraw txs it will apply."""
    chain = Chain(utc(2026, 3, 1))
    chain.model.fund_credit(RICH, [Coin("umfx", 10**15)])
    for price in prices:
        chain.lease(RICH, [item(price)])
    withdraw_txs: list[str] = []
    chain.model.subscribe(
        lambda tx: withdraw_txs.append(tx.tx_hash) if any("withdraw" in e.type for e in tx.events) else None
    )
    chain.clock.advance(3600)
    return chain, withdraw_txs


def _booked(ledger: Ledger, tx_hash: str) -> tuple[int, int]:
    """How many withdrawal rows and settlement rows the books hold for ``tx_hash``."""
    with ledger.read() as conn:
        w = conn.execute("SELECT COUNT(*) FROM withdrawals WHERE tx_hash = ?", (tx_hash,)).fetchone()[0]
        s = conn.execute("SELECT COUNT(*) FROM settlements WHERE tx_hash = ?", (tx_hash,)).fetchone()[0]
    return w, s


def test_a_withdraw_whose_answer_was_lost_reaches_the_books_by_its_tx(tmp_path):
    """The page was applied but its answer never came: looked up by its tx hash, it is booked."""
    chain, withdraw_txs = _withdraw_world(3, 5)
    life = Life(chain, tmp_path / "ledger.sqlite")
    life.client.faults.lose_answer(withdraw_operation())
    # Up to the first withdraw: applied on chain, its answer lost.
    life.run_until(chain.clock.now() + timedelta(hours=2), stop=lambda: bool(withdraw_txs))
    [lost] = withdraw_txs
    assert life.client.pages == []

    assert _booked(life.ledger, lost)[0] == 0  # not yet: the first lookup is due
    life.run_until(chain.clock.now() + timedelta(minutes=1))
    assert _booked(life.ledger, lost) == (1, 2)  # the page, and what it took from each of the two leases



def test_killed_before_the_lookup_the_restarted_sidecar_goes_on_with_it(tmp_path):
    """Restarted because the node was unreachable (what leaves a tx's outcome unknown): the tx is not forgotten."""
    chain, withdraw_txs = _withdraw_world(3)
    path = tmp_path / "ledger.sqlite"
    first = Life(chain, path)
    first.client.faults.lose_answer(withdraw_operation())
    first.run_until(chain.clock.now() + timedelta(hours=2), stop=lambda: bool(withdraw_txs))
    [lost] = withdraw_txs
    assert [w.tx_hash for w in first.ledger.withdraw_lookups()] == [lost]
    first.kill()  # before the first lookup is due
    chain.clock.advance(5)

    second = Life(chain, path)
    second.run_until(chain.clock.now() + timedelta(minutes=1))
    with second.ledger.read() as conn:
        rows = conn.execute("SELECT tx_hash, page FROM withdrawals WHERE tx_hash = ?", (lost,)).fetchall()
    assert len(rows) == 1
    assert second.ledger.withdraw_lookups() == []  # the lookup ended, and says so in the books


def test_killed_while_the_client_waited_for_inclusion_the_restarted_sidecar_books_the_page(tmp_path):
    """The tx's hash reaches the books when it is signed: a death before any answer does not lose the page."""
    chain, withdraw_txs = _withdraw_world(3, 5)
    path = tmp_path / "ledger.sqlite"
    first = Life(chain, path, writes=VanishingWrites())
    first.client.vanish = True
    first.run_until(chain.clock.now() + timedelta(hours=2), stop=lambda: bool(withdraw_txs))
    [applied] = withdraw_txs  # on chain: the leases settled, the provider paid

    assert _booked(first.ledger, applied)[0] == 0  # no answer came (the settlements are the in-process chain feed's)
    assert [w.tx_hash for w in first.ledger.withdraw_lookups()] == [applied]  # but the books know the tx
    first.kill()
    chain.clock.advance(30)

    second = Life(chain, path)
    second.run_until(chain.clock.now() + timedelta(minutes=1))
    assert _booked(second.ledger, applied) == (1, 2)  # the page, and what it took from each of the two leases (not twice)
    assert second.ledger.withdraw_lookups() == []


def _rich_chain() -> tuple[Chain, str]:
    """A chain from 27 February with a rich tenant's lease of ours (its uuid)."""
    chain = Chain(utc(2026, 2, 27))
    chain.model.fund_credit(RICH, [Coin("umfx", 10**15)])
    return chain, chain.lease(RICH, [item(3, 2)])


def _short_lease(life: Life, chain: Chain) -> str:
    """A lease of the rich tenant opened at 10:05 on March 10 and closed by it at 10:20: no hourly read sees it."""
    life.run_until(utc(2026, 3, 10, 10, 5))
    short = chain.lease(RICH, [item(5)])
    life.dispatcher.run_until_idle()
    life.run_until(utc(2026, 3, 10, 10, 20))
    chain.model.close_leases(RICH, [short], "tenant left")
    life.dispatcher.run_until_idle()
    return short


def test_as_against_a_node_a_lease_opened_and_closed_within_the_hour_is_priced_and_billed(tmp_path):
    """No active-lease read ever sees it: its events have it read from the chain for the books."""
    chain, _ = _rich_chain()
    life = Life(chain, tmp_path / "l.sqlite", ledger_feed=False)
    short = _short_lease(life, chain)
    life.run_until(MAR.end + timedelta(hours=GRACE_HOURS + 1, minutes=1))
    row = life.ledger.lease(short)
    assert row["priced"] and json.loads(row["items"]) == [["sku-1", 1, "umfx", "5"]]
    assert [r.status for r in Periods(life.ledger).runs(MAR)] == ["completed"]
    assert tenant_totals(life.ledger, MAR)[RICH]["umfx"][0] > 0


def test_as_against_a_node_a_lease_closed_while_down_is_billed_to_the_chains_close(tmp_path):
    chain, lease = _rich_chain()
    first = Life(chain, tmp_path / "l.sqlite", ledger_feed=False)
    first.run_until(utc(2026, 3, 10))
    first.kill()
    chain.clock.advance_to(utc(2026, 3, 12, 12) + timedelta(microseconds=500_000))
    chain.model.close_leases(RICH, [lease], "tenant left")
    chain.clock.advance_to(utc(2026, 4, 2))
    second = Life(chain, tmp_path / "l.sqlite", ledger_feed=False)
    second.run_until(utc(2026, 4, 2, 2))
    assert second.ledger.lease(lease)["closed_at_us"] == to_us(chain.model.lease(lease).closed_at)


def test_a_lease_that_cannot_be_read_is_retried_reported_and_read_at_the_next_start(tmp_path):
    """Its reads fail: retried with backoff all along, listed by the books as unread, and read by the next start."""
    chain, _ = _rich_chain()
    first = Life(chain, tmp_path / "l.sqlite", ledger_feed=False)
    first.client.faults.fail_rate("lease", 1.0)
    short = _short_lease(first, chain)
    first.run_until(utc(2026, 3, 10, 12))
    assert first.ledger.lease(short) is None and first.ledger.leases_to_read() == [short]
    [issue] = first.ledger.lease_issues()
    assert (issue.lease_uuid, issue.kind, issue.period) == (short, "unread", "2026-03")
    # Read from 10:05, again after 10 s doubling to 30 min (10:05:10, 10:05:30, ... 11:47:30): 11 reads
    # by noon, and no end to them (they went on past the five tries a read used to get).
    assert issue.detail.startswith("11 failed read(s), the last: ") and "injected failure" in issue.detail
    first.kill()
    second = Life(chain, tmp_path / "l.sqlite", ledger_feed=False)
    second.run_until(utc(2026, 3, 10, 12, 1))
    assert second.ledger.lease(short)["priced"] and second.ledger.leases_to_read() == []
    assert second.ledger.lease_issues() == []  # read: nothing left to report


def test_the_leases_to_read_at_start_are_asked_for_once_the_ledger_writer_is_there():
    """On a threaded dispatcher the reads answer at once: the ledger must already take their answers."""
    order: list[str] = []

    class Watching(Sidecar):
        def _tell(self, address, message):  # type: ignore[no-untyped-def]
            order.append(type(message).__name__)
            return super()._tell(address, message)

    chain = Chain(utc(2026, 3, 1))
    dispatcher = ManualDispatcher(chain.clock.now)
    Watching(clock=chain.clock, dispatcher=dispatcher, client=RecordingClient(chain.model, PROVIDER, PROVIDER_ADDRESS),
             settings=SCHEDULER, provider_uuid=PROVIDER, leases_to_read=("l1",),
             extra=[lambda s: order.append("the ledger writer")])
    assert order.index("the ledger writer") < order.index("LeasesToRead")


def test_killed_during_a_close_round_the_restarted_sidecar_books_every_close_and_its_settlement_once(tmp_path):
    """The close tx was broadcast and applied; the process died before its answer: written ahead, it is booked at the next start."""
    chain = Chain(utc(2026, 3, 31, 12))
    m = chain.model
    closing_txs: list[TxEvents] = []
    m.subscribe(lambda tx: closing_txs.append(tx) if any(e.type == "lease_closed" for e in tx.events) else None)
    poor = [addr(f"poor{i}") for i in range(3)]
    ours: list[str] = []
    for i, tenant in enumerate(poor):
        # Used up in about an hour, mostly by another provider's lease nobody settles: our
        # monitors' zero-balance grace window closes ours (the chain never auto-closes them).
        m.fund_credit(tenant, [Coin("umfx", (5 * (i + 1) + 1000) * 3600)])  # all dry at the same second
        ours += [chain.lease(tenant, [item(5)]) for _ in range(i + 1)]
        chain.lease(tenant, [item(1000)], provider=OTHER)
    path = tmp_path / "ledger.sqlite"
    first = Life(chain, path, writes=VanishingWrites(), ledger_feed=False)
    first.client.vanish_close = True
    # Killed after the broadcast, before the answer and the block's events: what the
    # process still does is what the signing set in motion (the books' write-ahead).
    first.client.before_vanish = first.kill
    first.run_until(utc(2026, 3, 31, 16), stop=lambda: bool(closing_txs))
    [tx] = closing_txs
    assert all(m.lease(u).state == "CLOSED" for u in ours)  # on chain: all six in one tx
    [written] = first.ledger.close_lookups()  # the books hold the tx, written ahead
    assert written.tx_hash == tx.tx_hash and {t for t, _ in written.by_tenant} == set(poor)
    # The answer never came, nor its events: nothing of the close is in the books but its tx's hash.
    assert first.ledger.conn.execute("SELECT COUNT(*) FROM settlements WHERE kind = 'close'").fetchone()[0] == 0
    chain.clock.advance(30)

    second = Life(chain, path, ledger_feed=False)
    second.run_until(chain.clock.now() + timedelta(minutes=5))
    assert second.ledger.close_lookups() == []
    chain_settled = {
        (e.get("lease_uuid"), c.denom): c.amount
        for e in tx.events if e.type == "lease_closed"
        for c in parse_coins(e.get("settled_amounts"))
    }
    with second.ledger.read() as conn:
        booked = conn.execute(
            "SELECT lease_uuid, denom, amount, at_us FROM settlements WHERE tx_hash = ? ORDER BY lease_uuid", (tx.tx_hash,)
        ).fetchall()
        closures = conn.execute("SELECT tenant, lease_uuids, tx_hashes, at_us FROM closures ORDER BY tenant").fetchall()
    assert {(u, d): int(a) for u, d, a, _ in booked} == chain_settled and len(booked) == len(ours)  # each once
    assert {at for *_, at in booked} == {to_us(tx.time)}  # at the tx's block time
    assert sorted((t, sorted(json.loads(u))) for t, u, _, _ in closures) == sorted(
        (t, sorted(u for u in ours if m.lease(u).tenant == t)) for t in poor
    )
    assert all(json.loads(h) == [tx.tx_hash] and at == to_us(tx.time) for _, _, h, at in closures)
    for u in ours:
        assert second.ledger.lease(u)["closed_at_us"] == to_us(m.lease(u).closed_at)
    # What a fault run counts: no close missing from the books, no unit lost or doubled.
    books = audit(second.ledger, m, PROVIDER)
    assert books.clean and books.closes == len(ours) and not books.reported, books.table()


def test_a_close_found_applied_after_a_restart_forgets_its_tenant_so_no_later_start_restores_its_grace(
    tmp_path, monkeypatch
) -> None:
    """A grace window passes, the close tx is signed and the process dies before its answer. The next
    start restores the tenant's monitor and looks the tx up: found applied, the monitor was not told (the
    lookup was restored), the scheduler stopped it, and its saved state, the window's start included,
    stayed in the books. Days later the tenant came back with a new lease: the start after restored that
    old window onto it, and its first read closed it, a minute after it was opened."""
    chain = Chain(utc(2026, 3, 31, 12))
    m = chain.model
    closing: list = []
    m.subscribe(lambda tx: closing.append(tx) if any(e.type == "lease_closed" for e in tx.events) else None)
    poor = addr("poor0")
    m.fund_credit(poor, [Coin("umfx", (5 + 1000) * 3600)])
    old = chain.lease(poor, [item(5)])
    chain.lease(poor, [item(1000)], provider=OTHER)
    path = tmp_path / "ledger.sqlite"
    first = Life(chain, path, writes=VanishingWrites(), ledger_feed=False)
    first.client.vanish_close = True
    first.client.before_vanish = first.kill  # the close applies, and the process dies before its answer
    first.run_until(utc(2026, 3, 31, 16), stop=lambda: bool(closing))
    assert m.lease(old).state == "CLOSED"
    chain.clock.advance(30)

    failing = {"credit": True, "lease": False}
    credit_account, lease_read = RecordingClient.credit_account, RecordingClient.lease

    def credit(self, tenant, *args, **kwargs):  # type: ignore[no-untyped-def]
        if failing["credit"]:
            raise ChainError("unavailable", transient=True)
        return credit_account(self, tenant, *args, **kwargs)

    def lease(self, uuid):  # type: ignore[no-untyped-def]
        if failing["lease"] and uuid == old:
            raise ChainError("unavailable", transient=True)
        return lease_read(self, uuid)

    monkeypatch.setattr(RecordingClient, "credit_account", credit)
    monkeypatch.setattr(RecordingClient, "lease", lease)
    second = Life(chain, path, ledger_feed=False)  # its reads of the tenant fail while the lookup finds the close
    second.run_until(chain.clock.now() + timedelta(minutes=1))
    failing["credit"] = False
    second.run_until(chain.clock.now() + timedelta(hours=2))
    assert [s.tenant for s in second.ledger.tenant_snapshots()] == []  # forgotten: no lease of it left
    second.kill()

    chain.clock.advance(timedelta(days=1))  # the sidecar down; the tenant comes back with a new lease
    m.fund_credit(poor, [Coin("umfx", 5 * 86400)])
    new = chain.lease(poor, [item(5)])
    chain.clock.advance(60)
    failing["lease"] = True
    third = Life(chain, path, ledger_feed=False)
    started = chain.clock.now()
    third.sidecar.withdraw_once()
    third.run_until(started + timedelta(minutes=2))
    failing["lease"] = False
    m.fund_credit(poor, [Coin("umfx", 10**12)])  # topped up within its grace window
    third.run_until(started + timedelta(minutes=10))
    assert m.lease(new).state == "ACTIVE"


def test_a_stop_writes_what_the_monitors_send_on_their_way_out(tmp_path) -> None:
    """The stop closed the ledger writer before it stopped the scheduler and the monitors: what a monitor
    still had to handle, and the state it then saved, was dropped on the floor (77 tenants' latest reads
    in a reviewer's run), and a grace window cleared in the last cycle came back open at the next start."""
    from messages.chain import Lease
    from messages.credit import LeasesSynced
    from runtime.router import tenant_address

    chain = Chain(utc(2026, 3, 31, 12))
    tenant = addr("rich")
    chain.model.fund_credit(tenant, [Coin("umfx", 10**9)])
    first = chain.lease(tenant, [item(5)])
    life = Life(chain, tmp_path / "ledger.sqlite", ledger_feed=False)
    life.sidecar.withdraw_once()
    life.run_until(chain.clock.now() + timedelta(minutes=1))
    (saved,) = life.ledger.tenant_snapshots()
    assert saved.lease_uuids == (first,)
    # Mail the monitor has not handled yet when the stop comes: a lease it must now watch too.
    second = Lease("lease-second", tenant, PROVIDER, (item(3),), acknowledged_at=chain.clock.now(), reservation=())
    life.sidecar.router.tell(tenant_address(tenant), LeasesSynced((second,), (first,)))
    life.sidecar.stop()
    (saved,) = Ledger.open(tmp_path / "ledger.sqlite", PROVIDER).tenant_snapshots()
    assert set(saved.lease_uuids) == {first, "lease-second"}
