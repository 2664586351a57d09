"""The devnet node behind its gRPC server behaves like a node: raw gRPC, hand-signed txs.

These tests sign txs themselves (cosmpy ``Transaction``) and call the
services with plain gRPC stubs, to pin what the node answers independent of
the sidecar's client: CheckTx codes, inclusion only in a block, GetTx
contents, atomic multi-message txs, and the fault injection.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import grpc
import pytest

from chain.billing_pb import tx_pb2 as billing_tx
from chain.errors import BILLING, LEASE_NOT_ACTIVE, SDK
from chain.keys import ProviderKey, load_provider_key
from chain.model import TxEvents
from chain.sdk_errors import classify_text
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_query
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_query
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service
from tests.devnet_harness import PROVIDER, Raw, World, make_world, wait_until

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def test_tx_is_found_only_once_a_block_includes_it(world: World, raw: Raw) -> None:
    t = world.tenant("t1")
    lease = world.lease(t, price=4)
    world.blocks.pause()
    world.clock.advance(50)
    seen: list[TxEvents] = []
    world.model.subscribe(lambda tx: seen.append(tx) if isinstance(tx, TxEvents) else None)  # txs, not blocks
    msg = billing_tx.MsgWithdraw(sender=raw.key.address, provider_uuid=PROVIDER, limit=10)
    r = raw.broadcast(raw.sign([msg]))
    assert r.code == 0

    with pytest.raises(grpc.RpcError) as info:
        raw.txs.GetTx(tx_service.GetTxRequest(hash=r.txhash))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert raw.account().sequence == 0  # committed state: not yet included

    height = world.node.latest_height()
    world.clock.advance(timedelta(seconds=5))  # the next grid point: a block
    got = raw.txs.GetTx(tx_service.GetTxRequest(hash=r.txhash))
    resp = got.tx_response
    assert (resp.height, resp.code) == (height + 1, 0)
    data = abci_pb2.TxMsgData.FromString(bytes.fromhex(resp.data))
    out = billing_tx.MsgWithdrawResponse()
    assert data.msg_responses[0].Unpack(out)
    assert out.withdrawal_count == 1 and out.total_amounts[0].amount == str(4 * 55)
    expected = {"message", "batch_withdraw"}
    if world.model.version.provider_wide_lease_events:  # v2.1.0 has no per-lease event here (2.5)
        expected.add("provider_withdraw")
    assert {e.type for e in resp.events} >= expected
    assert got.tx.body.messages[0].type_url == "/liftedinit.billing.v1.MsgWithdraw"
    assert raw.account().sequence == 1 and raw.account().pub_key.type_url.endswith("secp256k1.PubKey")
    assert [(tx.height, tx.tx_hash) for tx in seen] == [(height + 1, r.txhash)]
    assert world.node.tx_bytes(r.txhash) is not None
    assert world.model.lease(lease).last_settled_at == world.node.time_of(height + 1)


def test_check_tx_answers_the_sdk_codes(world: World, raw: Raw) -> None:
    t = world.tenant("t1")
    lease = world.lease(t)
    world.blocks.pause()
    msg = raw.close_msg(lease)

    assert raw.broadcast(raw.sign([msg], chain_id="wrong-chain")).code == 4
    assert raw.broadcast(raw.sign([msg], account_number=99)).code == 4
    assert raw.broadcast(raw.sign([msg], sequence=5)).raw_log.startswith(
        "account sequence mismatch, expected 0, got 5"
    )
    assert raw.broadcast(raw.sign([msg], fee=1)).code == 13
    assert raw.broadcast(raw.sign([msg], gas=100)).code == 11
    assert raw.broadcast(raw.sign([msg], fee=10**13, gas=10**9)).code == 5  # more than the account holds
    assert raw.broadcast(b"\xff\xff not a tx").code == 2
    stranger = ProviderKey.generate()
    foreign = billing_tx.MsgCloseLease(sender=stranger.address, lease_uuids=[lease])
    assert raw.broadcast(raw.sign([foreign])).code == 4  # signed by a key that is not the sender
    from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend

    assert raw.broadcast(raw.sign([MsgSend(from_address=raw.key.address)])).code == 6
    assert world.node.mempool_size() == 0

    good = raw.sign([msg])
    first = raw.broadcast(good)
    again = raw.broadcast(good)
    assert (first.code, again.code, again.codespace) == (0, 19, SDK)
    # The node expects the next sequence now (its mempool counts).
    assert raw.broadcast(raw.sign([raw.close_msg(lease)], sequence=0)).code == 32
    world.blocks.resume()
    wait_until(lambda: world.node.get_tx(first.txhash) is not None, what="inclusion")
    assert raw.broadcast(good).code == 19  # an included tx is still in the node's cache


def test_multi_message_tx_fails_whole_at_inclusion(world: World, raw: Raw) -> None:
    t = world.tenant("t1")
    x, y = world.lease(t), world.lease(t)
    world.blocks.pause()
    fee_before = world.node.fee_balance(raw.key.address)
    seen: list[TxEvents] = []
    world.model.subscribe(lambda tx: seen.append(tx) if isinstance(tx, TxEvents) else None)  # txs, not blocks
    a = raw.broadcast(raw.sign([raw.close_msg(x)], sequence=0))
    # Passes CheckTx (messages are not executed there), fails in the block after a.
    b = raw.broadcast(raw.sign([raw.close_msg(y), raw.close_msg(x)], sequence=1))
    assert (a.code, b.code) == (0, 0)
    world.clock.advance(timedelta(seconds=5))

    ra, rb = world.node.get_tx(a.txhash), world.node.get_tx(b.txhash)
    assert ra.code == 0
    assert (rb.codespace, rb.code) == (BILLING, LEASE_NOT_ACTIVE)
    assert rb.raw_log.startswith("failed to execute message; message index: 1:")
    assert world.model.lease(y).state == "ACTIVE"  # message 0 was undone
    assert raw.account().sequence == 2  # both txs used their sequence
    assert world.node.fee_balance(raw.key.address) == fee_before - 2 * 100_000
    assert [tx.tx_hash for tx in seen] == [a.txhash]  # no events of the failed tx


def test_simulate_runs_the_messages_and_rolls_them_back(world: World, raw: Raw) -> None:
    t = world.tenant("t1")
    x = world.lease(t)
    seen: list[TxEvents] = []
    world.model.subscribe(lambda tx: seen.append(tx) if isinstance(tx, TxEvents) else None)  # txs, not blocks
    r = raw.txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw.sign([raw.close_msg(x)], gas=0, fee=0)))
    assert r.gas_info.gas_used > 0
    out = billing_tx.MsgCloseLeaseResponse()
    assert r.result.msg_responses[0].Unpack(out) and out.closed_count == 1
    assert world.model.lease(x).state == "ACTIVE" and seen == []

    world.model.close_leases(raw.key.address, [x], "gone")
    with pytest.raises(grpc.RpcError) as info:
        raw.txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw.sign([raw.close_msg(x)], gas=0, fee=0)))
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert classify_text(info.value.details()) == (BILLING, LEASE_NOT_ACTIVE)
    with pytest.raises(grpc.RpcError) as info:
        raw.txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw.sign([raw.close_msg(x)], sequence=3)))
    assert classify_text(info.value.details()) == (SDK, 32)


def test_latest_block_and_syncing(world: World, raw: Raw) -> None:
    world.clock.advance(timedelta(seconds=12))
    block = raw.tm.GetLatestBlock(tm_query.GetLatestBlockRequest())
    assert block.block.header.height == 3  # genesis 1, then one every 5 s
    assert block.block.header.chain_id == world.devnet.chain_id
    assert block.block.header.time.ToDatetime().replace(tzinfo=world.clock.now().tzinfo) == (
        world.node.genesis_time + timedelta(seconds=10)
    )
    assert raw.tm.GetSyncing(tm_query.GetSyncingRequest()).syncing is False
    world.node.set_catching_up(True)
    assert raw.tm.GetSyncing(tm_query.GetSyncingRequest()).syncing is True
    assert raw.tm.GetNodeInfo(tm_query.GetNodeInfoRequest()).default_node_info.network == world.devnet.chain_id
    with pytest.raises(grpc.RpcError) as info:
        raw.auth.Account(auth_query.QueryAccountRequest(address=ProviderKey.generate().address))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_changes_outside_txs_carry_the_next_block_height(world: World) -> None:
    seen: list[TxEvents] = []
    world.model.subscribe(lambda tx: seen.append(tx) if isinstance(tx, TxEvents) else None)  # txs, not blocks
    world.clock.advance(timedelta(seconds=7))
    world.tenant("t9")
    assert seen[-1].height == world.node.latest_height() + 1 == 3


def test_configured_faults_latency_and_error_rates() -> None:
    w = make_world(latency="20ms", error_rates=["CreditAccount=0.5"], error_seed=3)
    try:
        client = w.client()
        t = w.tenant("t1")
        start = time.perf_counter()
        client.provider_withdrawable(PROVIDER)
        assert time.perf_counter() - start >= 0.02  # every call is delayed
        outcomes = []
        for _ in range(40):
            try:
                client.credit_account(t)
                outcomes.append(True)
            except Exception as exc:
                assert getattr(exc, "codespace", "") == "transport"
                outcomes.append(False)
        assert 8 <= outcomes.count(False) <= 32  # about half fail, seeded
    finally:
        w.close()


def test_start_devnet_serves_the_websocket_and_cleans_up_the_key() -> None:
    from websockets.sync.client import connect

    w = make_world(websocket=True)
    try:
        key_file = w.devnet.provider_key_file
        assert key_file.stat().st_mode & 0o777 == 0o600
        assert load_provider_key(key_file).address == w.devnet.provider_address
        assert w.model.provider(PROVIDER)[0] == w.devnet.provider_address
        w.node.set_catching_up(True)
        with connect(w.devnet.websocket_url, open_timeout=5) as ws:
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "status"}))
            answer = json.loads(ws.recv(timeout=5))
        sync = answer["result"]["sync_info"]
        assert sync["catching_up"] is True
        assert int(sync["latest_block_height"]) == w.node.latest_height()
    finally:
        w.close()
    assert not key_file.exists()


def test_the_port_check_refuses_only_a_port_in_use() -> None:
    """A bracketed IPv6 host (gRPC's form) with a free port is not taken as in use; one held is."""
    import socket

    from devnet.grpc_server import _port_in_use

    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        held = socket.socket(socket.AF_INET6)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("::1", 0))
    except OSError:
        pytest.skip("::1 cannot be bound here")
    with held:
        port = held.getsockname()[1]
        held.listen()
        assert _port_in_use("[::1]", port)
        assert not _port_in_use("no-such-host.invalid", port)  # gRPC's to judge
    assert not _port_in_use("[::1]", port)


