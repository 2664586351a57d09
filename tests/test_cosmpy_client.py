"""``CosmpyChainClient`` against the devnet, through real gRPC on loopback.

Each test runs the production client code (cosmpy signing, gRPC stubs)
against a devnet node on a manual clock; blocks are cut only when a tx
waits (``tests.devnet_harness.BlockProducer``), so amounts are exact.
"""

from __future__ import annotations

import ipaddress
import math
import threading
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import grpc
import pytest
from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey as Secp256k1PubKey
from cosmpy.protos.cosmos.tx.v1beta1 import tx_pb2
from google.protobuf.any_pb2 import Any as ProtoAny

from actors.chain_actor import ChainDecisions
from actors.effects import Send
from chain.billing_pb import tx_pb2 as billing_tx
from chain.errors import (
    BILLING,
    CLIENT,
    GAS_OVER_CAP,
    GRPC,
    GRPC_INVALID_ARGUMENT,
    GRPC_NOT_FOUND,
    LEASE_NOT_ACTIVE,
    SDK,
    ChainError,
    QueryRefused,
    is_no_tx_index,
)
from chain.cosmpy_client import CosmpyChainClient
from chain.keys import load_provider_key
from chain.model import TxEvents
from devnet.grpc_server import DevnetGrpcServer
from devnet.node import TxRejected
from messages.chain_actor import WithdrawTxAnswered, WithdrawTxCall
from messages.coins import Coin, coins
from messages.ledger import WithdrawLookupClosed
from runtime.clock import utc
from runtime.config import ConfigError, load_config
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, World, make_world, wait_until
from tests.support import addr, settings

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def test_provider_withdrawable_passes_over_a_page_that_pays_nothing_and_answers_a_later_ones_fees(
    world: World, monkeypatch
) -> None:
    """A current-chain page whose leases would settle paying nothing (auto-closes of tenants with no
    credit left: lease_count 1, no amounts) is not "nothing due": stopping there left every later
    page's fees uncollected. Both clients walk the pages alike (``chain.listing.withdrawable_due``)."""
    from chain.model_client import ModelChainClient
    from tests.support import PROVIDER_ADDRESS

    model_client = ModelChainClient(world.model, PROVIDER, PROVIDER_ADDRESS)
    if not world.model.version.withdrawable_pagination:
        # v2.1.0 answers once, over its first leases (of every state): past them it cannot tell.
        answer = [((), 3, True, b"", ())]
        monkeypatch.setattr(world.model, "provider_withdrawable", lambda uuid, limit, page: answer[0])
        assert world.client().provider_withdrawable(PROVIDER) is model_client.provider_withdrawable(PROVIDER) is None
        answer[0] = ((), 3, False, b"", ())
        assert world.client().provider_withdrawable(PROVIDER) == model_client.provider_withdrawable(PROVIDER) == ()
        return
    pages = {b"": ((), 1, False, b"k2", ()), b"k2": ((), 0, False, b"k3", ()),
             b"k3": ((Coin("umfx", 700),), 70, False, b"", ())}
    monkeypatch.setattr(world.model, "provider_withdrawable", lambda uuid, limit, page: pages[page.key])
    assert world.client().provider_withdrawable(PROVIDER) == model_client.provider_withdrawable(PROVIDER) == (Coin("umfx", 700),)
    pages[b"k3"] = ((), 1, False, b"", ())  # nothing to pay on any page: nothing due (the monitors close those leases)
    assert world.client().provider_withdrawable(PROVIDER) == model_client.provider_withdrawable(PROVIDER) == ()
    pages[b"k3"] = ((), 0, False, b"k2", ())  # a node that loops: refused, not walked for ever
    with pytest.raises(ChainError, match="repeated page key"):
        model_client.provider_withdrawable(PROVIDER)


def test_an_included_withdraw_whose_answer_cannot_be_read_is_reported_as_applied_with_its_hash(
    world: World, monkeypatch
) -> None:
    """Code 0: the tx applied and the fees moved. An answer that cannot be read (here an amount that
    is not a whole number) must not make it look unapplied: the lookups then keep it findable."""
    t = world.tenant("t1", umfx=10**9)
    world.lease(t, price=7)
    world.clock.advance(100)
    real = CosmpyChainClient._msg_responses

    def garbled(operation, r):
        out = []
        for a in real(operation, r):
            if a.type_url.endswith("MsgWithdrawResponse"):
                m = billing_tx.MsgWithdrawResponse.FromString(a.value)
                m.total_amounts[0].amount = "7.5"
                a = type(a)(type_url=a.type_url, value=m.SerializeToString())
            out.append(a)
        return tuple(out)

    monkeypatch.setattr(CosmpyChainClient, "_msg_responses", staticmethod(garbled))
    signed: list[str] = []
    with pytest.raises(ChainError) as info:
        world.client().withdraw_by_provider(PROVIDER, b"", signed=signed.append)
    assert world.model.balance(t)["umfx"] < 10**9  # applied on chain
    assert info.value.may_have_committed and info.value.tx_hash == signed[-1]
    assert "not an integer" in info.value.message


