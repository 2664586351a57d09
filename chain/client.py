"""The ``ChainClient`` interface: everything the sidecar asks of the chain.

The seed's five operations (provider withdrawable, withdraw by provider with
a cursor key, active leases by provider, credit account, close leases), plus
what leasewarden adds for the real chain: named withdraws (the only way to
reach every lease on a chain without the withdraw cursor), a tenant's leases
of every provider (what the credit rule needs), the listings that answer
for many tenants at once (any provider's ACTIVE leases, every credit
account, a denom's holders, and what account a credit address is), the chain's
``CreditEstimate``, single lease reads, tx lookups (by hash, and the tx that
ended a lease, by the node's tx search) and the node's sync status.

The reads a closure is decided on carry the height the node answered at
(a Cosmos SDK node sends it with every query, as the gRPC response header
``x-cosmos-block-height``): ``CreditAccount.height`` and
``Listing.height``; ``block_time`` says when a height's block was made, so
that a read can be told apart from one a lagging node served. Implementations: ``chain.model_client.ModelChainClient``
(in-process billing model) and the cosmpy client over gRPC.

Every method blocks until the chain answers and raises ``ChainError`` on
failure; the chain actor calls them off its own thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Protocol, Sequence

from messages.chain import CloseOutcome, CreditAccount, CreditEstimate, Lease, NodeStatus, WithdrawPage
from messages.coins import Coin

__all__ = ["ChainClient", "Listing", "AccountListing", "HolderListing"]


@dataclass(frozen=True, slots=True)
class Listing:
    """A listing of leases and the height the node answered it at (the lowest of its pages'; 0: unknown)."""

    leases: tuple[Lease, ...]
    height: int = 0
    #: The highest of its pages' heights (0: unknown): a read composed of several listings is only
    #: sound when each was answered no later than the next began (``actors.credit_bulk``).
    top_height: int = 0


@dataclass(frozen=True, slots=True)
class AccountListing:
    """Every credit account (``CreditAccounts``, all pages; no balances) and its pages' lowest and highest heights."""

    accounts: tuple[CreditAccount, ...]
    height: int = 0
    top_height: int = 0


@dataclass(frozen=True, slots=True)
class HolderListing:
    """Every holder of ``denom`` and its raw bank balance (``DenomOwners``, all pages), and the pages' heights."""

    denom: str
    balances: tuple[tuple[str, int], ...]
    height: int = 0
    top_height: int = 0


class ChainClient(Protocol):
    def provider_withdrawable(self, provider_uuid: str) -> tuple[Coin, ...] | None:
        """What a withdraw would move now: () when nothing is due, None when the node cannot tell."""
        ...

    def withdraw_by_provider(
        self, provider_uuid: str, key: bytes, signed: Callable[[str], None] | None = None
    ) -> WithdrawPage:
        """One provider-wide ``MsgWithdraw`` page starting after ``key``, once included.

        ``signed`` is called with the tx's hash once it is known, before the
        client waits for inclusion (and again for each tx it signs anew), so
        that the caller can remember a tx whose answer it may never see.

        A failure after the tx was signed and may have been applied raises
        ``ChainError`` with ``may_have_committed`` and the tx's ``tx_hash``.
        """
        ...

    def withdraw_leases(self, lease_uuids: Sequence[str], signed: Callable[[str], None] | None = None) -> WithdrawPage:
        """One named ``MsgWithdraw`` of 1..100 of our leases, once included; atomic.

        Raises ``ChainError`` billing code 15 when nothing was due on any of
        them. ``signed`` as for ``withdraw_by_provider``.
        """
        ...

    def withdraw_outcome(self, tx_hash: str, provider_uuid: str) -> WithdrawPage | None:
        """What the withdraw tx ``tx_hash`` applied, once included; None while no node knows it.

        Raises ``ChainError`` (not ``may_have_committed``) when it was included
        and failed: it applied nothing.
        """
        ...

    def close_outcome(self, tx_hash: str, lease_uuids: Sequence[str]) -> CloseOutcome | None:
        """What the close tx ``tx_hash`` of ``lease_uuids`` applied, once included; None while no node knows it.

        Raises ``ChainError`` (not ``may_have_committed``) when it was included
        and failed: it closed nothing.
        """
        ...

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        """All the provider's ACTIVE leases (every page; a listing cut short is a failure, never a short set)."""
        ...

    def leases_by_provider(self, provider_uuid: str) -> Listing:
        """Every ACTIVE lease of a provider, ours or another's (``LeasesByProvider``, every page; cut
        short is a failure), with its pages' lowest and highest heights."""
        ...

    def credit_accounts(self) -> AccountListing:
        """Every credit account on the chain (``CreditAccounts``, every page): the accounts a credit check
        reads in bulk, balances excluded (they are the bank's: ``denom_owners``)."""
        ...

    def denom_owners(self, denom: str) -> HolderListing:
        """Every holder of ``denom`` and its raw balance (bank ``DenomOwners``, every page)."""
        ...

    def account_kind(self, address: str) -> str:
        """What ``auth/Account`` holds at ``address``: "base", a vesting kind (``devnet.node.ACCOUNT_KINDS``,
        or the type URL of one not known), or "" when no account is there."""
        ...

    def leases_by_tenant(self, tenant: str) -> Listing:
        """Every ACTIVE lease of ``tenant``, of every provider (what draws on its credit), and the height read at."""
        ...

    def lease(self, lease_uuid: str) -> Lease:
        """One lease in any state (its price, and the chain's own times)."""
        ...

    def credit_account(self, tenant: str) -> CreditAccount:
        """The tenant's credit account and balances, ``height`` set to the height the node answered at."""
        ...

    def close_leases(
        self, lease_uuids: Sequence[str], reason: str, signed: Callable[[str], None] | None = None
    ) -> CloseOutcome:
        """Close 1..100 leases in one ``MsgCloseLease``; all or nothing. ``signed`` as for ``withdraw_by_provider``."""
        ...

    def lease_end_tx(self, lease_uuid: str, provider_uuid: str, tx_hash: str = "") -> CloseOutcome | None:
        """The tx that ended ``lease_uuid`` (``chain.lease_end``: found by the node's tx search, or by
        ``tx_hash`` when an event named one and that tx did end it), with what it settled on that
        lease (of ``provider_uuid``) at its block time, not on the others it ended; None when the
        node finds none.

        Raises ``ChainError`` ``chain.errors.NO_TX_INDEX`` when the node keeps no tx index.
        """
        ...

    def credit_estimate(self, tenant: str) -> CreditEstimate: ...

    def node_status(self) -> NodeStatus: ...

    def keeps_tx_index(self) -> bool:
        """Whether the node keeps a tx index: without one no tx of ours can be seen included or looked up.

        Raises ``ChainError`` when the node cannot say (unreachable).
        """
        ...

    def block_time(self, height: int) -> datetime:
        """When the block at ``height`` was made (its header's time)."""
        ...
