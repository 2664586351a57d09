"""The devnet websocket, through a real websocket client on loopback."""

from __future__ import annotations

import json
import socket
import threading
from datetime import timedelta

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from chain.model import BillingModel, ChainEvent, TxEvents
from devnet.websocket_server import WebsocketServer
from messages.chain import LeaseItem, NodeStatus
from messages.coins import Coin
from runtime.clock import ManualClock, utc
from tests.support import addr, chain_model, eventually as poll

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

P = "019bbef3-b000-7001-b950-1b66216ca536"
#: Subscriptions selecting on event attributes (the server's matching is what these tests check).
TARGETED = (
    f"tm.event='Tx' AND lease_created.provider_uuid='{P}'",
    f"tm.event='Tx' AND lease_acknowledged.provider_uuid='{P}'",
    f"tm.event='Tx' AND lease_closed.provider_uuid='{P}'",
    f"tm.event='NewBlockEvents' AND lease_expired.provider_uuid='{P}'",
    "tm.event='Tx' AND lease_auto_closed.reason='credit_exhausted'",
)
OTHER = "019bbef3-b000-73ca-8297-85d4d17d0ec4"
T0 = utc(2026, 3, 1)
RECV = 5.0  # seconds a test waits for a frame that must come


class World:
    def __init__(self, **server_args) -> None:
        self.clock = ManualClock(T0)
        self.model = chain_model(self.clock)
        self.model.register_provider(P, addr("prov"))
        self.model.register_provider(OTHER, addr("other"))
        self.model.fund_credit(addr("tenant"), [Coin("upwr", 1_000_000)])
        self.txs: list[TxEvents] = []
        self.model.subscribe(self.txs.append)
        self.status = NodeStatus(42, T0, False)
        self.server = WebsocketServer(self.model, lambda: self.status, **server_args)
        self.server.start()

    def lease(self, provider=P, tenant=addr("tenant")):
        return self.model.create_lease(tenant, provider, [LeaseItem("sku", 1, Coin("upwr", 1))])


@pytest.fixture
def world():
    w = World()
    yield w
    w.server.stop()


def rpc(ws, method, params=None, rid=1):
    msg = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    ws.send(json.dumps(msg))
    return json.loads(ws.recv(timeout=RECV))


def subscribe(ws, query, rid=1):
    reply = rpc(ws, "subscribe", {"query": query}, rid)
    assert reply == {"jsonrpc": "2.0", "id": rid, "result": {}}, reply


def test_subscribe_then_a_tx_arrives_in_the_exact_cometbft_shape(world):
    with connect(world.server.url) as ws:
        query = TARGETED[2]  # lease_closed of ours
        subscribe(ws, query, rid=7)
        lease = world.lease()
        world.clock.advance(timedelta(seconds=30))
        world.model.close_leases(addr("prov"), [lease.uuid], "done")
        frame = json.loads(ws.recv(timeout=RECV))
    tx = world.txs[-1]
    assert [e.type for e in tx.events] == ["message", "lease_closed"]  # one lease: no batch_closed (3)
    expected_events = [
        {"type": e.type, "attributes": [{"key": k, "value": v, "index": True} for k, v in e.attributes]}
        for e in tx.events
    ]
    flat = {"tm.event": ["Tx"], "tx.hash": [tx.tx_hash], "tx.height": [str(tx.height)]}
    for e in tx.events:
        for k, v in e.attributes:
            flat.setdefault(f"{e.type}.{k}", []).append(v)
    assert frame == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "query": query,
            "data": {
                "type": "tendermint/event/Tx",
                "value": {
                    "TxResult": {
                        "height": str(tx.height),
                        "index": 0,
                        "tx": "",
                        "result": {"code": 0, "data": "", "log": "", "events": expected_events},
                    }
                },
            },
            "events": flat,
        },
    }
    assert frame["result"]["events"]["lease_closed.lease_uuid"] == [lease.uuid]
    assert frame["result"]["events"]["lease_closed.closure_reason"] == ["done"]


def test_tx_bytes_are_pushed_base64_when_the_devnet_has_them():
    w = World(tx_bytes=lambda h: b"\x01\x02signed" if h else None)
    try:
        with connect(w.server.url) as ws:
            subscribe(ws, "tm.event='Tx'")
            w.lease()
            frame = json.loads(ws.recv(timeout=RECV))
        assert frame["result"]["data"]["value"]["TxResult"]["tx"] == "AQJzaWduZWQ="
    finally:
        w.server.stop()


