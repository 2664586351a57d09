"""Chain events -> typed ``LeaseEvent`` messages.

One tx carries many events of many types; every ``lease_*`` event becomes
one ``LeaseEvent``. Attribute values are untrusted text: an event missing
its lease or tenant is skipped, never fatal.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping

from messages.coins import Coin, parse_coins
from messages.lease_events import LeaseEvent

__all__ = ["lease_event_from_attributes", "lease_events_from_tx", "EVENT_KINDS"]

logger = logging.getLogger(__name__)

#: chain event type -> LeaseEvent.kind
EVENT_KINDS = {
    "lease_created": "created",
    "lease_acknowledged": "acknowledged",
    "lease_closed": "closed",
    "lease_expired": "expired",
    "lease_auto_closed": "auto_closed",
}


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
    kind = EVENT_KINDS.get(event_type)
    if kind is None:
        return None
    lease_uuid = attributes.get("lease_uuid", "")
    tenant = attributes.get("tenant", "")
    if not lease_uuid or not tenant:
        logger.warning("skipped %s event without lease_uuid/tenant", event_type)
        return None
    reason = attributes.get("closure_reason") or attributes.get("reason") or ""
    return LeaseEvent(
        kind=kind,
        lease_uuid=lease_uuid,
        tenant=tenant,
        provider_uuid=attributes.get("provider_uuid", ""),
        reason=reason,
        height=height,
        tx_hash=tx_hash,
        settled=_settled(attributes, lease_uuid) if kind == "closed" else (),
    )


def lease_events_from_tx(
    events: Iterable[tuple[str, Mapping[str, str]]], height: int = 0, tx_hash: str = ""
) -> list[LeaseEvent]:
    out = []
    for event_type, attributes in events:
        ev = lease_event_from_attributes(event_type, attributes, height, tx_hash)
        if ev is not None:
            out.append(ev)
    return out
