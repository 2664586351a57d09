"""What the ledger writer is told: the facts the books are kept from.

The scheduler and the chain actor send these to the ``ledger`` address as
things happen; with no ledger configured they are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from messages.chain import Lease
from messages.codec import message
from messages.coins import Coin
from messages.credit import TenantSnapshot
from messages.lease_events import LeaseEvent

__all__ = [
    "LeasesObserved",
    "LeaseEventRecorded",
    "WithdrawalRecorded",
    "ClosureRecorded",
    "TenantStateChanged",
    "TenantForgotten",
]


@message("leases_observed")
@dataclass(frozen=True, slots=True)
class LeasesObserved:
    """The provider's active leases as read from the chain (a reconcile)."""

    at: datetime
    leases: tuple[Lease, ...]


@message("lease_event_recorded")
@dataclass(frozen=True, slots=True)
class LeaseEventRecorded:
    at: datetime
    event: LeaseEvent


@message("withdrawal_recorded")
@dataclass(frozen=True, slots=True)
class WithdrawalRecorded:
    at: datetime
    cycle: int
    page: int
    tx_hash: str
    amounts: tuple[Coin, ...]
    withdrawal_count: int


@message("closure_recorded")
@dataclass(frozen=True, slots=True)
class ClosureRecorded:
    at: datetime
    tenant: str
    lease_uuids: tuple[str, ...]
    reason: str
    tx_hashes: tuple[str, ...]


@message("tenant_state_changed")
@dataclass(frozen=True, slots=True)
class TenantStateChanged:
    snapshot: TenantSnapshot


@message("tenant_forgotten")
@dataclass(frozen=True, slots=True)
class TenantForgotten:
    """The tenant has no lease with us any more: drop its persisted state."""

    tenant: str


@message("billing_tick_due")
@dataclass(frozen=True, slots=True)
class BillingTickDue:
    """Hourly, from the scheduler: walk the billing months (``ledger`` tick)."""

    at: datetime


__all__ += ["BillingTickDue"]
