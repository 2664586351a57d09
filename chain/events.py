"""Chain events -> typed ``LeaseEvent`` messages.

One tx carries many events of many types; every event that starts or ends a
lease becomes one ``LeaseEvent``: the ``lease_*`` events, and a
``provider_withdraw`` with ``auto_closed="true"`` (a withdraw's auto-close,
the only signal a named withdraw gives: CHAIN-VERSIONS.md 2.5). That one
names no tenant; every other event missing its lease or tenant is skipped,
never fatal. Attribute values are untrusted text.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping

from messages.coins import Coin, parse_coins
from messages.lease_events import LeaseEvent

__all__ = ["lease_event_from_attributes", "lease_events_from_tx", "is_lease_event", "named_first", "EVENT_KINDS"]

logger = logging.getLogger(__name__)

#: chain event type -> LeaseEvent.kind. ``provider_withdraw`` last: a tx that
#: has both it and ``lease_auto_closed`` for a lease is read from the one
#: that names the tenant first.
EVENT_KINDS = {
    "lease_created": "created",
    "lease_acknowledged": "acknowledged",
    "lease_closed": "closed",
    "lease_expired": "expired",
    "lease_auto_closed": "auto_closed",
    "lease_cancelled": "cancelled",
    "lease_rejected": "rejected",
    "provider_withdraw": "auto_closed",
}
#: ``lease_auto_closed.reason``: what a provider_withdraw auto-close is recorded as too.
_CREDIT_EXHAUSTED = "credit_exhausted"


def is_lease_event(event_type: str, attributes: Mapping[str, str]) -> bool:
    """An event that starts or ends a lease (a plain settling ``provider_withdraw`` is not)."""
    if event_type == "provider_withdraw":
        return attributes.get("auto_closed") == "true"
    return event_type in EVENT_KINDS


def _settled(attributes: Mapping[str, str], lease_uuid: str) -> tuple[Coin, ...]:
    text = attributes.get("settled_amounts", "")
    if not text:
        return ()
    try:
        return parse_coins(text)
    except ValueError as exc:
        logger.warning("lease %s: unreadable settled_amounts (%s); the close's settlement is not recorded", lease_uuid, exc)
        return ()


def lease_event_from_attributes(
    event_type: str, attributes: Mapping[str, str], height: int = 0, tx_hash: str = ""
) -> LeaseEvent | None:
    if not is_lease_event(event_type, attributes):
        return None
    kind = EVENT_KINDS[event_type]
    lease_uuid = attributes.get("lease_uuid", "")
    tenant = attributes.get("tenant", "")
    if not lease_uuid or (not tenant and event_type != "provider_withdraw"):
        logger.warning("skipped %s event without lease_uuid/tenant", event_type)
        return None
    reason = attributes.get("closure_reason") or attributes.get("reason") or ""
    if event_type == "provider_withdraw":
        reason = _CREDIT_EXHAUSTED
    return LeaseEvent(
        kind=kind,
        lease_uuid=lease_uuid,
        tenant=tenant,
        provider_uuid=attributes.get("provider_uuid", ""),
        reason=reason,
        height=height,
        tx_hash=tx_hash,
        settled=_settled(attributes, lease_uuid) if kind == "closed" else (),
        by=attributes.get("closed_by", "") if kind == "closed" else "",
    )


def lease_events_from_tx(
    events: Iterable[tuple[str, Mapping[str, str]]], height: int = 0, tx_hash: str = ""
) -> list[LeaseEvent]:
    out = []
    for event_type, attributes in events:
        ev = lease_event_from_attributes(event_type, attributes, height, tx_hash)
        if ev is not None:
            out.append(ev)
    return named_first(out)


def named_first(events: list[LeaseEvent]) -> list[LeaseEvent]:
    """One auto-close per lease, the copy that names the tenant where the tx has one.

    A provider-wide withdraw on the current chain reports an auto-close twice:
    ``provider_withdraw`` (no tenant) and ``lease_auto_closed`` (with it).
    """
    named = {ev.lease_uuid for ev in events if ev.kind == "auto_closed" and ev.tenant}
    if not named:
        return events
    return [ev for ev in events if ev.kind != "auto_closed" or ev.tenant or ev.lease_uuid not in named]
