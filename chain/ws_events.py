"""CometBFT websocket frames -> typed ``LeaseEvent`` messages.

A frame is one JSON-RPC 2.0 message from the node: the answer to a request
(``Reply``: a subscribe acknowledgement, a status, an error) or a matching
transaction (``TxFrame``), in the shape CHAIN.md shows. From a transaction
every lease event of every type is taken, not only the type the subscription
was for: one tx can carry a ``lease_closed`` of ours and another provider's
``lease_auto_closed`` together.

The events come from the flattened ``result.events`` map of parallel arrays
(index i of ``lease_closed.lease_uuid`` goes with index i of
``lease_closed.tenant``). When the arrays of one event type disagree in
length, the pairing is unknowable: the arrays of that type are skipped with a
warning, and the type is read from the frame's ``TxResult`` event list
instead when the frame carries one (each event there is its own object, so it
cannot be mis-paired). The attribute mapping itself is ``chain.events``'s.

Everything in a frame is untrusted text. A frame whose envelope, or whose
part the events are read from, lacks the documented shape raises
``MalformedFrame`` (the listener counts those); the ``TxResult`` event list
is only parsed (and checked) when it is read, so a well-formed frame pays
for one copy of its events, not two. An event whose identifiers are not
plain tokens is skipped with a warning; a free-text reason is cleaned of
control characters and bounded in length.

The same tx reaches the sidecar once per subscription it matches (a
``lease_auto_closed`` of ours matches the auto-close subscription and may
come with a ``lease_closed`` of ours), and each copy carries all of the tx's
events. ``SeenEvents`` remembers recent (tx hash, kind, lease) triples so
each event is delivered once.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from chain.events import EVENT_KINDS, is_lease_event, lease_event_from_attributes, named_first
from messages.lease_events import LeaseEvent

__all__ = [
    "MalformedFrame",
    "RpcError",
    "Reply",
    "TxFrame",
    "decode_frame",
    "parse_tx_result",
    "SeenEvents",
    "TX_EVENT_TYPE",
]

logger = logging.getLogger(__name__)

#: ``result.data.type`` of a transaction event, and of a block's end-of-block events.
TX_EVENT_TYPE = "tendermint/event/Tx"
BLOCK_EVENT_TYPE = "tendermint/event/NewBlockEvents"
#: Longest lease uuid / tenant / provider uuid accepted. Real values are 36
#: (UUID) and ~50 (bech32) characters; anything much longer is not an
#: identifier and would only bloat logs, captures and actor state.
MAX_IDENTIFIER_LENGTH = 128
#: A reason longer than this is cut (the chain itself refuses closure reasons
#: over 256 characters).
MAX_REASON_LENGTH = 256

#: Attributes of free text (who closed a lease, and why): kept, but printable and bounded,
#: so that a log line, a capture or a statement never carries a terminal escape or a lone
#: surrogate (which msgpack cannot encode as text).
_FREE_TEXT_ATTRIBUTES = ("closure_reason", "reason", "closed_by")
#: Attributes whose values name things; they must be plain tokens.
_IDENTIFIER_ATTRIBUTES = ("lease_uuid", "tenant", "provider_uuid")
#: A tx hash: hex (CometBFT's is 64 characters of SHA-256).
_HEX = re.compile(r"[0-9A-Fa-f]{1,128}")
#: A plain token: printable ASCII without spaces, quotes or backslashes.
_TOKEN = re.compile(r"[!#-&(-\[\]-~]{1,%d}" % MAX_IDENTIFIER_LENGTH)


class MalformedFrame(ValueError):
    """A websocket frame without the shape of a JSON-RPC reply or a Tx event."""


@dataclass(frozen=True, slots=True)
class RpcError:
    code: int
    message: str
    data: str = ""

    def __str__(self) -> str:
        return f"{self.code} {self.message}" + (f": {self.data}" if self.data else "")


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a request: ``result`` or ``error``, under the request's id."""

    id: Any
    result: Mapping[str, Any] | None = None
    error: RpcError | None = None


@dataclass(frozen=True, slots=True)
class TxFrame:
    """One transaction pushed for the subscription ``id`` (the subscribe request's id)."""

    id: Any
    query: str
    tx_hash: str
    height: int
    events: tuple[LeaseEvent, ...]
    #: Lease events that could not be read (mis-paired arrays with no
    #: ``TxResult`` to fall back on, identifiers that are not tokens).
    skipped: int = 0
    #: A block's end-of-block events (``NewBlockEvents``): how many txs the block held; -1 for a tx.
    num_txs: int = -1


