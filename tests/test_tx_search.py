"""The tx that ended a lease, found after the fact: the devnet's ``GetTxsEvent`` and the clients' ``lease_end_tx``.

A lease that ended while the sidecar heard nothing (down, its websocket
cut) is read as ended; what its last settlement moved is only in the tx
that ended it, found with the node's tx search (``chain.lease_end``). The
devnet indexes every tx the chain includes, its own and the ones made on
the model directly (the demo's tenants), with the events each emitted;
``[devnet] tx_index`` is a node's indexer: ``kv``, ``hash_only`` (a search
finds nothing) or ``null`` ("transaction indexing is disabled").
"""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest

from chain.errors import NO_TX_INDEX, TX_INDEX, ChainError
from chain.model import ChainEvent, TxEvents
from chain.model_client import ModelChainClient
from chain.tx_index import TxIndex
from chain.ws_query import parse_query
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service
from messages.coins import Coin
from runtime.clock import utc
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, Raw, World
from tests.support import PROVIDER as MODEL_PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

T0 = utc(2026, 3, 1)


def _tx(n: int, *events: tuple[str, tuple[tuple[str, str], ...]]) -> TxEvents:
    return TxEvents(n, f"{n:064X}", T0 + timedelta(seconds=n), tuple(ChainEvent(t, a) for t, a in events))


def test_the_index_finds_a_tx_by_every_condition_of_the_query_and_pages_in_block_order() -> None:
    index = TxIndex(capacity=3)
    index.add(_tx(1, ("lease_closed", (("lease_uuid", "a"), ("closed_by", "tenant")))))
    index.add(_tx(2, ("lease_closed", (("lease_uuid", "b"), ("closed_by", "provider")))))
    index.add(_tx(3, ("provider_withdraw", (("lease_uuid", "a"), ("auto_closed", "true")))))
    index.add(_tx(4, ("lease_closed", (("lease_uuid", "a"), ("closed_by", "provider")))))  # tx 1 is pruned

    found, total = index.search(parse_query("lease_closed.lease_uuid='a'"))
    assert [t.height for t in found] == [4] and total == 1
    both = parse_query("lease_closed.lease_uuid='b' AND lease_closed.closed_by='provider'")
    assert [t.height for t in index.search(both)[0]] == [2]
    assert index.search(parse_query("lease_closed.lease_uuid='b' AND lease_closed.closed_by='tenant'")) == ([], 0)
    everything = parse_query("tm.event='Tx'")
    assert [t.height for t in index.search(everything, descending=True)[0]] == [4, 3, 2]
    assert [t.height for t in index.search(everything, page=2, limit=2)[0]] == [4]
    assert index.get(f"{3:064x}") is not None and index.get(f"{1:064X}") is None

    index.events = False  # a node whose index-events leave the billing events out
    assert index.search(parse_query("lease_closed.lease_uuid='a'")) == ([], 0)
    assert [t.height for t in index.search(parse_query(f"tx.hash='{4:064X}'"))[0]] == [4]


def _closed_by_tenant(world: World) -> tuple[str, str, int]:
    """A lease of ours the tenant closes on the chain directly (no tx through the node): (tenant, lease, settled)."""
    t = world.tenant("leaver")
    lease = world.lease(t, price=7)
    world.clock.advance(40)
    before = world.model.lease_totals(lease)[1].get("umfx", 0)
    world.model.close_leases(t, [lease], "moving out")
    return t, lease, world.model.lease_totals(lease)[1]["umfx"] - before


def test_a_tenants_close_is_found_by_the_nodes_tx_search_with_its_settlement_at_its_block_time(world: World) -> None:
    _, lease, settled = _closed_by_tenant(world)
    client = world.client()
    outcome = client.lease_end_tx(lease, PROVIDER)
    assert outcome is not None and settled > 0
    [s] = outcome.settlements
    assert (s.lease_uuid, s.kind, [(c.denom, c.amount) for c in s.amounts]) == (lease, "close", [("umfx", settled)])
    assert s.at == world.model.lease(lease).closed_at
    # A hint naming a tx that did not end it (a forged event's) is only a hint.
    assert client.lease_end_tx(lease, PROVIDER, tx_hash="AB" * 32) == outcome


