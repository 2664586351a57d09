"""Whole cycles through the real actors on the chain model (manual clock and dispatcher)."""

from __future__ import annotations

import pytest

import time
from datetime import timedelta

from chain.errors import ChainError
from chain.model import CREDIT_EXHAUSTED_REASON
from chain.model_client import ModelChainClient
from messages.coins import Coin
from runtime.dispatch import ThreadedDispatcher
from runtime.clock import RealClock
from sidecar.app import Sidecar
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, chain_version, item, settings, world

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def paid_withdraws(client) -> int:  # type: ignore[no-untyped-def]
    """Withdraw txs sent, provider-wide pages and named ones."""
    return client.calls.get("withdraw_by_provider", 0) + client.calls.get("withdraw_leases", 0)


def credit_used_up_elsewhere(w, ours: int = 1):  # type: ignore[no-untyped-def]
    """t1 with ``ours`` leases of ours and a costly one of another provider that uses its
    credit up without settling; the sidecar runs and has just seen the credit gone.
    Returns (our leases, the other provider's lease)."""
    w.model.fund_credit(addr("t1"), [Coin("umfx", 1_000)])
    leases = [w.model.create_lease(addr("t1"), PROVIDER, [item(1)]) for _ in range(ours)]
    other = w.model.create_lease(addr("t1"), OTHER, [item(100)])
    w.sidecar.withdraw_once()
    w.sidecar.start()
    w.run_for(15)  # 1,500 accrued elsewhere > 1,000: credit gone counting unsettled accrual
    w.sidecar.trigger_withdraw("test")
    w.run_for(1)
    return leases, other


def test_a_withdraw_reaches_every_lease_by_cursor_or_by_name(clock) -> None:
    """Current: provider-wide pages through next_key. v2.1.0 (no cursor): the leases by name, at most 100 a tx."""
    w = world(clock, withdraw_limit=2)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**9)])
    leases = [w.model.create_lease(addr("t1"), PROVIDER, [item(3)]) for _ in range(5)]
    clock.advance(100)
    assert w.sidecar.withdraw_once()
    if w.model.version.withdraw_cursor:
        assert (w.client.calls["withdraw_by_provider"], w.client.calls.get("withdraw_leases", 0)) == (3, 0)  # 2 + 2 + 1
    else:
        assert (w.client.calls.get("withdraw_by_provider", 0), w.client.calls["withdraw_leases"]) == (0, 1)
    assert w.model.balance(addr("t1"))["umfx"] == 10**9 - 5 * 300
    for lease in leases:
        assert w.model.lease(lease.uuid).last_settled_at == clock.now()


def test_withdraw_stops_at_the_bound_of_txs(clock) -> None:
    if chain_version().withdraw_cursor:
        w = world(clock, withdraw_limit=2, max_withdraw_iterations=2)
        tenants, per_tenant, left = [addr("t1")], 5, 1  # pages of 2: one lease left
    else:
        w = world(clock, max_withdraw_iterations=1)
        tenants, per_tenant, left = [addr("t1"), addr("t2")], 75, 50  # a named tx of 100: 50 left
    for t in tenants:
        w.model.fund_credit(t, [Coin("umfx", 10**9)])
        for _ in range(per_tenant):
            w.model.create_lease(t, PROVIDER, [item(3)])
    clock.advance(100)
    w.sidecar.withdraw_once()
    assert paid_withdraws(w.client) == w.sidecar.settings.max_withdraw_iterations
    paid = sum(10**9 - w.model.balance(t)["umfx"] for t in tenants)
    assert paid == (len(tenants) * per_tenant - left) * 300  # the rest waits for the next cycle


