"""CometBFT event queries: the provider's subscriptions, and the subset a server accepts.

Two sides of one small language (see CHAIN.md, "CometBFT websocket"):

- the sidecar *builds* its subscriptions (``provider_queries``): every tx
  (``tm.event='Tx'``), and every block's end-of-block events
  (``tm.event='NewBlockEvents'``: a PENDING lease's expiry is never a tx
  event, CHAIN-VERSIONS.md 3; and each says how many txs its block held).
  Every tx, because what the sidecar must
  hear has no common key the AND-only language could select on, and would
  take more than a node's five subscriptions per client one type at a time:
  its own leases' created, acknowledged, closed, cancelled and rejected, and
  every provider's three auto-close signals (``lease_auto_closed``,
  ``provider_withdraw`` with ``auto_closed="true"``, ``lease_closed`` with
  ``closed_by=credit_exhaustion``), the cross-provider trigger, including
  closes sent through authz, which carry no billing ``message.module``. The
  listener drops the rest (``LeaseEvent.concerns``). No query names the
  provider any more, but its UUID is still checked to be one at the
  listener's start (a bad one would match none of the events it keeps).
- the embedded devnet *parses* what clients send (``parse_query``): the
  subset ``key='value'`` conditions joined by ``AND``. Everything else a real
  node would accept (``<``, ``>``, ``EXISTS``, ``CONTAINS``, numbers, dates)
  is refused with a ``QueryError`` naming what was found, so a client that
  relies on it fails loudly here instead of silently matching nothing.

A ``Query`` matches a transaction when every condition holds for some value
of its composite key (``type.attribute``) in the transaction's flattened
events; CometBFT's conditions are independent of each other, they do not
have to hold for the same event.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass
from typing import Collection, Mapping

__all__ = [
    "Condition",
    "Query",
    "QueryError",
    "InvalidProviderUUID",
    "provider_queries",
    "validate_provider_uuid",
    "parse_query",
    "TX_EVENT_CONDITION",
    "BLOCK_EVENT_CONDITION",
    "CREDIT_EXHAUSTED",
]

#: Transaction results, and a block's end-of-block events.
TX_EVENT_CONDITION = "tm.event='Tx'"
BLOCK_EVENT_CONDITION = "tm.event='NewBlockEvents'"
#: ``lease_auto_closed.reason`` the chain uses when a settlement found the credit exhausted.
CREDIT_EXHAUSTED = "credit_exhausted"

#: A query this long is not one the sidecar would send; refusing it bounds
#: the work an untrusted client can make the devnet do per subscription.
MAX_QUERY_LENGTH = 1024
#: Conditions per query, for the same reason.
MAX_CONDITIONS = 16

_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_UNSUPPORTED_OPERATORS = ("<=", ">=", "<", ">", "!=")
_UNSUPPORTED_KEYWORDS = ("EXISTS", "CONTAINS", "OR", "NOT", "MATCHES")


class QueryError(ValueError):
    """A query outside the supported subset; the message says what and where."""


class InvalidProviderUUID(ValueError):
    """A provider UUID that may not be interpolated into a websocket query."""


def validate_provider_uuid(provider_uuid: str) -> str:
    """Return ``provider_uuid`` if it is a canonical lowercase UUID, else raise.

    Canonical means exactly what ``str(uuid.UUID(...))`` prints: 36 characters,
    lowercase hex and four dashes. Anything else (braces, uppercase, a ``urn:``
    prefix, a quote) is refused rather than normalised, so the query the
    sidecar sends is byte for byte the UUID the chain emits in its events.
    """
    if not isinstance(provider_uuid, str):
        raise InvalidProviderUUID(f"provider uuid must be a string, got {type(provider_uuid).__name__}")
    try:
        canonical = str(uuidlib.UUID(provider_uuid))
    except ValueError:
        raise InvalidProviderUUID(f"provider uuid {provider_uuid[:64]!r} is not a UUID") from None
    if canonical != provider_uuid:
        raise InvalidProviderUUID(
            f"provider uuid {provider_uuid[:64]!r} is not a canonical lowercase UUID (expected {canonical!r})"
        )
    return provider_uuid


def provider_queries(provider_uuid: str) -> tuple[str, ...]:
    """The provider's subscriptions, in a stable order: two of a node's default five per client.

    Every block's end-of-block events, not only those with an expiry of ours: each says how many
    txs its block held (``num_txs``), which is how the listener finds that the node dropped the tx
    subscription (a full buffer) without telling it (``actors.listener``).
    """
    validate_provider_uuid(provider_uuid)
    return (TX_EVENT_CONDITION, BLOCK_EVENT_CONDITION)


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    value: str

    def holds(self, index: Mapping[str, Collection[str]]) -> bool:
        values = index.get(self.key)
        return values is not None and self.value in values


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: its text as the client sent it, and its conditions."""

    text: str
    conditions: tuple[Condition, ...]

    def matches(self, index: Mapping[str, Collection[str]]) -> bool:
        """``index``: composite key -> the values it has in one tx (``tm.event`` included)."""
        for condition in self.conditions:
            if not condition.holds(index):
                return False
        return True