def test_an_included_close_whose_answer_cannot_be_read_is_booked_from_its_events(
    world: World, monkeypatch
) -> None:
    """An applied close whose answer does not decode: raised without its hash, its write-ahead record was
    closed and no lookup begun; with it, the lookup read the same answer and gave up ("look it up by hand")."""
    t = world.tenant("t1", umfx=10**9)
    lease = world.lease(t, price=7)
    world.clock.advance(100)
    real = CosmpyChainClient._msg_responses

    def garbled(operation, r):
        return tuple(
            type(a)(type_url=a.type_url, value=b"\xff\xff\xff") if a.type_url.endswith("MsgCloseLeaseResponse") else a
            for a in real(operation, r)
        )

    monkeypatch.setattr(CosmpyChainClient, "_msg_responses", staticmethod(garbled))
    signed: list[str] = []
    client = world.client()
    outcome = client.close_leases([lease], "credit depleted", signed=signed.append)
    assert world.model.lease(lease).state == "CLOSED"  # applied on chain
    # A close is all or nothing: applied, it closed every lease it named; what each settled is in its events.
    assert outcome.closed_count == 1 and outcome.tx_hashes == (signed[-1],)
    assert [s.lease_uuid for s in outcome.settlements] == [lease] and outcome.settlements[0].amounts
    # Its lookup (an answer lost on the way) reads the same answer, and finds the same.
    looked_up = client.close_outcome(signed[-1], [lease])
    assert looked_up is not None and looked_up.closed_count == 1 and looked_up.settlements == outcome.settlements


def _withdraw_txs(world: World) -> list:
    """Included txs (code 0) carrying a MsgWithdraw."""
    out = []
    for r in world.node.included_txs():
        if r.code == 0 and any(m.type_url.endswith("MsgWithdraw") for m in _tx_msgs(r)):
            out.append(r)
    return out


def _tx_msgs(r) -> list:
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
    # The balance itself: CreditEstimate counts no unsettled accrual (CHAIN-VERSIONS.md 2.7).
    assert estimate.current_balance == (Coin("umfx", 5_000),)
    assert client.provider_withdrawable(PROVIDER) == (Coin("umfx", 700),)
    assert client.lease(lease) == world.model.lease(lease)
    status = client.node_status()
    assert status == world.node.status()
    assert status.latest_block_height == 1 + 100 // 5
    assert status.catching_up is False

    with pytest.raises(ChainError) as info:
        client.credit_account(addr("nobody"))
    # Query errors are gRPC statuses, not billing codes (CHAIN-VERSIONS.md 4): NOT_FOUND is 5.
    assert (info.value.codespace, info.value.code, info.value.transient) == ("grpc", 5, False)


@pytest.mark.parametrize(
    "status, code, transient",
    [("NOT_FOUND", 5, False), ("INVALID_ARGUMENT", 3, False), ("INTERNAL", 13, False), ("RESOURCE_EXHAUSTED", 8, True)],
)
def test_a_query_refused_with_a_status_is_filed_under_that_status(
    world: World, monkeypatch: pytest.MonkeyPatch, status: str, code: int, transient: bool
) -> None:
    """The querier's status is its answer: not a billing code guessed from the text, nor a transport failure."""
    t = world.tenant("t1")

    def refuse(tenant: str):
        # Worded like the chain's refusals, ending in a registered description (billing 12's).
        raise QueryRefused(status, f"provider_uuid of tenant {tenant} not found: provider not found")

    monkeypatch.setattr(world.model, "credit_estimate", refuse)
    with pytest.raises(ChainError) as info:
        world.client().credit_estimate(t)

    err = info.value
    assert (err.codespace, err.code, err.transient, err.may_have_committed) == (GRPC, code, transient, False)
    assert str(err).startswith(f"grpc code {code} ({status}): credit_estimate {t}: gRPC {status}: provider_uuid")


def test_query_statuses_of_the_chains_own_refusals(world: World) -> None:
    client = world.client()
    with pytest.raises(ChainError) as info:
        client.credit_account("not-an-address")
    assert (info.value.codespace, info.value.code) == (GRPC, GRPC_INVALID_ARGUMENT)
    assert "invalid tenant address" in str(info.value)
    with pytest.raises(ChainError) as info:
        client.lease("0197aaaa-0000-7000-8000-000000000000")
    assert (info.value.codespace, info.value.code, info.value.transient) == (GRPC, GRPC_NOT_FOUND, False)


