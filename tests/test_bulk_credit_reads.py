"""Credit reads in bulk: a check cycle reads the chain's listings, not each tenant, where that costs fewer calls.

chain-io composes a tenant's read from the provider listings (ours, and each
other provider our tenants share), every credit account and each denom's
holders (``actors.credit_bulk``), and reads on its own every tenant those do
not hold whole. Every test runs on both chain versions.
"""

from __future__ import annotations

import msgspec
import pytest

from actors.chain_io import ChainIO, InlineExecutor
from actors.credit_bulk import compose, in_order, relevant_denoms
from actors.credit_rule import judge
from actors.shell import start_actor
from chain.client import AccountListing, HolderListing, Listing
from chain.model_client import ModelChainClient
from messages.chain import CreditAccount, Lease
from messages.chain_actor import ActiveLeasesCall, CreditReadsCall
from messages.coins import Coin
from messages.credit import CreditRead, CreditReadFailed
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import SCHEDULER, Router, tenant_address
from tests.support import OTHER, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, chain_version, item, probe

pytestmark = pytest.mark.usefixtures("chain_version")

T0 = utc(2026, 3, 1)
N = 12


class World:
    def __init__(self, shared: int = N, alone: int = 0) -> None:
        self.clock = ManualClock(T0)
        self.d = ManualDispatcher(self.clock.now)
        self.router = Router()
        self.model = chain_model(self.clock)
        self.model.register_provider(PROVIDER, PROVIDER_ADDRESS)
        self.model.register_provider(OTHER, addr("other"))
        self.tenants = []
        for i in range(shared + alone):
            t = addr(f"t{i}")
            self.model.fund_credit(t, [Coin("umfx", 10**9 + i), Coin("upwr", 7)])
            self.model.create_lease(t, PROVIDER, [item(1 + i % 3)])
            if i < shared:
                self.model.create_lease(t, OTHER, [item(2)])
            self.tenants.append(t)
        self.client = ModelChainClient(self.model, PROVIDER, PROVIDER_ADDRESS)
        self.io = start_actor(self.router, ChainIO, self.d, self.router, self.client, PROVIDER, InlineExecutor(), InlineExecutor())
        self.monitors = {t: probe(self.router, self.d, tenant_address(t)) for t in self.tenants}
        probe(self.router, self.d, SCHEDULER)

    def cycle(self, n: int) -> dict[str, int]:
        """One check cycle's reads (the provider's listing, then every tenant's credit); the calls it made."""
        before = dict(self.client.calls)
        for mon in self.monitors.values():
            mon.received.clear()
        self.clock.advance(30)
        self.io.tell(ActiveLeasesCall(n, SCHEDULER))
        self.d.run_until_idle()
        self.io.tell(CreditReadsCall(n, tuple(sorted(self.tenants))))
        self.d.run_until_idle()
        return {k: v - before.get(k, 0) for k, v in self.client.calls.items() if v != before.get(k, 0)}

    def read(self, tenant: str) -> CreditRead:
        [read] = self.monitors[tenant].received
        assert isinstance(read, CreditRead), read
        return read


def test_after_one_cycle_of_own_reads_a_cycle_costs_a_few_listings_not_two_calls_a_tenant() -> None:
    w = World()
    first = w.cycle(1)
    # Nothing known yet of the provider the tenants share: each tenant's own read finds it.
    assert first["credit_account"] == N and first["leases_by_tenant"] == N
    calls = w.cycle(2)
    # Ours and the other provider's leases, the accounts, and the holders of umfx (what the leases
    # charge: the tenant's own answer shows no upwr either, CHAIN-VERSIONS.md 1.8's relevant denoms).
    assert calls == {"leases_by_provider": 2, "credit_accounts": 2, "denom_owners": 1}
    for t in w.tenants:
        read = w.read(t)
        own = w.model.credit_account(t)[0]
        # Every field of the tenant's own answer, and every ACTIVE lease of every provider.
        assert msgspec.structs.replace(read.account, height=0) == own
        assert sorted(lease.uuid for lease in read.leases) == sorted(
            r.lease.uuid for r in w.model.leases_by_tenant(t, "ACTIVE")[0]
        )
        assert {lease.provider_uuid for lease in read.leases} == {PROVIDER, OTHER}
        # Good for credit to spare only: the monitor reads the tenant alone before anything else.
        assert read.leases_listed and read.height == read.account.height == w.model.height