def test_a_second_server_on_the_devnets_port_is_refused_not_shared(world: World, capfd) -> None:
    """gRPC's default SO_REUSEPORT would let it bind the same port, and a client reach either server."""
    from devnet.grpc_server import DevnetGrpcServer

    port = int(world.devnet.grpc_url.rsplit(":", 1)[1])
    second = DevnetGrpcServer(world.node, host="127.0.0.1", port=port)
    capfd.readouterr()
    with pytest.raises(OSError, match=f"devnet gRPC server cannot listen on 127.0.0.1:{port}"):
        second.start()
    assert "add_port" not in capfd.readouterr().err  # the devnet's error alone, not gRPC's line before it
    client = world.client()
    try:
        assert client.node_status() is not None  # the devnet's own server still answers
    finally:
        client.close()


def test_a_tx_that_fails_in_its_block_is_pushed_on_the_websocket_with_its_code() -> None:
    """A node pushes a Tx event for every tx its block holds, failed ones too (code, no events), and each
    block's end-of-block events say how many it held: the listener finds a dropped tx feed by the two
    disagreeing. The devnet pushed only the txs that applied, and its listener reconnected for nothing."""
    from websockets.sync.client import connect

    w = make_world(websocket=True)
    try:
        raw = Raw(w)
        t = w.tenant("t1")
        w.lease(t)
        w.clock.advance(timedelta(seconds=20))
        with connect(w.devnet.websocket_url, open_timeout=5) as ws:
            for rid, query in ((1, "tm.event='Tx'"), (2, "tm.event='NewBlockEvents'")):
                ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscribe", "params": {"query": query}}))
                assert json.loads(ws.recv(timeout=5))["id"] == rid
            w.node.add_gas_surcharge(10**9)  # the next tx runs out of gas in its block
            msg = billing_tx.MsgWithdraw(sender=raw.key.address, provider_uuid=PROVIDER, limit=10)
            assert raw.broadcast(raw.sign([msg])).code == 0  # passes CheckTx
            w.clock.advance(timedelta(seconds=5))  # the block that includes it
            frames = [json.loads(ws.recv(timeout=5)) for _ in range(2)]
        by_id = {f["id"]: f["result"]["data"] for f in frames}
        tx = by_id[1]["value"]["TxResult"]
        assert tx["result"]["code"] == 11 and tx["result"]["events"] == []
        assert by_id[2]["value"]["num_txs"] == "1" and by_id[2]["value"]["height"] == tx["height"]
    finally:
        w.close()
