"""Websocket frames -> LeaseEvents: every type, many per tx, parallel arrays, bad input."""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest

from chain.ws_events import MalformedFrame, Reply, SeenEvents, TxFrame, decode_frame
from messages.coins import Coin
from messages.lease_events import LeaseEvent

P = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-73ca-8297-85d4d17d0ec4"
L1 = "019bbef3-b000-7bd7-ab91-fa086c2e5d90"
L2 = "019bbef3-b000-7b45-a01f-9bc572f64764"
L3 = "019bbef3-b000-7f62-9943-6d6e6a08e539"
TX_HASH = "A1" * 32


def tx_frame(events, *, height=123, tx_hash=TX_HASH, sub_id=1, flat=True, tx_result=True, code=0):
    """A Tx event frame in CHAIN.md's shape; ``events`` is [(type, [(key, value), ...]), ...]."""
    result: dict = {"query": f"tm.event='Tx' AND lease_closed.provider_uuid='{P}'"}
    if tx_result:
        result["data"] = {
            "type": "tendermint/event/Tx",
            "value": {
                "TxResult": {
                    "height": str(height),
                    "index": 0,
                    "tx": base64.b64encode(b"tx-bytes").decode(),
                    "result": {
                        "code": code,
                        "data": "",
                        "log": "",
                        "events": [
                            {"type": t, "attributes": [{"key": k, "value": v, "index": True} for k, v in attrs]}
                            for t, attrs in events
                        ],
                    },
                }
            },
        }
    if flat:
        index: dict[str, list[str]] = {"tm.event": ["Tx"], "tx.hash": [tx_hash], "tx.height": [str(height)]}
        for t, attrs in events:
            for k, v in attrs:
                index.setdefault(f"{t}.{k}", []).append(v)
        result["events"] = index
    return json.dumps({"jsonrpc": "2.0", "id": sub_id, "result": result})


def closed(lease, tenant="manifest1tenant", provider=P, reason="credit depleted", by="manifest1prov"):
    return (
        "lease_closed",
        [
            ("lease_uuid", lease),
            ("tenant", tenant),
            ("provider_uuid", provider),
            ("settled_amounts", "10upwr"),
            ("closed_by", by),
            ("duration_seconds", "60"),
            ("closure_reason", reason),
        ],
    )


def auto_closed(lease, tenant="manifest1tenant", provider=P):
    return (
        "lease_auto_closed",
        [("lease_uuid", lease), ("tenant", tenant), ("provider_uuid", provider), ("reason", "credit_exhausted")],
    )


ALL_TYPES = [
    ("lease_created", [("lease_uuid", L1), ("tenant", "manifest1a"), ("provider_uuid", P), ("item_count", "1"),
                       ("total_rate_per_second", "1upwr"), ("created_by", "manifest1a")]),
    ("lease_acknowledged", [("lease_uuid", L1), ("tenant", "manifest1a"), ("provider_uuid", P),
                            ("acknowledged_by", "manifest1prov")]),
    ("lease_expired", [("lease_uuid", L2), ("tenant", "manifest1b"), ("provider_uuid", P), ("reason", "ttl")]),
    closed(L3, tenant="manifest1c", reason="done"),
    auto_closed(L2, tenant="manifest1b", provider=OTHER),
]


def test_every_lease_event_type_of_a_tx_becomes_a_lease_event():
    frame = decode_frame(tx_frame(ALL_TYPES, height=77))
    assert isinstance(frame, TxFrame)
    assert frame.tx_hash == TX_HASH and frame.height == 77 and frame.id == 1
    assert frame.query.startswith("tm.event='Tx'")
    assert sorted(frame.events, key=lambda e: e.kind) == sorted(
        [
            LeaseEvent("created", L1, "manifest1a", P, "", 77, TX_HASH),
            LeaseEvent("acknowledged", L1, "manifest1a", P, "", 77, TX_HASH),
            LeaseEvent("expired", L2, "manifest1b", P, "ttl", 77, TX_HASH),
            # a close carries what it settled, for the books
            LeaseEvent("closed", L3, "manifest1c", P, "done", 77, TX_HASH, (Coin("upwr", 10),), by="manifest1prov"),
            LeaseEvent("auto_closed", L2, "manifest1b", OTHER, "credit_exhausted", 77, TX_HASH),
        ],
        key=lambda e: e.kind,
    )
    assert frame.skipped == 0


def test_events_that_are_not_lease_events_are_ignored():
    events = [
        ("provider_withdraw", [("lease_uuid", L1), ("provider_uuid", P), ("amount", "5upwr")]),
        ("batch_closed", [("lease_count", "1"), ("provider_uuid", P)]),
        ("message", [("action", "/liftedinit.billing.v1.MsgWithdraw")]),
        auto_closed(L1),
    ]
    frame = decode_frame(tx_frame(events))
    assert [e.kind for e in frame.events] == ["auto_closed"]