def decode_frame(raw: str | bytes) -> Reply | TxFrame:
    """Decode one websocket message; raise ``MalformedFrame`` saying what is wrong."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedFrame("binary frame that is not UTF-8 text") from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise MalformedFrame(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedFrame(f"expected a JSON object, got {type(doc).__name__}")
    frame_id = doc.get("id")
    if frame_id is not None and (isinstance(frame_id, bool) or not isinstance(frame_id, (int, str))):
        raise MalformedFrame(f"id must be a number or a string, got {type(frame_id).__name__}")
    if "error" in doc:
        return Reply(frame_id, error=_rpc_error(doc["error"]))
    if "result" not in doc:
        raise MalformedFrame("neither result nor error")
    result = doc["result"]
    if not isinstance(result, dict):
        raise MalformedFrame(f"result must be an object, got {type(result).__name__}")
    if "data" not in result and "events" not in result:
        return Reply(frame_id, result=result)
    tx_hash, height, events, skipped = parse_tx_result(result)
    query = result.get("query", "")
    if not isinstance(query, str):
        raise MalformedFrame("result.query must be a string")
    return TxFrame(frame_id, query, tx_hash, height, tuple(events), skipped, _num_txs(result))


def _num_txs(result: Mapping[str, Any]) -> int:
    """A ``NewBlockEvents`` frame's ``num_txs`` (-1 for a tx's frame, or a block's that does not say)."""
    data = result.get("data")
    if not isinstance(data, dict) or data.get("type") != BLOCK_EVENT_TYPE:
        return -1
    value = data.get("value")
    n = value.get("num_txs") if isinstance(value, dict) else None
    if n is None:
        return -1
    if isinstance(n, str) and n.isdigit() and len(n) <= 18:  # (JSON-encoded int64: a string)
        return int(n)
    if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
        return n
    raise MalformedFrame("NewBlockEvents.num_txs is not a whole number")


def _rpc_error(error: Any) -> RpcError:
    if not isinstance(error, dict):
        raise MalformedFrame("error must be an object")
    code = error.get("code")
    if isinstance(code, bool) or not isinstance(code, int):
        raise MalformedFrame("error.code must be an integer")
    message = error.get("message", "")
    data = error.get("data", "")
    if not isinstance(message, str):
        raise MalformedFrame("error.message must be a string")
    if not isinstance(data, str):
        data = json.dumps(data)[:MAX_REASON_LENGTH]
    return RpcError(code, _clean_text(message), _clean_text(data))


def parse_tx_result(result: Mapping[str, Any]) -> tuple[str, int, list[LeaseEvent], int]:
    """``result`` of a Tx event -> (tx hash, height, lease events, lease events skipped)."""
    tx_result = _tx_result(result)
    flat = result.get("events")
    if flat is not None:
        flat = _flat_events(flat)
    if flat is None and tx_result is None:
        raise MalformedFrame("a Tx event needs result.events or result.data.value.TxResult")

    tx_hash = _tx_hash(flat, tx_result)
    height = _height(flat, tx_result)

    if tx_result is not None and tx_result.code != 0:
        # A failed tx changed nothing; whatever lease events it lists did not happen.
        return tx_hash, height, [], 0

    events: list[LeaseEvent] = []
    skipped = 0
    if flat is None:
        assert tx_result is not None
        for event_type, attributes in tx_result.events:
            _, n = _append(events, event_type, [attributes], height, tx_hash)
            skipped += n
        return tx_hash, height, named_first(events), skipped

    by_type: dict[str, dict[str, list[str]]] = {}
    for key, values in flat.items():
        event_type, dot, attr = key.partition(".")
        if dot and event_type in EVENT_KINDS:
            by_type.setdefault(event_type, {})[attr] = _column(flat, key)  # type: ignore[assignment]
    for event_type in EVENT_KINDS:
        columns = by_type.get(event_type)
        if not columns:
            continue
        lengths = {len(v) for v in columns.values()}
        if len(lengths) == 1:
            n_events = lengths.pop()
            rows = [{attr: values[i] for attr, values in columns.items()} for i in range(n_events)]
            _, n = _append(events, event_type, rows, height, tx_hash)
            skipped += n
            continue
        shown = ", ".join(f"{attr}={len(values)}" for attr, values in sorted(columns.items()))
        if tx_result is not None:
            # Expected where an attribute is on some events only (provider_withdraw's
            # auto_closed marks the auto-closed leases alone): TxResult pairs them right.
            rows = [attrs for etype, attrs in tx_result.events if etype == event_type]
            logger.debug(
                "tx %s: %s arrays disagree in length (%s); read %d event(s) from TxResult instead",
                tx_hash, event_type, shown, len(rows),
            )
            _, n = _append(events, event_type, rows, height, tx_hash)
            skipped += n
        else:
            skipped += max(len(v) for v in columns.values())
            logger.warning(
                "tx %s: %s arrays disagree in length (%s); skipped those events", tx_hash, event_type, shown
            )
    return tx_hash, height, named_first(events), skipped


