"""Messages a ``CreditMonitorActor`` (one per tenant) receives and sends."""

from __future__ import annotations

from datetime import datetime

from messages.chain import ChainFailure, CreditAccount, CreditEstimate, Lease
from messages.codec import Message
from messages.coins import Coin

__all__ = [
    "LeasesSynced",
    "LeaseOpened",
    "LeaseGone",
    "CreditRead",
    "CreditReadFailed",
    "CloseRequested",
    "LeasesClosed",
    "CloseFailed",
]


class LeasesSynced(Message, tag="leases_synced"):
    """The tenant's complete set of our active leases, read from the chain."""

    leases: tuple[Lease, ...]
    #: Leases the read no longer lists, kept until a read of the lease itself
    #: says it ended: a listing alone never ends a lease.
    kept: tuple[str, ...] = ()


class LeaseOpened(Message, tag="lease_opened"):
    lease: Lease


class LeaseGone(Message, tag="lease_gone"):
    lease_uuid: str
    #: Which event removed it: closed, expired, auto_closed.
    reason: str


class CreditRead(Message, tag="credit_read"):
    """One complete credit read: the account and the tenant's ACTIVE leases of every provider.

    Both parts or none: a read missing either is a ``CreditReadFailed``.
    """

    cycle: int
    account: CreditAccount
    #: Captures made before the credit rule read leases held the chain's
    #: CreditEstimate here; it decides nothing any more.
    estimate: CreditEstimate | None = None
    #: Every ACTIVE lease of the tenant, ours and other providers'.
    leases: tuple[Lease, ...] = ()
    #: The leases are as providers' listings had them (``LeasesByProvider``, read before
    #: the account), not a read of the tenant's own: ours alone where the account counted
    #: no other ACTIVE lease (one call, not two), or a bulk read's, whose account and
    #: balances came from listings of every account and every holder too
    #: (``actors.credit_bulk``). Read at other times than each other, the parts are good
    #: for a verdict of credit to spare only: a tenant whose credit looks gone on them,
    #: or that is in a grace window, is read again in full.
    leases_listed: bool = False
    #: The height the read reflects: the lower of the account's and the
    #: leases' (``x-cosmos-block-height``); 0: not known (captures from before).
    height: int = 0


class CreditReadFailed(Message, tag="credit_read_failed"):
    cycle: int
    error: ChainFailure


class CloseRequested(Message, tag="close_requested"):
    cycle: int
    tenant: str
    lease_uuids: tuple[str, ...]
    reason: str
    #: The height of the read that decided it (``CreditRead.height``): a read
    #: further behind the chain than ``max_node_lag`` closes nothing.
    read_height: int = 0


class LeasesClosed(Message, tag="leases_closed"):
    tenant: str
    lease_uuids: tuple[str, ...]
    reason: str
    tx_hashes: tuple[str, ...] = ()
    #: True for leases found already closed on chain (dropped from a batch).
    already_closed: bool = False


class CloseFailed(Message, tag="close_failed"):
    tenant: str
    lease_uuids: tuple[str, ...]
    error: ChainFailure
    #: When the tenant should try again (a syncing node asks for a wait).
    retry_at: datetime | None = None


class TenantSnapshot(Message, tag="tenant_snapshot"):
    """What a tenant actor has learned, persisted so that a restart loses nothing.

    Restored into a new ``CreditMonitorActor`` at start: the burn-rate
    baseline, the error streak, the zero-balance grace window (its start is
    kept, so a restart never restarts the window) and pending closures.
    """

    tenant: str
    lease_uuids: tuple[str, ...] = ()
    last_balances: tuple[Coin, ...] | None = None
    last_sample_at: datetime | None = None
    consecutive_errs: int = 0
    zero_since: datetime | None = None
    depletion_at: datetime | None = None
    recheck_at: datetime | None = None
    closing: tuple[str, ...] = ()
    #: Denoms the leases are charged in: after a restart the leases' prices
    #: are unknown until the next chain read, and "is the credit gone?" must
    #: not be answered without them (a zero umfx balance beside plenty of
    #: upwr is gone for a umfx lease).
    charged_denoms: tuple[str, ...] = ()
    #: The highest height a read of the tenant was taken at: a read from
    #: below it (a node further behind) is stale, even after a restart.
    read_height: int = 0


__all__ += ["TenantSnapshot"]


class TenantRestored(Message, tag="tenant_restored"):
    """First message of a tenant actor restarted from persisted state."""

    snapshot: TenantSnapshot


__all__ += ["TenantRestored"]