def parse_query(text: str) -> Query:
    """Parse ``key='value' AND key='value' ...``; raise ``QueryError`` for anything else."""
    if not isinstance(text, str):
        raise QueryError(f"query must be a string, got {type(text).__name__}")
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(f"query is {len(text)} characters long; at most {MAX_QUERY_LENGTH} are accepted")
    return Query(text, tuple(_Parser(text).conditions()))


class _Parser:
    """A one-pass scanner over the query text; errors name the character position."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def conditions(self) -> list[Condition]:
        self._skip_space()
        if self.pos == len(self.text):
            raise QueryError("empty query")
        out = [self._condition()]
        while True:
            self._skip_space()
            if self.pos == len(self.text):
                return out
            at = self.pos
            word = self._word()
            if word.upper() in _UNSUPPORTED_KEYWORDS:
                raise QueryError(f"{word!r} at position {at} is not supported: conditions join with AND only")
            if word != "AND":
                self.pos = at
                raise self._unexpected(word or self.text[at], "AND or the end of the query")
            self._skip_space()
            if self.pos == len(self.text):
                raise QueryError(f"expected a condition after AND at position {self.pos}, found the end")
            out.append(self._condition())
            if len(out) > MAX_CONDITIONS:
                raise QueryError(f"more than {MAX_CONDITIONS} conditions")

    def _condition(self) -> Condition:
        start = self.pos
        m = _KEY.match(self.text, self.pos)
        if m is None:
            found = self.text[self.pos : self.pos + 1] or "the end"
            raise self._unexpected(found, "an event key such as lease_closed.provider_uuid")
        key = m.group(0)
        if key.upper() in _UNSUPPORTED_KEYWORDS:
            raise QueryError(f"{key!r} at position {start} is not supported: only key='value' AND ...")
        self.pos = m.end()
        self._skip_space()
        rest = self.text[self.pos :]
        for op in _UNSUPPORTED_OPERATORS:
            if rest.startswith(op):
                raise QueryError(f"operator {op!r} at position {self.pos} is not supported: only '='")
        word = self._peek_word()
        if word.upper() in _UNSUPPORTED_KEYWORDS:
            raise QueryError(f"operator {word!r} at position {self.pos} is not supported: only '='")
        if not rest.startswith("="):
            raise self._unexpected(rest[:1] or "the end", "'=' after " + repr(key))
        self.pos += 1
        self._skip_space()
        if self.text[self.pos : self.pos + 1] != "'":
            found = self.text[self.pos : self.pos + 1] or "the end"
            raise QueryError(
                f"value of {key!r} at position {self.pos} must be a single-quoted string, found {found!r}"
            )
        close = self.text.find("'", self.pos + 1)
        if close < 0:
            raise QueryError(f"unterminated string starting at position {self.pos}")
        value = self.text[self.pos + 1 : close]
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise QueryError(f"value of {key!r} at position {self.pos} contains a control character")
        self.pos = close + 1
        return Condition(key, value)

    def _skip_space(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos].isspace():
            pos += 1
        self.pos = pos

    def _peek_word(self) -> str:
        m = _KEY.match(self.text, self.pos)
        return m.group(0) if m else ""

    def _word(self) -> str:
        word = self._peek_word()
        self.pos += len(word)
        return word

    def _unexpected(self, found: str, expected: str) -> QueryError:
        return QueryError(f"expected {expected} at position {self.pos}, found {found!r}")
