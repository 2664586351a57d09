"""The websocket listener actor against the real devnet websocket on loopback."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta

import pytest

import actors.listener as listener_module
from actors.listener import (
    ListenerActor,
    ListenerStats,
    LeaseEventStream,
    backoff_delay,
    malformed_log_level,
)
from actors.listener_settings import ListenerSettings
from chain.ws_query import provider_queries
from chain.model import BillingModel, ChainEvent, TxEvents
from chain.ws_query import InvalidProviderUUID
from devnet.websocket_server import WebsocketServer
from messages.chain import LeaseItem, NodeStatus
from messages.coins import Coin
from messages.health import WebsocketLost, WebsocketSubscribed
from messages.scheduler import LeaseEventReceived, Reconcile
from runtime.clock import ManualClock, utc
from runtime.config import ConfigError, load_config
from runtime.dispatch import Delivery, PooledActor, ThreadedDispatcher
from runtime.router import HEALTH, SCHEDULER, Router
from tests.support import addr, chain_model, eventually as wait_until

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

P = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-73ca-8297-85d4d17d0ec4"
T0 = utc(2026, 3, 1)
MS = timedelta(milliseconds=1)

FAST = ListenerSettings(
    ping_interval=100 * MS,
    ping_timeout=200 * MS,
    close_timeout=200 * MS,
    open_timeout=timedelta(seconds=3),
    backoff_initial=30 * MS,
    backoff_max=200 * MS,
    stable_after=timedelta(0),
    malformed_log_every=2,
)


# -- pure parts -------------------------------------------------------------------------------
def test_backoff_doubles_from_initial_to_the_cap_without_jitter_at_the_midpoint():
    delays = [backoff_delay(a, 1.0, 60.0, jitter=0.2, random=lambda: 0.5) for a in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert backoff_delay(10_000, 1.0, 60.0, random=lambda: 0.5) == 60.0  # no overflow


def test_backoff_jitter_spreads_either_way_within_initial_and_cap():
    assert backoff_delay(3, 1.0, 60.0, jitter=0.2, random=lambda: 0.0) == pytest.approx(6.4)
    assert backoff_delay(3, 1.0, 60.0, jitter=0.2, random=lambda: 0.999999) == pytest.approx(9.6, abs=1e-4)
    # Never below the first delay, never above the cap.
    assert backoff_delay(0, 1.0, 60.0, jitter=0.5, random=lambda: 0.0) == 1.0
    assert backoff_delay(8, 1.0, 60.0, jitter=0.5, random=lambda: 0.999) == 60.0
    assert backoff_delay(8, 1.0, 60.0, jitter=0.5, random=lambda: 0.0) == 30.0
    assert backoff_delay(2, 1.0, 60.0, jitter=0.0, random=lambda: 0.0) == 4.0


def test_backoff_jitter_decorrelates_reconnects():
    import random

    rng = random.Random(7)
    delays = {round(backoff_delay(4, 1.0, 60.0, jitter=0.2, random=rng.random), 6) for _ in range(50)}
    assert len(delays) > 40 and min(delays) >= 12.8 and max(delays) <= 19.2


@pytest.mark.parametrize(
    "args, words",
    [((-1, 1.0, 60.0), "attempt"), ((0, 0.0, 60.0), "initial"), ((0, 2.0, 1.0), "initial"),
     ((0, 1.0, 2.0, 1.5), "jitter")],
)
def test_backoff_refuses_nonsense(args, words):
    with pytest.raises(ValueError, match=words):
        backoff_delay(*args)


def test_malformed_frames_escalate_first_warning_then_every_nth_error():
    levels = [malformed_log_level(n, 100) for n in (1, 2, 99, 100, 101, 200)]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.ERROR, logging.DEBUG, logging.ERROR]


def test_listener_section_loads_and_names_bad_keys():
    config = load_config(overrides={"listener": {"ping_interval": "5s", "backoff_max": "2m"}})
    assert config.listener.ping_interval == timedelta(seconds=5)
    assert config.listener.backoff_max == timedelta(minutes=2)
    assert config.listener.backoff_initial == timedelta(seconds=1)
    with pytest.raises(ConfigError, match=r"\[listener\] backoff_max must not be shorter"):
        load_config(overrides={"listener": {"backoff_initial": "10s", "backoff_max": "5s"}})
    with pytest.raises(ConfigError, match=r"\[listener\] ping_timeout"):
        load_config(overrides={"listener": {"ping_timeout": "0"}})
    with pytest.raises(ConfigError, match=r"\[listener\] unknown key 'ping'"):
        load_config(overrides={"listener": {"ping": "5s"}})


def test_a_bad_provider_uuid_or_url_fails_at_start():
    dispatcher = ThreadedDispatcher(lambda: T0, workers=1)
    try:
        with pytest.raises(InvalidProviderUUID):
            ListenerActor.start(dispatcher, Router(), "ws://127.0.0.1:1/websocket", P + "' OR a='b", FAST)
        with pytest.raises(ValueError, match="ws://"):
            ListenerActor.start(dispatcher, Router(), "http://127.0.0.1:1/websocket", P, FAST)
    finally:
        dispatcher.shutdown()


# -- against the devnet websocket ------------------------------------------------------------------
class Probe(PooledActor):
    """Stands in for the scheduler (or ``health``): records what it is sent."""

    def __init__(self, dispatcher, inbox, address: str = SCHEDULER) -> None:
        super().__init__(dispatcher, address)
        self.inbox = inbox

    def on_receive(self, message) -> None:
        self.inbox.append(message)


class Inbox:
    def __init__(self) -> None:
        self.messages: list = []
        self._cond = threading.Condition()

    def append(self, message) -> None:
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def wait_for(self, predicate, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.messages), timeout)

    def events(self):
        return [m.event for m in self.messages if isinstance(m, LeaseEventReceived)]

    def reconciles(self) -> int:
        return sum(isinstance(m, Reconcile) for m in self.messages)


class Harness:
    def __init__(self, settings: ListenerSettings = FAST, **server_args) -> None:
        self.clock = ManualClock(T0)
        self.model = chain_model(self.clock)
        self.model.register_provider(P, addr("prov"))
        self.model.register_provider(OTHER, addr("other"))
        self.model.fund_credit(addr("tenant"), [Coin("upwr", 10**9)])
        self.server = WebsocketServer(self.model, lambda: NodeStatus(1, T0, False), **server_args)
        self.server.start()
        self.deliveries: list[Delivery] = []
        self.dispatcher = ThreadedDispatcher(lambda: T0, workers=1, tap=self.deliveries.append)
        self.router = Router()
        self.inbox = Inbox()
        self.router.add(SCHEDULER, Probe.start(self.dispatcher, self.inbox))
        self.health = Inbox()
        self.router.add(HEALTH, Probe.start(self.dispatcher, self.health, HEALTH))
        self.settings = settings
        self.listener = None

    def start_listener(self, **kwargs):
        self.listener = ListenerActor.start(self.dispatcher, self.router, self.server.url, P, self.settings, **kwargs)
        return self.listener

    def stream(self) -> LeaseEventStream:
        return self.listener.actor_inbox.actor.stream  # type: ignore[union-attr]

    def stats(self) -> ListenerStats:
        return self.listener.proxy().stats().get(timeout=5)  # type: ignore[union-attr]

    def connected(self, sessions: int = 1) -> bool:
        """Subscribed ``sessions`` times and the Reconcile for it has arrived."""
        return self.inbox.wait_for(lambda msgs: sum(isinstance(m, Reconcile) for m in msgs) >= sessions)

    def lease(self, provider=P, tenant=addr("tenant")):
        return self.model.create_lease(tenant, provider, [LeaseItem("sku", 1, Coin("upwr", 1))])

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop(timeout=10)
        self.server.stop()
        self.dispatcher.shutdown()


@pytest.fixture
def harness():
    h = Harness()
    yield h
    h.close()


def test_lease_events_arrive_at_the_scheduler_after_a_reconcile(harness):
    harness.start_listener()
    assert harness.connected()
    assert isinstance(harness.inbox.messages[0], Reconcile)
    assert harness.inbox.messages[0].source == "listener"
    lease = harness.lease()
    harness.clock.advance(timedelta(seconds=60))
    harness.model.close_leases(addr("prov"), [lease.uuid], "done")
    assert harness.inbox.wait_for(lambda msgs: len(msgs) >= 4)
    events = harness.inbox.events()
    assert [(e.kind, e.lease_uuid, e.tenant, e.provider_uuid, e.reason) for e in events] == [
        ("created", lease.uuid, addr("tenant"), P, ""),
        ("acknowledged", lease.uuid, addr("tenant"), P, ""),
        ("closed", lease.uuid, addr("tenant"), P, "done"),
    ]
    assert events[0].height < events[1].height < events[2].height
    # each stamped with the clock's time its frame was read (the scheduler's latency is measured from it)
    assert {m.received_at for m in harness.inbox.messages if isinstance(m, LeaseEventReceived)} == {T0}
    # Captures name the listener as the sender of everything the scheduler got.
    to_scheduler = [d for d in harness.deliveries if d.recipient == SCHEDULER]
    assert len(to_scheduler) == 4 and {d.sender for d in to_scheduler} == {"listener"}


def test_other_providers_events_arrive_only_as_credit_exhausted_auto_closes(harness):
    harness.start_listener()
    assert harness.connected()
    harness.lease(provider=OTHER)  # not ours: not subscribed
    harness.model.fund_credit(addr("poor"), [Coin("upwr", 10)])
    harness.model.create_lease(addr("poor"), OTHER, [LeaseItem("sku", 1, Coin("upwr", 5))])
    harness.clock.advance(timedelta(seconds=10))
    harness.model.withdraw(addr("other"), provider_uuid=OTHER)  # exhausts manifest1poor
    assert harness.inbox.wait_for(lambda msgs: len(msgs) >= 2)
    assert [(e.kind, e.tenant, e.provider_uuid) for e in harness.inbox.events()] == [
        ("auto_closed", addr("poor"), OTHER)
    ]


def test_a_tx_seen_twice_is_delivered_once(harness):
    """A tx the node pushes again (a subscription matched twice, a resubscribe) is delivered once."""
    harness.start_listener()
    assert harness.connected()
    tx = TxEvents(
        50, "C3" * 32, T0,
        (
            ChainEvent("lease_closed", (("lease_uuid", "l-ours"), ("tenant", "t1"), ("provider_uuid", P),
                                        ("closure_reason", "credit_exhausted"))),
            ChainEvent("lease_auto_closed", (("lease_uuid", "l-other"), ("tenant", "t1"), ("provider_uuid", OTHER),
                                             ("reason", "credit_exhausted"))),
        ),
    )
    harness.server.publish(tx)
    harness.server.publish(tx)
    marker = harness.lease()  # a later tx: once it is in, the duplicates have been handled
    assert harness.inbox.wait_for(lambda msgs: any(
        isinstance(m, LeaseEventReceived) and m.event.lease_uuid == marker.uuid and m.event.kind == "acknowledged"
        for m in msgs))
    kinds = [(e.kind, e.lease_uuid) for e in harness.inbox.events() if e.height == 50]
    assert kinds == [("closed", "l-ours"), ("auto_closed", "l-other")]
    assert harness.stats().duplicates == 2


def test_after_a_drop_it_reconnects_resubscribes_and_reconciles(harness):
    harness.start_listener()
    assert harness.connected(1)
    assert harness.server.drop_all() == 1
    assert harness.connected(2)
    assert wait_until(lambda: harness.server.subscription_count() == len(provider_queries(P)))
    lease = harness.lease()
    assert harness.inbox.wait_for(lambda msgs: any(
        isinstance(m, LeaseEventReceived) and m.event.lease_uuid == lease.uuid for m in msgs))
    stats = harness.stats()
    assert stats.subscribed_sessions == 2 and stats.disconnects == 1 and stats.dead_peers == 0
    assert stats.connected
    # health heard each subscribe and the lost session between them, with its reason
    assert harness.health.wait_for(lambda msgs: len(msgs) >= 3)
    first, lost, second = harness.health.messages[:3]
    assert first == second == WebsocketSubscribed(harness.server.url, len(provider_queries(P)))
    assert isinstance(lost, WebsocketLost) and lost.was_subscribed and lost.reason


def test_a_block_whose_txs_did_not_all_arrive_means_a_dropped_subscription_and_is_reconciled(harness):
    """CometBFT drops a subscriber whose buffer is full and tells it only if its write buffer has room,
    which under that load it has not: the socket and its pings stayed up, no reconnect, no reconcile,
    and every lease event after it was lost. Each block's end-of-block frame says how many txs it held."""
    from chain.model import BlockEvents

    harness.start_listener()
    assert harness.connected(1)
    lease = harness.lease()  # its tx frame arrives: block 1 is whole
    assert harness.inbox.wait_for(lambda msgs: any(isinstance(m, LeaseEventReceived) for m in msgs))
    height = harness.model.height
    harness.server.publish(BlockEvents(height, T0, (), num_txs=1))
    harness.server.publish(BlockEvents(height + 1, T0, (), num_txs=2))  # two txs whose frames never come
    for h in range(height + 2, height + 2 + listener_module.BLOCK_CHECK_LAG):
        harness.server.publish(BlockEvents(h, T0, (), num_txs=0))
    assert harness.connected(2)  # resubscribed, and reconciled (the leases are read again)
    stats = harness.stats()
    assert stats.dropped_subscriptions == 1 and stats.disconnects == 1
    assert f"block {height + 1} held 2 tx(s) and 0 reached us" in stats.last_error
    assert lease.uuid  # (the first block, whole, ended nothing)


