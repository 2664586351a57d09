"""The tx that ended a lease, found after the fact: what to search for, and what it settled.

A lease of ours can end while nobody hears it (the sidecar down, its
websocket cut). Its read says it ended and when; what its last settlement
moved is only in the tx that ended it. That tx is found with the node's tx
search (``GetTxsEvent``), one query per way a lease ends with a settlement
(CHAIN-VERSIONS.md 2.5, 3):

1. ``lease_closed.lease_uuid='U'``: a ``MsgCloseLease`` (the tenant's, the
   authority's, ours; ``closed_by=credit_exhaustion`` when the close found
   the credit gone): its ``settled_amounts``;
2. ``lease_auto_closed.lease_uuid='U'``: a provider-wide ``MsgWithdraw``
   that found the credit exhausted (both versions);
3. ``provider_withdraw.lease_uuid='U' AND provider_withdraw.auto_closed='true'``:
   a withdraw's auto-close as a named withdraw reports it (v2.1.0), or
   either mode does (current). 2 and 3 are settled by that withdraw's
   ``provider_withdraw`` amounts (``chain.settlements.settlements_in_withdraw``).
   v2.1.0's provider-wide withdraw has none per lease, and its named withdraw
   that auto-closed several leases one total for them all: what such a tx
   settled on one of them cannot be known from it, and is reported as such.

A lease that expired (``lease_expired``, an end-of-block event with no tx)
or was rejected or cancelled while PENDING never accrued: there is nothing
to find, and nobody searches for it.

The clients (cosmpy over gRPC, the in-process model) share this: the queries,
which events of a found tx end the lease, and the ``CloseOutcome`` it makes
(its settlements at the tx's block time). Attribute values are untrusted
text; the lease uuid is interpolated into a query only once it is a UUID.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from chain.errors import ChainError, INVALID_LEASE
from chain.settlements import settlements_in_tx, settlements_in_withdraw
from messages.chain import CloseOutcome
from messages.coins import Coin

__all__ = ["ending_queries", "ending_kind", "lease_end_outcome"]

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

Events = Sequence[tuple[str, Mapping[str, str]]]


def ending_queries(lease_uuid: str) -> tuple[str, ...]:
    """The searches that find the tx that ended ``lease_uuid``, in the order to ask them."""
    if not _UUID.match(lease_uuid):
        raise ChainError.billing(INVALID_LEASE, f"lease uuid {lease_uuid[:64]!r} is not a UUID: not searched for")
    return (
        f"lease_closed.lease_uuid='{lease_uuid}'",
        f"lease_auto_closed.lease_uuid='{lease_uuid}'",
        f"provider_withdraw.lease_uuid='{lease_uuid}' AND provider_withdraw.auto_closed='true'",
    )


def ending_kind(events: Iterable[tuple[str, Mapping[str, str]]], lease_uuid: str) -> str:
    """How the tx with ``events`` ended ``lease_uuid``: "close", "withdraw", or "" when it did not."""
    kind = ""
    for event_type, attributes in events:
        if attributes.get("lease_uuid") != lease_uuid:
            continue
        if event_type == "lease_closed":
            return "close"
        if event_type == "lease_auto_closed" or (
            event_type == "provider_withdraw" and attributes.get("auto_closed") == "true"
        ):
            kind = "withdraw"
    return kind


def lease_end_outcome(
    tx_hash: str,
    at: datetime,
    events: Events,
    lease_uuid: str,
    provider_uuid: str,
    withdraw_total: Iterable[Coin] | None = None,
) -> CloseOutcome | None:
    """What the tx that ended ``lease_uuid`` settled on it, at its block time ``at``.

    None when the tx did not end the lease (a tx hash from an event that
    was not the chain's, say). Raises a ``ChainError`` (not transient) when it
    did but names no amount for it: the search ends there, and the books keep
    the lease reported (``actors.close_search``). ``withdraw_total``: a withdraw's
    ``MsgWithdrawResponse.total_amounts``, for the part of it its events
    leave unsaid (v2.1.0's named auto-close, ``settlements_in_withdraw``);
    None when it is not known.
    """
    kind = ending_kind(events, lease_uuid)
    if kind == "close":
        settled = settlements_in_tx(tx_hash, at, events, provider_uuid=provider_uuid, lease_uuids={lease_uuid})
    elif kind == "withdraw":
        settled = settlements_in_withdraw(tx_hash, at, events, withdraw_total, provider_uuid=provider_uuid)
    else:
        return None
    # Its own settlement only: each lease that ended is looked for on its own.
    settled = [s for s in settled if s.lease_uuid == lease_uuid]
    if kind == "withdraw" and not settled:
        # What it settled on this lease is unknown, not nothing: booked as nothing, the books would
        # lack it and say nothing.
        raise ChainError(
            f"tx {tx_hash} ended lease {lease_uuid} (a withdraw's auto-close), but names no amount the "
            f"books can take for it ({_why_no_amount(events, lease_uuid, provider_uuid, withdraw_total)}): "
            "its last settlement is not known",
            transient=False,
        )
    return CloseOutcome(closed_count=1, tx_hashes=(tx_hash,), settlements=tuple(settled))


def _why_no_amount(events: Events, lease_uuid: str, provider_uuid: str, withdraw_total: Iterable[Coin] | None) -> str:
    """Which case left a withdraw's auto-close of ``lease_uuid`` without a settlement, for the books' issue."""
    ours = [a for t, a in events
            if t == "provider_withdraw" and a.get("provider_uuid") == provider_uuid]
    own = [a for a in ours if a.get("lease_uuid") == lease_uuid]
    if not own:
        # v2.1.0's provider-wide withdraw: lease_auto_closed only (CHAIN-VERSIONS.md 2.5, 3).
        return "a provider-wide withdraw, for which v2.1.0 emits no provider_withdraw per lease"
    closed = sum(1 for a in ours if a.get("auto_closed") == "true")
    if withdraw_total is None:
        return "its amount is the withdraw's total less the other leases', and the tx's answer cannot be read"
    if closed > 1:
        # v2.1.0's named withdraw: each auto-close's amount is "0", the tx's total covers them all.
        return f"one of {closed} leases the tx auto-closed, whose total cannot be split between them"
    return f"its provider_withdraw amount {own[0].get('amount', '')[:64]!r} cannot be read"
