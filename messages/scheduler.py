"""Messages the ``SchedulerActor`` receives.

The scheduler owns the cycle: withdraw, read the provider's active leases,
have every tenant checked, flush the closures, then sleep until the next wake.
"""

from __future__ import annotations

from datetime import datetime

from messages.chain import ChainFailure, Lease
from messages.codec import Message
from messages.coins import Coin
from messages.credit import TenantSnapshot
from messages.lease_events import LeaseEvent

__all__ = [
    "Wake",
    "TriggerWithdraw",
    "RunCycle",
    "WithdrawFinished",
    "ActiveLeasesRead",
    "LeaseRead",
    "LeasesToRead",
    "TenantChecked",
    "ClosuresFlushed",
    "NO_CYCLE",
    "LeaseEventReceived",
    "WAKE_REASONS",
]

#: Why the scheduler's timer fired; the reason decides whether the cycle pays
#: for a withdrawal (see ``actors.schedule``).
WAKE_REASONS = ("interval", "check", "depletion", "recheck", "retry", "deadline")


class Wake(Message, tag="wake"):
    reason: str
    #: The wake this timer was set for; a wake superseded by a newer timer is
    #: ignored rather than running a second cycle.
    token: int = 0


class TriggerWithdraw(Message, tag="trigger_withdraw"):
    """Run a withdraw cycle now, bypassing the withdraw rate limit."""

    source: str = "operator"


class RunCycle(Message, tag="run_cycle"):
    """``withdraw_once()``: one full cycle before ``start()``."""

    withdraw: bool = True


class WithdrawFinished(Message, tag="withdraw_finished"):
    cycle: int
    pages: int
    total_amounts: tuple[Coin, ...]
    withdrawal_count: int
    tx_hashes: tuple[str, ...]
    #: ``max_withdraw_iterations`` pages were done and the cursor was not empty.
    hit_page_bound: bool = False
    error: ChainFailure | None = None
    #: Leases whose withdraw keeps failing, and how many times in a row: they
    #: are retried by name with backoff, reported until they recover.
    failing: tuple[tuple[str, int], ...] = ()
    #: ProviderWithdrawable said nothing was due: no paid tx was sent.
    nothing_due: bool = False


class ActiveLeasesRead(Message, tag="active_leases_read"):
    cycle: int
    leases: tuple[Lease, ...] = ()
    error: ChainFailure | None = None


class LeaseRead(Message, tag="lease_read"):
    """One lease as the chain answered a ``LeaseCall`` (None, with the error, when it did not)."""

    lease_uuid: str
    lease: Lease | None = None
    error: ChainFailure | None = None


class LeasesToRead(Message, tag="leases_to_read"):
    """At start: leases the books want read from the chain (``Ledger.leases_to_read``)."""

    lease_uuids: tuple[str, ...]


class TenantChecked(Message, tag="tenant_checked"):
    """A tenant actor's verdict for one cycle."""

    cycle: int
    tenant: str
    #: Earliest estimated depletion; None where no estimate could be made.
    depletion_at: datetime | None = None
    #: Early re-check this tenant asks for (read errors, zero-balance grace).
    recheck_at: datetime | None = None
    #: Leases this tenant asked the chain actor to close in this cycle.
    closing: tuple[str, ...] = ()
    #: One readable line saying what was decided and why.
    note: str = ""



#: ``ClosuresFlushed.cycle`` of a close a lookup found applied: a lookup keeps no cycle, and none is 0.
NO_CYCLE = 0


class ClosuresFlushed(Message, tag="closures_flushed"):
    #: the check cycle whose closures these are; ``NO_CYCLE``: a close a lookup found applied
    cycle: int
    closed: tuple[str, ...] = ()
    #: Leases that were already closed on chain and were dropped from a batch.
    already_closed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    tx_hashes: tuple[str, ...] = ()
    error: ChainFailure | None = None
    #: When the failed closures should be tried again (a syncing node asks for a wait).
    retry_at: datetime | None = None


class LeaseEventReceived(Message, tag="lease_event_received"):
    event: LeaseEvent
    #: the clock's time when the listener read the event's frame (None from the in-process
    #: model): its delivery's time minus this is what the event waited to reach the scheduler
    received_at: datetime | None = None


class Reconcile(Message, tag="reconcile"):
    """Re-read the provider's active leases now (after a websocket gap, at start)."""

    source: str = "listener"


__all__ += ["Reconcile"]


class StartSchedule(Message, tag="start_schedule"):
    """Begin the periodic wakes (the seed's ``Start``)."""


class StopSchedule(Message, tag="stop_schedule"):
    """Stop: no new cycle starts; later triggers are ignored (the seed's ``Stop``)."""


class CycleDeadline(Message, tag="cycle_deadline"):
    """A cycle still waiting for tenants at this point is closed out without them."""

    cycle: int


class BillingTickTimer(Message, tag="billing_tick_timer"):
    """The scheduler's hourly timer for the books (sends ``BillingTickDue`` to the ledger)."""


class TenantsRestored(Message, tag="tenants_restored"):
    """What the ledger remembered of each tenant at the last run; sent once at start."""

    snapshots: tuple[TenantSnapshot, ...]


__all__ += ["StartSchedule", "StopSchedule", "CycleDeadline", "BillingTickTimer", "TenantsRestored"]
