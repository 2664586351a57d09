"""``CosmpyChainClient`` against the devnet, through real gRPC on loopback.

Each test runs the production client code (cosmpy signing, gRPC stubs)
against a devnet node on a manual clock; blocks are cut only when a tx
waits (``tests.devnet_harness.BlockProducer``), so amounts are exact.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from chain.billing_pb import tx_pb2 as billing_tx
from chain.errors import BILLING, LEASE_NOT_ACTIVE, SDK, ChainError
from chain.model import TxEvents
from messages.coins import Coin, coins
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, World, wait_until


def _withdraw_txs(world: World) -> list:
    """Included txs (code 0) carrying a MsgWithdraw."""
    out = []
    for r in world.node.included_txs():
        if r.code == 0 and any(m.type_url.endswith("MsgWithdraw") for m in _tx_msgs(r)):
            out.append(r)
    return out


def _tx_msgs(r) -> list:
    from cosmpy.protos.cosmos.tx.v1beta1 import tx_pb2

    tx = tx_pb2.Tx()
    r.tx.Unpack(tx)
    return list(tx.body.messages)


def test_active_leases_by_provider_reads_every_page(world: World) -> None:
    t = world.tenant("t1")
    ours = [world.lease(t) for _ in range(7)]
    world.lease(t, provider=OTHER_PROVIDER)
    world.model.close_leases(world.devnet.provider_address, [ours[3]], "gone")
    client = world.client(page_size=2)

    leases = client.active_leases_by_provider(PROVIDER)

    assert [lease.uuid for lease in leases] == sorted(set(ours) - {ours[3]})
    assert all(lease.state == "ACTIVE" and lease.tenant == t for lease in leases)
    assert leases[0].items[0].locked_price == Coin("umfx", 10)
    assert world.devnet.faults.calls["LeasesByProvider"] == 3  # 6 leases, 2 per page


def test_queries_answer_what_the_chain_holds(world: World) -> None:
    t = world.tenant("t1", umfx=5_000)
    lease = world.lease(t, price=7)
    world.clock.advance(100)
    client = world.client()

    account = client.credit_account(t)
    assert account.balances == (Coin("umfx", 5_000),)
    assert account.active_lease_count == 1
    estimate = client.credit_estimate(t)
    assert estimate == world.model.credit_estimate(t)
    assert estimate.current_balance == (Coin("umfx", 5_000 - 700),)
    assert client.provider_withdrawable(PROVIDER) == (Coin("umfx", 700),)
    assert client.lease(lease) == world.model.lease(lease)
    status = client.node_status()
    assert status == world.node.status()
    assert status.latest_block_height == 1 + 100 // 5
    assert status.catching_up is False

    with pytest.raises(ChainError) as info:
        client.credit_account("manifest1nobody")
    assert (info.value.codespace, info.value.code, info.value.transient) == (BILLING, 8, False)


def test_node_status_reports_catching_up(world: World) -> None:
    client = world.client()
    world.node.set_catching_up(True)
    assert client.node_status().catching_up is True
    world.node.set_catching_up(False)
    assert client.node_status().catching_up is False


def test_paged_withdraw_drains_the_provider_through_next_key(world: World) -> None:
    t1, t2 = world.tenant("t1"), world.tenant("t2")
    leases = [world.lease(t1, price=3) for _ in range(4)] + [world.lease(t2, price=5) for _ in range(3)]
    world.clock.advance(60)
    seen: list[TxEvents] = []
    world.model.subscribe(seen.append)
    client = world.client(withdraw_limit=3)
    before = world.model.balance(t1)["umfx"] + world.model.balance(t2)["umfx"]

    pages = []
    key = b""
    while True:
        page = client.withdraw_by_provider(PROVIDER, key)
        pages.append(page)
        key = page.next_key
        if not key:
            break

    assert [p.withdrawal_count for p in pages] == [3, 3, 1]
    assert [p.has_more for p in pages] == [True, True, False]
    assert pages[0].next_key == sorted(leases)[2].encode()
    paid = sum(p.total_amounts[0].amount for p in pages if p.total_amounts)
    after = world.model.balance(t1)["umfx"] + world.model.balance(t2)["umfx"]
    assert paid == before - after > 0
    # Every lease was settled exactly once, up to its page's block.
    for u in leases:
        accrued, paid_total = world.model.lease_totals(u)
        assert accrued == paid_total
    # The model's events carry the node's block height and the tx hash GetTx knows.
    withdraw_events = [tx for tx in seen if any(e.type == "batch_withdraw" for e in tx.events)]
    assert [tx.tx_hash for tx in withdraw_events] == [p.tx_hash for p in pages]
    for tx in withdraw_events:
        included = world.node.get_tx(tx.tx_hash)
        assert included is not None and included.height == tx.height


def test_each_txs_cost_is_the_fee_and_gas_the_node_charged(world: World) -> None:
    t = world.tenant("t1")
    lease = world.lease(t)
    world.clock.advance(30)
    client = world.client()
    address = world.devnet.provider_address
    before = world.node.fee_balance(address)

    page = client.withdraw_by_provider(PROVIDER, b"")
    closed = client.close_leases([lease], "done")

    charged = before - world.node.fee_balance(address)
    costs = [page.cost, closed.cost]
    assert all(c is not None for c in costs)
    assert sum(c.fee[0].amount for c in costs) == charged > 0  # type: ignore[union-attr]
    for cost, tx_hash in zip(costs, (page.tx_hash, closed.tx_hashes[0])):
        included = world.node.get_tx(tx_hash)
        assert included is not None and cost is not None
        assert (cost.gas_wanted, cost.gas_used) == (included.gas_wanted, included.gas_used)
        assert cost.fee[0].denom == "umfx" and cost.sequence_retries == 0
    # A lookup of the same tx tells the same cost, minus the re-signs only the sender knew of.
    assert client.withdraw_outcome(page.tx_hash, PROVIDER).cost == page.cost  # type: ignore[union-attr]


def test_injected_sequence_mismatch_is_retried_and_lands_once(world: World) -> None:
    t = world.tenant("t1")
    world.lease(t)
    client = world.client()
    client.withdraw_by_provider(PROVIDER, b"")  # caches account number and sequence
    world.clock.advance(30)
    accounts_read = world.devnet.faults.calls["Account"]
    # Another writer used the key: the cached sequence is now one behind.
    world.node.advance_sequence(world.devnet.provider_address)

    signed: list[tuple[str, bool]] = []  # each hash, and whether the node had included it when we heard it

    def heard(tx_hash: str) -> None:
        signed.append((tx_hash, any(r.txhash == tx_hash for r in world.node.included_txs())))

    page = client.withdraw_by_provider(PROVIDER, b"", signed=heard)

    assert page.withdrawal_count == 1
    assert world.devnet.faults.calls["Account"] == accounts_read + 1  # re-read once
    landed = _withdraw_txs(world)
    assert len(landed) == 2 and landed[-1].txhash == page.tx_hash
    assert all(r.code == 0 for r in world.node.included_txs())
    # The stale sequence was caught by the simulation, before any signing: one tx signed, heard before its broadcast.
    assert signed == [(page.tx_hash, False)]
    assert page.cost is not None and (page.cost.sequence_retries, page.cost.out_of_gas_retries) == (1, 0)


def test_two_writers_with_one_key_collide_and_recover(world: World) -> None:
    t = world.tenant("t1")
    world.lease(t)
    a, b = world.client(), world.client()
    a.withdraw_by_provider(PROVIDER, b"")
    b.withdraw_by_provider(PROVIDER, b"")  # b read the account after a's tx: fine
    world.clock.advance(10)
    a.withdraw_by_provider(PROVIDER, b"")  # a's cached sequence is stale: mismatch, retry
    assert len(_withdraw_txs(world)) == 3


def test_lost_broadcast_answer_is_resent_and_lands_exactly_once(world: World) -> None:
    t = world.tenant("t1")
    lease = world.lease(t)
    world.clock.advance(20)
    client = world.client()
    world.devnet.faults.lose_response("BroadcastTx")

    page = client.withdraw_by_provider(PROVIDER, b"")

    assert world.devnet.faults.calls["BroadcastTx"] == 2  # the first answer was lost
    assert len(_withdraw_txs(world)) == 1
    assert page.withdrawal_count == 1
    # The sequence stayed right: the next tx needs no retry.
    client.close_leases([lease], "done")
    assert world.model.lease(lease).state == "CLOSED"
    assert all(r.code == 0 for r in world.node.included_txs())


def test_out_of_gas_at_inclusion_is_retried_with_more_gas(world: World) -> None:
    t = world.tenant("t1")
    world.lease(t)
    world.clock.advance(20)
    client = world.client(withdraw_limit=3)
    # Execution costs more than simulated, once: a 1.5x margin is too small.
    world.node.add_gas_surcharge(60_000, times=1)

    page = client.withdraw_by_provider(PROVIDER, b"")

    codes = [r.code for r in world.node.included_txs()]
    assert codes == [11, 0]  # out of gas (sequence used, fee paid), then landed
    assert page.cost is not None and (page.cost.sequence_retries, page.cost.out_of_gas_retries) == (0, 1)
    assert page.tx_hash == world.node.included_txs()[-1].txhash
    accrued, paid = world.model.lease_totals(world.model.active_leases_by_provider(PROVIDER)[0].uuid)
    assert accrued == paid and paid["umfx"] > 0
    # Looked up, the tx that ran out of gas is final: a lookup that asked again would find the same.
    failed = world.node.included_txs()[0].txhash
    with pytest.raises(ChainError) as info:
        client.withdraw_outcome(failed, PROVIDER)
    assert (info.value.code, info.value.transient, info.value.may_have_committed) == (11, False, False)


def test_close_batch_with_a_closed_lease_fails_whole_with_billing_code_3(world: World) -> None:
    t = world.tenant("t1")
    a, b, c = world.lease(t), world.lease(t), world.lease(t)
    client = world.client()
    client.close_leases([b], "first")

    with pytest.raises(ChainError) as info:
        client.close_leases([a, b, c], "credit depleted")

    err = info.value
    assert (err.codespace, err.code, err.transient, err.may_have_committed) == (BILLING, LEASE_NOT_ACTIVE, False, False)
    assert b in str(err)
    assert world.model.lease(a).state == "ACTIVE" and world.model.lease(c).state == "ACTIVE"
    outcome = client.close_leases([a, c], "credit depleted")
    assert outcome.closed_count == 2


def test_several_close_messages_in_one_tx_are_atomic(world: World) -> None:
    t = world.tenant("t1")
    leases = [world.lease(t) for _ in range(4)]
    client = world.client()
    outcome = client.close_lease_batches([leases[:2], leases[2:]], "depleted")
    assert outcome.closed_count == 4 and len(outcome.tx_hashes) == 1
    assert {world.model.lease(u).state for u in leases} == {"CLOSED"}


def test_tx_signed_for_the_wrong_chain_id_is_rejected(world: World) -> None:
    t = world.tenant("t1")
    world.lease(t)
    wrong = world.client(chain_id="some-other-chain")

    with pytest.raises(ChainError) as info:
        wrong.withdraw_by_provider(PROVIDER, b"")

    assert (info.value.codespace, info.value.code, info.value.transient) == (SDK, 4, False)
    assert "chain-id" in str(info.value)
    assert world.node.included_txs() == [] and world.node.mempool_size() == 0
    # The right chain id still signs at the unchanged sequence.
    assert world.client().withdraw_by_provider(PROVIDER, b"").withdrawal_count == 1


def test_fee_below_the_node_minimum_is_a_permanent_error(world: World) -> None:
    world.lease(world.tenant("t1"))
    with pytest.raises(ChainError) as info:
        world.client(gas_price=world.client().gas_price / 100).withdraw_by_provider(PROVIDER, b"")
    assert (info.value.codespace, info.value.code, info.value.transient) == (SDK, 13, False)


def test_inclusion_timeout_may_have_committed_and_the_tx_lands_later(world: World) -> None:
    world.lease(world.tenant("t1"))
    client = world.client(tx_timeout=0.2)
    world.blocks.pause()

    with pytest.raises(ChainError) as info:
        client.withdraw_by_provider(PROVIDER, b"")

    assert info.value.may_have_committed and info.value.transient
    tx_hash = info.value.tx_hash
    assert len(tx_hash) == 64 and tx_hash in str(info.value)
    assert world.node.mempool_size() == 1
    assert client.withdraw_outcome(tx_hash, PROVIDER) is None  # in the mempool: no node knows it as included
    world.blocks.resume()
    wait_until(lambda: len(_withdraw_txs(world)) == 1, what="the timed-out tx to be included")
    # Once included, the lookup reads what it applied, as withdraw_by_provider would have answered.
    page = client.withdraw_outcome(tx_hash, PROVIDER)
    assert page is not None and page.tx_hash == tx_hash and page.withdrawal_count == 1
    assert page.total_amounts and [s.tx_hash for s in page.settlements] == [tx_hash]
    assert client.withdraw_outcome("00" * 32, PROVIDER) is None


def test_concurrent_txs_of_one_client_are_serialized(world: World) -> None:
    t = world.tenant("t1")
    leases = [world.lease(t) for _ in range(6)]
    client = world.client()
    errors: list[BaseException] = []

    def close(u: str) -> None:
        try:
            client.close_leases([u], "bye")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=close, args=(u,)) for u in leases]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=10)
    assert errors == []
    assert [r.code for r in world.node.included_txs()] == [0] * 6
    assert world.devnet.faults.calls["Account"] == 1  # never a sequence mismatch


def test_transport_failures_are_transient(world: World) -> None:
    t = world.tenant("t1")
    client = world.client()
    world.devnet.faults.fail_next("CreditAccount")
    with pytest.raises(ChainError) as info:
        client.credit_account(t)
    assert (info.value.codespace, info.value.transient) == ("transport", True)
    assert client.credit_account(t).balances == coins({"umfx": 10**9})

    other = world.tenant("t2")
    world.devnet.faults.fail_for("CreditAccount", frozenset({other}))
    with pytest.raises(ChainError) as info:
        client.credit_account(other)
    assert info.value.transient
    assert client.credit_account(t).balances == coins({"umfx": 10**9})  # only that tenant fails

    port = world.devnet.grpc_server.port
    world.devnet.grpc_server.stop(grace=0)
    dead = world.client(query_timeout=0.5)
    assert dead.grpc_url.endswith(str(port))
    with pytest.raises(ChainError) as info:
        dead.node_status()
    assert info.value.transient and info.value.codespace == "transport"


def test_unknown_provider_account_is_a_clear_permanent_error(world: World) -> None:
    from chain.cosmpy_client import CosmpyChainClient
    from chain.keys import ProviderKey

    stranger = CosmpyChainClient(world.devnet.grpc_url, ProviderKey.generate(), world.devnet.chain_id)
    with pytest.raises(ChainError, match="does not exist on chain") as info:
        stranger.send_messages("test", [billing_tx.MsgCloseLease(sender=stranger.address, lease_uuids=["x"])])
    assert not info.value.transient
    assert repr(stranger).startswith("CosmpyChainClient(") and "signer=" in repr(stranger)


def test_wait_for_inclusion_uses_real_blocks(world: World) -> None:
    """A tx is only found once a block includes it: GetTx says NotFound before."""
    world.lease(world.tenant("t1"))
    world.blocks.pause()
    client = world.client()
    result: list = []
    th = threading.Thread(target=lambda: result.append(client.withdraw_by_provider(PROVIDER, b"")))
    th.start()
    wait_until(lambda: world.node.mempool_size() == 1, what="the tx to reach the mempool")
    assert result == [] and world.node.included_txs() == []
    height = world.node.latest_height()
    world.clock.advance(timedelta(seconds=5))
    th.join(timeout=5)
    assert result and world.node.get_tx(result[0].tx_hash).height == height + 1


def test_a_close_of_unknown_outcome_is_read_back_by_its_tx(world: World) -> None:
    lease = world.lease(world.tenant("t1"))
    client = world.client(tx_timeout=0.2)
    world.blocks.pause()
    with pytest.raises(ChainError) as info:
        client.close_leases([lease], "bye")
    tx_hash = info.value.tx_hash
    assert info.value.may_have_committed and tx_hash
    assert client.close_outcome(tx_hash, [lease]) is None  # in the mempool: not included yet
    world.blocks.resume()
    wait_until(lambda: len(world.node.included_txs()) == 1, what="the timed-out close to be included")
    outcome = client.close_outcome(tx_hash, [lease])
    assert outcome is not None and outcome.closed_count == 1 and outcome.tx_hashes == (tx_hash,)
    assert [(s.lease_uuid, s.kind, s.tx_hash) for s in outcome.settlements] == [(lease, "close", tx_hash)]
