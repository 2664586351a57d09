"""The whole sidecar against the devnet, through gRPC and the CometBFT websocket (issue 3).

The clock is manual: the test moves it, and a block producer moves it one
block whenever a tx waits. The actors run on worker threads (chain calls
block on the network), so each step waits for the sidecar to settle: no
cycle running and the next wake planned after now.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from chain.model import CREDIT_EXHAUSTED_REASON
from messages.scheduler import Reconcile
from runtime.dispatch import Delivery, ThreadedDispatcher
from sidecar.app import Sidecar
from sidecar.runner import ListenerPart
from tests.devnet_harness import OTHER_ADDRESS, OTHER_PROVIDER, PROVIDER, World, make_world, wait_until
from actors.listener_settings import ListenerSettings
from tests.support import addr

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

MS = timedelta(milliseconds=1)
FAST_LISTENER = ListenerSettings(
    ping_interval=200 * MS,
    ping_timeout=400 * MS,
    close_timeout=200 * MS,
    open_timeout=timedelta(seconds=3),
    backoff_initial=300 * MS,  # long enough that events of the gap are surely missed
    backoff_max=600 * MS,
    stable_after=timedelta(0),
)


class Harness:
    def __init__(self, world: World, parts: tuple[Any, ...] = (), **restored: Any) -> None:
        """``parts``: more of the sidecar, started before the listener; ``restored``: what a restart hands it."""
        self.w = world
        self.deliveries: list[Delivery] = []
        self.dispatcher = ThreadedDispatcher(world.clock.now, workers=2, tap=self.deliveries.append)
        self.client = world.client()
        config = world.config
        self.sidecar = Sidecar(
            clock=world.clock,
            dispatcher=self.dispatcher,
            client=self.client,
            settings=config.scheduler,
            provider_uuid=PROVIDER,
            extra=[*parts, lambda s: ListenerPart(s, world.devnet.websocket_url, _with_listener(config))],
            on_stop=[self.client.close],
            **restored,
        )
        self.core = self.sidecar.scheduler_core

    def settled(self) -> bool:
        c, clock = self.core, self.w.clock
        # The core plans a wake before its actor sets the timer: one set after the clock has
        # passed its time (the test moved it meanwhile) is due now; the manual clock fires it
        # only when moved, so it is moved by nothing.
        due = clock.next_timer()
        if due is not None and due <= clock.now():
            clock.advance_to(clock.now())
            return False
        wake = c.wake_at
        return c.cycle is None and wake is not None and wake > clock.now() and not self.w.node.mempool_size()

    def settle(self, what: str = "the sidecar to settle") -> None:
        wait_until(self.settled, timeout=10, what=what)

    def start(self) -> None:
        assert self.sidecar.withdraw_once(timeout=20)
        wait_until(lambda: self.reconciles() >= 1, timeout=5, what="the listener's first subscribe")
        self.sidecar.start()
        self.settle()

    def step(self, seconds: float) -> None:
        self.w.clock.advance(timedelta(seconds=seconds))
        self.settle()

    def credit_used_up_elsewhere(self, name: str, ours: int = 1) -> list[str]:
        """A tenant with ``ours`` leases of ours and a costly one of another provider using its
        credit up without settling; the sidecar runs and has just seen the credit gone."""
        w = self.w
        t = w.tenant(name, umfx=1_000)
        leases = [w.lease(t, price=1) for _ in range(ours)]
        w.lease(t, price=100, provider=OTHER_PROVIDER)
        self.start()
        self.step(15)
        self.sidecar.trigger_withdraw("test")
        self.settle()
        return leases

    def reconciles(self) -> int:
        return sum(1 for d in list(self.deliveries) if isinstance(d.message, Reconcile))

    def close(self) -> None:
        self.sidecar.stop()
        self.dispatcher.shutdown()
        self.w.close()


def _with_listener(config: Any) -> Any:
    class C:
        provider = config.provider
        listener = FAST_LISTENER

    return C


@pytest.fixture
def h():
    harness = Harness(make_world(websocket=True))
    yield harness
    harness.close()


def test_a_tenant_running_dry_is_closed_within_the_grace_window_plus_one_check(h: Harness) -> None:
    w = h.w
    (ours,) = h.credit_used_up_elsewhere("dry")
    entry = h.core.tenants[addr("dry")]
    assert entry.recheck_at is not None  # inside the grace window now
    window_start = w.clock.now()
    s = w.config.scheduler
    while w.model.lease(ours).state == "ACTIVE" and w.clock.now() < window_start + timedelta(minutes=10):
        h.step(10)
    closed = w.model.lease(ours)
    assert closed.state == "CLOSED" and closed.closure_reason == s.closure_reason
    assert closed.closed_at <= window_start + s.credit_check_zero_grace_period + s.credit_check_retry_interval + timedelta(seconds=15)
    assert closed.closed_at >= window_start + s.credit_check_zero_grace_period - timedelta(seconds=15)


def test_another_providers_withdraw_exhausting_a_shared_tenant_closes_our_leases_at_once(h: Harness) -> None:
    w = h.w
    t = w.tenant("shared", umfx=10_000)
    ours = w.lease(t, price=1)
    w.lease(t, price=100, provider=OTHER_PROVIDER)
    h.start()
    w.clock.advance(timedelta(seconds=200))  # the other lease owes 20,000: more than the credit
    w.model.withdraw(OTHER_ADDRESS, provider_uuid=OTHER_PROVIDER)  # settles, exhausts, auto-closes theirs
    if w.model.version.withdrawable_pagination:
        # No wake is due for an hour: only the listener's trigger can settle ours now, and the
        # current chain's ProviderWithdrawable (a dry run) says the auto-close is due.
        wait_until(lambda: w.model.lease(ours).state == "CLOSED", timeout=10, what="our lease to be auto-closed")
    else:
        # v2.1.0's ProviderWithdrawable sees nothing to withdraw from a tenant with no credit: the
        # trigger's cycle sends no tx, and our own close ends the lease after the grace window.
        h.settle()
        assert w.model.lease(ours).state == "ACTIVE"
        for _ in range(40):
            if w.model.lease(ours).state != "ACTIVE":
                break
            h.step(10)
    assert w.model.lease(ours).closure_reason == CREDIT_EXHAUSTED_REASON
    h.settle()
    assert t not in h.core.tenants


def test_leases_opened_and_closed_during_a_websocket_gap_are_reconciled(h: Harness) -> None:
    w = h.w
    a, b = w.tenant("a"), w.tenant("b")
    a_lease = w.lease(a)
    w.lease(b)
    h.start()
    before = h.reconciles()
    w.devnet.websocket_server.freeze_all()  # nothing is pushed to the listener from here on
    c = w.tenant("c")
    c_lease = w.lease(c)  # its events go nowhere, whatever the threads' timing
    w.model.close_leases(a, [a_lease], "tenant left")
    w.devnet.websocket_server.drop_all()  # then the connection goes: the listener reconnects
    wait_until(lambda: h.reconciles() > before, timeout=10, what="a reconnect")
    h.settle()
    chain = {}
    for lease in w.model.active_leases_by_provider(PROVIDER):
        chain.setdefault(lease.tenant, set()).add(lease.uuid)
    assert {t: set(e.leases) for t, e in h.core.tenants.items()} == chain
    assert c_lease in chain[c] and a not in h.core.tenants


def test_a_close_batch_with_an_already_closed_lease_still_closes_the_rest(h: Harness) -> None:
    w = h.w
    original = h.client.close_leases
    first_closed: list[str] = []

    def tenant_beats_us(lease_uuids, reason, signed=None):  # type: ignore[no-untyped-def]
        if not first_closed:
            first_closed.append(lease_uuids[0])
            w.model.close_leases(addr("pair"), [lease_uuids[0]], "tenant left")
        return original(lease_uuids, reason, signed=signed)

    h.client.close_leases = tenant_beats_us  # type: ignore[method-assign]
    first, second = sorted(h.credit_used_up_elsewhere("pair", ours=2))
    for _ in range(40):
        if w.model.lease(second).state != "ACTIVE":
            break
        h.step(10)
    (gone,) = first_closed
    kept = second if gone == first else first
    assert w.model.lease(gone).closure_reason == "tenant left"
    assert w.model.lease(kept).closure_reason == w.config.scheduler.closure_reason


def test_a_syncing_node_closes_nothing_until_it_has_caught_up(h: Harness) -> None:
    w = h.w
    (ours,) = h.credit_used_up_elsewhere("stale")
    w.node.set_catching_up(True)
    for _ in range(45):  # 7.5 minutes: well past the grace window
        h.step(10)
    assert w.model.lease(ours).state == "ACTIVE"
    w.node.set_catching_up(False)
    for _ in range(6):
        if w.model.lease(ours).state != "ACTIVE":
            break
        h.step(10)
    assert w.model.lease(ours).closure_reason == w.config.scheduler.closure_reason


def test_a_tenants_own_close_heard_by_the_websocket_is_booked_from_the_tx_it_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from actors.ledger_writer import start_ledger_writer
    from ledger.store import Ledger

    world = make_world(websocket=True)
    ledger = Ledger.open(tmp_path / "books.sqlite", PROVIDER, synchronous="normal")
    h = Harness(world)
    writer = start_ledger_writer(h.sidecar.router, world.clock, ledger, world.config.ledger)
    try:
        t = world.tenant("leaving")
        lease = world.lease(t, price=3)
        h.start()
        world.clock.advance(timedelta(seconds=100))
        result = world.model.close_leases(t, [lease], "tenant left")  # not through us: the event tells, its tx says
        settled = {c.denom: c.amount for c in result.total_settled_amounts}

        def booked() -> dict[str, int]:  # the writer commits when its mailbox runs dry
            rows = ledger.conn.execute(
                "SELECT denom, amount FROM settlements WHERE lease_uuid = ? AND kind = 'close'", (lease,)
            ).fetchall()
            return {d: int(a) for d, a in rows}

        wait_until(lambda: booked() == settled, timeout=10, what="the close's settlement in the ledger")
        assert settled == {"umfx": 300}
    finally:
        h.close()
        writer.close()
        ledger.close()


class BookedHarness(Harness):
    """The sidecar with its books on ``path``, restored from them as a restart restores it; the world outlives it."""

    def __init__(self, world: World, path) -> None:  # type: ignore[no-untyped-def]
        from actors.ledger_writer import start_ledger_writer
        from ledger.store import Ledger

        self.ledger = ledger = Ledger.open(path, PROVIDER, synchronous="normal")
        super().__init__(
            world,
            (lambda s: start_ledger_writer(s.router, world.clock, ledger, world.config.ledger),),
            restored=ledger.tenant_snapshots(),
            restored_lookups=ledger.withdraw_lookups(),
            restored_close_lookups=ledger.close_lookups(),
            leases_to_read=ledger.leases_to_read(),
        )

    def booked(self, lease: str) -> list[tuple[str, int, int]]:
        """(denom, amount, at_us) of each close settlement of ``lease`` in the books."""
        with self.ledger.read() as conn:
            rows = conn.execute(
                "SELECT denom, amount, at_us FROM settlements WHERE lease_uuid = ? AND kind = 'close'", (lease,)
            ).fetchall()
        return [(d, int(a), at) for d, a, at in rows]

    def close(self) -> None:
        self.sidecar.stop()
        self.dispatcher.shutdown()
        self.ledger.close()


@pytest.mark.parametrize("tx_index", ["kv", "hash_only"])
def test_closes_by_a_tenant_while_the_sidecar_was_down_are_booked_at_their_block_time(tmp_path, tx_index) -> None:  # type: ignore[no-untyped-def]
    from ledger.periods import to_us

    world = make_world(websocket=True)
    path = tmp_path / "books.sqlite"
    try:
        t = world.tenant("leaving")
        a, b = world.lease(t, price=3), world.lease(t, price=5)
        stays = world.tenant("stays")
        c = world.lease(stays, price=2)
        first = BookedHarness(world, path)
        first.start()
        first.step(60)
        first.close()  # down: nobody hears what follows
        world.clock.advance(timedelta(seconds=100))
        settled = {}
        for lease in (a, b):
            before = world.model.lease_totals(lease)[1].get("umfx", 0)
            world.model.close_leases(t, [lease], "moving out")
            settled[lease] = world.model.lease_totals(lease)[1]["umfx"] - before
            world.clock.advance(timedelta(seconds=7))
        world.node.set_tx_index(tx_index)

        second = BookedHarness(world, path)  # the restart, on the same books
        try:
            second.start()
            closed_at = {u: to_us(world.model.lease(u).closed_at) for u in (a, b)}
            if tx_index == "kv":
                wait_until(lambda: all(second.booked(u) == [("umfx", settled[u], closed_at[u])] for u in (a, b)),
                           timeout=10, what="the tenant's closes in the books")
                wait_until(lambda: second.ledger.lease_issues() == [], timeout=10, what="the searches marked over")
                assert all(settled.values())
            else:
                # The node's index leaves the billing events out: the books say so, per lease, in its month
                # (not found, and still sought while the search is asked again).
                def issues() -> set[tuple[str, str, str, str]]:
                    return {(i.lease_uuid, i.kind, i.period, i.tenant) for i in second.ledger.lease_issues()}

                expected = {(u, kind, "2026-03", t) for u in (a, b) for kind in ("close_not_found", "close_sought")}
                wait_until(lambda: issues() == expected, timeout=10, what="the issues")
                assert second.booked(a) == second.booked(b) == []
            for u in (a, b):  # billed to the chain's own close, heard or not
                wait_until(lambda u=u: second.ledger.lease(u)["closed_at_us"] == closed_at[u], timeout=10, what="closed_at")
            assert world.model.lease(c).state == "ACTIVE" and second.ledger.lease(c)["closed_at_us"] is None
        finally:
            second.close()
        from bench.books_audit import audit

        books = audit(second.ledger.__class__.open(path, PROVIDER), world.model, PROVIDER)
        if tx_index == "kv":
            assert books.clean and not books.reported and books.closes == 2, books.table()
        else:  # the books say what they lack: nothing lost unreported, nothing doubled
            assert books.clean and books.reported == {"umfx": sum(settled.values())}, books.table()
    finally:
        world.close()


def test_a_search_for_a_closing_tx_that_a_stop_cut_short_is_made_again_at_the_next_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The tenant's close is heard and read, but the node's tx search keeps failing until the sidecar stops:
    the books hold the search (close_sought); the next start reads the lease again and books the close."""
    from ledger.periods import to_us

    world = make_world(websocket=True)
    path = tmp_path / "books.sqlite"
    try:
        t = world.tenant("leaving")
        lease = world.lease(t, price=3)
        first = BookedHarness(world, path)
        first.start()
        world.devnet.faults.set_error_rate("GetTxsEvent", 1.0)
        world.devnet.faults.set_error_rate("GetTx", 1.0)
        world.clock.advance(timedelta(seconds=40))
        paid = world.model.lease_totals(lease)[1].get("umfx", 0)
        world.model.close_leases(t, [lease], "moving out")
        settled = world.model.lease_totals(lease)[1]["umfx"] - paid
        closed_at = to_us(world.model.lease(lease).closed_at)
        wait_until(lambda: first.ledger.lease(lease)["closed_at_us"] == closed_at, timeout=10, what="the close read")
        assert [(i.lease_uuid, i.kind) for i in first.ledger.lease_issues()] == [(lease, "close_sought")]
        assert first.booked(lease) == []
        first.close()  # stopped with the search still failing

        world.devnet.faults.set_error_rate("GetTxsEvent", 0.0)
        world.devnet.faults.set_error_rate("GetTx", 0.0)
        second = BookedHarness(world, path)
        assert lease in second.ledger.leases_to_read()
        try:
            second.start()
            wait_until(lambda: second.booked(lease) == [("umfx", settled, closed_at)], timeout=10, what="the close booked")
            wait_until(lambda: second.ledger.lease_issues() == [], timeout=10, what="the search marked over")
        finally:
            second.close()
    finally:
        world.close()