def test_a_key_in_the_websocket_url_is_used_to_connect_and_shown_nowhere(harness, caplog):
    """A node provider's API key in the URL (a query value, a user): the connection uses it, while
    the logs and the health message (and so ``/readyz`` and the capture) show it masked."""
    caplog.set_level(logging.INFO)
    secret = "Zk3yV4lu3NotForLogs"
    host = harness.server.url.split("://", 1)[1]
    harness.listener = ListenerActor.start(
        harness.dispatcher, harness.router, f"ws://op:{secret}@{host}?apikey={secret}", P, harness.settings)
    assert harness.connected()
    assert harness.health.wait_for(lambda msgs: any(isinstance(m, WebsocketSubscribed) for m in msgs))
    [subscribed] = [m for m in harness.health.messages if isinstance(m, WebsocketSubscribed)]
    assert subscribed.url == f"ws://***@{host}?apikey=***"
    assert secret not in caplog.text and "apikey=***" in caplog.text


def test_a_url_is_shown_with_its_credentials_masked_and_its_host_kept():
    from runtime.urls import shown_url

    assert shown_url("ws://127.0.0.1:26657/websocket") == "ws://127.0.0.1:26657/websocket"
    assert shown_url("wss://u:p@rpc.example.com/websocket?apikey=k&flag") == "wss://***@rpc.example.com/websocket?apikey=***&***"
    assert shown_url("wss://node.example.com/ws/v3/9aa3d95b3bc440fa88ea12eaa4456161") == "wss://node.example.com/ws/v3/***"
    assert shown_url("grpc+https://[::1]:9090") == "grpc+https://[::1]:9090"
    assert shown_url("wss://rpc.example.com/cosmos-rpc/websocket") == "wss://rpc.example.com/cosmos-rpc/websocket"
    # a key too short to look like one, or with '=' in it, is still not a name
    assert shown_url("wss://rpc.example.net/v3/s3cr3tpassABCDEF/websocket") == "wss://rpc.example.net/v3/***/websocket"
    assert shown_url("wss://rpc.example.net/t=s3cr3tpass/ws") == "wss://rpc.example.net/***/ws"
    assert shown_url("wss://rpc.example.net/v3/KEYKEYKEYKEYKEYKEYKE") == "wss://rpc.example.net/v3/***"  # letters only
    # a query parameter's name is shown only where it reads as one: a bare token is the key itself
    assert shown_url("wss://rpc.example.net/websocket?dGhpc2lzYXNlY3JldGtleQ==") == "wss://rpc.example.net/websocket?***"
    assert shown_url("wss://rpc.example.net/websocket?s3cr3tKEY9a=") == "wss://rpc.example.net/websocket?***"
    assert shown_url("wss://rpc.example.net/websocket?apiKey=k") == "wss://rpc.example.net/websocket?apiKey=***"
    # what an error quotes: a URL that does not parse shows its scheme at most, never what may be user:key@host
    assert shown_url("ws://host:99999/k3y") == "ws://***"  # a port that does not parse
    assert shown_url("alice:s3cr3tpass@grpc.example.net:443") == "***"  # no scheme
    assert shown_url("wss:/alice:s3cr3tpass@rpc.example.net/websocket") == "***"  # a slash short
    assert shown_url("") == ""


