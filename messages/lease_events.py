"""Lease events from the chain, as one typed message.

The websocket listener (and, on the in-process model, the model itself)
turns every ``lease_*`` event of a transaction into one ``LeaseEvent``.
"""

from __future__ import annotations

from dataclasses import dataclass

from messages.codec import message
from messages.coins import Coin

__all__ = ["LeaseEvent", "LEASE_EVENT_KINDS"]

#: The event kinds the sidecar acts on, named as the chain names the events
#: without the ``lease_`` prefix.
LEASE_EVENT_KINDS = ("created", "acknowledged", "closed", "expired", "auto_closed")


@message("lease_event")
@dataclass(frozen=True, slots=True)
class LeaseEvent:
    kind: str
    lease_uuid: str
    tenant: str
    provider_uuid: str
    #: closure_reason / reason attribute where the event has one.
    reason: str = ""
    height: int = 0
    #: the transaction that emitted it (hex), where known
    tx_hash: str = ""
    #: lease_closed: what the close settled, per denom (its settled_amounts)
    settled: tuple[Coin, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LEASE_EVENT_KINDS:
            raise ValueError(f"unknown lease event kind {self.kind!r}")
