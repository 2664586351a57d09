"""Conformance, CHAIN-VERSIONS.md 1.7, 1.8 and 2.8: the listings that answer for many tenants at once.

A credit check reads, besides each provider's ACTIVE leases (``LeasesByProvider``),
every credit account (``Query/CreditAccounts``: 1 pagination -> 1 credit_accounts,
2 pagination, on both versions) and the holders of each denom the tenants' leases
charge in (the bank's ``DenomOwners``: cosmos-sdk 0.50 for v2.1.0, 0.50 or 0.53 for
the current chain, both of which have it). Both page through the SDK's
``query.CollectionPaginate``: a key starts the page at the first row at or after
it (so a row gone between pages does not cut the walk short, unlike the lease
indexes' exact-match cursor of 2.8), a limit of 0 is 100, key and offset
together are refused. ``auth/Account`` tells a credit address's kind: on the
current chain B is the *spendable* balance (2.4), and a vesting account at a
credit address is what makes it differ from the raw one ``DenomOwners`` lists.

The wire tests run against the devnet over gRPC, the paging tests on the model,
and both clients are read on the same world; every test runs on both versions.
"""

from __future__ import annotations

import grpc
import pytest

from chain.billing_pb import query_pb2
from chain.errors import QueryRefused
from chain.model import PageRequest
from chain.model_client import ModelChainClient
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_query
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_query, query_pb2_grpc as bank_grpc
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock, utc
from tests.conformance_support import funded, lease, model_of, numbers, query_status
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, Raw, World
from tests.support import addr, chain_version

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def _bank(raw: Raw) -> bank_grpc.QueryStub:
    return bank_grpc.QueryStub(raw.channel)


def test_1_8_credit_accounts_lists_the_stored_accounts_with_no_balances(world: World, raw: Raw) -> None:
    a, b = world.tenant("a"), world.tenant("b", umfx=5 * 10**8)
    world.lease(a, price=3)
    world.model.create_lease(b, PROVIDER, [LeaseItem("sku-1", 1, Coin("umfx", 2))], legacy=True)
    world.lease(b, provider=OTHER_PROVIDER)
    r = raw.billing.CreditAccounts(query_pb2.QueryCreditAccountsRequest())
    assert numbers(r) == {1, 2} and not r.pagination.next_key
    listed = {acct.tenant: acct for acct in r.credit_accounts}
    assert set(listed) == {a, b}
    for tenant, acct in listed.items():
        # The same stored record the per-tenant query answers, field for field.
        single = raw.billing.CreditAccount(query_pb2.QueryCreditAccountRequest(tenant=tenant)).credit_account
        assert acct == single
    assert (listed[b].active_lease_count, listed[b].pending_lease_count) == (2, 0)
    if chain_version().unattributed_fields:
        assert listed[b].unattributed_lease_count == 1 and 6 in numbers(listed[b])
    else:
        assert numbers(listed[b]) <= {1, 2, 3, 4, 5}


def test_1_8_credit_accounts_pages_by_tenant_address(world: World, raw: Raw) -> None:
    tenants = {world.tenant(f"t{i}") for i in range(5)}
    seen, key, pages = [], b"", 0
    while True:
        r = raw.billing.CreditAccounts(
            query_pb2.QueryCreditAccountsRequest(pagination=pagination_pb2.PageRequest(key=key, limit=2))
        )
        pages += 1
        seen += [acct.tenant for acct in r.credit_accounts]
        key = r.pagination.next_key
        if not key:
            break
    assert pages == 3 and len(seen) == 5 and set(seen) == tenants  # 2 + 2 + 1, each once
    total = raw.billing.CreditAccounts(
        query_pb2.QueryCreditAccountsRequest(pagination=pagination_pb2.PageRequest(limit=1, count_total=True))
    ).pagination.total
    assert total == 5