def test_node_status_reports_catching_up(world: World) -> None:
    client = world.client()
    world.node.set_catching_up(True)
    assert client.node_status().catching_up is True
    world.node.set_catching_up(False)
    assert client.node_status().catching_up is False


def test_a_withdraw_reaches_every_lease_through_next_key_or_by_name(world: World) -> None:
    """2.1/2.2: provider-wide pages through the cursor; on v2.1.0, whose first page has has_more and
    no next_key (no cursor), named withdraws reach the rest."""
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

    if world.model.version.withdraw_cursor:
        assert [p.withdrawal_count for p in pages] == [3, 3, 1]
        assert [p.has_more for p in pages] == [True, True, False]
        assert pages[0].next_key == sorted(leases)[2].encode()
    else:
        assert [(p.withdrawal_count, p.has_more, p.next_key) for p in pages] == [(3, True, b"")]
        pages.append(client.withdraw_leases(sorted(leases)[3:]))  # the rest, by name
        assert pages[-1].withdrawal_count == 4
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
    # Execution costs more than simulated, once: the 1.2x adjustment is too small.
    world.node.add_gas_surcharge(60_000, times=1)
    simulated = _record_simulations(world)

    page = client.withdraw_by_provider(PROVIDER, b"")

    codes = [r.code for r in world.node.included_txs()]
    assert codes == [11, 0]  # out of gas (sequence used, fee paid), then landed
    # One Simulate seeded both: the second signs the first's gas x 1.5.
    ((_, gas_used),) = simulated
    first = int(gas_used * Decimal("1.2"))
    assert [_fee_of(world, r.txhash)[0] for r in world.node.included_txs()] == [first, int(first * Decimal("1.5"))]
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
        world.client(gas_price=Decimal(world.config.devnet.min_gas_price) / 2).withdraw_by_provider(PROVIDER, b"")
    assert (info.value.codespace, info.value.code, info.value.transient) == (SDK, 13, False)


def test_inclusion_timeout_may_have_committed_and_the_tx_lands_later(world: World) -> None:
    lease = world.lease(world.tenant("t1"))
    client = world.client(tx_timeout=0.2)
    world.blocks.pause()

    with pytest.raises(ChainError) as info:
        if world.model.version.withdraw_cursor:
            client.withdraw_by_provider(PROVIDER, b"")
        else:  # v2.1.0's provider-wide withdraw says nothing per lease: withdraws go by name (2.5)
            client.withdraw_leases([lease])

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


@pytest.mark.parametrize("kind", ["continuous_vesting", "delayed_vesting", "periodic_vesting", "permanent_locked"])
def test_a_vesting_signer_account_signs_and_withdraws(kind: str) -> None:
    world = make_world(signer_account=kind)
    try:
        assert world.node.account(world.devnet.provider_address).kind == kind
        t = world.tenant("t1")
        lease = world.lease(t)
        world.clock.advance(20)
        client = world.client()

        page = client.withdraw_by_provider(PROVIDER, b"")
        outcome = client.close_leases([lease], "done")

        assert page.withdrawal_count == 1 and page.total_amounts
        assert outcome.closed_count == 1
        # Number and sequence were read from inside the vesting account, once, and were right.
        assert world.devnet.faults.calls["Account"] == 1
        assert [r.code for r in world.node.included_txs()] == [0, 0]
        assert world.node.account(world.devnet.provider_address).sequence == 2
    finally:
        world.close()


def test_an_account_type_a_signer_cannot_have_is_a_clear_error() -> None:
    from cosmpy.protos.cosmos.auth.v1beta1 import auth_pb2

    from chain.cosmpy_client import base_account

    module = ProtoAny()
    module.Pack(auth_pb2.ModuleAccount(base_account=auth_pb2.BaseAccount(sequence=4), name="fees"), type_url_prefix="/")
    assert base_account(module) is None
    vesting = ProtoAny(type_url="/cosmos.vesting.v1beta1.DelayedVestingAccount", value=b"\xff\xff")
    assert base_account(vesting) is None  # undecodable


