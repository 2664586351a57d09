"""Conformance, CHAIN-VERSIONS.md section 3: every event's attributes per version, and their delivery.

Attribute sets are read from the events the chain model emits per tx
(``TxEvents``, tagged with ``msg_index`` and preceded by the SDK's
``message`` event, as a node's tx result holds them) and per end of block
(``BlockEvents``). Delivery is checked on the devnet: a multi-message tx's
``msg_index`` over gRPC, and the CometBFT websocket's ``Tx`` and
``NewBlockEvents`` frames through a real websocket client. Each test runs
once per chain version, named by the fact it checks.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from websockets.sync.client import connect

from chain.billing_pb import tx_pb2 as billing_tx
from chain.model import BlockEvents, ChainEvent, TxEvents
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock
from tests.conformance_support import P, PA, funded, lease, model_of
from tests.devnet_harness import PROVIDER, Raw, World, make_world
from tests.support import addr, chain_version

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

RECV = 5.0  # seconds a test waits for a websocket frame that must come


class Recorded:
    """A model of this run's version whose every tx and end of block is kept."""

    def __init__(self, clock: ManualClock, **params: int) -> None:
        self.model = model_of(clock, **params)
        self.seen: list[TxEvents | BlockEvents] = []
        self.model.subscribe(self.seen.append)

    def last(self) -> list[ChainEvent]:
        return list(self.seen[-1].events)

    def of(self, kind: str) -> list[ChainEvent]:
        return [e for e in self.last() if e.type == kind]


@pytest.fixture
def rec(clock: ManualClock) -> Recorded:
    return Recorded(clock)


def keys(event: ChainEvent) -> list[str]:
    return [k for k, _ in event.attributes]


def test_3_every_tx_event_has_msg_index_after_the_sdk_message_event(rec: Recorded) -> None:
    t = funded(rec.model, "t", 100)
    message, funded_event = rec.last()
    assert message.attributes == (
        ("action", "/liftedinit.billing.v1.MsgFundCredit"), ("sender", t), ("module", "billing"), ("msg_index", "0"),
    )
    assert funded_event.type == "credit_funded" and funded_event.get("msg_index") == "0"
    lease(rec.model, t)  # create, then acknowledge: two txs
    for tx in rec.seen[-2:]:
        assert isinstance(tx, TxEvents) and tx.events[0].type == "message"
        assert all(e.get("msg_index") == "0" for e in tx.events)


def test_3_credit_funded_and_lease_created_attributes(rec: Recorded) -> None:
    m = rec.model
    t = funded(m, "t", 100)
    assert rec.of("credit_funded")[0].attributes[:-1] == (
        ("tenant", t), ("credit_address", m.credit_address(t)), ("sender", t), ("amount", "100umfx"),
        ("new_balance", "100umfx"),
    )
    m.fund_credit(t, [Coin("upwr", 5)], sender=addr("friend"))
    (ev,) = rec.of("credit_funded")
    assert (ev.get("sender"), ev.get("amount"), ev.get("new_balance")) == (addr("friend"), "5upwr", "100umfx,5upwr")
    items = [LeaseItem("a", 2, Coin("umfx", 3)), LeaseItem("b", 1, Coin("upwr", 1))]
    u = m.create_lease(t, P, items, acknowledge=False, meta_hash=b"\xab\x01").uuid
    (ev,) = rec.of("lease_created")
    expected = ["lease_uuid", "tenant", "provider_uuid", "item_count", "total_rate_per_second",
                "pending_lease_count", "created_by"]
    if chain_version().created_event_sender:
        expected.append("sender")
    assert keys(ev) == expected + ["meta_hash", "msg_index"]
    assert (ev.get("lease_uuid"), ev.get("item_count"), ev.get("total_rate_per_second")) == (u, "2", "6umfx,1upwr")
    assert (ev.get("pending_lease_count"), ev.get("created_by"), ev.get("meta_hash")) == ("1", "tenant", "ab01")