def test_a_url_that_lacks_its_scheme_is_refused_without_quoting_its_credentials():
    from runtime.config import ConfigError, load_config

    for name, url in (("grpc_url", "alice:s3cr3tpass@grpc.example.net:443"),
                      ("websocket_url", "wss:/alice:s3cr3tpass@rpc.example.net/websocket")):
        with pytest.raises(ConfigError) as refused:
            load_config(overrides={"node": {name: url}})
        assert name in str(refused.value) and "s3cr3tpass" not in str(refused.value)


def test_a_placeholder_url_masked_in_a_capture_still_replays():
    """[node] unused (mode = devnet) with a port that does not parse: the capture's copy still loads."""
    from replay.config import replay_config
    from runtime.config import load_config

    shown = load_config(overrides={"node": {"grpc_url": "grpc+http://HOST:PORT"}}).effective()
    assert shown["node"]["grpc_url"] == "grpc+http://***"
    replay_config(shown)


def test_a_node_restart_is_ridden_out_with_backoff_and_reconciled(harness):
    harness.start_listener()
    assert harness.connected(1)
    harness.server.stop()  # the node goes away: connection lost, then connection refused
    assert wait_until(lambda: harness.stream().stats.failed_attempts >= 2)
    lease_during_gap = harness.lease()  # emitted while nobody listens: lost, as on a real node
    harness.server.start()
    assert harness.connected(2)  # the Reconcile is what recovers the gap
    lease_after = harness.lease()
    assert harness.inbox.wait_for(lambda msgs: any(
        isinstance(m, LeaseEventReceived) and m.event.lease_uuid == lease_after.uuid for m in msgs))
    assert lease_during_gap.uuid not in {e.lease_uuid for e in harness.inbox.events()}


