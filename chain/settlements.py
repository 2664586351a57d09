"""A transaction's events -> what each lease settled in it (``LeaseSettled``).

A withdraw carries one ``provider_withdraw`` event per lease it settled
(``lease_uuid``, ``amount``); a close one ``lease_closed`` per lease
(``settled_amounts``). They are the only place the chain says how much each
lease paid, which a statement sets beside what the lease accrued. The chain
clients read them from the tx they just had included (so a ``WithdrawPage``
or ``CloseOutcome`` carries them), and the ledger's model feed from every tx
of the in-process chain (``ledger.facts``): both through this one parser, so
the two sources agree to the unit and deduplicate on (tx, lease, denom).

An auto-close inside a withdraw (``lease_auto_closed``) moves nothing of its
own: its lease's last settlement is that tx's ``provider_withdraw``.

Attribute values are untrusted text: an event with a missing lease or an
amount that does not parse is skipped and logged, never fatal (the tx is
already on chain; one bad event must not lose the others).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Collection, Iterable, Mapping

from messages.coins import parse_coins
from messages.ledger import LeaseSettled

__all__ = ["SETTLING_EVENTS", "settlements_in_tx"]

logger = logging.getLogger(__name__)

#: event type -> (LeaseSettled.kind, attribute holding the amounts)
SETTLING_EVENTS = {
    "provider_withdraw": ("withdraw", "amount"),
    "lease_closed": ("close", "settled_amounts"),
}


def settlements_in_tx(
    tx_hash: str,
    at: datetime,
    events: Iterable[tuple[str, Mapping[str, str]]],
    *,
    provider_uuid: str | None = None,
    lease_uuids: Collection[str] | None = None,
) -> list[LeaseSettled]:
    """The settlements in one tx included at ``at`` (its block time), in event order.

    Only leases of ``provider_uuid`` and/or among ``lease_uuids`` when given:
    a tx can settle other providers' leases too (a tenant closing several).
    """
    out = []
    for event_type, attributes in events:
        spec = SETTLING_EVENTS.get(event_type)
        if spec is None:
            continue
        if provider_uuid is not None and attributes.get("provider_uuid", "") != provider_uuid:
            continue
        kind, key = spec
        lease_uuid = attributes.get("lease_uuid", "")
        if not lease_uuid:
            logger.warning("skipped %s event of tx %s without lease_uuid", event_type, tx_hash)
            continue
        if lease_uuids is not None and lease_uuid not in lease_uuids:
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