def _self_signed_certificate() -> tuple[bytes, bytes]:
    """(private key, certificate) PEM for 127.0.0.1 and localhost, its own CA: what a node's operator might run."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leasewarden devnet test CA")])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def test_a_grpc_https_node_is_reached_with_the_configured_ca_file(world: World, tmp_path: Path) -> None:
    key_pem, cert_pem = _self_signed_certificate()
    ca_file = tmp_path / "node-ca.pem"
    ca_file.write_bytes(cert_pem)
    server = DevnetGrpcServer(world.node, host="127.0.0.1", tls=(key_pem, cert_pem))
    server.start()
    try:
        assert server.url.startswith("grpc+https://127.0.0.1:")
        config = load_config(
            overrides={"node": {"grpc_url": server.url, "tls_ca_file": str(ca_file), "tx_poll_interval": "2ms"}}
        )
        key = load_provider_key(world.devnet.provider_key_file)
        client = CosmpyChainClient.from_settings(config.node, world.devnet.chain_id, key=key)
        world.lease(world.tenant("t1"))
        world.clock.advance(20)

        assert client.node_status() == world.node.status()
        assert client.withdraw_by_provider(PROVIDER, b"").withdrawal_count == 1  # a tx, over TLS

        # Without the CA file the system's CAs are asked, and they do not know this node's certificate.
        untrusting = CosmpyChainClient(server.url, key, world.devnet.chain_id, query_timeout=2.0)
        with pytest.raises(ChainError) as info:
            untrusting.node_status()
        assert (info.value.codespace, info.value.transient) == ("transport", True)
        client.close()
        untrusting.close()
    finally:
        server.stop()


def test_a_tls_ca_file_that_cannot_be_used_is_an_error_at_start_naming_the_setting(world: World, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing-ca.pem")
    https = "grpc+https://node.example:9090"
    with pytest.raises(ConfigError, match=r"\[node\] tls_ca_file '.*missing-ca.pem': no such file"):
        load_config(overrides={"node": {"grpc_url": https, "tls_ca_file": missing}})
    not_pem = tmp_path / "ca.der"
    not_pem.write_bytes(b"\x30\x82\x01\x0a")
    with pytest.raises(ConfigError, match=r"\[node\] tls_ca_file '.*ca.der': holds no PEM certificate"):
        load_config(overrides={"node": {"grpc_url": https, "tls_ca_file": str(not_pem)}})
    with pytest.raises(ConfigError, match=r"\[node\] tls_ca_file: set, but grpc_url 'grpc\+http://.*' does not use TLS"):
        load_config(overrides={"node": {"grpc_url": "grpc+http://127.0.0.1:9090", "tls_ca_file": missing}})
    # The client refuses the same, built without the settings.
    key = load_provider_key(world.devnet.provider_key_file)
    with pytest.raises(ValueError, match=r"tls_ca_file '.*missing-ca.pem': no such file"):
        CosmpyChainClient(https, key, world.devnet.chain_id, tls_ca_file=missing)


def _fee_of(world: World, tx_hash: str) -> tuple[int, list[tuple[str, str]]]:
    """(gas limit, [(denom, amount)]) of an included tx, from its auth_info."""
    tx = tx_pb2.Tx()
    world.node.get_tx(tx_hash).tx.Unpack(tx)
    return tx.auth_info.fee.gas_limit, [(c.denom, c.amount) for c in tx.auth_info.fee.amount]


def _record_simulations(world: World) -> list[tuple[bytes, int]]:
    """Every tx the node is asked to simulate from now on, with the gas it answered."""
    asked: list[tuple[bytes, int]] = []
    simulate = world.node.simulate

    def recording(raw: bytes):
        gas, result = simulate(raw)
        asked.append((raw, gas))
        return gas, result

    world.node.simulate = recording
    return asked


@pytest.mark.parametrize("adjustment", [None, 2.75])
def test_the_fee_is_the_gas_used_times_the_adjustment_times_the_price_rounded_up(world: World, adjustment) -> None:
    t = world.tenant("t1")
    for _ in range(3):
        world.lease(t)
    world.clock.advance(60)
    simulated = _record_simulations(world)
    client = world.client() if adjustment is None else world.client(gas_adjustment=adjustment)
    assert world.config.node.gas_price == "0.000025" and world.config.node.gas_adjustment == 1.2

    page = client.withdraw_by_provider(PROVIDER, b"")

    ((_, gas_used),) = simulated
    factor = Decimal("1.2") if adjustment is None else Decimal(str(adjustment))
    gas_limit, fee = _fee_of(world, page.tx_hash)
    assert gas_limit == int(gas_used * factor)  # truncated
    assert fee == [("umfx", str(math.ceil(gas_limit * Decimal("0.000025"))))]
    assert 0 < int(fee[0][1]) < 100  # a page of 50 leases costs tens of umfx, not tens of thousands


def test_the_fee_is_at_least_one_umfx(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    world.node.min_gas_price = Decimal(0)  # a node that takes any fee
    tiny = world.client(gas_price="0.00000001")

    page = tiny.withdraw_by_provider(PROVIDER, b"")
    closed = world.client(gas_price="0").close_leases([world.model.active_leases_by_provider(PROVIDER)[0].uuid], "bye")

    gas_limit, fee = _fee_of(world, page.tx_hash)
    assert gas_limit * Decimal("0.00000001") < 1 and fee == [("umfx", "1")]
    assert _fee_of(world, closed.tx_hashes[0])[1] == [("umfx", "1")]


def test_simulate_is_asked_with_the_declared_gas_no_fee_and_an_empty_signature(world: World) -> None:
    t = world.tenant("t1")
    lease = world.lease(t)
    world.clock.advance(20)
    simulated = _record_simulations(world)
    client = world.client()
    client.withdraw_by_provider(PROVIDER, b"")
    client.close_leases([lease], "done")

    assert len(simulated) == 2
    for sequence, (raw, _) in enumerate(simulated):
        tx_raw = tx_pb2.TxRaw.FromString(raw)
        auth_info = tx_pb2.AuthInfo.FromString(tx_raw.auth_info_bytes)
        assert auth_info.fee.gas_limit == 200_000  # [node] simulate_gas, never the fallback gas_limit
        assert list(auth_info.fee.amount) == []
        assert list(tx_raw.signatures) == [b""]
        (signer,) = auth_info.signer_infos
        assert signer.sequence == sequence  # the account's sequence at the time
        pubkey = Secp256k1PubKey()
        signer.public_key.Unpack(pubkey)
        assert pubkey.key == client.key.public_key.public_key_bytes


#: [node] gas_limit x gas_adjustment: what a tx declares when Simulate cannot say.
FALLBACK_GAS = int(1_500_000 * Decimal("1.2"))


def _withdraw_gas_limits(world: World) -> list[int]:
    return [_fee_of(world, r.txhash)[0] for r in _withdraw_txs(world)]


def test_a_failing_simulate_leaves_the_tx_to_the_fallback_gas(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client()
    world.devnet.faults.fail_next("Simulate")  # UNAVAILABLE

    page = client.withdraw_by_provider(PROVIDER, b"")

    assert page.withdrawal_count == 1
    assert world.devnet.faults.calls["Simulate"] == 1  # not asked again for the same tx
    gas_limit, fee = _fee_of(world, page.tx_hash)
    assert gas_limit == FALLBACK_GAS == 1_800_000
    assert fee == [("umfx", "45")]  # ceil(1,800,000 x 0.000025)


def test_an_unreadable_or_slow_simulate_is_a_simulation_failure_too(world: World) -> None:
    world.lease(world.tenant("t1"))
    client = world.client()
    simulate = world.node.simulate

    def broken(raw: bytes):
        raise TxRejected("", 0, "panic: runtime error: invalid memory address")  # UNKNOWN, no registered error

    world.node.simulate = broken
    world.clock.advance(20)
    first = client.withdraw_by_provider(PROVIDER, b"")
    world.node.simulate = simulate
    world.devnet.faults.latency = 0.1  # every call; only Simulate's deadline is this short
    client.simulate_timeout = 0.02
    world.clock.advance(20)
    second = client.withdraw_by_provider(PROVIDER, b"")

    assert _fee_of(world, first.tx_hash)[0] == _fee_of(world, second.tx_hash)[0] == FALLBACK_GAS
    assert client.simulate_breaker.failures == 2


def test_a_message_failing_in_simulate_is_the_txs_answer_not_a_simulation_failure(world: World) -> None:
    t = world.tenant("t1")
    a, b = world.lease(t), world.lease(t)
    client = world.client()
    client.close_leases([b], "first")
    world.devnet.faults.fail_next("Simulate", 4)
    for _ in range(4):  # four failures in a row: one short of opening the breaker
        world.clock.advance(10)
        client.withdraw_by_provider(PROVIDER, b"")
    broadcasts = world.devnet.faults.calls["BroadcastTx"]

    with pytest.raises(ChainError) as info:
        client.close_leases([a, b], "credit depleted")

    assert (info.value.codespace, info.value.code) == (BILLING, LEASE_NOT_ACTIVE)
    assert world.devnet.faults.calls["BroadcastTx"] == broadcasts  # raised before any fee was paid
    # Simulate answered, so it works: the failures in a row start again from none.
    assert client.simulate_breaker.failures == 0
    world.devnet.faults.fail_next("Simulate", 4)
    for _ in range(4):
        world.clock.advance(10)
        client.withdraw_by_provider(PROVIDER, b"")
    assert client.simulate_breaker.allows(client.breaker_clock())


def test_the_simulate_breaker_opens_after_five_failures_for_thirty_seconds_of_the_clients_clock(world: World) -> None:
    world.lease(world.tenant("t1"))
    now = [1_000.0]
    client = world.client(breaker_clock=lambda: now[0])
    faults = world.devnet.faults

    def withdraw() -> None:
        world.clock.advance(10)
        client.withdraw_by_provider(PROVIDER, b"")

    faults.fail_next("Simulate", 5)
    for _ in range(5):
        withdraw()
    assert faults.calls["Simulate"] == 5
    withdraw()  # open: not asked
    now[0] += 29.9
    withdraw()  # still open
    assert faults.calls["Simulate"] == 5
    assert _withdraw_gas_limits(world) == [FALLBACK_GAS] * 7

    now[0] += 0.1  # 30 s after it opened
    withdraw()
    assert faults.calls["Simulate"] == 6  # asked again, and it answered
    simulated = _withdraw_gas_limits(world)[-1]
    assert simulated < FALLBACK_GAS

    faults.fail_next("Simulate", 1)
    withdraw()  # one failure after a success: the breaker stays closed
    withdraw()
    assert faults.calls["Simulate"] == 8
    assert _withdraw_gas_limits(world)[-2:] == [FALLBACK_GAS, simulated]


def test_simulation_failed_tells_the_nodes_answer_from_a_failure_of_simulate() -> None:
    from chain.cosmpy_client import simulation_failed
    from chain.sdk_errors import status_error

    def answer(status: str, text: str) -> bool:
        return simulation_failed(status_error("simulate", status, text))

    assert not answer("UNKNOWN", "failed to execute message; message index: 0: lease x: lease not active")
    assert not answer("UNKNOWN", "failed to execute message; message index: 0: some module's own error")
    assert not answer("UNKNOWN", "account sequence mismatch, expected 4, got 3: incorrect account sequence")
    assert answer("UNKNOWN", "panic: runtime error")
    assert answer("INTERNAL", "store: cannot decode: invalid lease")
    assert answer("UNAVAILABLE", "connection refused")
    assert answer("DEADLINE_EXCEEDED", "")


def test_out_of_gas_climbs_by_half_up_to_max_gas_limit_and_is_final_there(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    simulated = _record_simulations(world)
    client = world.client(withdraw_limit=3)
    client.max_gas_limit = cap = 250_000
    world.node.add_gas_surcharge(10**6, times=10)  # no gas limit is enough

    with pytest.raises(ChainError) as info:
        client.withdraw_by_provider(PROVIDER, b"")

    ((_, gas_used),) = simulated
    first = int(gas_used * Decimal("1.2"))
    assert first < int(first * Decimal("1.5")) < cap < int(first * Decimal("2.25"))
    assert [_fee_of(world, r.txhash)[0] for r in world.node.included_txs()] == [first, int(first * Decimal("1.5")), cap]
    err = info.value
    assert (err.codespace, err.code, err.transient, err.may_have_committed) == (SDK, 11, False, False)
    assert f"gas {cap} is max_gas_limit already" in err.message


def test_a_simulated_gas_over_max_gas_limit_is_refused_before_anything_is_sent(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client()  # a page of 50 leases: about 800,000 gas
    client.gas_limit = client.max_gas_limit = 500_000

    with pytest.raises(ChainError) as info:
        client.withdraw_by_provider(PROVIDER, b"")

    err = info.value
    assert (err.codespace, err.code, err.transient) == (CLIENT, GAS_OVER_CAP, False)
    assert "over max_gas_limit 500000: not sent" in err.message
    assert world.devnet.faults.calls.get("BroadcastTx", 0) == 0
    assert client.simulate_breaker.failures == 0  # Simulate answered: it works
    # The fallback is capped too: with Simulate failing the tx declares max_gas_limit, not 1.2 x gas_limit.
    world.devnet.faults.fail_next("Simulate")
    client.withdraw_limit = 3  # a page small enough for the cap
    page = client.withdraw_by_provider(PROVIDER, b"")
    assert _fee_of(world, page.tx_hash)[0] == 500_000 and page.withdrawal_count == 1


def test_max_gas_limit_below_gas_limit_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match=r"\[node\] max_gas_limit: 1000000 is below gas_limit 1500000 \(0 means no cap\)"):
        load_config(overrides={"node": {"max_gas_limit": 1_000_000}})
    assert load_config(overrides={"node": {"max_gas_limit": 1_500_000}}).node.max_gas_limit == 1_500_000


def _record_check_txs(world: World) -> list[int]:
    """The CheckTx code of every broadcast from now on."""
    codes: list[int] = []
    check_tx = world.node.check_tx

    def recording(raw: bytes):
        result = check_tx(raw)
        codes.append(result.code)
        return result

    world.node.check_tx = recording
    return codes


def test_already_in_mempool_waits_for_the_tx_the_node_holds(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client()
    checked = _record_check_txs(world)
    world.devnet.faults.lose_response("BroadcastTx")  # accepted, but the answer is lost: sent again

    page = client.withdraw_by_provider(PROVIDER, b"")

    assert checked == [0, 19]  # the second send was told the node holds it, and nothing was sent after
    assert [r.txhash for r in _withdraw_txs(world)] == [page.tx_hash]
    assert page.withdrawal_count == 1


def test_a_held_tx_not_included_in_time_is_a_final_error_with_its_hash(world: World) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client(tx_timeout=0.2)
    checked = _record_check_txs(world)
    world.blocks.pause()
    world.devnet.faults.lose_response("BroadcastTx")

    with pytest.raises(ChainError) as info:
        client.withdraw_by_provider(PROVIDER, b"")

    err = info.value
    assert (err.codespace, err.code, err.transient, err.may_have_committed) == (SDK, 19, False, True)
    assert len(err.tx_hash) == 64 and err.tx_hash in err.message and "not sent again" in err.message
    assert checked == [0, 19] and world.node.mempool_size() == 1
    world.blocks.resume()
    wait_until(lambda: len(_withdraw_txs(world)) == 1, what="the held tx to be included")
    page = client.withdraw_outcome(err.tx_hash, PROVIDER)
    assert page is not None and page.withdrawal_count == 1 and page.tx_hash == err.tx_hash


def _withdraw_resent(world: World, resend) -> tuple[list[str], object]:  # type: ignore[no-untyped-def]
    """A withdraw whose first BroadcastTx reaches the node (its tx enters the mempool) and whose answer is
    lost; ``resend(check_tx, raw, n)`` answers the node's n-th CheckTx. (The signed hashes, the outcome.)"""
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client(tx_timeout=0.5)
    world.blocks.pause()
    world.devnet.faults.lose_response("BroadcastTx")
    check_tx = world.node.check_tx
    calls: list[int] = []

    def checked(raw: bytes):  # type: ignore[no-untyped-def]
        calls.append(1)
        return resend(check_tx, raw, len(calls))

    world.node.check_tx = checked
    signed: list[str] = []
    outcome: object
    try:
        outcome = client.withdraw_by_provider(PROVIDER, b"", signed=signed.append)
    except ChainError as exc:
        outcome = exc
    world.blocks.resume()
    wait_until(lambda: world.node.mempool_size() == 0, what="the mempool to drain")
    return signed, outcome


