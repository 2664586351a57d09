"""Lease events from the chain, as one typed message.

The websocket listener (and, on the in-process model, the model itself)
turns every event of a transaction that starts or ends a lease into one
``LeaseEvent``. A lease ends four ways (CHAIN-VERSIONS.md 2.5, 3): closed
(``lease_closed``, whoever closed it, ``closed_by=credit_exhaustion`` when
the chain found it exhausted), auto-closed by a withdraw
(``lease_auto_closed``, or ``provider_withdraw`` with ``auto_closed="true"``,
which names no tenant), expired while PENDING (``lease_expired``, an
end-of-block event), or rejected or cancelled while PENDING.
"""

from __future__ import annotations


from messages.codec import Message
from messages.coins import Coin

__all__ = ["LeaseEvent", "LEASE_EVENT_KINDS", "ENDING_KINDS", "CREDIT_EXHAUSTION"]

#: The event kinds the sidecar acts on, named as the chain names the events
#: without the ``lease_`` prefix.
LEASE_EVENT_KINDS = ("created", "acknowledged", "closed", "expired", "auto_closed", "cancelled", "rejected")
#: The kinds that end a lease.
ENDING_KINDS = ("closed", "expired", "auto_closed", "cancelled", "rejected")
#: ``lease_closed.closed_by`` of a close that found the lease exhausted.
CREDIT_EXHAUSTION = "credit_exhaustion"


class LeaseEvent(Message, tag="lease_event"):
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
    #: lease_closed: who closed it (a role: tenant, provider, authority, credit_exhaustion)
    by: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LEASE_EVENT_KINDS:
            raise ValueError(f"unknown lease event kind {self.kind!r}")

    @property
    def credit_exhausted(self) -> bool:
        """The chain ended the lease because its credit was exhausted (any of the three signals)."""
        return self.kind == "auto_closed" or (self.kind == "closed" and self.by == CREDIT_EXHAUSTION)

    def concerns(self, provider_uuid: str) -> bool:
        """Whether a sidecar of ``provider_uuid`` acts on it: a lease of its own, or any
        credit exhaustion (another provider's, of a tenant it may share)."""
        return self.provider_uuid == provider_uuid or self.credit_exhausted
