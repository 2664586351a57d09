"""Chain transaction events -> the ledger's per-lease settlement facts.

A withdraw transaction carries one ``provider_withdraw`` event per lease it
settled (``lease_uuid``, ``amount``), and a close one ``lease_closed`` per lease
(``settled_amounts``). These are the only place the chain says how much each
lease paid, which is what a statement sets beside what the lease accrued.
Whoever sees a transaction's events (the chain I/O after a withdraw, the
websocket listener for ``lease_closed``, the model's event feed) turns them
into ``LeaseSettled`` messages for the ``ledger`` with this function.

Attribute values are untrusted text: an event with a missing lease or an
amount that does not parse is skipped and logged, never fatal.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Iterable, Mapping

from messages.coins import parse_coins
from messages.ledger import LeaseSettled

__all__ = ["settlements_from_tx"]

logger = logging.getLogger(__name__)

#: event type -> (LeaseSettled.kind, attribute holding the amounts)
_SETTLING = {
    "provider_withdraw": ("withdraw", "amount"),
    "lease_closed": ("close", "settled_amounts"),
}


def settlements_from_tx(
    tx_hash: str,
    at: datetime,
    events: Iterable[tuple[str, Mapping[str, str]]],
    provider_uuid: str,
) -> list[LeaseSettled]:
    """The settlements of ``provider_uuid``'s leases in one transaction included at ``at``."""
    out = []
    for event_type, attributes in events:
        spec = _SETTLING.get(event_type)
        if spec is None or attributes.get("provider_uuid", "") != provider_uuid:
            continue
        kind, key = spec
        lease_uuid = attributes.get("lease_uuid", "")
        if not lease_uuid:
            logger.warning("skipped %s event of tx %s without lease_uuid", event_type, tx_hash)
            continue
        try:
            amounts = parse_coins(attributes.get(key, ""))
        except ValueError as exc:
            logger.warning("skipped %s of lease %s in tx %s: %s", event_type, lease_uuid, tx_hash, exc)
            continue
        out.append(
            LeaseSettled(
                at=at,
                tx_hash=tx_hash,
                lease_uuid=lease_uuid,
                amounts=amounts,
                kind=kind,
                tenant=attributes.get("tenant", ""),
            )
        )
    return out