def test_an_error_mid_withdraw_ends_it_after_retries_and_the_check_goes_on(clock) -> None:
    w = world(clock, withdraw_limit=2, max_retries=3)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**9)])
    for _ in range(5):
        w.model.create_lease(addr("t1"), PROVIDER, [item(3)])
    clock.advance(100)
    if w.model.version.withdraw_cursor:
        w.client.faults.fail("withdraw_by_provider", times=3, after=1)
        calls, settled = ("withdraw_by_provider", 4), 2  # page 1, then page 2 three times
    else:
        w.client.faults.fail("withdraw_leases", times=3)
        calls, settled = ("withdraw_leases", 3), 0  # the one named tx, three times
    w.sidecar.trigger_withdraw()
    w.run_for(30)  # backoff 1 s + 2 s
    assert w.client.calls[calls[0]] == calls[1]
    assert w.model.balance(addr("t1"))["umfx"] == 10**9 - settled * 300
    assert w.client.calls["credit_account"] == 1  # the credit check still ran


def test_exhausted_tenant_is_closed_after_the_grace_window_and_not_before(clock) -> None:
    w = world(clock)
    (ours,), _ = credit_used_up_elsewhere(w)
    zero_since = w.sidecar.scheduler_core.tenants[addr("t1")].recheck_at
    assert zero_since is not None
    w.run_for(4 * 60)
    assert w.model.lease(ours.uuid).state == "ACTIVE"
    w.run_for(70)
    closed = w.model.lease(ours.uuid)
    assert closed.state == "CLOSED" and closed.closure_reason == "credit depleted"
    assert addr("t1") not in w.sidecar.scheduler_core.tenants


def test_recovery_during_the_window_keeps_the_leases(clock) -> None:
    w = world(clock)
    (ours,), other = credit_used_up_elsewhere(w)
    w.run_for(59)
    w.model.close_leases(OTHER_ADDRESS, [other.uuid])  # settles what it owed
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**9)])
    w.run_for(10 * 60)
    assert w.model.lease(ours.uuid).state == "ACTIVE"


def test_failed_close_is_retried_at_the_next_check_without_a_new_window(clock) -> None:
    w = world(clock)
    (ours,), _ = credit_used_up_elsewhere(w)
    window_start = clock.now()
    w.client.faults.fail("close_leases", times=1)
    w.run_for(5 * 60 + 5)
    assert w.client.calls["close_leases"] == 1 and w.model.lease(ours.uuid).state == "ACTIVE"
    w.run_for(30)  # one retry interval: closed at once, no new five-minute window
    closed = w.model.lease(ours.uuid)
    assert closed.state == "CLOSED" and closed.closed_at < window_start + timedelta(minutes=6)


def test_failing_reads_schedule_early_rechecks_and_close_nothing(clock) -> None:
    w = world(clock)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**9)])
    ours = w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    w.client.faults.fail_rate("credit_account", 1.0)
    w.sidecar.withdraw_once()
    w.sidecar.start()
    w.run_for(3 * 60)
    assert w.client.calls["credit_account"] == 1  # below the threshold: the next check is the hourly one
    w.sidecar.trigger_withdraw()
    w.sidecar.trigger_withdraw()
    w.run_for(1)
    assert w.client.calls["credit_account"] == 3  # the threshold
    w.run_for(95)
    assert w.client.calls["credit_account"] == 6  # early re-checks every 30 s
    assert w.client.calls.get("close_leases", 0) == 0
    assert w.model.lease(ours.uuid).state == "ACTIVE"
    w.client.faults.clear()
    w.run_for(30)
    assert w.sidecar.scheduler_core.tenants[addr("t1")].recheck_at is None  # a good read ends the streak


def test_huge_balance_with_a_tiny_burn_does_not_overflow(clock) -> None:
    w = world(clock)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 2**250)])
    w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    w.sidecar.withdraw_once()
    w.sidecar.start()
    w.run_for(3 * 3600)
    dep = w.sidecar.scheduler_core.tenants[addr("t1")].depletion_at
    assert dep is not None and dep.year < 2100