def test_3_acknowledge_reject_and_cancel_attributes_and_their_batch_events(world: World, raw: Raw) -> None:
    m = world.model
    t = world.tenant("t")
    item = [LeaseItem("sku-1", 1, Coin("umfx", 1))]
    pending = [m.create_lease(t, PROVIDER, item, acknowledge=False).uuid for _ in range(5)]
    one = raw.included(raw.sign([billing_tx.MsgAcknowledgeLease(sender=raw.key.address, lease_uuids=pending[:1])]))
    two = raw.included(raw.sign([billing_tx.MsgAcknowledgeLease(sender=raw.key.address, lease_uuids=pending[1:3])]))
    rejected = raw.included(raw.sign(
        [billing_tx.MsgRejectLease(sender=raw.key.address, lease_uuids=pending[3:5], reason="full\n")]
    ))
    by = raw.key.address

    def events(tx):
        return [(e.type, [(a.key, a.value) for a in e.attributes]) for e in tx.events]

    ack = [("lease_uuid", pending[0]), ("tenant", t), ("provider_uuid", PROVIDER), ("acknowledged_by", by), ("msg_index", "0")]
    assert [e for e in events(one) if e[0] != "message"] == [("lease_acknowledged", ack)]  # one lease: no batch
    assert [kind for kind, _ in events(two)] == ["message", "lease_acknowledged", "lease_acknowledged", "batch_acknowledged"]
    assert events(two)[-1][1] == [("lease_count", "2"), ("provider_uuid", PROVIDER), ("acknowledged_by", by), ("msg_index", "0")]
    kinds = [kind for kind, _ in events(rejected)]
    assert kinds == ["message", "lease_rejected", "lease_rejected", "batch_rejected"]
    assert events(rejected)[1][1] == [
        ("lease_uuid", pending[3]), ("tenant", t), ("provider_uuid", PROVIDER), ("rejected_by", by),
        ("rejection_reason", "full"), ("msg_index", "0"),  # sanitized: the newline is gone
    ]
    assert events(rejected)[-1][1] == [("lease_count", "2"), ("provider_uuid", PROVIDER), ("rejected_by", by), ("msg_index", "0")]
    seen: list = []
    m.subscribe(seen.append)
    cancelled = m.create_lease(t, PROVIDER, item, acknowledge=False).uuid
    m.cancel_lease(cancelled)
    (ev,) = [e for e in seen[-1].events if e.type == "lease_cancelled"]
    assert ev.attributes == (("lease_uuid", cancelled), ("tenant", t), ("provider_uuid", PROVIDER), ("cancelled_by", t), ("msg_index", "0"))


def test_3_lease_closed_and_batch_closed(clock: ManualClock, rec: Recorded) -> None:
    m = rec.model
    t = funded(m, "t", 10**6)
    m.fund_credit(t, [Coin("upwr", 10**6)])
    a = lease(m, t, rate=2)
    b = m.create_lease(t, P, [LeaseItem("x", 1, Coin("umfx", 1)), LeaseItem("y", 1, Coin("upwr", 5))]).uuid
    clock.advance(30)
    m.withdraw(PA, lease_uuids=[a])  # a's last settlement: duration counts from here
    clock.advance(15)
    m.close_leases(t, [a, b], "a\x07b")
    first, second = rec.of("lease_closed")
    assert keys(first) == ["lease_uuid", "tenant", "provider_uuid", "settled_amounts", "closed_by", "duration_seconds",
                           "active_lease_count", "closure_reason", "msg_index"]
    assert (first.get("settled_amounts"), first.get("duration_seconds"), first.get("active_lease_count")) == ("30umfx", "15", "1")
    assert (second.get("settled_amounts"), second.get("duration_seconds"), second.get("active_lease_count")) == (
        "45umfx,225upwr", "45", "0"  # coins as sdk.Coins.String(): sorted, comma-joined
    )
    assert first.get("closure_reason") == "ab" and m.lease(a).closure_reason == "a\x07b"  # sanitized in the event only
    (batch,) = rec.of("batch_closed")
    assert batch.attributes == (("lease_count", "2"), ("closed_by", "tenant"), ("settled_amounts", "75umfx,225upwr"), ("msg_index", "0"))
    c = lease(m, t)
    m.close_leases(t, [c])  # one lease, nothing accrued, no reason
    assert [e.type for e in rec.last()] == ["message", "lease_closed"]
    (ev,) = rec.of("lease_closed")
    assert ev.get("settled_amounts") == "" and "closure_reason" not in keys(ev)


