"""Honest reads (issue 13, faults 2 and 7): a partial read is a failed read, and reads carry their height.

A credit read is the tenant's account and its leases; either part failing
is a failed read (fault 2). Every read is stamped with the height the node
answered at (``x-cosmos-block-height``); a read below one already seen for
the tenant is stale, and the chain actor closes nothing on a read further
behind the chain than ``max_node_lag`` (fault 7). The devnet serves stale
and zero reads when told, while it says it is synced.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from actors.chain_io import ChainIO, InlineExecutor
from actors.closures import CloseRound
from actors.shell import start_actor
from actors.tenant_credit import TenantCredit
from messages.chain import ChainFailure, CreditAccount, Lease, NodeStatus
from messages.chain_actor import CloseBatchCall, CreditCall, NodeStatusAnswered, NodeStatusCall
from messages.coins import Coin
from messages.credit import CloseFailed, CloseRequested, CreditRead, CreditReadFailed, LeasesSynced, TenantRestored
from messages.scheduler import TenantChecked
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import Router, tenant_address
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item, probe, settings

T0 = utc(2026, 3, 1)
S = settings()
LEASES = (Lease("l1", "t", PROVIDER, (item(2),)),)


def sent(effects, kind):
    return [e.message for e in effects if hasattr(e, "message") and isinstance(e.message, kind)]


def monitor() -> TenantCredit:
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES), T0)
    return m


def read(m: TenantCredit, at, umfx: int, height: int, cycle: int = 1):
    return m.handle(CreditRead(cycle, CreditAccount("t", (Coin("umfx", umfx),)), leases=LEASES, height=height), at)


def _one_lease_world():  # type: ignore[no-untyped-def]
    """(clock, the chain model, a tenant with credit and one lease of ours)."""
    clock = ManualClock(T0)
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    tenant = addr("t")
    model.fund_credit(tenant, [Coin("umfx", 10**9)])
    model.create_lease(tenant, PROVIDER, [item(1)])
    return clock, model, tenant


# -- fault 2: a partial read is a failed read ---------------------------------------------------
@pytest.mark.usefixtures("chain_version")
@pytest.mark.parametrize("part", ["credit_account", "leases_by_tenant"])
def test_fault_2_a_read_missing_its_account_or_its_leases_is_failed_and_never_clears_a_grace_window(part: str) -> None:
    """Through chain-io on the chain model: one part of the read fails, the other answers."""
    from chain.model_client import ModelChainClient

    clock, model, tenant = _one_lease_world()
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    d, router = ManualDispatcher(clock.now), Router()
    start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    box = probe(router, d, tenant_address(tenant))
    client.faults.fail(part, times=3)
    for cycle in (1, 2, 3):
        router.tell("chain-io", CreditCall(cycle, tenant))
    d.run_until_idle()
    failed = box.received
    assert [type(m) for m in failed] == [CreditReadFailed] * 3 and all(m.error.operation == part for m in failed)

    # A monitor in a grace window: each of them counts, keeps the window, asks for the re-check.
    m = monitor()
    read(m, T0, 0, height=1)  # credit gone: the window opens
    assert m.zero_since == T0
    for n, f in enumerate(failed, start=1):
        out = m.handle(f, T0 + timedelta(seconds=30 * n))
        (verdict,) = sent(out, TenantChecked)
        assert m.zero_since == T0 and m.consecutive_errs == n  # the window stands; never "credit back"
        assert verdict.recheck_at == T0 + timedelta(seconds=30 * n) + S.credit_check_retry_interval
        assert not sent(out, CloseRequested) and "credit back" not in verdict.note


@pytest.mark.usefixtures("chain_version")
def test_leases_answered_below_their_account_make_a_failed_read_not_a_read_of_too_little_credit() -> None:
    """Behind a load balancer the leases can come from a node a block behind the account's. A withdraw
    between the two heights then counts twice: the balance after it, the leases' accrual before it; the
    tenant looked out of credit. Such a read is failed (the monitor re-checks); leases from above the
    account's height (the order they are asked in) still make a read."""
    from chain.client import Listing
    from chain.model_client import ModelChainClient

    clock, model, tenant = _one_lease_world()
    shift = {"by": -1}

    class Behind(ModelChainClient):
        def leases_by_tenant(self, tenant: str) -> Listing:
            listing = super().leases_by_tenant(tenant)
            return Listing(listing.leases, listing.height + shift["by"], listing.top_height + shift["by"])

    client = Behind(model, PROVIDER, PROVIDER_ADDRESS)
    d, router = ManualDispatcher(clock.now), Router()
    start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    box = probe(router, d, tenant_address(tenant))
    router.tell("chain-io", CreditCall(1, tenant, full=True))
    d.run_until_idle()
    shift["by"] = 1
    router.tell("chain-io", CreditCall(2, tenant, full=True))
    d.run_until_idle()
    behind, ahead = box.received
    assert isinstance(behind, CreditReadFailed) and behind.error.transient and "below its credit account's" in behind.error.message
    assert isinstance(ahead, CreditRead) and ahead.height == ahead.account.height  # as old as its older part