def test_only_matching_txs_arrive_and_a_tx_matching_two_subscriptions_arrives_twice(world):
    with connect(world.server.url) as ws:
        queries = TARGETED
        for rid, q in enumerate(queries, 1):
            subscribe(ws, q, rid)
        other = world.lease(provider=OTHER)  # not ours: created+acknowledged match nothing
        ours = world.lease()
        created = json.loads(ws.recv(timeout=RECV))
        acknowledged = json.loads(ws.recv(timeout=RECV))
        assert created["id"] == 1 and created["result"]["events"]["lease_created.lease_uuid"] == [ours.uuid]
        assert acknowledged["id"] == 2
        assert acknowledged["result"]["events"]["lease_acknowledged.lease_uuid"] == [ours.uuid]
        # Another provider's auto-close matches the credit_exhausted subscription (id 5) only.
        world.model.fund_credit(addr("poor"), [Coin("upwr", 10)])
        world.model.create_lease(addr("poor"), OTHER, [LeaseItem("sku", 1, Coin("upwr", 5))])
        world.clock.advance(timedelta(seconds=10))
        world.model.withdraw(addr("other"), provider_uuid=OTHER)
        frame = json.loads(ws.recv(timeout=RECV))
        assert frame["id"] == 5
        assert frame["result"]["events"]["lease_auto_closed.provider_uuid"] == [OTHER]
        # A tx with our lease_closed and an auto-close arrives once per matching subscription.
        tx = TxEvents(
            999, "C3" * 32, T0,
            (
                ChainEvent("lease_closed", (("lease_uuid", ours.uuid), ("tenant", "t"), ("provider_uuid", P))),
                ChainEvent("lease_auto_closed", (("lease_uuid", other.uuid), ("tenant", "t"),
                                                 ("provider_uuid", OTHER), ("reason", "credit_exhausted"))),
            ),
        )
        world.server.publish(tx)
        ids = sorted(json.loads(ws.recv(timeout=RECV))["id"] for _ in range(2))
        assert ids == [3, 5]


def test_unsubscribe_and_unsubscribe_all(world):
    q_created, q_ack = TARGETED[:2]
    with connect(world.server.url) as ws:
        subscribe(ws, q_created, 1)
        subscribe(ws, q_ack, 2)
        assert rpc(ws, "unsubscribe", {"query": q_created}, 3) == {"jsonrpc": "2.0", "id": 3, "result": {}}
        world.lease()  # created (no longer subscribed), then acknowledged
        frame = json.loads(ws.recv(timeout=RECV))
        assert frame["id"] == 2 and "lease_acknowledged.lease_uuid" in frame["result"]["events"]
        err = rpc(ws, "unsubscribe", {"query": q_created}, 4)
        assert err["error"]["code"] == -32603 and err["error"]["data"] == "subscription not found"
        assert rpc(ws, "unsubscribe_all", None, 5) == {"jsonrpc": "2.0", "id": 5, "result": {}}
        world.lease()
        # Nothing was pushed for that lease: the next frame is the status answer.
        status = rpc(ws, "status", None, 6)
        assert status["id"] == 6 and "result" in status
        assert rpc(ws, "unsubscribe_all", None, 7)["error"]["data"] == "subscription not found"
    assert poll(lambda: world.server.subscription_count() == 0)


def test_status_reports_sync_info_from_the_node(world):
    with connect(world.server.url) as ws:
        reply = rpc(ws, "status", rid="s")
        assert reply["id"] == "s"
        assert reply["result"]["sync_info"] == {
            "latest_block_height": "42",
            "latest_block_time": "2026-03-01T00:00:00.000000Z",
            "catching_up": False,
        }
        world.status = NodeStatus(43, utc(2026, 3, 1, 0, 0, 5), True)
        assert rpc(ws, "status")["result"]["sync_info"]["catching_up"] is True


def test_the_subscription_cap_and_duplicate_subscriptions():
    w = World(max_subscriptions=2)
    try:
        with connect(w.server.url) as ws:
            subscribe(ws, "tm.event='Tx' AND a.b='1'", 1)
            dup = rpc(ws, "subscribe", {"query": "tm.event='Tx' AND a.b='1'"}, 2)
            assert dup["error"] == {"code": -32603, "message": "Internal error", "data": "already subscribed"}
            subscribe(ws, "tm.event='Tx' AND a.b='2'", 3)
            over = rpc(ws, "subscribe", ["tm.event='Tx' AND a.b='3'"], 4)  # params as an array
            assert over == {
                "jsonrpc": "2.0",
                "id": 4,
                "error": {"code": -32603, "message": "Internal error",
                          "data": "max_subscriptions_per_client 2 reached"},
            }
            # The cap is per client: another connection may subscribe.
            with connect(w.server.url) as ws2:
                subscribe(ws2, "tm.event='Tx' AND a.b='3'", 1)
            assert w.server.subscription_count() >= 2
    finally:
        w.server.stop()


@pytest.mark.parametrize(
    "request_text, code, message, data_words",
    [
        ("{oops", -32700, "Parse error. Invalid JSON", "Expecting"),
        ("[1]", -32600, "Invalid Request", "JSON object"),
        ('{"jsonrpc":"1.0","id":1,"method":"status"}', -32600, "Invalid Request", "jsonrpc"),
        ('{"jsonrpc":"2.0","id":1,"method":"broadcast_tx_sync"}', -32601, "Method not found", "broadcast_tx_sync"),
        ('{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{}}', -32602, "Invalid params", "query"),
        ('{"jsonrpc":"2.0","id":1,"method":"subscribe","params":"q"}', -32602, "Invalid params", "object"),
        ('{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"query":"tx.height>5"}}',
         -32603, "Internal error", "failed to parse query: operator '>'"),
        ('{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"query":"a=\'1\' OR b=\'2\'"}}',
         -32603, "Internal error", "'OR'"),
    ],
)
def test_errors_are_json_rpc_errors(world, request_text, code, message, data_words):
    with connect(world.server.url) as ws:
        ws.send(request_text)
        reply = json.loads(ws.recv(timeout=RECV))
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] in (1, None)
    assert reply["error"]["code"] == code and reply["error"]["message"] == message
    assert data_words in reply["error"]["data"]


