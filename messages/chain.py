"""What the chain answers, as typed values that can cross actor boundaries.

These mirror the ``liftedinit.billing.v1`` types the sidecar reads (see
CHAIN.md), reduced to the fields its decisions use. Every chain answer that
reaches an actor is one of these, so a capture holds exactly what the
sidecar saw.

``LeaseSettled`` (what one tx moved from one lease) is read from a tx's
events by the chain clients and carried on ``WithdrawPage``/``CloseOutcome``;
it lives here rather than in ``messages.ledger`` (which re-exports it, as
the ledger's fact) because ``messages.ledger`` imports this module.
"""

from __future__ import annotations

from datetime import datetime

from messages.codec import Message
from messages.coins import Coin
from messages.tx_cost import TxCost

__all__ = [
    "LeaseItem",
    "Lease",
    "CreditAccount",
    "CreditEstimate",
    "WithdrawPage",
    "CloseOutcome",
    "LeaseSettled",
    "NodeStatus",
    "ChainFailure",
    "LEASE_STATES",
]

#: liftedinit.billing.v1.LeaseState, by value.
LEASE_STATES = ("UNSPECIFIED", "PENDING", "ACTIVE", "CLOSED", "REJECTED", "EXPIRED")


class LeaseItem(Message, tag="lease_item"):
    sku_uuid: str
    quantity: int
    #: Price per second per unit.
    locked_price: Coin


class Lease(Message, tag="lease"):
    uuid: str
    tenant: str
    provider_uuid: str
    items: tuple[LeaseItem, ...]
    state: str = "ACTIVE"
    created_at: datetime | None = None
    acknowledged_at: datetime | None = None
    last_settled_at: datetime | None = None
    closed_at: datetime | None = None
    closure_reason: str = ""
    #: Seconds of the rate reserved at creation; 0 for a lease from before
    #: per-lease reservations (the current chain then draws on the
    #: account's unattributed reservation instead of the lease's own).
    min_lease_duration_at_creation: int = 0
    #: What is left of the lease's own reservation tranche (current chain,
    #: field 16; empty once the lease ended). None where the chain has no
    #: such field (v2.1.0): the credit rule then reads the raw balance.
    reservation: tuple[Coin, ...] | None = None
    #: When a lease that never became active ended, by the chain's record:
    #: its ``expired_at`` (EXPIRED) or ``rejected_at`` (REJECTED). The
    #: chain gives such a lease no ``closed_at``, and its expiry has no tx
    #: and an event that is only a hint: the read is what ends it in the books.
    ended_at: datetime | None = None

    def rate_per_second(self) -> dict[str, int]:
        """What the lease accrues each whole second, per denom."""
        rate: dict[str, int] = {}
        for item in self.items:
            d = item.locked_price.denom
            rate[d] = rate.get(d, 0) + item.locked_price.amount * item.quantity
        return rate


class CreditAccount(Message, tag="credit_account"):
    """A tenant's credit account and the balances at its credit address (``Query/CreditAccount``)."""

    tenant: str
    balances: tuple[Coin, ...]
    active_lease_count: int = 0
    pending_lease_count: int = 0
    credit_address: str = ""
    #: R: the account's reservations (CHAIN-VERSIONS.md 2.6).
    reserved_amounts: tuple[Coin, ...] = ()
    #: U (current chain): the legacy leases' shared reservation, and how many share it.
    unattributed_reserved_amounts: tuple[Coin, ...] = ()
    unattributed_lease_count: int = 0
    #: ``balances - R``: what new leases may still reserve.
    available_balances: tuple[Coin, ...] = ()
    #: The block height the node answered at (its ``x-cosmos-block-height``
    #: header; the lowest of the pages'); 0: not known (captures from before).
    height: int = 0


class CreditEstimate(Message, tag="credit_estimate"):
    """The chain's gross runway: the balance over the ACTIVE rate (CHAIN-VERSIONS.md 2.7).

    It counts neither unsettled accrual nor reservations.
    """

    tenant: str
    current_balance: tuple[Coin, ...]
    total_rate_per_second: tuple[Coin, ...]
    estimated_duration_seconds: int
    active_lease_count: int = 0


class LeaseSettled(Message, tag="lease_settled"):
    """What one settlement moved from a lease's tenant to us, per denom.

    From a ``provider_withdraw`` event (``kind`` "withdraw"; ``amount``) or a
    ``lease_closed`` event (``kind`` "close"; ``settled_amounts``). ``at`` is
    the block time of the transaction. The statement sets these beside what
    the lease accrued, so a tenant whose credit ran out shows the shortfall.
    """

    at: datetime
    tx_hash: str
    lease_uuid: str
    amounts: tuple[Coin, ...]
    kind: str = "withdraw"
    tenant: str = ""


class WithdrawPage(Message, tag="withdraw_page"):
    """One provider-wide ``MsgWithdraw`` as included on chain."""

    tx_hash: str
    total_amounts: tuple[Coin, ...]
    withdrawal_count: int
    has_more: bool
    next_key: bytes
    payout_address: str = ""
    #: What the tx moved from each lease (its ``provider_withdraw`` events;
    #: ``at`` is the block time), for the ledger. Empty in captures made
    #: before the chain clients read them.
    settlements: tuple[LeaseSettled, ...] = ()
    #: Current chain: leases of this page whose settlement failed; the
    #: cursor moved past them (they must be withdrawn by name).
    failed_lease_uuids: tuple[str, ...] = ()
    #: what the tx cost (fee, gas, re-signs); None where the client does not know it (the in-process model)
    cost: TxCost | None = None


class CloseOutcome(Message, tag="close_outcome"):
    closed_count: int
    tx_hashes: tuple[str, ...]
    #: What the close settled on each lease (its ``lease_closed`` events;
    #: ``at`` is the block time), for the ledger. Empty in older captures.
    settlements: tuple[LeaseSettled, ...] = ()
    #: what the tx cost (fee, gas, re-signs); None where the client does not know it (the in-process model)
    cost: TxCost | None = None


class NodeStatus(Message, tag="node_status"):
    latest_block_height: int
    latest_block_time: datetime
    catching_up: bool


class ChainFailure(Message, tag="chain_failure"):
    """A chain call that did not succeed, as data (see ``chain.errors``)."""

    operation: str
    message: str
    codespace: str = ""
    code: int = 0
    #: Worth retrying: a timeout, an unavailable node, a sequence race.
    transient: bool = False
    #: The call may have been applied on chain even though it failed here
    #: (e.g. broadcast succeeded, inclusion timed out). Never re-drive it.
    may_have_committed: bool = False
    #: With ``may_have_committed``: the hash of the tx whose outcome is
    #: unknown, when it was signed ("" otherwise), so that it can be looked up.
    tx_hash: str = ""