def test_denom_owners_lists_each_credit_address_and_its_raw_balance(world: World, raw: Raw) -> None:
    a, b = world.tenant("a", umfx=700), world.tenant("b", umfx=900)
    world.model.fund_credit(b, [Coin("upwr", 5)])
    umfx = _bank(raw).DenomOwners(bank_query.QueryDenomOwnersRequest(denom="umfx"))
    address = {t: world.model.credit_account(t)[0].credit_address for t in (a, b)}
    assert {(o.address, o.balance.denom, o.balance.amount) for o in umfx.denom_owners} == {
        (address[a], "umfx", "700"), (address[b], "umfx", "900")
    }
    upwr = _bank(raw).DenomOwners(bank_query.QueryDenomOwnersRequest(denom="upwr"))
    assert [(o.address, o.balance.amount) for o in upwr.denom_owners] == [(address[b], "5")]  # a holds none
    first = _bank(raw).DenomOwners(
        bank_query.QueryDenomOwnersRequest(denom="umfx", pagination=pagination_pb2.PageRequest(limit=1))
    )
    rest = _bank(raw).DenomOwners(
        bank_query.QueryDenomOwnersRequest(denom="umfx", pagination=pagination_pb2.PageRequest(key=first.pagination.next_key))
    )
    assert len(first.denom_owners) == len(rest.denom_owners) == 1 and not rest.pagination.next_key
    assert first.denom_owners[0].address != rest.denom_owners[0].address
    with pytest.raises(grpc.RpcError) as info:
        _bank(raw).DenomOwners(bank_query.QueryDenomOwnersRequest(denom="1x"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_auth_account_of_a_credit_address_is_what_the_bank_made_it(world: World, raw: Raw) -> None:
    plain, locked = world.tenant("plain"), world.tenant("locked")
    world.model.set_credit_address_kind(locked, "continuous_vesting")
    for tenant, type_url in ((plain, "/cosmos.auth.v1beta1.BaseAccount"),
                             (locked, "/cosmos.vesting.v1beta1.ContinuousVestingAccount")):
        address = world.model.credit_account(tenant)[0].credit_address
        assert raw.auth.Account(auth_query.QueryAccountRequest(address=address)).account.type_url == type_url
    with pytest.raises(grpc.RpcError) as info:
        raw.auth.Account(auth_query.QueryAccountRequest(address=world.model.credit_address(addr("unfunded"))))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND  # an address is an account once something is sent to it


# -- paging (the model) -------------------------------------------------------------------------

def test_2_8_collection_paging_starts_at_or_after_its_key_and_is_never_cut_short() -> None:
    m = model_of(ManualClock(utc(2026, 3, 1)))
    tenants = [funded(m, f"t{i}", 10**6) for i in range(4)]
    first, key, _ = m.credit_accounts(PageRequest(limit=2))
    # A key between two rows (as when the row it named is gone) starts at the next one; a lease
    # index's exact-match cursor would end the walk there (2.8).
    after = key[:-1] + bytes([key[-1] + 1]) if key[-1] < 255 else key + b"\x00"
    rest, end, _ = m.credit_accounts(PageRequest(key=after, limit=10))
    inclusive, _, _ = m.credit_accounts(PageRequest(key=key, limit=10))
    assert len(inclusive) == 2 and len(rest) == 1 and not end
    assert {a.tenant for a in first + inclusive} == set(tenants)
    assert query_status(lambda: m.credit_accounts(PageRequest(key=key, offset=1))) == "INVALID_ARGUMENT"
    many = [funded(m, f"u{i}", 10**6) for i in range(101)]
    page, next_key, _ = m.credit_accounts(PageRequest())  # limit 0 is 100
    assert len(page) == 100 and next_key and len(many) + 4 == 105


def test_2_8_denom_owners_never_lists_a_zero_balance() -> None:
    m = model_of(ManualClock(utc(2026, 3, 1)))
    rich, gone = funded(m, "rich", 10**6), funded(m, "gone", 3600 + 2)
    lease(m, gone, rate=1)
    m.clock.advance(3600 + 2)
    m.withdraw(m.provider(PROVIDER)[0], provider_uuid=PROVIDER)  # settles all it has: its balance is 0
    holders = dict(m.denom_owners("umfx")[0])
    assert m.balance(gone).get("umfx", 0) == 0
    assert set(holders) == {m.credit_account(rich)[0].credit_address}
    with pytest.raises(QueryRefused):
        m.denom_owners("")


# -- both clients, one world ----------------------------------------------------------------------

def test_both_clients_read_the_same_listings_with_their_heights(world: World) -> None:
    tenants = [world.tenant(f"t{i}") for i in range(3)]
    for t in tenants:
        world.lease(t)
        world.lease(t, provider=OTHER_PROVIDER)
    cosmpy = world.client()
    model = ModelChainClient(world.model, PROVIDER, world.devnet.provider_address, page_size=2)
    try:
        for client in (cosmpy, model):
            other = client.leases_by_provider(OTHER_PROVIDER)
            assert sorted(lease.tenant for lease in other.leases) == sorted(tenants)
            assert 0 < other.height <= other.top_height
            accounts = client.credit_accounts()
            assert sorted(a.tenant for a in accounts.accounts) == sorted(tenants)
            assert all(a.balances == () and a.active_lease_count == 2 for a in accounts.accounts)
            holders = dict(client.denom_owners("umfx").balances)
            assert holders == {a.credit_address: world.model.balance(a.tenant)["umfx"] for a in accounts.accounts}
            assert client.account_kind(accounts.accounts[0].credit_address) == "base"
            assert client.account_kind(world.model.credit_address(addr("nobody"))) == ""
    finally:
        cosmpy.close()


def test_a_bulk_listing_that_is_not_one_is_a_failed_call() -> None:
    from chain.answers import MalformedAnswer, check_answer
    from chain.client import AccountListing, HolderListing

    check_answer("denom_owners", HolderListing("umfx", (("manifest1a", 3),), 5, 6))
    for op, answer in (
        ("denom_owners", HolderListing("umfx", (("manifest1a", -3),), 5, 6)),  # not an amount
        ("denom_owners", HolderListing("umfx", (), 6, 5)),  # its highest page below its lowest
        ("credit_accounts", AccountListing(("not an account",), 5, 5)),  # type: ignore[arg-type]
        ("leases_by_provider", HolderListing("umfx", ())),  # a listing of holders, not of leases
        ("account_kind", None),
    ):
        with pytest.raises(MalformedAnswer):
            check_answer(op, answer)


def test_the_devnets_read_faults_reach_the_bulk_listings(world: World, raw: Raw) -> None:
    """Not a chain fact: the devnet's faults (``GrpcFaults``), so that bulk reads meet what own reads meet."""
    ok, broken = world.tenant("ok"), world.tenant("broken")
    world.devnet.faults.fail_for("CreditAccount", frozenset({broken}))
    listed = [a.tenant for a in raw.billing.CreditAccounts(query_pb2.QueryCreditAccountsRequest()).credit_accounts]
    assert listed == [ok]  # a node that cannot answer its account does not list it
    world.devnet.faults.zero_reads(1.0)
    owners = _bank(raw).DenomOwners(bank_query.QueryDenomOwnersRequest(denom="umfx")).denom_owners
    assert len(owners) == 2 and {o.balance.amount for o in owners} == {"0"}
