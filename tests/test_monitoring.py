"""/metrics, /healthz and /readyz of a sidecar running on the devnet, through gRPC and the websocket.

The clock is manual; a block producer cuts a block whenever a tx waits
(``tests.devnet_harness``). The actors run on worker threads, so each step
waits for the sidecar to settle. The HTTP server listens on a free port.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from cosmpy.crypto.address import Address
from prometheus_client.parser import text_string_to_metric_families

from chain.billing_pb import tx_pb2 as billing_tx
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock, utc
from runtime.config import load_config
from sidecar.runner import build
from tests.devnet_harness import BlockProducer, wait_until

OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"


def address(label: str) -> str:
    return str(Address(hashlib.sha256(label.encode()).digest()[:20], "manifest"))


class Running:
    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        self.config = load_config(overrides={
            "chain": {"mode": "devnet"},
            "devnet": {"block_time": "5s", "min_lease_duration": "1s"},
            "node": {"tx_poll_interval": "2ms", "tx_timeout": "10s", "query_timeout": "5s"},
            "metrics": {"listen": "127.0.0.1:0"},
            "ledger": {"path": str(tmp_path / "books.sqlite"), "synchronous": "normal"},
            "capture": {"directory": str(tmp_path / "captures")},
        })
        self.clock = ManualClock(utc(2026, 3, 1))
        self.r = build(self.config, self.clock, serve=True, demo=False)
        self.devnet = self.r.devnet
        self.model = self.r.model
        self.blocks = BlockProducer(self.devnet, self.clock)
        self.core = self.r.sidecar.scheduler_core
        self.model.register_provider(OTHER, address("other provider"))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.r.server.url}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        _, text = self.get("/metrics")
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def settled(self) -> bool:
        c = self.core
        return c.cycle is None and c.wake_at is not None and c.wake_at > self.clock.now() and not self.devnet.node.mempool_size()

    def step(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))
        wait_until(self.settled, timeout=10, what="the sidecar to settle")

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def close(self) -> None:
        self.blocks.stop()
        self.r.close()


@pytest.fixture
def running(tmp_path):  # type: ignore[no-untyped-def]
    r = Running(tmp_path)
    yield r
    r.close()


def withdrawn_on_chain(node, provider_address: str) -> int:  # type: ignore[no-untyped-def]
    """umfx our included MsgWithdraw txs took, as their responses say."""
    total = 0
    for r in node.included_txs():
        if r.code != 0:
            continue
        for any_msg in abci_pb2.TxMsgData.FromString(bytes.fromhex(r.data)).msg_responses:
            if any_msg.type_url.endswith("MsgWithdrawResponse"):
                response = billing_tx.MsgWithdrawResponse.FromString(any_msg.value)
                total += sum(int(c.amount) for c in response.total_amounts if c.denom == "umfx")
    return total


def test_the_counters_move_by_what_the_chain_shows_after_a_withdraw_and_a_closure(running: Running) -> None:
    provider = running.config.provider.uuid
    rich, dry = address("rich tenant"), address("dry tenant")
    running.model.fund_credit(rich, [Coin("umfx", 10**9)])
    running.model.fund_credit(dry, [Coin("umfx", 1_000)])
    running.model.create_lease(rich, provider, [LeaseItem("sku-1", 1, Coin("umfx", 7))])
    ours = running.model.create_lease(dry, provider, [LeaseItem("sku-1", 1, Coin("umfx", 1))]).uuid
    running.model.create_lease(dry, OTHER, [LeaseItem("sku-1", 1, Coin("umfx", 100))])  # uses the credit up, unsettled
    node_fees_before = running.devnet.node.fee_balance(running.devnet.provider_address)
    assert running.r.sidecar.withdraw_once(timeout=20)
    running.r.sidecar.start()
    wait_until(running.settled, timeout=10, what="the first cycle")
    for _ in range(60):  # the grace window (5 minutes) and a re-check
        if running.model.lease(ours).state != "ACTIVE":
            break
        running.step(10)
    assert running.model.lease(ours).closure_reason == running.config.scheduler.closure_reason
    wait_until(lambda: running.metrics().get(("leasewarden_leases_closed_total", (("reason", "credit depleted"),))) == 1,
               timeout=5, what="the closure counted")

    m = running.metrics()
    withdrawn = withdrawn_on_chain(running.devnet.node, running.devnet.provider_address)
    assert withdrawn > 0
    assert m[("leasewarden_withdrawn_total", (("denom", "umfx"),))] == withdrawn
    fees = node_fees_before - running.devnet.node.fee_balance(running.devnet.provider_address)
    assert m[("leasewarden_tx_fees_total", (("denom", "umfx"),))] == fees > 0
    assert m[("leasewarden_txs_included_total", (("kind", "close"),))] == 1
    assert m[("leasewarden_withdraw_pages_total", (("outcome", "included"),))] == m[("leasewarden_txs_included_total", (("kind", "withdraw"),))]
    assert m[("leasewarden_last_withdraw_timestamp_seconds", ())] >= utc(2026, 3, 1).timestamp()
    assert m[("leasewarden_last_credit_check_timestamp_seconds", ())] > utc(2026, 3, 1).timestamp()
    assert m[("leasewarden_tenants_watched", ())] == 1 and m[("leasewarden_leases_watched", ())] == 1  # the rich one left
    assert m[("leasewarden_websocket_connected", ())] == 1
    assert m[("leasewarden_lease_events_total", (("kind", "closed"), ("provider", "ours")))] == 1
    assert m[("leasewarden_node_height", ())] > 0 and m[("leasewarden_node_catching_up", ())] == 0
    assert m[("leasewarden_capture_bytes_total", ())] > 0 and m[("leasewarden_capture_dropped_total", ())] == 0
    assert not [k for k, v in m.items() if k[0] == "leasewarden_message_failures_total" and v]  # no handler raised
    assert m[("leasewarden_messages_delivered_total", (("actor", "tenant"),))] > 0
    assert ("leasewarden_mailbox_depth_max", (("actor", "scheduler"),)) in m
    assert m[("leasewarden_billing_months", (("stage", "open"),))] == 0  # the books' first tick: no month has ended


def test_readyz_turns_not_ready_when_the_websocket_is_cut_and_ready_after_the_reconnect(running: Running) -> None:
    assert running.get("/healthz") == (200, "alive\n")
    wait_until(running.ready, timeout=10, what="ready at start")
    code, body = running.get("/readyz")
    assert body.splitlines()[0] == "ready" and "websocket: ready" in body and "node: ready" in body
    server = running.devnet.websocket_server
    server.stop()  # the node's websocket goes away: refused until it is back
    wait_until(lambda: not running.ready(), timeout=10, what="not ready")
    code, body = running.get("/readyz")
    assert code == 503 and "websocket: NOT READY since 2026-03-01 00:00:00 UTC: reconnecting: " in body
    assert "chain: ready" in body  # only the websocket is down
    status = json.loads(running.get("/readyz?format=json")[1])
    assert not status["ready"] and [p["name"] for p in status["parts"] if not p["ready"]] == ["websocket"]
    server.start()
    wait_until(running.ready, timeout=15, what="ready after the reconnect")
    assert running.metrics()[("leasewarden_websocket_reconnects_total", ())] == 1
