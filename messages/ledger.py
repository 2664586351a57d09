"""What the ledger writer is told: the facts the books are kept from.

The scheduler and the chain actor send these to the ``ledger`` address as
things happen; with no ledger configured they are dropped.
"""

from __future__ import annotations

from datetime import datetime

# LeaseSettled is defined beside the chain answers that carry it
# (WithdrawPage, CloseOutcome); it is one of the ledger's facts all the same.
from messages.chain import Lease, LeaseSettled
from messages.codec import Message
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


class LeasesObserved(Message, tag="leases_observed"):
    """The provider's active leases as read from the chain (a reconcile)."""

    at: datetime
    leases: tuple[Lease, ...]


class LeaseEventRecorded(Message, tag="lease_event_recorded"):
    at: datetime
    event: LeaseEvent


class WithdrawalRecorded(Message, tag="withdrawal_recorded"):
    at: datetime
    cycle: int
    page: int
    tx_hash: str
    amounts: tuple[Coin, ...]
    withdrawal_count: int


class ClosureRecorded(Message, tag="closure_recorded"):
    at: datetime
    tenant: str
    lease_uuids: tuple[str, ...]
    reason: str
    tx_hashes: tuple[str, ...]


class TenantStateChanged(Message, tag="tenant_state_changed"):
    snapshot: TenantSnapshot


class TenantForgotten(Message, tag="tenant_forgotten"):
    """The tenant has no lease with us any more: drop its persisted state."""

    tenant: str


class BillingTickDue(Message, tag="billing_tick_due"):
    """Hourly, from the scheduler: walk the billing months (``ledger`` tick)."""

    at: datetime


__all__ += ["BillingTickDue"]


class LeaseObserved(Message, tag="lease_observed"):
    """One lease as read from the chain (a ``Lease`` query), in any state.

    Unlike ``LeasesObserved`` it says nothing about other leases. Send it when
    a lease is read outside a reconcile: a new lease after its
    ``lease_acknowledged`` event (its items are its price), or a lease that
    vanished from the active set (its ``closed_at`` is the chain's own, so
    the month is billed to the second).
    """

    at: datetime
    lease: Lease


__all__ += ["LeaseObserved", "LeaseSettled"]


class LeasesReconciled(Message, tag="leases_reconciled"):
    """The provider's *complete* set of active leases, as one read at ``at`` returned it.

    Unlike ``LeasesObserved`` (any leases, e.g. only the new ones) the set is
    whole; still, a lease the ledger holds as active that is missing from it
    is not taken for closed: the scheduler has it read, and its
    ``LeaseObserved`` gives the chain's own ``closed_at``. Send it after
    every successful active-leases read.
    """

    at: datetime
    leases: tuple[Lease, ...]


__all__ += ["LeasesReconciled"]


class SettlementsRecorded(Message, tag="settlements_recorded"):
    """Every per-lease settlement of one transaction (a withdraw page, a close batch).

    One message per transaction rather than one per lease: a page settles up
    to 100 leases, and every message is a capture record and a replay input.
    """

    settlements: tuple[LeaseSettled, ...]


__all__ += ["SettlementsRecorded"]


class WithdrawLookupOpened(Message, tag="withdraw_lookup_opened"):
    """A withdraw tx whose outcome is not in the books yet: signed and awaiting its answer,
    or of unknown outcome and being looked up. Kept across restarts: a sidecar that
    starts with one open looks the tx up."""

    tx_hash: str
    cycle: int
    page: int
    at: datetime


class WithdrawLookupClosed(Message, tag="withdraw_lookup_closed"):
    """``tx_hash``'s outcome is settled: its page booked, refused before inclusion, or its
    lookup ended (found, failed on chain, or given up)."""

    tx_hash: str


__all__ += ["WithdrawLookupOpened", "WithdrawLookupClosed"]


class CloseLookupOpened(Message, tag="close_lookup_opened"):
    """A close tx whose outcome is not in the books yet: signed and awaiting its answer, or of
    unknown outcome and being looked up. Kept across restarts (``actors.close_lookup``): a
    sidecar that starts with one open looks the tx up, and books what it closed and settled."""

    tx_hash: str
    reason: str
    #: (tenant, its leases in the tx), as the close round grouped them
    by_tenant: tuple[tuple[str, tuple[str, ...]], ...]
    at: datetime


class CloseLookupClosed(Message, tag="close_lookup_closed"):
    """``tx_hash``'s outcome is settled: booked from its answer or its lookup, refused before
    inclusion, included and failed, or given up."""

    tx_hash: str


__all__ += ["CloseLookupOpened", "CloseLookupClosed"]


class LeaseIssue(Message, tag="lease_issue"):
    """Something the books cannot yet say of one lease, kept visible until it is resolved.

    ``kind`` (``LEASE_ISSUE_KINDS``): ``unread``, the lease could not be read
    from the chain (retried with backoff; its read clears it);
    ``close_not_found``, it ended while unheard and the node's tx search
    finds no tx that ended it (or finds one that names no amount for it:
    v2.1.0's provider-wide auto-close, or its named withdraw auto-closing
    several leases at once); ``no_tx_index``, it ended while unheard and
    the node keeps no tx index to search; ``settlement_refused``, a
    settlement the ledger would not book (more than the lease could have
    accrued); ``close_sought``, it ended and the search for the tx that
    ended it has not finished (written ahead of the search, so that a
    restart searches again). ``at``: the instant it is about (when the read failed; when the
    lease closed). Shown by ``run.py periods`` and the statements, so that
    the books say what they lack instead of silently under-booking.
    """

    at: datetime
    lease_uuid: str
    kind: str
    detail: str = ""
    tenant: str = ""


class LeaseIssueResolved(Message, tag="lease_issue_resolved"):
    """The books no longer lack what ``kind`` said of ``lease_uuid`` (its closing tx was found)."""

    lease_uuid: str
    kind: str


#: What a ``LeaseIssue`` can say.
LEASE_ISSUE_KINDS = ("unread", "close_not_found", "no_tx_index", "settlement_refused", "close_sought")

__all__ += ["LeaseIssue", "LeaseIssueResolved", "LEASE_ISSUE_KINDS"]
