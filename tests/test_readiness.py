"""The health actor's core: which parts are ready, since when and why not; its node checks."""

from __future__ import annotations

from datetime import timedelta

from actors.effects import Note, Send
from actors.readiness import Readiness
from messages.chain import ChainFailure, NodeStatus
from messages.chain_actor import NodeStatusAnswered, NodeStatusCall
from messages.health import HealthCheckDue, LedgerWriteFailed, LedgerWritesResumed, WebsocketLost, WebsocketSubscribed
from runtime.clock import utc
from runtime.router import CHAIN_IO, HEALTH

T0 = utc(2026, 3, 1)
S = timedelta(seconds=1)


def core(**parts: bool) -> Readiness:
    return Readiness(timedelta(seconds=30), timedelta(minutes=2), websocket=parts.get("websocket", True),
                     ledger=parts.get("ledger", True), signer="manifest1signer")


def synced(at, height: int = 7) -> NodeStatusAnswered:  # type: ignore[no-untyped-def]
    return NodeStatusAnswered(1, NodeStatus(height, at, False), tx_index=True)


def test_nothing_is_ready_before_the_node_answered_and_the_websocket_subscribed() -> None:
    r = core()
    out = r.handle(HealthCheckDue(), T0)
    assert Send(CHAIN_IO, NodeStatusCall(1, reply_to=HEALTH, tx_index=True)) in out
    assert Send(HEALTH, HealthCheckDue(), at=T0 + 30 * S) in out
    report = r.report(T0 + S)
    assert not report.ready
    assert report.lines() == [
        "not ready",
        "chain: NOT READY since 2026-03-01 00:00:00 UTC: not checked yet",
        "node: NOT READY since 2026-03-01 00:00:00 UTC: not checked yet",
        "websocket: NOT READY since 2026-03-01 00:00:00 UTC: not subscribed yet",
        "ledger: ready since 2026-03-01 00:00:00 UTC: writable",
        "key: ready since 2026-03-01 00:00:00 UTC: loaded: signing as manifest1signer",
        "tx index: NOT READY since 2026-03-01 00:00:00 UTC: not checked yet",
    ]
    r.handle(synced(T0), T0 + S)
    r.handle(WebsocketSubscribed("ws://node/websocket", 5), T0 + 2 * S)
    assert r.report(T0 + 3 * S).ready


def test_an_unreachable_node_then_a_lagging_one_is_not_ready_with_the_reason_and_since_when() -> None:
    r = core(websocket=False, ledger=False)
    r.handle(HealthCheckDue(), T0)
    out = r.handle(NodeStatusAnswered(1, error=ChainFailure("node_status", "UNAVAILABLE: connection refused")), T0 + S)
    # the first answer is told, even though nothing was ready before it
    assert [(n.event, n.level) for n in out if isinstance(n, Note)] == [("chain_not_ready", "warning"), ("node_not_ready", "warning")]
    parts = {p.name: p for p in r.report(T0 + 2 * S).parts}
    assert parts["chain"].detail == "the node does not answer: UNAVAILABLE: connection refused"
    assert parts["chain"].since is None  # not ready since the start
    asks = r.handle(HealthCheckDue(), T0 + 30 * S)
    assert Send(CHAIN_IO, NodeStatusCall(2, reply_to=HEALTH, tx_index=True)) in asks
    # a check is in flight until it is answered: the next timer does not ask again
    assert not [e for e in r.handle(HealthCheckDue(), T0 + 60 * S) if isinstance(e, Send) and e.to == CHAIN_IO]
    out = r.handle(NodeStatusAnswered(2, NodeStatus(9, T0 + 55 * S, False), tx_index=True), T0 + 61 * S)
    assert r.report(T0 + 33 * S).ready
    assert {n.event for n in out if isinstance(n, Note)} == {"chain_ready", "node_ready", "tx_index_ready"}
    r.handle(HealthCheckDue(), T0 + 90 * S)
    out = r.handle(NodeStatusAnswered(3, NodeStatus(9, T0 + 55 * S, False)), T0 + 5 * 60 * S)  # no block since
    node = {p.name: p for p in r.report(T0 + 5 * 60 * S).parts}["node"]
    assert (node.ready, node.since) == (False, T0 + 5 * 60 * S)
    assert node.detail == "its latest block (2026-03-01 00:00:55 UTC) is 245s old"
    assert [(n.event, n.level) for n in out if isinstance(n, Note)] == [("node_not_ready", "warning")]