def test_our_own_close_and_a_withdraws_auto_close_are_found_too(world: World) -> None:
    client = world.client()
    t = world.tenant("closed", umfx=10**9)
    ours = world.lease(t, price=3)
    poor = world.tenant("poor", umfx=50)
    drained = world.lease(poor, price=10)
    world.clock.advance(20)
    closed = client.close_leases([ours], "done")
    page = client.withdraw_leases([drained]) if not world.model.version.withdraw_cursor else client.withdraw_by_provider(PROVIDER, b"")
    assert world.model.lease(drained).state == "CLOSED"

    found = client.lease_end_tx(ours, PROVIDER)
    assert found is not None and found.tx_hashes == closed.tx_hashes
    assert found.settlements == closed.settlements
    auto = client.lease_end_tx(drained, PROVIDER)
    assert auto is not None and auto.tx_hashes == (page.tx_hash,)
    assert {s.lease_uuid for s in auto.settlements} <= {drained}
    booked = sum(c.amount for s in auto.settlements for c in s.amounts)
    assert booked == world.model.lease_totals(drained)[1].get("umfx", 0) > 0


def test_a_v2_1_0_provider_wide_auto_close_found_after_the_fact_is_not_booked_as_settling_nothing(world: World) -> None:
    """v2.1.0's provider-wide withdraw (the authority's, or ours from another process) auto-closes a
    lease with lease_auto_closed and batch_withdraw only, no provider_withdraw per lease
    (CHAIN-VERSIONS.md 2.5, 3): the tx is found, but what it settled on the lease is not known."""
    if world.model.version.withdraw_cursor:
        pytest.skip("the current chain names each lease's amount (provider_withdraw): the test above")
    client = world.client()
    drained = world.lease(world.tenant("poor", umfx=50), price=10)
    world.lease(world.tenant("rich", umfx=10**9), price=3)
    world.clock.advance(20)
    page = client.withdraw_by_provider(PROVIDER, b"")
    assert world.model.lease(drained).state == "CLOSED" and world.model.lease_totals(drained)[1].get("umfx", 0) > 0
    with pytest.raises(ChainError) as refused:
        client.lease_end_tx(drained, PROVIDER)
    assert not refused.value.transient  # searching again finds the same tx
    assert page.tx_hash in refused.value.message and "not known" in refused.value.message


def test_a_named_withdraw_that_auto_closed_two_leases_is_booked_only_where_each_amount_is_known(world: World) -> None:
    """v2.1.0's named withdraw writes amount "0" on each lease it auto-closes, and one total for the
    tx (CHAIN-VERSIONS.md 2.5): with two such leases, what each settled is not known, and neither is
    booked as settling nothing. The current chain names each lease's amount."""
    client = world.client()
    poor = world.tenant("poor", umfx=60)
    drained = [world.lease(poor, price=10), world.lease(poor, price=5)]
    world.clock.advance(20)
    page = client.withdraw_leases(drained)
    assert all(world.model.lease(u).state == "CLOSED" for u in drained)
    paid = {u: world.model.lease_totals(u)[1].get("umfx", 0) for u in drained}
    assert sum(paid.values()) == 60  # the first lease settled takes what credit there was
    for u in drained:
        if world.model.version.withdraw_cursor:
            [s] = client.lease_end_tx(u, PROVIDER).settlements
            assert [(c.denom, c.amount) for c in s.amounts] == ([("umfx", paid[u])] if paid[u] else [])
            continue
        with pytest.raises(ChainError) as refused:
            client.lease_end_tx(u, PROVIDER)
        assert not refused.value.transient and page.tx_hash in refused.value.message
        assert "cannot be split" in refused.value.message and "not known" in refused.value.message