def test_batch_with_an_already_closed_lease_still_closes_the_rest(clock) -> None:
    w = world(clock, events=False)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 1_000)])
    a = w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    b = w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    w.model.create_lease(addr("t1"), OTHER, [item(100)])
    original = ModelChainClient.close_leases

    def close_after_tenant_closed_one(self, lease_uuids, reason, signed=None):  # type: ignore[no-untyped-def]
        if w.model.lease(a.uuid).state == "ACTIVE":
            w.model.close_leases(addr("t1"), [a.uuid], "tenant left")  # the tenant beats us to it
        return original(self, lease_uuids, reason, signed)

    w.client.close_leases = close_after_tenant_closed_one.__get__(w.client)  # type: ignore[method-assign]
    w.sidecar.withdraw_once()
    w.sidecar.start()
    w.run_for(15)
    w.sidecar.trigger_withdraw("test")
    w.run_for(6 * 60)
    assert w.model.lease(a.uuid).closure_reason == "tenant left"
    assert w.model.lease(b.uuid).state == "CLOSED" and w.model.lease(b.uuid).closure_reason == "credit depleted"


def test_another_providers_auto_close_triggers_our_withdraw_and_our_leases_close(clock) -> None:
    w = world(clock)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10_000)])
    ours = w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    w.model.create_lease(addr("t1"), OTHER, [item(100)])
    w.sidecar.withdraw_once()
    w.sidecar.start()
    clock.advance(200)  # 20,000 accrued at the other provider
    checks = w.client.calls["provider_withdrawable"]
    w.model.withdraw(OTHER_ADDRESS, provider_uuid=OTHER)  # exhausts t1, auto-closes the other lease
    w.sidecar.settle()
    assert w.client.calls["provider_withdrawable"] == checks + 1  # triggered, not waiting an hour
    lease = w.model.lease(ours.uuid)
    if w.model.version.withdrawable_pagination:
        # The current chain's ProviderWithdrawable dry-runs the auto-close: it is due, and our
        # withdraw touches the lease, which the chain closes.
        assert paid_withdraws(w.client) >= 1
        assert lease.state == "CLOSED" and lease.closure_reason == CREDIT_EXHAUSTED_REASON
    else:
        # v2.1.0's sees nothing to withdraw (the credit is gone): no paid tx; our own close,
        # after the grace window, ends the lease (the chain stores it as exhausted: 2.3).
        assert lease.state == "ACTIVE" and paid_withdraws(w.client) == 0
        w.run_for((w.sidecar.settings.credit_check_zero_grace_period + w.sidecar.settings.credit_check_retry_interval).total_seconds())
        lease = w.model.lease(ours.uuid)
        assert lease.state == "CLOSED" and lease.closure_reason == CREDIT_EXHAUSTED_REASON
        assert w.client.calls["close_leases"] == 1
    assert addr("t1") not in w.sidecar.scheduler_core.tenants


def test_new_lease_event_starts_a_monitor_at_once(clock) -> None:
    w = world(clock)
    w.sidecar.withdraw_once()
    w.sidecar.start()
    assert w.sidecar.tenant_count() == 0
    w.model.fund_credit(addr("t5"), [Coin("umfx", 10**6)])
    w.model.create_lease(addr("t5"), PROVIDER, [item(1)])
    w.sidecar.settle()
    assert w.sidecar.tenant_count() == 1


def test_trigger_after_stop_is_ignored_and_stop_ends_start(clock) -> None:
    w = world(clock)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**6)])
    w.model.create_lease(addr("t1"), PROVIDER, [item(1)])
    w.sidecar.start()
    w.sidecar.stop()
    assert w.sidecar.trigger_withdraw() is False
    clock.advance(timedelta(hours=5))
    w.sidecar.settle()
    assert w.client.calls.get("withdraw_by_provider", 0) == 0
    assert w.sidecar.tenant_count() == 0 and not w.sidecar.scheduler.is_alive()