def test_3_withdraw_events_per_mode_and_version(clock: ManualClock, rec: Recorded) -> None:
    m = rec.model
    version = chain_version()
    t, poor = funded(m, "t", 10**6), funded(m, "poor", 3)
    a, b, broke, failing = lease(m, t), lease(m, t, rate=2), lease(m, poor), lease(m, t)
    m.block_payouts([failing])
    clock.advance(10)
    m.withdraw(PA, lease_uuids=[a])
    assert [(e.type, keys(e)) for e in rec.last()[1:]] == [
        ("provider_withdraw", ["lease_uuid", "amount", "provider_uuid", "payout_address", "msg_index"])
    ]  # one named lease: no batch_withdraw
    clock.advance(10)
    m.withdraw(PA, lease_uuids=[a, b])
    (batch,) = rec.of("batch_withdraw")
    assert batch.attributes == (("lease_count", "2"), ("provider_uuid", P), ("amount", "50umfx"), ("payout_address", PA), ("msg_index", "0"))
    clock.advance(10)
    m.withdraw(PA, provider_uuid=P)
    (batch,) = rec.of("batch_withdraw")
    expected = ["lease_count", "provider_uuid", "amount", "payout_address", "auto_closed"]
    if version.batch_withdraw_failures:
        expected += ["failed_lease_count", "failed_lease_uuids"]
    assert keys(batch) == expected + ["msg_index"]
    assert (batch.get("lease_count"), batch.get("amount"), batch.get("auto_closed")) == ("3", "33umfx", "1")
    if version.batch_withdraw_failures:
        assert (batch.get("failed_lease_count"), batch.get("failed_lease_uuids")) == ("1", failing)
    (auto,) = rec.of("lease_auto_closed")
    if version.auto_close_event_amounts:
        assert keys(auto) == ["lease_uuid", "tenant", "provider_uuid", "amount", "payout_address", "reason", "msg_index"]
        assert auto.get("amount") == "3umfx"
    else:
        assert keys(auto) == ["lease_uuid", "tenant", "provider_uuid", "reason", "msg_index"]
    per_lease = {e.get("lease_uuid"): e.get("amount") for e in rec.of("provider_withdraw")}
    assert per_lease == ({a: "10umfx", b: "20umfx", broke: "3umfx"} if version.provider_wide_lease_events else {})
    clock.advance(1)
    m.unblock_payouts()
    m.withdraw(PA, provider_uuid=P)
    (batch,) = rec.of("batch_withdraw")
    if version.batch_withdraw_failures:
        assert (batch.get("failed_lease_count"), batch.get("failed_lease_uuids")) == ("0", "")  # "" when none


def test_3_lease_expired_is_an_end_of_block_event(clock: ManualClock, rec: Recorded) -> None:
    m = rec.model
    u = lease(m, funded(m, "t", 10), acknowledge=False)
    m.end_block(7, clock.now() + timedelta(seconds=m.params.pending_timeout + 1))
    block = rec.seen[-1]
    assert isinstance(block, BlockEvents) and block.height == 7 and block.tx_hash == ""
    (ev,) = block.events
    # No msg_index: no message emitted it; the SDK marks it mode=EndBlock.
    assert ev.attributes == (("lease_uuid", u), ("tenant", addr("t")), ("provider_uuid", P), ("reason", "pending_timeout"), ("mode", "EndBlock"))


def test_3_a_multi_message_tx_numbers_its_events_by_message(world: World, raw: Raw) -> None:
    t = world.tenant("t")
    a, b = world.lease(t), world.lease(t)
    tx = raw.included(raw.sign([raw.close_msg(a), raw.close_msg(b)]))
    tagged = [(e.type, {x.key: x.value for x in e.attributes}.get("msg_index")) for e in tx.events]
    assert tagged == [("message", "0"), ("lease_closed", "0"), ("message", "1"), ("lease_closed", "1")]


# -- delivery over the CometBFT websocket ----------------------------------------------------------


@pytest.fixture
def ws_world():
    w = make_world(websocket=True)
    yield w
    w.close()


def subscribe(ws, rid: int, query: str) -> None:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscribe", "params": {"query": query}}))
    assert json.loads(ws.recv(timeout=RECV)) == {"jsonrpc": "2.0", "id": rid, "result": {}}