def test_the_websocket_and_the_ledger_come_and_go_with_their_messages() -> None:
    r = core()
    r.handle(synced(T0), T0)
    r.handle(WebsocketSubscribed("ws://n", 5), T0)
    r.handle(WebsocketLost("closed by the node (1006)", was_subscribed=True), T0 + 10 * S)
    r.handle(LedgerWriteFailed("database is locked", 12), T0 + 11 * S)
    parts = {p.name: p for p in r.report(T0 + 12 * S).parts}
    assert (parts["websocket"].ready, parts["websocket"].since, parts["websocket"].detail) == (
        False, T0 + 10 * S, "reconnecting: closed by the node (1006)")
    assert parts["ledger"].detail == "writes refused (database is locked); 12 fact(s) held"
    r.handle(WebsocketLost("connection refused"), T0 + 20 * S)  # still down: the reason moves, the time does not
    assert {p.name: p for p in r.report(T0).parts}["websocket"].since == T0 + 10 * S
    r.handle(WebsocketSubscribed("ws://n", 5), T0 + 30 * S)
    r.handle(LedgerWritesResumed(12), T0 + 31 * S)
    assert r.report(T0 + 32 * S).ready


def test_a_node_without_a_tx_index_is_not_ready_saying_what_the_books_lack_until_it_keeps_one() -> None:
    """Without a tx index no withdraw or close of ours is seen included: the books would lack them all, quietly."""
    r = core(websocket=False)
    r.handle(HealthCheckDue(), T0)
    out = r.handle(NodeStatusAnswered(1, NodeStatus(7, T0, False), tx_index=False), T0 + S)
    told = {n.event: n for n in out if isinstance(n, Note)}
    assert told["tx_index_not_ready"].level == "warning"
    assert "keeps no tx index" in told["tx_index_not_ready"].text and 'indexer = "kv"' in told["tx_index_not_ready"].text
    report = r.report(T0 + 2 * S)
    assert not report.ready and [p.name for p in report.parts if not p.ready] == ["tx index"]
    # an answer that could not say (the probe failed) changes nothing, and tells nothing
    r.handle(HealthCheckDue(), T0 + 30 * S)
    out = r.handle(NodeStatusAnswered(2, NodeStatus(8, T0 + 30 * S, False), tx_index=None), T0 + 31 * S)
    assert not [n for n in out if isinstance(n, Note)]
    assert not r.report(T0 + 32 * S).ready
    # the node's indexer turned on: ready, and told once
    r.handle(HealthCheckDue(), T0 + 60 * S)
    out = r.handle(NodeStatusAnswered(3, NodeStatus(9, T0 + 60 * S, False), tx_index=True), T0 + 61 * S)
    assert [n.event for n in out if isinstance(n, Note)] == ["tx_index_ready"]
    assert r.report(T0 + 62 * S).ready


def test_a_sidecar_that_neither_signs_nor_keeps_books_does_not_ask_about_the_tx_index() -> None:
    r = Readiness(timedelta(seconds=30), timedelta(minutes=2), websocket=False, ledger=False)
    assert Send(CHAIN_IO, NodeStatusCall(1, reply_to=HEALTH)) in r.handle(HealthCheckDue(), T0)
    r.handle(NodeStatusAnswered(1, NodeStatus(7, T0, False)), T0 + S)
    assert [p.name for p in r.report(T0 + 2 * S).parts] == ["chain", "node"] and r.report(T0 + 2 * S).ready


def test_a_tx_index_that_cannot_be_checked_is_not_ready_with_the_reason_until_it_is_found_kept() -> None:
    """A proxy that refuses GetTx: not "not checked yet" for ever, and told; once found kept, a failed probe changes nothing."""
    r = core(websocket=False)
    refused = ChainFailure("keeps_tx_index", "UNIMPLEMENTED: unknown method GetTx")
    r.handle(HealthCheckDue(), T0)
    out = r.handle(NodeStatusAnswered(1, NodeStatus(7, T0, False), tx_index_error=refused), T0 + S)
    assert [n.event for n in out if isinstance(n, Note)] == ["chain_ready", "node_ready", "tx_index_not_ready"]
    part = {p.name: p for p in r.report(T0 + 2 * S).parts}["tx index"]
    assert not part.ready and part.detail == "could not be checked: UNIMPLEMENTED: unknown method GetTx"
    r.handle(HealthCheckDue(), T0 + 30 * S)
    r.handle(NodeStatusAnswered(2, NodeStatus(8, T0 + 30 * S, False), tx_index=True), T0 + 31 * S)
    r.handle(HealthCheckDue(), T0 + 60 * S)
    out = r.handle(NodeStatusAnswered(3, NodeStatus(9, T0 + 60 * S, False), tx_index_error=refused), T0 + 61 * S)
    assert not [n for n in out if isinstance(n, Note)] and r.report(T0 + 62 * S).ready