def test_a_close_tx_that_ended_several_leases_gives_each_its_own_settlement_once(world: World) -> None:
    """Each ended lease is searched for on its own: its outcome holds its settlement, not the whole tx's."""
    t = world.tenant("leaves-all")
    ours = [world.lease(t, price=p) for p in (3, 5, 7)]
    theirs = world.lease(t, price=11, provider=OTHER_PROVIDER)
    world.clock.advance(40)
    before = {u: world.model.lease_totals(u)[1].get("umfx", 0) for u in ours}
    world.model.close_leases(t, [*ours, theirs], "moving out")
    settled = {u: world.model.lease_totals(u)[1]["umfx"] - before[u] for u in ours}
    assert len(set(settled.values())) == 3 and min(settled.values()) > 0

    client = world.client()
    outcomes = {u: client.lease_end_tx(u, PROVIDER) for u in ours}
    assert len({o.tx_hashes for o in outcomes.values()}) == 1  # one tx ended them all
    for u, outcome in outcomes.items():
        [s] = outcome.settlements
        assert (s.lease_uuid, [(c.denom, c.amount) for c in s.amounts]) == (u, [("umfx", settled[u])])
    booked = [s for o in outcomes.values() for s in o.settlements]
    assert sum(c.amount for s in booked for c in s.amounts) == sum(settled.values())


def test_a_lease_that_never_ended_by_a_tx_is_not_found(world: World) -> None:
    t = world.tenant("stays")
    active = world.lease(t)
    assert world.client().lease_end_tx(active, PROVIDER) is None
    with pytest.raises(ChainError, match="not a UUID"):
        world.client().lease_end_tx("x' OR lease_closed.lease_uuid='y", PROVIDER)


def test_a_node_that_indexes_hashes_only_finds_nothing_and_one_without_an_index_says_so(world: World, raw: Raw) -> None:
    _, lease, _ = _closed_by_tenant(world)
    client = world.client()
    world.node.set_tx_index("hash_only")
    assert client.lease_end_tx(lease, PROVIDER) is None

    world.node.set_tx_index("null")
    with pytest.raises(ChainError) as info:
        client.lease_end_tx(lease, PROVIDER)
    assert (info.value.codespace, info.value.code, info.value.transient) == (TX_INDEX, NO_TX_INDEX, False)
    assert "indexing is disabled" in str(info.value)
    with pytest.raises(grpc.RpcError) as raw_info:
        raw.txs.GetTxsEvent(tx_service.GetTxsEventRequest(query=f"lease_closed.lease_uuid='{lease}'"))
    assert raw_info.value.code() == grpc.StatusCode.INTERNAL


def test_get_txs_event_answers_as_the_sdk_does(world: World, raw: Raw) -> None:
    _, lease, _ = _closed_by_tenant(world)
    r = raw.txs.GetTxsEvent(tx_service.GetTxsEventRequest(query=f"lease_closed.lease_uuid='{lease}'", page=1, limit=10))
    assert r.total == 1 and len(r.txs) == len(r.tx_responses) == 1
    resp = r.tx_responses[0]
    assert {e.type for e in resp.events} >= {"lease_closed", "message"}
    assert resp.height > 0 and resp.timestamp and resp.code == 0
    assert raw.txs.GetTx(tx_service.GetTxRequest(hash=resp.txhash)).tx_response.txhash == resp.txhash
    for bad in ("", "lease_closed.lease_uuid > 'x'"):
        with pytest.raises(grpc.RpcError) as info:
            raw.txs.GetTxsEvent(tx_service.GetTxsEventRequest(query=bad))
        assert info.value.code() == grpc.StatusCode.INTERNAL


def test_the_model_client_searches_the_same_way_and_a_restarted_client_still_finds_the_tx(clock) -> None:
    model = chain_model(clock)
    model.register_provider(MODEL_PROVIDER, PROVIDER_ADDRESS)
    first = ModelChainClient(model, MODEL_PROVIDER, PROVIDER_ADDRESS)
    tenant = addr("leaver")
    model.fund_credit(tenant, [Coin("umfx", 10**9)])
    lease = model.create_lease(tenant, MODEL_PROVIDER, [item(5)]).uuid
    clock.advance(60)
    model.close_leases(tenant, [lease], "bye")
    again = ModelChainClient(model, MODEL_PROVIDER, PROVIDER_ADDRESS)  # after a restart
    found = again.lease_end_tx(lease, MODEL_PROVIDER)
    assert found is not None and first.lease_end_tx(lease, MODEL_PROVIDER) == found
    assert found.settlements[0].amounts[0].amount == model.lease_totals(lease)[1]["umfx"]
    again.tx_index_mode = "null"
    with pytest.raises(ChainError, match="indexing is disabled"):
        again.lease_end_tx(lease, MODEL_PROVIDER)