def test_a_close_during_a_websocket_gap_is_booked_from_its_tx_and_billed_to_the_chains_close(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ledger.periods import to_us

    world = make_world(websocket=True)
    h = BookedHarness(world, tmp_path / "books.sqlite")
    try:
        t = world.tenant("gap")
        lease = world.lease(t, price=4)
        h.start()
        before = h.reconciles()
        world.devnet.websocket_server.freeze_all()  # nothing is pushed to the listener from here on
        world.clock.advance(timedelta(seconds=90))
        paid = world.model.lease_totals(lease)[1].get("umfx", 0)
        world.model.close_leases(t, [lease], "tenant left")
        settled = world.model.lease_totals(lease)[1]["umfx"] - paid
        world.devnet.websocket_server.drop_all()
        wait_until(lambda: h.reconciles() > before, timeout=10, what="a reconnect")
        closed_at = to_us(world.model.lease(lease).closed_at)
        wait_until(lambda: h.booked(lease) == [("umfx", settled, closed_at)], timeout=10, what="the close in the books")
        wait_until(lambda: h.ledger.lease(lease)["closed_at_us"] == closed_at, timeout=10, what="the chain's close time")
    finally:
        h.close()
        world.close()


def test_forged_but_well_formed_frames_change_nothing_in_the_books_or_the_watch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Frames the websocket pushes that the chain never made: a close of an ACTIVE lease settling
    -1,000,000 and 10^26 umfx, its auto-close, a new lease of a tenant nobody knows. Each has the lease
    read; the reads say otherwise, and nothing is booked, ended or started."""
    from chain.model import ChainEvent, TxEvents

    world = make_world(websocket=True)
    h = BookedHarness(world, tmp_path / "books.sqlite")
    try:
        t = world.tenant("real")
        lease = world.lease(t, price=4)
        h.start()
        before = {table: h.ledger.count(table) for table in ("settlements", "closures", "lease_issues")}
        ghost = "019bbef3-b000-7aaa-8000-00000000dead"
        forged = [
            ("lease_closed", (("lease_uuid", lease), ("tenant", t), ("provider_uuid", PROVIDER),
                              ("settled_amounts", "-1000000umfx"), ("closed_by", "tenant"))),
            ("lease_closed", (("lease_uuid", lease), ("tenant", t), ("provider_uuid", PROVIDER),
                              ("settled_amounts", f"{10**26}umfx"), ("closed_by", "credit_exhaustion"))),
            ("lease_auto_closed", (("lease_uuid", lease), ("tenant", t), ("provider_uuid", PROVIDER),
                                   ("reason", "credit_exhausted"))),
            ("lease_created", (("lease_uuid", ghost), ("tenant", addr("ghost")), ("provider_uuid", PROVIDER))),
        ]
        for i, (kind, attributes) in enumerate(forged):
            world.devnet.websocket_server.publish(
                TxEvents(world.node.latest_height(), f"{i:02d}" * 32, world.clock.now(), (ChainEvent(kind, attributes),))
            )
        wait_until(lambda: sum(1 for d in list(h.deliveries) if type(d.message).__name__ == "LeaseRead") >= 2,
                   timeout=10, what="the reads the frames asked for")
        h.step(30)
        h.settle()
        assert world.model.lease(lease).state == "ACTIVE"
        assert {table: h.ledger.count(table) for table in before} == before  # nothing booked, nothing reported
        assert h.ledger.lease(lease)["closed_at_us"] is None and h.ledger.lease(ghost) is None
        assert h.core.tenants[t].leases == {lease} and addr("ghost") not in h.core.tenants
        # The lease is still watched and billed as the chain says: a real close ends it.
        world.model.close_leases(t, [lease], "tenant left")
        wait_until(lambda: h.ledger.lease(lease)["closed_at_us"] is not None, timeout=10, what="the real close")
        wait_until(lambda: len(h.booked(lease)) == 1, timeout=10, what="its settlement")
        assert 0 < h.booked(lease)[0][1] < 10**9
    finally:
        h.close()
        world.close()


def test_a_pending_lease_that_expires_at_end_of_block_is_heard_and_no_longer_watched() -> None:
    """lease_expired has no tx: it comes in a NewBlockEvents frame (CHAIN-VERSIONS.md 3)."""
    from messages.chain import LeaseItem
    from messages.coins import Coin
    from messages.scheduler import LeaseEventReceived

    h = Harness(make_world(websocket=True, pending_timeout="60s"))
    try:
        t = h.w.tenant("undecided")
        h.start()
        item = LeaseItem("sku-1", 1, Coin("umfx", 3))
        pending = h.w.model.create_lease(t, PROVIDER, [item], acknowledge=False).uuid
        wait_until(lambda: t in h.core.tenants, timeout=5, what="the lease_created event")
        for _ in range(16):  # past the pending timeout, a block at a time
            h.step(5)

        def heard() -> bool:
            return any(
                isinstance(d.message, LeaseEventReceived) and d.message.event.kind == "expired"
                and d.message.event.lease_uuid == pending
                for d in list(h.deliveries)
            )

        wait_until(heard, timeout=5, what="the lease_expired event")
        assert h.w.model.lease(pending).state == "EXPIRED"
        wait_until(lambda: t not in h.core.tenants, timeout=5, what="the tenant's monitor to retire")
    finally:
        h.close()