def test_a_dead_peer_is_detected_by_missed_pongs_and_replaced():
    # The server's own keepalive is off, so only the listener's pings can find the dead peer.
    h = Harness(ping_interval=None)
    try:
        h.start_listener()
        assert h.connected(1)
        assert h.server.freeze_all() == 1
        assert h.connected(2)  # within ping_interval + ping_timeout + close_timeout + backoff
        stats = h.stats()
        assert stats.dead_peers == 1
        assert "no pong" in stats.last_error
        lease = h.lease()
        assert h.inbox.wait_for(lambda msgs: any(
            isinstance(m, LeaseEventReceived) and m.event.lease_uuid == lease.uuid for m in msgs))
    finally:
        h.close()


def test_malformed_frames_are_counted_logged_with_escalation_and_not_fatal(harness, caplog):
    harness.start_listener()
    assert harness.connected()
    with caplog.at_level(logging.DEBUG, logger="actors.listener"):
        harness.server.send_raw_to_all("{not json")
        harness.server.send_raw_to_all('{"jsonrpc":"2.0","id":3,"result":{"events":{"tx.hash":["zz"]}}}')
        harness.server.send_raw_to_all("[" * 5000)
        lease = harness.lease()
        assert harness.inbox.wait_for(lambda msgs: any(
            isinstance(m, LeaseEventReceived) and m.event.lease_uuid == lease.uuid for m in msgs))
    stats = harness.stats()
    assert stats.malformed_frames == 3 and stats.subscribed_sessions == 1 and stats.connected
    records = [r for r in caplog.records if "malformed frame" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR, logging.DEBUG]  # every 2nd errors
    assert "#2" in records[1].getMessage()
    assert all(len(r.getMessage()) < 400 for r in records)  # a huge frame is not dumped into the log