class _TxResult:
    """``result.data.value.TxResult``: header checked at once, event list parsed when read."""

    __slots__ = ("height", "code", "tx", "block", "_raw_events", "_events")

    def __init__(self, height: int | None, code: int, tx: bytes, raw_events: list[Any]) -> None:
        #: end-of-block events (NewBlockEvents): no tx behind them
        self.block = False
        self.height = height
        self.code = code
        self.tx = tx
        self._raw_events = raw_events
        self._events: tuple[tuple[str, dict[str, str]], ...] | None = None

    @property
    def events(self) -> tuple[tuple[str, dict[str, str]], ...]:
        # Only read when the flattened map is missing or mis-paired: most frames
        # never pay for a second copy of their events.
        if self._events is None:
            self._events = tuple(_tx_result_event(ev) for ev in self._raw_events)
        return self._events


def _tx_result(result: Mapping[str, Any]) -> _TxResult | None:
    data = result.get("data")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise MalformedFrame("result.data must be an object")
    if data.get("type") == BLOCK_EVENT_TYPE:
        return _block_events(data.get("value"))
    if data.get("type") != TX_EVENT_TYPE:
        raise MalformedFrame(f"result.data.type is {str(data.get('type'))[:64]!r}, not {TX_EVENT_TYPE!r}")
    value = data.get("value")
    tx = value.get("TxResult") if isinstance(value, dict) else None
    if not isinstance(tx, dict):
        raise MalformedFrame("result.data.value.TxResult must be an object")
    height = tx.get("height")
    if height is not None:
        height = _parse_height(height, "TxResult.height")
    raw_tx = tx.get("tx", "")
    if not isinstance(raw_tx, str):
        raise MalformedFrame("TxResult.tx must be a base64 string")
    try:
        tx_bytes = base64.b64decode(raw_tx, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedFrame("TxResult.tx is not base64") from None
    res = tx.get("result", {})
    if not isinstance(res, dict):
        raise MalformedFrame("TxResult.result must be an object")
    code = res.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, int):
        raise MalformedFrame("TxResult.result.code must be an integer")
    raw_events = res.get("events")
    if raw_events is None:
        raw_events = []
    if not isinstance(raw_events, list):
        raise MalformedFrame("TxResult.result.events must be a list")
    return _TxResult(height, code, tx_bytes, raw_events)


def _block_events(value: Any) -> _TxResult:
    """``NewBlockEvents``' value (height, events, num_txs), read as a tx result with no tx."""
    if not isinstance(value, dict):
        raise MalformedFrame("result.data.value of NewBlockEvents must be an object")
    height = value.get("height")
    if height is not None:
        height = _parse_height(height, "NewBlockEvents.height")
    raw_events = value.get("events")
    if raw_events is None:
        raw_events = []
    if not isinstance(raw_events, list):
        raise MalformedFrame("NewBlockEvents.events must be a list")
    result = _TxResult(height, 0, b"", raw_events)
    result.block = True
    return result


def _tx_result_event(ev: Any) -> tuple[str, dict[str, str]]:
    if not isinstance(ev, dict) or not isinstance(ev.get("type"), str):
        raise MalformedFrame("every TxResult event needs a string type")
    attrs = ev.get("attributes")
    if attrs is None:
        attrs = []
    if not isinstance(attrs, list):
        raise MalformedFrame(f"attributes of a {ev['type'][:64]!r} event must be a list")
    pairs: dict[str, str] = {}
    for attr in attrs:
        if not isinstance(attr, dict):
            raise MalformedFrame("an event attribute must be an object")
        key, val = attr.get("key"), attr.get("value", "")
        if not isinstance(key, str) or not isinstance(val, str):
            raise MalformedFrame("event attribute keys and values must be strings")
        pairs.setdefault(key, val)
    return ev["type"], pairs


def _flat_events(flat: Any) -> dict[str, list[str]]:
    if not isinstance(flat, dict):
        raise MalformedFrame("result.events must be an object of arrays")
    return flat


def _column(flat: Mapping[str, Any], key: str) -> list[str] | None:
    """``flat[key]``, checked to be an array of strings (only the arrays read are checked); None when absent."""
    values = flat.get(key)
    if values is None and key not in flat:
        return None  # (a JSON null is no array: refused below, as the frame it is in)
    if isinstance(values, list):
        try:
            "".join(values)  # the C-speed way to check that every item is a str
            return values
        except TypeError:
            pass
    raise MalformedFrame(f"result.events[{key[:64]!r}] must be an array of strings")