# -- fault 7: a stale read never closes a tenant with credit ------------------------------------
def test_a_read_below_a_height_already_read_is_a_failed_read_whatever_it_says() -> None:
    m = monitor()
    read(m, T0, 0, height=100)  # credit gone at 100: the window opens
    read(m, T0 + timedelta(minutes=1), 10**6, height=110)  # credit back at 110: the window clears
    assert m.zero_since is None and m.read_height == 110
    out = read(m, T0 + S.credit_check_zero_grace_period * 2, 0, height=100)  # a node behind: the old zero
    (verdict,) = sent(out, TenantChecked)
    assert m.zero_since is None and m.consecutive_errs == 1 and not sent(out, CloseRequested)
    assert "stale read: answered at height 100, below height 110 already read" in verdict.note
    # Nor does a stale read that shows credit clear a window.
    read(m, T0 + timedelta(minutes=20), 0, height=120)
    read(m, T0 + timedelta(minutes=21), 10**6, height=119)
    assert m.zero_since == T0 + timedelta(minutes=20)
    # The height survives a restart.
    again = TenantCredit("t", S)
    again.handle(TenantRestored(m.snapshot()), T0)
    assert again.read_height == 120


def test_a_close_carries_the_height_of_the_read_that_decided_it() -> None:
    m = monitor()
    read(m, T0, 0, height=100)
    out = read(m, T0 + S.credit_check_zero_grace_period, 0, height=160)
    (request,) = sent(out, CloseRequested)
    assert request.read_height == 160


def status(height: int, at) -> NodeStatus:
    return NodeStatus(height, at, False)


@pytest.mark.parametrize(
    "read_height,block_times,closes,why",
    [
        (200, (), True, ""),  # at the chain's latest block
        (210, (), True, ""),  # past it: another node, ahead
        (190, ((190, T0 - timedelta(seconds=50)),), True, ""),  # 50 s behind: within max_node_lag (2 min)
        (100, ((100, T0 - timedelta(minutes=10)),), False, "its read was at height 100, 600s behind the chain's latest block"),
        (100, (), False, "its read was at height 100, whose block the node could not date"),
        (0, (), False, "its read carries no height"),
    ],
)
def test_the_chain_actor_closes_nothing_on_a_read_further_behind_the_chain_than_max_node_lag(
    read_height, block_times, closes, why
) -> None:
    rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a",), "r", read_height=read_height),
                               CloseRequested(5, "t2", ("b",), "r", read_height=200)])
    (call,) = sent(rnd.begin(), NodeStatusCall)
    assert call.heights == tuple(sorted({h for h in (read_height, 200) if h}))
    out = rnd.on_status(NodeStatusAnswered(1, status(200, T0), block_times=block_times), T0)
    (batch,) = sent(out, CloseBatchCall)
    assert batch.lease_uuids == (("a", "b") if closes else ("b",))
    if not closes:
        notes = [e.text for e in out if hasattr(e, "text")]
        assert any(f"closures of tenant t1 wait: {why}" in n and "a stale read never closes anything" in n for n in notes)
        assert rnd.failed["a"].message.startswith(f"stale read: {why}")


def test_a_round_whose_every_read_is_stale_tells_each_tenant_to_read_again() -> None:
    rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a",), "r", read_height=100)])
    out = rnd.on_status(NodeStatusAnswered(1, status(200, T0), block_times=((100, T0 - timedelta(hours=1)),)), T0)
    (failed,) = sent(out, CloseFailed)
    assert failed.lease_uuids == ("a",) and failed.retry_at == T0 + S.credit_check_retry_interval
    assert rnd.finished and not sent(out, CloseBatchCall)