def test_a_resend_told_sequence_mismatch_while_the_first_copy_is_pending_signs_nothing_new(world: World) -> None:
    """CHAIN.md: one signer, one writer; two txs of one sequence collide. A re-send told 32 is not
    proof the first copy is gone: signing again would make a second withdraw of the same intent."""
    # The re-send lands on a node that does not hold those bytes in its cache (another node behind
    # the load balancer, or one restarted): its CheckTx counts the first copy's sequence as used
    # and answers sdk 32; GetTx does not know the tx yet (not included). The first copy is alive.
    def load_balanced(check_tx, raw: bytes, n: int):  # type: ignore[no-untyped-def]
        if n == 2:  # the re-send: a node without the tx in its cache
            world.node._cache.clear()
        if n == 3:  # a second tx signed for the same withdraw
            world.blocks.resume()
        return check_tx(raw)

    signed, outcome = _withdraw_resent(world, load_balanced)
    assert len(_withdraw_txs(world)) == 1, f"{len(_withdraw_txs(world))} withdraw txs applied for one intent"
    assert signed[:1] == signed, f"signed {len(signed)} txs for one withdraw"
    assert isinstance(outcome, ChainError) and outcome.may_have_committed and outcome.tx_hash == signed[0]


@pytest.mark.parametrize("code, log", [(20, "mempool is full"), (13, "insufficient fee")])
def test_a_resend_refused_for_any_reason_while_the_first_copy_is_pending_is_looked_up_not_taken_as_refused(
    world: World, code: int, log: str
) -> None:
    """The answer to the first BroadcastTx is lost; the re-send of the same bytes is refused: CometBFT
    answers "mempool full" (20) before it looks in its cache, another node behind the load balancer
    wants a higher fee (13). That says nothing of the first copy: it was taken as refused, its
    write-ahead record closed, and when the first copy was included what it withdrew reached no book."""
    from devnet.node import CheckResult

    def refused_on_resend(check_tx, raw: bytes, n: int):  # type: ignore[no-untyped-def]
        r = check_tx(raw)
        return CheckResult(r.txhash, code, "sdk", log) if n == 2 else r

    signed, outcome = _withdraw_resent(world, refused_on_resend)
    assert [t.txhash for t in _withdraw_txs(world)] == signed[:1]  # the first copy applied, once
    assert isinstance(outcome, ChainError) and outcome.may_have_committed and outcome.tx_hash == signed[0], outcome
    assert outcome.code == code and log in str(outcome)


