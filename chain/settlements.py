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

import msgspec

from messages.coins import Coin, coins, format_coins, parse_coins
from messages.ledger import LeaseSettled

__all__ = ["SETTLING_EVENTS", "settlements_in_tx", "settlements_in_withdraw"]

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


def settlements_in_withdraw(
    tx_hash: str,
    at: datetime,
    events: Iterable[tuple[str, Mapping[str, str]]],
    total_amounts: Iterable[Coin] | None,
    *,
    provider_uuid: str,
) -> list[LeaseSettled]:
    """What a withdraw tx settled per lease, its ``total_amounts`` accounted for in full.

    v2.1.0's named withdraw writes ``amount="0"`` on the ``provider_withdraw``
    of a lease it auto-closed, although the auto-close moved the rest of the
    tenant's credit (CHAIN-VERSIONS.md 2.5). What the events leave of the
    tx's total is that lease's: when exactly one lease of the tx auto-closed,
    the remainder is booked to it. With several, the split cannot be known:
    the remainder is left out with a warning naming the tx and the leases,
    and so are those leases' "0" settlements (the statement then shows a
    shortfall rather than a wrong lease, or a lease that settled nothing),
    which is why the sidecar withdraws a lease near its runway in a tx of
    its own. ``total_amounts`` None: the tx's answer could not be read, so
    no remainder can be known, and an auto-close's "0" is left out too.
    """
    events = list(events)
    out = settlements_in_tx(tx_hash, at, events, provider_uuid=provider_uuid)
    if total_amounts is None:
        unknown = {s.lease_uuid for s in out if not s.amounts} & _auto_closed(events, provider_uuid)
        if unknown:
            logger.warning(
                "withdraw tx %s: its answer is not known, so what it settled on the lease(s) it auto-closed "
                "(%s) is not known either: not booked", tx_hash, ", ".join(sorted(unknown)),
            )
        return [s for s in out if s.lease_uuid not in unknown]
    remainder: dict[str, int] = {}
    for c in total_amounts:
        remainder[c.denom] = remainder.get(c.denom, 0) + c.amount
    for settled in out:
        for c in settled.amounts:
            remainder[c.denom] = remainder.get(c.denom, 0) - c.amount
    remainder = {d: a for d, a in remainder.items() if a > 0}
    if not remainder:
        return out
    closed = [
        i for i, s in enumerate(out)
        if not s.amounts and s.lease_uuid in _auto_closed(events, provider_uuid)
    ]
    if len(closed) == 1:
        i = closed[0]
        out[i] = msgspec.structs.replace(out[i], amounts=coins(remainder))
        return out
    # Several auto-closed leases share the remainder (or none is there to take it): what each
    # settled is unknown, not nothing. Their "0" is left out, so nothing books them as settled in
    # full (a close search of one then reports it: ``chain.lease_end.lease_end_outcome``).
    unknown = {out[i].lease_uuid for i in closed}
    logger.warning(
        "withdraw tx %s moved %s more than its per-lease events say, over %d auto-closed lease(s)%s: "
        "not booked to any lease",
        tx_hash, format_coins(coins(remainder)), len(closed),
        f" ({', '.join(sorted(unknown))})" if unknown else "",
    )
    return [s for s in out if s.lease_uuid not in unknown]


def _auto_closed(events: Iterable[tuple[str, Mapping[str, str]]], provider_uuid: str) -> set[str]:
    return {
        a.get("lease_uuid", "")
        for t, a in events
        if t == "provider_withdraw" and a.get("auto_closed") == "true" and a.get("provider_uuid") == provider_uuid
    }