def test_a_tenant_the_listings_do_not_hold_whole_is_read_on_its_own() -> None:
    w = World()
    w.cycle(1)
    w.cycle(2)
    third = addr("third-provider")
    w.model.register_provider("019bbef3-b000-7003-8000-000000000003", third)
    newcomer = w.tenants[0]
    w.model.create_lease(newcomer, "019bbef3-b000-7003-8000-000000000003", [item(1)])  # a provider not listed
    calls = w.cycle(3)
    assert calls["credit_account"] == 1 and calls["leases_by_tenant"] == 1
    assert not w.read(newcomer).leases_listed and len(w.read(newcomer).leases) == 3
    assert all(w.read(t).leases_listed for t in w.tenants[1:])


@pytest.mark.parametrize("kind", ["continuous_vesting", "permanent_locked"])
def test_a_vesting_credit_address_is_read_on_its_own_on_the_current_chain(kind: str) -> None:
    w = World()
    locked = w.tenants[3]
    w.model.set_credit_address_kind(locked, kind)
    w.cycle(1)
    w.cycle(2)
    if chain_version().reservation_isolation:
        # B is the spendable balance there; the bank lists the raw one, locked coins included.
        assert not w.read(locked).leases_listed
    else:
        assert w.read(locked).leases_listed  # v2.1.0 spends the raw balance: the listing is the read
    assert all(w.read(t).leases_listed for t in w.tenants if t != locked)


def test_a_bulk_read_answered_out_of_order_is_not_composed() -> None:
    w = World()
    w.cycle(1)
    real = w.client.denom_owners

    def lagging(denom: str) -> HolderListing:  # a node further behind answers the balances
        h = real(denom)
        return HolderListing(h.denom, h.balances, h.height - 1, h.top_height - 1)

    w.client.denom_owners = lagging  # type: ignore[method-assign]
    calls = w.cycle(2)
    assert calls["credit_account"] == N and calls["leases_by_tenant"] == N
    assert not any(w.read(t).leases_listed for t in w.tenants)


def test_a_failed_listing_reads_every_tenant_on_its_own_and_loses_none() -> None:
    w = World(shared=N - 4, alone=4)
    w.cycle(1)
    w.client.faults.fail("credit_accounts")
    calls = w.cycle(2)
    assert calls["credit_account"] == N
    assert all(isinstance(w.read(t), CreditRead) for t in w.tenants)
    w.client.faults.fail("denom_owners", times=2)
    w.cycle(3)
    assert all(isinstance(m.received[0], (CreditRead, CreditReadFailed)) and len(m.received) == 1
               for m in w.monitors.values())


def test_a_few_tenants_are_cheaper_read_one_by_one() -> None:
    w = World(shared=2)
    w.cycle(1)
    calls = w.cycle(2)
    assert "credit_accounts" not in calls and calls["credit_account"] == 2


# -- the core ---------------------------------------------------------------------------

def _listing(low: int, high: int) -> Listing:
    return Listing((), low, high)


def test_in_order_wants_leases_then_accounts_then_balances_by_height() -> None:
    accounts = AccountListing((), 10, 11)
    owners = HolderListing("umfx", (), 11, 12)
    assert in_order([_listing(9, 10)], accounts, [owners]) is None
    assert in_order([_listing(9, 10)], accounts, [HolderListing("umfx", (), 10, 12)]) is not None  # below the accounts
    assert in_order([_listing(9, 12)], accounts, [owners]) is not None  # a lease page after the accounts began
    assert in_order([_listing(0, 0)], accounts, [owners]) is not None  # a page without a height


LEASE = Lease("l1", "t", PROVIDER, (item(2),), last_settled_at=T0)