class _NodeHiccup(grpc.RpcError):
    """What the SDK's GetTx answers when its CometBFT RPC is briefly unreachable (a plain error: UNKNOWN)."""

    def __init__(self, status: grpc.StatusCode, details: str) -> None:
        self._status, self._details = status, details

    def code(self) -> grpc.StatusCode:
        return self._status

    def details(self) -> str:
        return self._details


class _FailingOnce:
    def __init__(self, stub, error: grpc.RpcError) -> None:
        self._stub, self._error = stub, error

    def GetTx(self, *args, **kwargs):
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._stub.GetTx(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._stub, name)


@pytest.mark.parametrize("status, details", [
    (grpc.StatusCode.UNKNOWN, 'post failed: Post "http://localhost:26657": dial tcp 127.0.0.1:26657: connect: connection refused'),
    (grpc.StatusCode.INTERNAL, "internal error"),
])
def test_a_lookup_that_failed_at_the_node_is_asked_again_not_closed(world: World, status, details) -> None:
    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client(tx_timeout=0.2)
    world.blocks.pause()
    with pytest.raises(ChainError) as info:
        client.withdraw_by_provider(PROVIDER, b"")
    tx_hash = info.value.tx_hash
    assert info.value.may_have_committed and tx_hash
    world.blocks.resume()
    wait_until(lambda: len(_withdraw_txs(world)) == 1, what="the tx to be included")  # it was applied

    chain = ChainDecisions(settings())
    chain.lookups.begin(1, 1, tx_hash, utc(2026, 3, 1))
    client._txs = _FailingOnce(client._txs, _NodeHiccup(status, details))
    try:
        client.withdraw_outcome(tx_hash, PROVIDER)
        pytest.fail("the hiccup should fail the lookup")
    except ChainError as exc:
        failure = exc.failure("withdraw_outcome")
    out = chain.handle(WithdrawTxAnswered(1, 1, tx_hash, 1, error=failure), utc(2026, 3, 1))

    closed = [e for e in out if isinstance(e, Send) and isinstance(e.message, WithdrawLookupClosed)]
    again = [e for e in out if isinstance(e, Send) and isinstance(e.message, WithdrawTxCall)]
    assert not closed, f"the record of an applied withdraw was closed on a failed read: {out[0].text}"
    assert again and client.withdraw_outcome(tx_hash, PROVIDER) is not None  # the next lookup finds it