def _tx_hash(flat: Mapping[str, list[str]] | None, tx_result: _TxResult | None) -> str:
    """The tx's hash; "" for end-of-block events, which no tx emitted."""
    if (tx_result is not None and tx_result.block) or (flat is not None and "block.height" in flat and "tx.hash" not in flat):
        return ""
    hashes = _column(flat, "tx.hash") if flat is not None else None
    if hashes:
        tx_hash = hashes[0]
        if _HEX.fullmatch(tx_hash) is None:
            raise MalformedFrame(f"tx.hash {tx_hash[:64]!r} is not hex")
        return tx_hash.upper()
    if tx_result is not None and tx_result.tx:
        # CometBFT names a tx by the SHA-256 of its bytes.
        return hashlib.sha256(tx_result.tx).hexdigest().upper()
    raise MalformedFrame("a Tx event without tx.hash (and no tx bytes to hash)")


def _height(flat: Mapping[str, list[str]] | None, tx_result: _TxResult | None) -> int:
    heights = _column(flat, "tx.height") if flat is not None else None
    if not heights and flat is not None:
        heights = _column(flat, "block.height")
    if heights:
        return _parse_height(heights[0], "tx.height")
    if tx_result is not None and tx_result.height is not None:
        return tx_result.height
    raise MalformedFrame("an event without a height")


def _parse_height(value: Any, where: str) -> int:
    # CometBFT sends int64s as decimal strings; a bare number is tolerated.
    if isinstance(value, bool):
        raise MalformedFrame(f"{where} must be a decimal integer")
    if isinstance(value, int):
        height = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        height = int(value)
    else:
        raise MalformedFrame(f"{where} {str(value)[:32]!r} is not a decimal integer")
    if height < 0 or height >= 2**63:
        raise MalformedFrame(f"{where} {height} is out of range")
    return height


def _append(
    out: list[LeaseEvent], event_type: str, rows: Iterable[Mapping[str, str]], height: int, tx_hash: str
) -> tuple[int, int]:
    """Append the lease events of ``rows``; returns (appended, skipped)."""
    added = skipped = 0
    for row in rows:
        if not is_lease_event(event_type, row):
            continue  # a provider_withdraw that settled and closed nothing
        bad = _bad_identifier(row)
        if bad is not None:
            logger.warning("tx %s: skipped a %s event: %s", tx_hash, event_type, bad)
            skipped += 1
            continue
        attributes = row
        for key in _FREE_TEXT_ATTRIBUTES:
            text = row.get(key)
            if text is not None and (len(text) > MAX_REASON_LENGTH or not text.isprintable()):
                if attributes is row:
                    attributes = dict(row)  # rows may be shared (TxResult's cached events)
                attributes[key] = _clean_text(text)
        ev = lease_event_from_attributes(event_type, attributes, height, tx_hash)
        if ev is None:
            skipped += 1
            continue
        out.append(ev)
        added += 1
    return added, skipped


def _bad_identifier(row: Mapping[str, str]) -> str | None:
    for key in _IDENTIFIER_ATTRIBUTES:
        value = row.get(key, "")
        if _TOKEN.fullmatch(value) is None and value:
            if len(value) > MAX_IDENTIFIER_LENGTH:
                return f"{key} is {len(value)} characters long"
            return f"{key} {value[:64]!r} is not a plain token"
    return None


def _clean_text(value: str) -> str:
    """Free text from the chain, safe to log and store: printable and bounded."""
    if len(value) > MAX_REASON_LENGTH:
        value = value[:MAX_REASON_LENGTH]
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else "?" for ch in value)


class SeenEvents:
    """The lease events already delivered, by tx, for the last ``capacity`` txs.

    Copies of one tx arrive back to back (one per matching subscription), so
    a window of recent txs is enough; an old tx falling out of the window
    costs at most a duplicate event, which the scheduler tolerates (it reads
    events as hints and the chain as the truth).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("SeenEvents capacity must be at least 1")
        self.capacity = capacity
        self._seen: collections.OrderedDict[str, set[tuple[str, str]]] = collections.OrderedDict()
        self.duplicates = 0

    def fresh(self, tx_hash: str, events: Sequence[LeaseEvent]) -> list[LeaseEvent]:
        """The events of ``tx_hash`` not delivered before, remembered as delivered now."""
        seen = self._seen.get(tx_hash)
        if seen is None:
            seen = set()
            self._seen[tx_hash] = seen
            if len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
        out = []
        for ev in events:
            key = (ev.kind, ev.lease_uuid)
            if key in seen:
                self.duplicates += 1
                continue
            seen.add(key)
            out.append(ev)
        return out

    def __len__(self) -> int:
        return len(self._seen)