def test_a_cancelled_subscription_ends_the_session_and_is_resubscribed(harness):
    harness.start_listener()
    assert harness.connected(1)
    harness.server.send_raw_to_all(
        '{"jsonrpc":"2.0","id":2,"error":{"code":-32000,"message":"Server error",'
        '"data":"subscription was canceled (reason: client is not pulling messages fast enough)"}}'
    )
    assert harness.connected(2)
    assert "cancelled subscription" in harness.stats().last_error


def test_a_refused_subscription_is_retried_without_reconciling():
    h = Harness(max_subscriptions=1)  # the node refuses our second query
    try:
        h.start_listener()
        assert wait_until(lambda: h.stream().stats.failed_attempts >= 2)
        assert h.inbox.reconciles() == 0
        assert "max_subscriptions_per_client 1 reached" in h.stream().stats.last_error
    finally:
        h.close()


def test_backoff_uses_the_injected_random_source():
    h = Harness()
    h.server.stop()  # nothing listens: every attempt fails
    draws = []

    def rnd() -> float:
        draws.append(1)
        return 0.5

    try:
        h.start_listener(random=rnd)
        assert wait_until(lambda: len(draws) >= 3)
        assert h.stream().stats.failed_attempts >= 3 and h.inbox.reconciles() == 0
    finally:
        h.listener.stop(timeout=10)
        h.dispatcher.shutdown()