def test_a_batch_close_yields_one_event_per_lease_paired_by_index():
    frame = decode_frame(tx_frame([closed(L1, "manifest1a"), closed(L2, "manifest1b"), closed(L3, "manifest1c")]))
    assert [(e.lease_uuid, e.tenant) for e in frame.events] == [
        (L1, "manifest1a"), (L2, "manifest1b"), (L3, "manifest1c"),
    ]


def test_only_the_flattened_arrays_are_enough():
    frame = decode_frame(tx_frame([closed(L1), auto_closed(L2)], tx_result=False))
    assert {(e.kind, e.lease_uuid) for e in frame.events} == {("closed", L1), ("auto_closed", L2)}


def test_only_the_tx_result_is_enough_and_the_hash_is_that_of_the_tx_bytes():
    frame = decode_frame(tx_frame([closed(L1)], flat=False, height=9))
    assert [(e.kind, e.lease_uuid, e.height) for e in frame.events] == [("closed", L1, 9)]
    assert frame.tx_hash == hashlib.sha256(b"tx-bytes").hexdigest().upper()


def _mismatched(doc_text, key, drop_last=True):
    doc = json.loads(doc_text)
    doc["result"]["events"][key] = doc["result"]["events"][key][:-1]
    return json.dumps(doc)


def test_mismatched_arrays_of_one_type_are_skipped_with_a_warning(caplog):
    raw = _mismatched(tx_frame([closed(L1), closed(L2), auto_closed(L3)], tx_result=False), "lease_closed.tenant")
    with caplog.at_level(logging.WARNING, logger="chain.ws_events"):
        frame = decode_frame(raw)
    # lease_closed cannot be paired: skipped; the other type of the same tx still counts.
    assert [(e.kind, e.lease_uuid) for e in frame.events] == [("auto_closed", L3)]
    assert frame.skipped == 2
    assert any("lease_closed arrays disagree" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_mismatched_arrays_fall_back_to_the_tx_result_events(caplog):
    raw = _mismatched(tx_frame([closed(L1, "manifest1a"), closed(L2, "manifest1b")]), "lease_closed.lease_uuid")
    with caplog.at_level(logging.DEBUG, logger="chain.ws_events"):
        frame = decode_frame(raw)
    assert [(e.lease_uuid, e.tenant) for e in frame.events] == [(L1, "manifest1a"), (L2, "manifest1b")]
    assert frame.skipped == 0
    assert any("from TxResult instead" in r.getMessage() for r in caplog.records)


def test_a_failed_tx_yields_no_events():
    frame = decode_frame(tx_frame([closed(L1)], code=3))
    assert isinstance(frame, TxFrame) and frame.events == ()


def test_replies_are_told_apart_from_events():
    ack = decode_frame('{"jsonrpc":"2.0","id":3,"result":{}}')
    assert ack == Reply(3, result={})
    err = decode_frame(
        '{"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"Internal error","data":"already subscribed"}}'
    )
    assert isinstance(err, Reply) and err.id == "x" and err.error is not None
    assert (err.error.code, err.error.data) == (-32603, "already subscribed")
    status = decode_frame(b'{"jsonrpc":"2.0","id":4,"result":{"sync_info":{"catching_up":false}}}')
    assert isinstance(status, Reply) and status.result == {"sync_info": {"catching_up": False}}


def _with(doc_text, path, value):
    doc = json.loads(doc_text)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return json.dumps(doc)


_DELETE = object()
_GOOD = tx_frame([closed(L1)])
#: TxResult only: its event list is then what the events are read from.
_GOOD_TXR = tx_frame([closed(L1)], flat=False)


@pytest.mark.parametrize(
    "raw, words",
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        ("[1, 2]", "JSON object"),
        ('{"jsonrpc":"2.0","id":1}', "neither result nor error"),
        ('{"jsonrpc":"2.0","id":[1],"result":{}}', "id must be"),
        ('{"jsonrpc":"2.0","id":1,"result":"x"}', "result must be an object"),
        ('{"jsonrpc":"2.0","id":1,"error":"boom"}', "error must be an object"),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}', "error.code"),
        (_with(_GOOD, ["result", "events"], ["a"]), "object of arrays"),
        (_with(_GOOD, ["result", "events", "lease_closed.tenant"], "manifest1a"), "array of strings"),
        (_with(_GOOD, ["result", "events", "lease_closed.tenant"], [7]), "array of strings"),
        # A JSON null where an array goes: it raised TypeError, a listener failure, and ten frames a
        # minute of it stopped the sidecar as a crash loop.
        (_with(_GOOD, ["result", "events", "lease_closed.tenant"], None), "array of strings"),
        (_with(_GOOD, ["result", "events", "tx.hash"], None), "array of strings"),
        (_with(_GOOD, ["result", "events", "tx.height"], None), "array of strings"),
        (_with(_GOOD, ["result", "events", "tx.height"], ["12a"]), "not a decimal integer"),
        (_with(_GOOD, ["result", "events", "tx.height"], ["-1"]), "not a decimal integer"),
        (_with(_GOOD, ["result", "events", "tx.height"], ["99999999999999999999"]), "not a decimal integer"),
        (_with(_GOOD, ["result", "events", "tx.hash"], ["zz"]), "not hex"),
        (_with(_with(_GOOD, ["result", "events", "tx.hash"], _DELETE),
               ["result", "data", "value", "TxResult", "tx"], ""), "without tx.hash"),
        (_with(_GOOD, ["result", "data", "type"], "tendermint/event/NewBlock"), "not 'tendermint/event/Tx'"),
        (_with(_GOOD, ["result", "data", "value"], {}), "TxResult must be an object"),
        (_with(_GOOD, ["result", "data", "value", "TxResult", "tx"], "***"), "not base64"),
        (_with(_GOOD, ["result", "data", "value", "TxResult", "result", "code"], "0"), "code must be an integer"),
        (_with(_GOOD, ["result", "data", "value", "TxResult", "result", "events"], {}), "must be a list"),
        (_with(_GOOD_TXR, ["result", "data", "value", "TxResult", "result", "events"], [{"attributes": []}]),
         "string type"),
        (_with(_GOOD_TXR, ["result", "data", "value", "TxResult", "result", "events"],
               [{"type": "lease_closed", "attributes": "x"}]), "must be a list"),
        (_with(_GOOD_TXR, ["result", "data", "value", "TxResult", "result", "events"],
               [{"type": "lease_closed", "attributes": [{"key": "tenant", "value": 5}]}]), "must be strings"),
        (_with(_GOOD, ["result", "query"], 5), "query must be a string"),
    ],
)
def test_malformed_frames_raise_saying_what_is_wrong(raw, words):
    with pytest.raises(MalformedFrame) as err:
        decode_frame(raw)
    assert words in str(err.value)