def test_compose_takes_the_balances_of_every_denom_the_tenants_own_read_shows() -> None:
    account = CreditAccount("t", (), active_lease_count=1, credit_address="c", reserved_amounts=(Coin("umfx", 5),))
    holders = {"umfx": {"c": 100, "x": 1}, "upwr": {"x": 3}}
    got = compose(account, (LEASE,), holders, None, shown=("upwr",))
    assert isinstance(got, CreditAccount)
    assert got.balances == (Coin("umfx", 100),) and got.available_balances == (Coin("umfx", 95),)
    assert isinstance(compose(account, (LEASE,), holders, None, shown=("uatom",)), str)  # not listed
    assert isinstance(compose(account, (), holders, None), str)  # counts a lease not listed
    isolated = msgspec.structs.replace(LEASE, reservation=())
    assert isinstance(compose(account, (isolated,), holders, None), str)  # current chain, kind unknown
    assert isinstance(compose(account, (isolated,), holders, "base"), CreditAccount)


def test_compose_with_the_denoms_its_caller_found_and_a_height_is_compose_at_that_height() -> None:
    account = CreditAccount("t", (), active_lease_count=1, credit_address="c", reserved_amounts=(Coin("umfx", 5),))
    holders = {"umfx": {"c": 100}, "upwr": {"c": 7}}
    denoms = relevant_denoms(account, (LEASE,), ("upwr",))
    assert denoms == {"umfx", "upwr"}
    got = compose(account, (LEASE,), holders, None, ("upwr",), denoms=denoms, height=42)
    assert got == msgspec.structs.replace(compose(account, (LEASE,), holders, None, ("upwr",)), height=42)
    assert got.balances == (Coin("umfx", 100), Coin("upwr", 7)) and got.height == 42
    # A lease listed twice is not two leases: its account's count of two does not match.
    twice = msgspec.structs.replace(account, active_lease_count=2)
    assert isinstance(compose(twice, (LEASE, LEASE), holders, None, denoms={"umfx"}), str)


def test_a_tenant_whose_reads_always_fail_fails_in_bulk_too_and_is_never_judged_on_a_listing() -> None:
    w = World()
    failing = w.tenants[5]
    w.client.faults.fail_rate("credit_account", 1.0, only=frozenset({failing}))
    w.cycle(1)
    w.cycle(2)
    assert isinstance(w.monitors[failing].received[0], CreditReadFailed)
    assert all(w.read(t).leases_listed for t in w.tenants if t != failing)


def test_a_lease_created_between_the_accounts_and_the_balances_does_not_make_a_bulk_read_say_credit_to_spare() -> None:
    """Current chain: a new (PENDING) lease reserves its tranche into R (2.6), which our lease may not spend.

    The bulk read takes R from ``CreditAccounts`` and B from ``DenomOwners`` read later. A lease created
    between the two is in neither the accounts nor the listings, so R lacks its tranche: S = B - (R - A)
    comes out larger than the truth at every height, and a lease whose credit is gone is judged to have
    credit to spare (its depletion wake planned up to T / rate later).
    """
    if not chain_version().reservation_isolation:
        pytest.skip("v2.1.0 spends the raw balance: reservations do not decide")
    w = World()
    edge = addr("edge")
    w.model.fund_credit(edge, [Coin("umfx", 1_000)])
    ours = w.model.create_lease(edge, PROVIDER, [item(10)])  # tranche 10 (min_lease_duration 1)
    w.tenants.append(edge)
    w.monitors[edge] = probe(w.router, w.d, tenant_address(edge))
    w.cycle(1)
    w.cycle(2)
    real = w.client.denom_owners
    created = []

    def meanwhile(denom: str) -> HolderListing:
        if not created:  # the tenant opens a lease with another provider while the walk runs
            created.append(w.model.create_lease(edge, OTHER, [item(200)], acknowledge=False))
        return real(denom)

    w.client.denom_owners = meanwhile  # type: ignore[method-assign]
    w.cycle(3)
    now = w.clock.now()
    own_account, _ = w.model.credit_account(edge)
    own_leases = tuple(r.lease for r in w.model.leases_by_tenant(edge, "ACTIVE")[0])
    (truth,) = judge(own_account, own_leases, {ours.uuid}, now)
    assert truth.gone, truth  # the tenant's own read at the chain's state: gone
    assert w.model._plan(w.model._leases[ours.uuid], now).exhausted  # and the chain would close it if touched
    read = w.read(edge)
    (seen,) = judge(read.account, read.leases, {ours.uuid}, now)
    assert seen.gone, (read.leases_listed, seen)
