"""A tenant's credit read costs one call where its account counts only our leases; it is acted on only when safe.

chain-io keeps the provider's last listing of its ACTIVE leases; a tenant
whose account counts as many ACTIVE leases as the listing holds for it gets
those (``leases_listed``) instead of a ``LeasesByTenant`` call. Read before
the account, they are good for a verdict of credit to spare only: the
tenant's monitor asks for a full read before it opens, keeps, clears or acts
on a grace window.
"""

from __future__ import annotations

from actors.chain_io import ChainIO, InlineExecutor
from actors.effects import Send
from actors.shell import start_actor
from actors.tenant_credit import TenantCredit
from chain.model_client import ModelChainClient
from messages.chain import CreditAccount, Lease
from messages.chain_actor import ActiveLeasesCall, CreditCall, CreditReadsCall
from messages.coins import Coin
from messages.credit import CreditRead, LeasesSynced
from messages.scheduler import ActiveLeasesRead, TenantChecked
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import CHAIN_IO, SCHEDULER, Router, tenant_address
from tests.support import OTHER, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item, probe, settings

T0 = utc(2026, 3, 1)


def _chain_io():
    clock = ManualClock(T0)
    d = ManualDispatcher(clock.now)
    router = Router()
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.register_provider(OTHER, addr("other"))
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    io = start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    return clock, d, router, model, client, io


def test_a_tenant_with_only_our_leases_costs_one_call_and_one_with_others_two() -> None:
    clock, d, router, model, client, io = _chain_io()
    ours, shared = addr("ours"), addr("shared")
    for t in (ours, shared):
        model.fund_credit(t, [Coin("umfx", 10**9)])
        model.create_lease(t, PROVIDER, [item(1)])
    model.create_lease(shared, OTHER, [item(2)])
    sched, a, b = probe(router, d, SCHEDULER), probe(router, d, tenant_address(ours)), probe(router, d, tenant_address(shared))
    io.tell(ActiveLeasesCall(1, SCHEDULER))
    d.run_until_idle()
    before = dict(client.calls)
    io.tell(CreditReadsCall(1, (ours, shared)))
    d.run_until_idle()
    calls = {k: v - before.get(k, 0) for k, v in client.calls.items() if v != before.get(k, 0)}
    # And once per tenant on the current chain, what its credit address is (actors.credit_bulk).
    kinds = {"account_kind": 2} if model.version.reservation_isolation else {}
    assert calls == {"credit_account": 2, "leases_by_tenant": 1, **kinds}
    before = dict(client.calls)
    io.tell(CreditReadsCall(2, (ours, shared)))
    d.run_until_idle()
    calls = {k: v - before.get(k, 0) for k, v in client.calls.items() if v != before.get(k, 0)}
    assert calls == {"credit_account": 2, "leases_by_tenant": 1}  # two tenants: cheaper one by one than in bulk
    a.received, b.received = a.received[:1], b.received[:1]
    [read_ours], [read_shared] = a.received, b.received
    assert read_ours.leases_listed and [lease.tenant for lease in read_ours.leases] == [ours]
    assert read_ours.leases == tuple(lease for lease in sched.received[0].leases if lease.tenant == ours)
    assert not read_shared.leases_listed and len(read_shared.leases) == 2  # the other provider's lease counts
    # The listing has no height: a listed read is stamped with its account's.
    assert read_ours.height == read_ours.account.height > 0
    assert 0 < read_shared.height <= read_shared.account.height


def test_a_full_read_is_asked_for_and_a_tenant_unlisted_reads_its_leases() -> None:
    clock, d, router, model, client, io = _chain_io()
    t = addr("t")
    model.fund_credit(t, [Coin("umfx", 10**9)])
    model.create_lease(t, PROVIDER, [item(1)])
    mon = probe(router, d, tenant_address(t))
    io.tell(CreditCall(1, t))  # no listing yet: the tenant's own leases are read
    io.tell(ActiveLeasesCall(1, SCHEDULER))
    probe(router, d, SCHEDULER)
    d.run_until_idle()
    io.tell(CreditCall(1, t, full=True))
    d.run_until_idle()
    assert [m.leases_listed for m in mon.received] == [False, False]
    assert client.calls["leases_by_tenant"] == 2


# -- the monitor ---------------------------------------------------------------------------

LEASE = Lease("l1", "t", PROVIDER, (item(2),), last_settled_at=T0, reservation=())


def _monitor() -> TenantCredit:
    m = TenantCredit("t", settings())
    m.handle(LeasesSynced((LEASE,)), T0)
    return m


def _listed(m: TenantCredit, umfx: int, at=T0, cycle: int = 1):
    return m.handle(CreditRead(cycle, CreditAccount("t", (Coin("umfx", umfx),), 1), leases=(LEASE,), leases_listed=True), at)


def _sent(effects, kind):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def test_a_listed_read_with_credit_to_spare_is_a_verdict_like_any_read() -> None:
    m = _monitor()
    out = _listed(m, 10**9)
    [v] = _sent(out, TenantChecked)
    assert v.depletion_at is not None and _sent(out, CreditCall) == [] and m.last_sample_at == T0


def test_a_listed_read_whose_credit_looks_gone_changes_nothing_and_asks_for_a_full_read() -> None:
    m = _monitor()
    before = m.snapshot()
    out = _listed(m, 0, cycle=4)
    assert [e.to for e in out] == [CHAIN_IO] and _sent(out, CreditCall) == [CreditCall(4, "t", full=True)]
    assert m.snapshot() == before and m.zero_since is None  # no window opened on it
    # The full read decides: it opens the window.
    out = m.handle(CreditRead(4, CreditAccount("t", (Coin("umfx", 0),), 1), leases=(LEASE,)), T0)
    [v] = _sent(out, TenantChecked)
    assert m.zero_since == T0 and v.recheck_at is not None


def test_a_listed_read_never_clears_a_grace_window() -> None:
    m = _monitor()
    m.handle(CreditRead(1, CreditAccount("t", (Coin("umfx", 0),), 1), leases=(LEASE,)), T0)
    assert m.zero_since == T0
    out = _listed(m, 10**9, cycle=2)  # credit back, as the listing has it: not enough to clear the window
    assert _sent(out, CreditCall) == [CreditCall(2, "t", full=True)] and m.zero_since == T0
    m.handle(CreditRead(2, CreditAccount("t", (Coin("umfx", 10**9),), 1), leases=(LEASE,)), T0)
    assert m.zero_since is None