def test_deeply_nested_json_is_malformed_not_a_crash():
    with pytest.raises(MalformedFrame):
        decode_frame("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize("flat", [True, False], ids=["parallel-arrays", "tx-result"])
def test_untrusted_identifiers_skip_the_event_and_reasons_are_cleaned(caplog, flat):
    events = [
        closed(L1, tenant="manifest1a\x1b[31m"),  # a terminal escape in an identifier
        closed(L2, tenant="x" * 500),  # too long to be an identifier
        closed("a b", tenant="manifest1d"),  # whitespace
        closed("q'uote", tenant="manifest1d"),  # a quote
        closed(L3, tenant="manifest1c", reason="bad\x00\nreason" + "r" * 400, by="\ud800" + "b" * 400),
    ]
    with caplog.at_level(logging.WARNING, logger="chain.ws_events"):
        frame = decode_frame(tx_frame(events, flat=flat, tx_result=not flat))
    assert [e.lease_uuid for e in frame.events] == [L3]
    assert frame.skipped == 4
    reason = frame.events[0].reason
    assert reason.startswith("bad??reason") and len(reason) == 256 and reason.isprintable()
    by = frame.events[0].by  # who closed it: free text too (a lone surrogate, say)
    assert by.startswith("?b") and len(by) == 256 and by.isprintable()
    warned = [r.getMessage() for r in caplog.records]
    assert sum("not a plain token" in m or "characters long" in m for m in warned) == 4
    assert not any("\x1b" in m for m in warned)  # the escape is shown escaped, never raw


def test_an_event_without_lease_or_tenant_is_skipped_not_fatal():
    frame = decode_frame(tx_frame([("lease_closed", [("lease_uuid", L1), ("provider_uuid", P)]), auto_closed(L2)],
                                  flat=False))
    assert [e.lease_uuid for e in frame.events] == [L2]
    assert frame.skipped == 1


def test_the_same_event_on_two_subscriptions_is_delivered_once():
    # Our lease_closed and a lease_auto_closed in one tx match two subscriptions:
    # the node pushes the whole tx twice.
    events = [closed(L1), auto_closed(L2, provider=OTHER)]
    first = decode_frame(tx_frame(events, sub_id=3))
    second = decode_frame(tx_frame(events, sub_id=5))
    seen = SeenEvents(capacity=10)
    assert seen.fresh(first.tx_hash, first.events) == list(first.events)
    assert seen.fresh(second.tx_hash, second.events) == []
    assert seen.duplicates == 2
    # The same lease in another tx is a new event.
    third = decode_frame(tx_frame(events, tx_hash="B2" * 32))
    assert len(seen.fresh(third.tx_hash, third.events)) == 2


def test_seen_events_forgets_the_oldest_tx_beyond_its_capacity():
    seen = SeenEvents(capacity=2)
    ev = [LeaseEvent("closed", L1, "t", P)]
    for h in ("H1", "H2", "H3"):
        assert seen.fresh(h, ev) == ev
    assert len(seen) == 2
    assert seen.fresh("H3", ev) == []
    assert seen.fresh("H1", ev) == ev  # forgotten: a late duplicate is let through
    with pytest.raises(ValueError):
        SeenEvents(capacity=0)


def block_frame(events, *, height=124, sub_id=2):
    """A NewBlockEvents frame: end-of-block events, no tx behind them (CHAIN-VERSIONS.md 3)."""
    value = {
        "height": str(height),
        "num_txs": "0",
        "events": [{"type": t, "attributes": [{"key": k, "value": v, "index": True} for k, v in attrs]} for t, attrs in events],
    }
    index: dict[str, list[str]] = {"tm.event": ["NewBlockEvents"]}
    for t, attrs in events:
        for k, v in attrs:
            index.setdefault(f"{t}.{k}", []).append(v)
    result = {
        "query": f"tm.event='NewBlockEvents' AND lease_expired.provider_uuid='{P}'",
        "data": {"type": "tendermint/event/NewBlockEvents", "value": value},
        "events": index,
    }
    return json.dumps({"jsonrpc": "2.0", "id": sub_id, "result": result})


def test_a_pending_lease_expired_at_end_of_block_arrives_in_a_new_block_events_frame() -> None:
    frame = decode_frame(block_frame([
        ("lease_expired", [("lease_uuid", L1), ("tenant", "manifest1t"), ("provider_uuid", P), ("msg_index", "0")]),
    ]))
    assert isinstance(frame, TxFrame) and frame.height == 124 and frame.tx_hash == ""
    assert frame.events == (LeaseEvent("expired", L1, "manifest1t", P, "", 124, ""),)


def test_a_withdraws_auto_close_names_no_tenant_and_a_settling_provider_withdraw_is_no_lease_event() -> None:
    frame = decode_frame(tx_frame([
        ("provider_withdraw", [("lease_uuid", L1), ("amount", "5umfx"), ("provider_uuid", P), ("auto_closed", "true")]),
        ("provider_withdraw", [("lease_uuid", L2), ("amount", "5umfx"), ("provider_uuid", P)]),
    ]))  # auto_closed is on one event of two: only the TxResult pairs attributes right
    (ev,) = frame.events
    assert (ev.kind, ev.lease_uuid, ev.tenant, ev.provider_uuid) == ("auto_closed", L1, "", P)
    assert ev.credit_exhausted and ev.concerns(OTHER)


def test_an_auto_close_reported_twice_in_one_tx_is_one_event_the_one_naming_the_tenant() -> None:
    frame = decode_frame(tx_frame([
        ("provider_withdraw", [("lease_uuid", L1), ("amount", "5umfx"), ("provider_uuid", P), ("auto_closed", "true")]),
        auto_closed(L1),
    ]))
    (ev,) = frame.events
    assert (ev.kind, ev.tenant) == ("auto_closed", "manifest1tenant")


def test_cancel_reject_and_who_closed_are_read() -> None:
    frame = decode_frame(tx_frame([
        ("lease_cancelled", [("lease_uuid", L1), ("tenant", "manifest1t"), ("provider_uuid", P), ("cancelled_by", "manifest1t")]),
        ("lease_rejected", [("lease_uuid", L2), ("tenant", "manifest1t"), ("provider_uuid", P), ("rejected_by", "manifest1p")]),
        ("lease_closed", [("lease_uuid", L3), ("tenant", "manifest1u"), ("provider_uuid", OTHER),
                          ("closed_by", "credit_exhaustion"), ("settled_amounts", "3umfx")]),
    ], tx_result=False))
    # The flat index groups events by type, in lifecycle order (chain.events.EVENT_KINDS).
    assert [(e.kind, e.lease_uuid) for e in frame.events] == [("closed", L3), ("cancelled", L1), ("rejected", L2)]
    exhausted = frame.events[0]
    assert exhausted.by == "credit_exhaustion" and exhausted.credit_exhausted and exhausted.settled == (Coin("umfx", 3),)
    # Another provider's lease: acted on only because credit ran out (a tenant it may share).
    assert exhausted.concerns(P) and not frame.events[1].credit_exhausted
    ordinary = LeaseEvent("closed", L3, "manifest1u", OTHER, by="manifest1other")
    assert not ordinary.concerns(P)