def test_a_notification_gets_no_answer(world):
    with connect(world.server.url) as ws:
        ws.send('{"jsonrpc":"2.0","method":"status"}')
        assert rpc(ws, "status", rid=9)["id"] == 9  # the first answer is to the request with an id


def test_only_the_websocket_path_is_served(world):
    with pytest.raises(InvalidStatus) as err:
        with connect(f"ws://127.0.0.1:{world.server.port}/other"):
            pass
    assert err.value.response.status_code == 404


def test_ping_is_answered_until_the_connection_is_frozen(world):
    with connect(world.server.url, close_timeout=0.2) as ws:
        assert ws.ping().wait(RECV)
        subscribe(ws, "tm.event='Tx'")
        assert world.server.freeze_all() == 1
        assert not ws.ping().wait(0.3)  # a dead peer: no pong
        world.lease()
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.2)  # and nothing pushed


def test_drop_all_cuts_every_connection(world):
    with connect(world.server.url) as a, connect(world.server.url) as b:
        assert poll(lambda: world.server.client_count() == 2)
        assert world.server.drop_all() == 2
        for ws in (a, b):
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=RECV)
    assert world.server.stats.dropped == 2
    assert poll(lambda: world.server.client_count() == 0)


def test_drop_interval_drops_periodically():
    w = World(drop_interval=timedelta(milliseconds=100))
    try:
        for _ in range(2):
            with connect(w.server.url) as ws:
                with pytest.raises(ConnectionClosed):
                    ws.recv(timeout=RECV)
        assert w.server.stats.dropped >= 2
    finally:
        w.server.stop()


def test_a_slow_client_is_disconnected():
    w = World(slow_client_queue=20)
    try:
        # A client that never reads, with a tiny receive buffer, so the backlog
        # lands in the server's queue rather than in the kernel's.
        sock = socket.create_connection(("127.0.0.1", w.server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        with connect(w.server.url, sock=sock, max_queue=1) as ws:
            subscribe(ws, "tm.event='Tx'")
            big = tuple(("attr%d" % i, "v" * 200) for i in range(20))
            n = 0
            while w.server.stats.slow_disconnects == 0 and n < 20_000:
                w.server.publish(TxEvents(n, f"{n:064X}", T0, (ChainEvent("lease_closed", big),)))
                n += 1
                if n % 200 == 0:
                    poll(lambda: w.server.stats.txs_published >= n, timeout=2)
            assert poll(lambda: w.server.stats.slow_disconnects == 1)
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    ws.recv(timeout=RECV)
            assert closed.value.rcvd is None or closed.value.rcvd.code == 1008
        assert poll(lambda: w.server.client_count() == 0)
    finally:
        w.server.stop()


def test_model_callbacks_from_many_threads_all_arrive_in_one_piece(world):
    with connect(world.server.url) as ws:
        subscribe(ws, "tm.event='Tx'")
        per_thread, threads = 200, 4

        def emit(t):
            for i in range(per_thread):
                world.server.publish(
                    TxEvents(1, f"{t:02X}{i:062X}", T0, (ChainEvent("x", (("n", f"{t}-{i}"),)),))
                )

        workers = [threading.Thread(target=emit, args=(t,)) for t in range(threads)]
        for th in workers:
            th.start()
        for th in workers:
            th.join()
        got = set()
        for _ in range(per_thread * threads):
            got.add(json.loads(ws.recv(timeout=RECV))["result"]["events"]["x.n"][0])
    assert got == {f"{t}-{i}" for t in range(threads) for i in range(per_thread)}


def test_raw_frames_can_be_injected_and_the_server_restarts_cleanly(world):
    with connect(world.server.url) as ws:
        assert poll(lambda: world.server.client_count() == 1)
        assert world.server.send_raw_to_all("{not json") == 1
        assert ws.recv(timeout=RECV) == "{not json"
    world.server.stop()
    with pytest.raises(RuntimeError, match="not running"):
        world.server.drop_all()
    world.lease()  # a tx after stop is dropped quietly, not an error in the model's thread


def test_bad_constructor_arguments_are_refused():
    model = chain_model(ManualClock(T0))
    with pytest.raises(ValueError, match="max_subscriptions"):
        WebsocketServer(model, lambda: None, max_subscriptions=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="slow_client_queue"):
        WebsocketServer(model, lambda: None, slow_client_queue=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="drop_interval"):
        WebsocketServer(model, lambda: None, drop_interval=timedelta(0))  # type: ignore[arg-type,return-value]