def test_stop_releases_a_stalled_chain_call_promptly() -> None:
    clock = RealClock()
    dispatcher = ThreadedDispatcher(clock.now, workers=2)
    from chain.model import BillingModel

    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.fund_credit(addr("t1"), [Coin("umfx", 10**6)])
    model.create_lease(addr("t1"), PROVIDER, [item(1)])
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    client.faults.stall("provider_withdrawable")  # the cycle's first chain call
    sidecar = Sidecar(
        clock=clock, dispatcher=dispatcher, client=client, settings=settings(), provider_uuid=PROVIDER,
        on_stop=[client.close],
    )
    try:
        sidecar.trigger_withdraw()
        deadline = time.monotonic() + 5
        while client.calls.get("provider_withdrawable", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.calls["provider_withdrawable"] == 1  # now blocked inside the chain call
        t = time.monotonic()
        sidecar.stop(timeout=5)
        assert time.monotonic() - t < 2.0
        assert not sidecar.chain_io.is_alive() and not sidecar.scheduler.is_alive()
    finally:
        dispatcher.shutdown()
        clock.close()


def test_chain_errors_are_classified() -> None:
    assert ChainError("x", codespace="sdk", code=32).transient
    assert not ChainError.billing(3, "not active").transient
    assert ChainError.transport("timeout", may_have_committed=True).failure("withdraw").may_have_committed


def test_waiting_for_a_cycle_on_the_threaded_runtime_returns_when_it_ends_and_times_out_on_none() -> None:
    """``wait_cycles_after`` sleeps on the scheduler's notification, not on a poll: it must still see
    the cycle end (and say False when none comes within its timeout)."""
    clock = RealClock()
    dispatcher = ThreadedDispatcher(clock.now, workers=2)
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    for i in range(3):
        model.fund_credit(addr(f"t{i}"), [Coin("umfx", 10**9)])
        model.create_lease(addr(f"t{i}"), PROVIDER, [item(1)])
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    sidecar = Sidecar(clock=clock, dispatcher=dispatcher, client=client, settings=settings(), provider_uuid=PROVIDER)
    try:
        core = sidecar.scheduler_core
        assert not sidecar.wait_cycles_after(0, timeout=0.05)  # no cycle asked for: none ends
        for n in range(3):
            sidecar.reconcile("test")
            assert sidecar.wait_cycles_after(n, timeout=30)
            assert core.cycles_started == n + 1 and core.cycle is None
        assert sidecar.tenant_count() == 3
    finally:
        sidecar.stop(timeout=5)
        dispatcher.shutdown()
        clock.close()


def test_a_message_outside_a_tx_happens_at_one_time_its_events_included() -> None:
    """The model read its clock again to stamp a message's events: on a real clock at 300x, a few
    milliseconds later was a second or more, and the books refused a withdraw's settlements as more
    than the lease could have accrued since its previous one (130 of them in a run of 220 tenants)."""
    from runtime.clock import ManualClock, utc

    class Ticking(ManualClock):
        """Every read of the time is 0.7 s later than the one before, as on a busy accelerated clock."""

        def now(self):  # type: ignore[no-untyped-def]
            self.advance(timedelta(milliseconds=700))
            return super().now()

    clock = Ticking(utc(2026, 3, 1))
    m = chain_model(clock)
    m.register_provider(PROVIDER, PROVIDER_ADDRESS)
    tenant = addr("t")
    m.fund_credit(tenant, [Coin("umfx", 10**9)])
    lease = m.create_lease(tenant, PROVIDER, [item(7)]).uuid
    txs: list = []
    m.subscribe(txs.append)
    clock.advance(timedelta(minutes=5))
    m.withdraw(PROVIDER_ADDRESS, lease_uuids=[lease])
    (tx,) = [t for t in txs if any(e.type == "provider_withdraw" for e in t.events)]
    settled = m.lease(lease).last_settled_at
    # The current chain moves the cursor by whole seconds (below the time by a fraction), v2.1.0 to the time.
    assert timedelta(0) <= tx.time - settled < timedelta(seconds=1), (tx.time, settled)