@pytest.mark.parametrize("state", ["connected", "dead-peer", "backing-off"])
def test_stop_is_prompt_and_ends_the_thread(state):
    # A long close timeout and backoff: stopping must not wait for either.
    settings = ListenerSettings(
        ping_interval=timedelta(seconds=30), ping_timeout=timedelta(seconds=30),
        close_timeout=timedelta(seconds=10), backoff_initial=timedelta(seconds=30),
        backoff_max=timedelta(seconds=60),
    )
    h = Harness(settings, ping_interval=None)
    try:
        h.start_listener()
        assert h.connected()
        stream = h.stream()
        if state == "dead-peer":
            h.server.freeze_all()
        elif state == "backing-off":
            h.server.drop_all()
            assert wait_until(lambda: stream.stats.disconnects == 1)
        started = time.monotonic()
        h.listener.stop(timeout=10)
        elapsed = time.monotonic() - started
        assert elapsed < 2.0, f"stop took {elapsed:.2f}s"
        assert not stream.running
        h.listener = None
        if state != "dead-peer":  # a frozen server reads nothing, so it cannot see the close
            assert wait_until(lambda: h.server.client_count() == 0)
    finally:
        h.close()


def test_a_stream_stopped_before_it_started_does_nothing():
    stream = LeaseEventStream("ws://127.0.0.1:1/websocket", ["tm.event='Tx'"], FAST, lambda e: None, lambda: None)
    assert stream.stop() is True
    assert not stream.running


def test_server_side_slow_client_queue_cancels_a_listener_that_cannot_keep_up():
    # A listener whose scheduler delivery blocks cannot read; the node drops it,
    # and the listener comes back and reconciles.
    h = Harness(slow_client_queue=5)
    gate = threading.Event()
    try:
        h.start_listener()
        assert h.connected(1)
        stream = h.stream()
        original = stream.on_events

        def slow(events):
            gate.wait(5)
            original(events)

        stream.on_events = slow
        big = tuple(("closure_reason", "x" * 100) for _ in range(1))
        for i in range(3000):
            h.server.publish(TxEvents(100 + i, f"{i:064X}", T0, (ChainEvent(
                "lease_closed", (("lease_uuid", f"l{i}"), ("tenant", "t"), ("provider_uuid", P)) + big),)))
            if h.server.stats.slow_disconnects:
                break
        assert wait_until(lambda: h.server.stats.slow_disconnects == 1)
        stream.on_events = original
        gate.set()
        assert h.connected(2)
        assert json.dumps(h.stats().last_error)  # a readable reason was recorded
    finally:
        gate.set()
        h.close()
