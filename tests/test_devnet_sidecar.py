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
    def __init__(self, world: World) -> None:
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
            extra=[lambda s: ListenerPart(s, world.devnet.websocket_url, _with_listener(config))],
            on_stop=[self.client.close],
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

    def tenant_beats_us(lease_uuids, reason):  # type: ignore[no-untyped-def]
        if not first_closed:
            first_closed.append(lease_uuids[0])
            w.model.close_leases(addr("pair"), [lease_uuids[0]], "tenant left")
        return original(lease_uuids, reason)

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


def test_a_tenants_own_close_is_booked_from_the_websocket_event(tmp_path) -> None:  # type: ignore[no-untyped-def]
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
        result = world.model.close_leases(t, [lease], "tenant left")  # not through us: only the event tells
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