def test_3_lease_expired_arrives_under_new_block_events_never_under_tx(ws_world: World) -> None:
    w = ws_world
    t = w.tenant("t")
    with connect(w.devnet.websocket_url) as ws:
        subscribe(ws, 1, f"tm.event='NewBlockEvents' AND lease_expired.provider_uuid='{PROVIDER}'")
        subscribe(ws, 2, f"tm.event='Tx' AND lease_expired.provider_uuid='{PROVIDER}'")
        subscribe(ws, 3, f"tm.event='Tx' AND lease_created.provider_uuid='{PROVIDER}'")
        u = w.model.create_lease(t, PROVIDER, [LeaseItem("sku-1", 1, Coin("umfx", 1))], acknowledge=False).uuid
        assert json.loads(ws.recv(timeout=RECV))["id"] == 3  # the tx subscriptions are live
        deadline = w.model.lease(u).created_at + w.config.devnet.pending_timeout
        w.clock.advance(w.config.devnet.pending_timeout.total_seconds() + 10)
        frame = json.loads(ws.recv(timeout=RECV))
        # Anything else this block matched was queued with it, before this answer.
        ws.send(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "status"}))
        later = []
        while True:
            reply = json.loads(ws.recv(timeout=RECV))
            if reply["id"] == 9:
                break
            later.append(reply)
    assert later == []  # never under tm.event='Tx'
    assert frame["id"] == 1
    data, flat = frame["result"]["data"], frame["result"]["events"]
    assert data["type"] == "tendermint/event/NewBlockEvents" and set(data["value"]) == {"height", "events", "num_txs"}
    assert [e["type"] for e in data["value"]["events"]] == ["lease_expired"]
    assert flat["tm.event"] == ["NewBlockEvents"] and "tx.hash" not in flat
    assert flat["lease_expired.lease_uuid"] == [u] and flat["lease_expired.reason"] == ["pending_timeout"]
    height = int(flat["block.height"][0])
    assert data["value"]["height"] == str(height)
    # The first block strictly after created_at + pending_timeout.
    assert w.node.time_of(height - 1) <= deadline < w.node.time_of(height)
    assert w.model.lease_record(u).expired_at == w.node.time_of(height)


def test_3_tx_result_data_is_base64_of_the_tx_msg_data(ws_world: World) -> None:
    w = ws_world
    t = w.tenant("t")
    w.lease(t)
    w.clock.advance(10)
    raw = Raw(w)
    try:
        with connect(w.devnet.websocket_url) as ws:
            subscribe(ws, 1, f"tm.event='Tx' AND batch_withdraw.provider_uuid='{PROVIDER}'")
            signed = raw.sign([billing_tx.MsgWithdraw(sender=raw.key.address, provider_uuid=PROVIDER)])
            tx = raw.included(signed)
            frame = json.loads(ws.recv(timeout=RECV))
    finally:
        raw.close()
    result = frame["result"]
    tx_result = result["data"]["value"]["TxResult"]
    assert result["data"]["type"] == "tendermint/event/Tx"
    assert base64.b64decode(tx_result["result"]["data"]) == bytes.fromhex(tx.data)
    assert base64.b64decode(tx_result["tx"]) == signed
    assert (tx_result["height"], result["events"]["tx.hash"], result["events"]["tx.height"]) == (
        str(tx.height), [tx.txhash], [str(tx.height)],
    )
    assert result["events"]["message.action"] == ["/liftedinit.billing.v1.MsgWithdraw"]



def test_3_new_block_events_counts_the_txs_of_its_block(ws_world: World) -> None:
    w = ws_world
    w.blocks.pause()  # this test cuts its one block itself
    t = w.tenant("t")
    w.lease(t)
    u = w.model.create_lease(t, PROVIDER, [LeaseItem("sku-1", 1, Coin("umfx", 1))], acknowledge=False).uuid
    deadline = w.model.lease(u).created_at + w.config.devnet.pending_timeout
    expiring_at = w.node.time_of(w.node.height_at(deadline) + 1)
    w.clock.advance_to(expiring_at - timedelta(seconds=1))
    raw = Raw(w)
    try:
        with connect(w.devnet.websocket_url) as ws:
            subscribe(ws, 1, "tm.event='NewBlockEvents'")
            sent = raw.broadcast(raw.sign([billing_tx.MsgWithdraw(sender=raw.key.address, provider_uuid=PROVIDER)]))
            assert sent.code == 0
            w.clock.advance_to(expiring_at)  # one block: the withdraw, then the expiry
            frame = json.loads(ws.recv(timeout=RECV))
    finally:
        raw.close()
    value = frame["result"]["data"]["value"]
    assert (value["height"], value["num_txs"]) == (str(w.node.get_tx(sent.txhash).height), "1")
