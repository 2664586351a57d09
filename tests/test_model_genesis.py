"""``BillingModel.load_genesis``: a world loaded whole is the world built message by message.

Large benchmarks load their worlds this way (``bench/scale_tenants.py``), so
whatever the sidecar reads and does on one must be what it would read and
do on the other: every query, and what a withdraw and a close then move.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from chain.errors import ChainError, INSUFFICIENT_CREDIT, MAX_LEASES_REACHED, PROVIDER_NOT_FOUND
from chain.model import ChainParams, GenesisAccount, GenesisLease, PageRequest
from messages.coins import Coin
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item

pytestmark = pytest.mark.usefixtures("chain_version")

#: Reservations big enough to matter: a tenant funded with exactly its leases' runs dry in a minute.
PARAMS = ChainParams(min_lease_duration=60, max_leases_per_tenant=4)


def _genesis() -> list[GenesisAccount]:
    """Tenants of both providers, two denoms, one funded with exactly its reservations."""
    out = []
    for i in range(12):
        leases = [GenesisLease(PROVIDER, (item(1 + i % 3),)) for _ in range(1 + i % 3)]
        if i % 4 == 0:
            leases.append(GenesisLease(OTHER, (item(5), item(2, quantity=3, denom="upwr"))))
        need_umfx = sum(it.locked_price.amount * it.quantity for gl in leases for it in gl.items
                        if it.locked_price.denom == "umfx") * PARAMS.min_lease_duration
        umfx = need_umfx if i == 5 else 10**9 + i
        out.append(GenesisAccount(addr(f"g{i}"), (Coin("umfx", umfx), Coin("upwr", 10**6)), tuple(leases)))
    return out


def _two_worlds(clock):  # type: ignore[no-untyped-def]
    by_messages, loaded = (chain_model(clock, params=PARAMS) for _ in range(2))
    for m in (by_messages, loaded):
        m.register_provider(PROVIDER, PROVIDER_ADDRESS)
        m.register_provider(OTHER, OTHER_ADDRESS)
        # UUIDs carry 12 bits of the lease sequence: past 4,096 leases in one
        # millisecond they no longer come in index order (a large world's do not).
        m._lease_sequence = 4_090
    for acct in _genesis():
        by_messages.fund_credit(acct.tenant, acct.balances)
        for lease in acct.leases:
            by_messages.create_lease(acct.tenant, lease.provider_uuid, lease.items)
    assert loaded.load_genesis(_genesis()) == sum(len(a.leases) for a in _genesis())
    return by_messages, loaded


def _queries(m):  # type: ignore[no-untyped-def]
    """Everything a sidecar can read of the world (the answers' heights aside: genesis has no txs)."""
    tenants = sorted(m.tenants())
    pages = []
    for provider in (PROVIDER, OTHER):
        for state in ("", "ACTIVE", "CLOSED"):
            key = b""
            while True:
                page, key, _ = m.leases_by_provider(provider, state, PageRequest(key=key, limit=3))
                pages.append(page)
                if not key:
                    break
    return (
        m.all_leases(),
        pages,
        [m.credit_account(t)[0] for t in tenants],
        [m.leases_by_tenant(t) for t in tenants],
        [m.credit_estimate(t) for t in tenants],
        [(m.balance(t), m.reserved(t)) for t in tenants],
        m.provider_withdrawable(PROVIDER),
        [m.credit_accounts(PageRequest(offset=o, limit=5)) for o in range(0, len(tenants), 5)],
        m.denom_owners("umfx"),
        m.denom_owners("upwr"),
        [m.credit_address_kind(m.credit_address(t)) for t in tenants],
    )


def test_a_loaded_world_answers_every_query_as_one_built_by_messages(clock) -> None:
    by_messages, loaded = _two_worlds(clock)
    assert _queries(loaded) == _queries(by_messages)
    clock.advance(timedelta(seconds=90))  # tenant g5 has used its reservations up
    assert _queries(loaded) == _queries(by_messages)
    assert loaded.all_leases()[0].state == "ACTIVE"


def test_withdraws_and_closes_move_the_same_on_both(clock) -> None:
    by_messages, loaded = _two_worlds(clock)
    clock.advance(timedelta(seconds=90))
    ours = [lease.uuid for lease in loaded.all_leases() if lease.provider_uuid == PROVIDER]
    results = []
    for m in (by_messages, loaded):
        if m.version.withdraw_cursor:
            w = m.withdraw(PROVIDER_ADDRESS, provider_uuid=PROVIDER, limit=100)
        else:
            w = m.withdraw(PROVIDER_ADDRESS, lease_uuids=ours[:20])
        c = m.close_leases(PROVIDER_ADDRESS, ours[-3:], "test")
        results.append(((w.total_amounts, w.withdrawal_count, w.has_more, w.failed_lease_uuids),
                        (c.closed_count, c.total_settled_amounts), _queries(m)))
    assert results[0] == results[1]
    assert results[1][0][0], "something was withdrawn: the comparison is not of two empty answers"


def test_a_refused_lease_refuses_the_whole_genesis_as_the_chain_would_refuse_it(clock) -> None:
    m = chain_model(clock, params=PARAMS)
    m.register_provider(PROVIDER, PROVIDER_ADDRESS)
    fine = GenesisAccount(addr("fine"), (Coin("umfx", 10**9),), (GenesisLease(PROVIDER, (item(1),)),))
    short = GenesisAccount(addr("short"), (Coin("umfx", 119),), (GenesisLease(PROVIDER, (item(1),)),) * 2)
    with pytest.raises(ChainError) as loaded:
        m.load_genesis([fine, short])
    assert loaded.value.code == INSUFFICIENT_CREDIT
    assert (m.tenants(), m.all_leases()) == ((), ())  # nothing of it went in, the fine tenant neither
    # The same refusal, word for word, as the message that would have hit it.
    m.fund_credit(short.tenant, short.balances)
    m.create_lease(short.tenant, PROVIDER, [item(1)])
    with pytest.raises(ChainError) as created:
        m.create_lease(short.tenant, PROVIDER, [item(1)])
    assert str(created.value) == str(loaded.value)


def test_genesis_keeps_the_chains_caps_and_knows_its_providers(clock) -> None:
    m = chain_model(clock, params=PARAMS)
    m.register_provider(PROVIDER, PROVIDER_ADDRESS)
    rich = (Coin("umfx", 10**9),)
    with pytest.raises(ChainError) as many:
        m.load_genesis([GenesisAccount(addr("many"), rich, (GenesisLease(PROVIDER, (item(1),)),) * 5)])
    assert many.value.code == MAX_LEASES_REACHED
    with pytest.raises(ChainError) as unknown:
        m.load_genesis([GenesisAccount(addr("u"), rich, (GenesisLease(OTHER, (item(1),)),))])
    assert unknown.value.code == PROVIDER_NOT_FOUND
    m.load_genesis([GenesisAccount(addr("once"), rich)])
    with pytest.raises(ValueError, match="already has a credit account"):
        m.load_genesis([GenesisAccount(addr("once"), rich)])
    assert m.tenants() == (addr("once"),)