# -- the devnet: heights on every answer, stale and zero reads ----------------------------------
@pytest.mark.usefixtures("chain_version")
def test_every_credit_read_over_grpc_carries_the_height_the_node_answered_at(world) -> None:
    t = world.tenant("h")
    world.lease(t, price=1)
    world.clock.advance(timedelta(seconds=42))
    client = world.client()
    try:
        height = world.node.latest_height()
        assert client.credit_account(t).height == height
        listing = client.leases_by_tenant(t)
        assert listing.height == height and len(listing.leases) == 1
        assert client.block_time(height - 3) == world.node.time_of(height - 3)
    finally:
        client.close()


@pytest.mark.usefixtures("chain_version")
def test_the_devnet_serves_stale_reads_from_an_older_height_and_zero_reads_at_the_current_one(world) -> None:
    t = world.tenant("s", umfx=5_000)
    client = world.client()
    faults = world.devnet.faults
    try:
        before = client.credit_account(t)  # remembered by the devnet, at its height
        world.model.fund_credit(t, [Coin("umfx", 1_000)])
        world.clock.advance(timedelta(minutes=1))
        faults.stale_reads(1.0, blocks=6)
        stale = client.credit_account(t)
        assert (stale.height, stale.balances) == (before.height, before.balances)  # 12 blocks back, as it was then
        faults.stale_reads(0.0, blocks=1)
        fresh = client.credit_account(t)
        assert fresh.height == world.node.latest_height() and fresh.balances == (Coin("umfx", 6_000),)
        faults.zero_reads(1.0)
        zero = client.credit_account(t)
        assert zero.height == fresh.height and zero.balances == () and zero.available_balances == ()
        assert (faults.stale_served, faults.zero_served) == (1, 1)
    finally:
        faults.clear()
        client.close()


def test_stale_and_zero_reads_are_devnet_settings_with_bounds() -> None:
    from runtime.config import ConfigError, load_config

    d = load_config(overrides={"devnet": {"stale_read_rate": 0.2, "stale_read_lag": "10m", "zero_read_rate": 0.05}}).devnet
    assert (d.stale_read_rate, d.stale_read_lag, d.zero_read_rate) == (0.2, timedelta(minutes=10), 0.05)
    with pytest.raises(ConfigError, match=r"\[devnet\] stale_read_rate: must be at most 1.0"):
        load_config(overrides={"devnet": {"stale_read_rate": 1.5}})
    with pytest.raises(ConfigError, match=r"\[devnet\] stale_read_lag: must be at least"):
        load_config(overrides={"devnet": {"stale_read_lag": "0s"}})


@pytest.mark.usefixtures("chain_version")
def test_fault_7_stale_reads_from_a_node_that_says_it_is_synced_never_close_a_tenant_with_credit(caplog) -> None:
    """The issue's deterministic case: credit gone, the tenant pays, and a lagging node keeps answering the old zero."""
    from tests.devnet_harness import make_world
    from tests.test_devnet_sidecar import Harness

    h = Harness(make_world(websocket=True))
    try:
        w = h.w
        t = w.tenant("stale", umfx=1_000)
        ours = w.lease(t, price=1)
        other = w.lease(t, price=100, provider=OTHER)
        h.start()
        h.step(15)
        h.sidecar.trigger_withdraw("test")
        h.settle()
        assert h.core.tenants[t].recheck_at is not None  # credit gone: inside the grace window
        for _ in range(6):
            h.step(10)
        # The tenant pays; from now on the node behind the load balancer answers from 30 blocks back
        # (150 s, more than max_node_lag) while saying it is synced: the old zero, again and again.
        w.model.close_leases(OTHER_ADDRESS, [other])
        w.model.fund_credit(t, [Coin("umfx", 10**9)])
        w.devnet.faults.stale_reads(1.0, blocks=30)
        with caplog.at_level(logging.WARNING, logger="leasewarden.decisions"):
            for _ in range(60):  # ten minutes: twice the grace window
                h.step(10)
        assert w.model.lease(ours).state == "ACTIVE"
        assert w.devnet.faults.stale_served > 10
        assert any("stale read" in r.getMessage() for r in caplog.records)
        # The node catches up: the fresh read finds the credit, and the tenant is kept.
        w.devnet.faults.stale_reads(0.0, blocks=1)
        for _ in range(40):
            h.step(10)
        assert w.model.lease(ours).state == "ACTIVE"
        assert h.core.tenants[t].recheck_at is None
    finally:
        h.close()