def test_the_client_tells_a_node_that_keeps_a_tx_index_from_one_that_keeps_none(world: World) -> None:
    client = world.client()
    assert client.keeps_tx_index() is True
    world.node.set_tx_index("hash_only")  # txs by hash, events not searchable: a tx is still seen included
    assert client.keeps_tx_index() is True
    world.node.set_tx_index("null")
    assert client.keeps_tx_index() is False


def test_a_node_that_keeps_no_tx_index_is_heard_at_once_and_its_lookups_end_keeping_the_record(world: World) -> None:
    """GetTx answers "transaction indexing is disabled": not a hiccup to wait out for tx_timeout, nor ask about for ever."""
    import time as wall

    world.lease(world.tenant("t1"))
    world.clock.advance(20)
    client = world.client(tx_timeout=30.0)
    world.node.set_tx_index("null")
    started = wall.monotonic()
    with pytest.raises(ChainError) as sent:
        client.withdraw_by_provider(PROVIDER, b"")
    assert wall.monotonic() - started < 10.0  # not the 30 s tx_timeout
    failure = sent.value.failure("withdraw_by_provider")
    assert is_no_tx_index(failure) and failure.may_have_committed and not failure.transient
    assert sent.value.tx_hash and "no tx index" in sent.value.message
    with pytest.raises(ChainError) as looked:
        client.withdraw_outcome(sent.value.tx_hash, PROVIDER)
    assert is_no_tx_index(looked.value.failure("withdraw_outcome"))

    chain = ChainDecisions(settings())
    chain.lookups.begin(1, 1, sent.value.tx_hash, utc(2026, 3, 1))
    out = chain.handle(WithdrawTxAnswered(1, 1, sent.value.tx_hash, 1, error=looked.value.failure("withdraw_outcome")),
                       utc(2026, 3, 1))
    assert not [e for e in out if isinstance(e, Send) and isinstance(e.message, WithdrawTxCall)]  # not asked again
    assert any("no tx index" in getattr(e, "text", "") for e in out)
    # The withdraw may well have applied: its record stays for a start on a node that indexes txs.
    assert not [e for e in out if isinstance(e, Send) and isinstance(e.message, WithdrawLookupClosed)]
