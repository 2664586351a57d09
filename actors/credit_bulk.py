"""Credit reads of many tenants from the chain's list queries, and when they may stand for a tenant's own.

A tenant's own read costs a ``CreditAccount`` call and, when another
provider's lease draws on the same credit, a ``LeasesByTenant`` call: 4,002
calls for 2,000 tenants that each share a lease. The chain answers the same
facts for many tenants at once, on both versions (CHAIN-VERSIONS.md 1.8):

- ``LeasesByProvider`` (ACTIVE) of our provider, and of each provider our
  tenants share (learned from their own reads);
- ``CreditAccounts``: every stored account (counts, R, U), no balances;
- the bank's ``DenomOwners``: every holder of a denom and its raw balance.

Such a read is only as good as the order its parts were answered in, since
each page comes at its own height. Whatever happened between two parts, the
"usable" margin the credit rule judges (``actors.credit_rule``) must come
out no larger than the truth at some height:

- a settlement moves B down by what it paid and the lease's
  ``last_settled_at`` forward by as much accrual: a balance read *after*
  the leases counts it twice (too little credit), a balance read before
  them not at all (too much). The same for R against B, which a settlement
  from a lease's own tranche lowers with B. So every balance page must be
  answered at or after every lease and account page;
- a lease created or closed between the lease listings and the accounts
  moves the account's ACTIVE count away from the leases listed, which a
  tenant's read must match; the accounts are read after the listings, so
  R never lacks the tranche of a lease the listings hold;
- a lease created between the accounts and the balances reserves its
  tranche into R (current chain, CHAIN-VERSIONS.md 2.6) while still
  PENDING, in no listing and no ACTIVE count: R read before it lacks that
  tranche (too much credit). So the accounts are listed again after the
  balances (``ChainIO._bulk_reads``), at or above their height, and a
  tenant whose R, U or counts moved between the two is read on its own.

``in_order`` checks that by the pages' heights (a node behind a load
balancer can answer a later page from a lower height); a part of unknown
height fails it. Even so a composed read is good for credit to spare only:
its parts are seconds apart, so it goes to the monitor as ``leases_listed``
and a tenant whose verdict could open, keep, clear or act on a grace window
is read again on its own (``CreditCall(full=True)``), complete and at one
height, before anything is decided on it.

A tenant is composed only when every part holds it whole:

- its account is listed, and counts exactly the ACTIVE leases the listings
  hold for it (else a provider not listed, or a lease opened or closed
  between the parts: read on its own);
- every denom its account's own answer would show (its leases' item
  denoms, its reservations', and those its last own read showed, so that no
  balance seems to vanish: ``actors.credit_drop``) was listed;
- on the current chain (its leases carry field 16) its credit address is
  known to be a plain account: B there is the *spendable* balance (2.4),
  and ``DenomOwners`` lists the raw one, locked vesting coins included. An
  account that exists is never made a vesting account afterwards, so once
  seen plain it stays so; any other kind, or one not seen yet, is read on
  its own. v2.1.0 judges the raw balance, which ``DenomOwners`` lists.

Everything here is a function of what was read; nothing here calls the chain.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from chain.client import AccountListing, HolderListing, Listing
from messages.chain import CreditAccount, Lease
from messages.coins import coins, coins_to_dict

__all__ = ["in_order", "relevant_denoms", "isolated", "compose", "PLAIN_ACCOUNT", "page_estimate", "BULK_ROWS"]

#: What ``account_kind`` answers for an account that holds no locked coins.
PLAIN_ACCOUNT = "base"

#: Rows a bulk page asks for (``chain.cosmpy_client.BULK_PAGE_LIMIT``): the estimate of a part not read yet.
BULK_ROWS = 1000


def page_estimate(rows: int, page: int = BULK_ROWS) -> int:
    """The calls a walk of ``rows`` rows costs at ``page`` a page (at least one)."""
    return max(1, -(-rows // page))


def in_order(listings: Iterable[Listing], accounts: AccountListing, holders: Iterable[HolderListing]) -> str | None:
    """Why these parts cannot make one read (see the module doc), or None when they can."""
    listings, holders = list(listings), list(holders)
    for part in (*listings, accounts, *holders):
        if part.height <= 0 or part.top_height < part.height:
            return "a page was answered without its height"
    lease_top = max((p.top_height for p in listings), default=0)
    if accounts.height < lease_top:
        return (f"the accounts were answered from height {accounts.height}, below the lease listings' "
                f"{lease_top} (a node further behind)")
    if holders:
        low = min(p.height for p in holders)
        if low < max(accounts.top_height, lease_top):
            return (f"balances were answered from height {low}, below the accounts' and leases' "
                    f"{max(accounts.top_height, lease_top)} (a node further behind)")
    return None


def relevant_denoms(account: CreditAccount, leases: Iterable[Lease], shown: Collection[str] = ()) -> set[str]:
    """The denoms a tenant's own ``CreditAccount`` answer would hold: its leases' and reservations', and ``shown``."""
    # Plain loops with a bound ``add``: this runs for every tenant of a bulk read, and a
    # comprehension's function and a generator per tenant cost more than the work.
    denoms = set(shown)
    add = denoms.add
    for lease in leases:
        for item in lease.items:
            add(item.locked_price.denom)
    for c in account.reserved_amounts:
        add(c.denom)
    for c in account.unattributed_reserved_amounts:
        add(c.denom)
    return denoms


def isolated(leases: Iterable[Lease]) -> bool:
    """Whether the leases are the current chain's (field 16 present): its credit rule reads spendable balances."""
    for lease in leases:  # a loop, not any() over a generator: once per tenant of a bulk read
        if lease.reservation is not None:
            return True
    return False


def compose(
    account: CreditAccount | None,
    leases: tuple[Lease, ...],
    holders: Mapping[str, Mapping[str, int]],
    kind: str | None,
    shown: Collection[str] = (),
    *,
    denoms: Collection[str] | None = None,
    height: int = 0,
) -> CreditAccount | str:
    """The tenant's account with its balances from ``holders``, or why it must be read on its own.

    ``leases``: every ACTIVE lease the listings hold for the tenant;
    ``holders``: per denom listed, each holder's balance (the bank lists no zero balance);
    ``kind``: its credit address's account kind, None when not known;
    ``shown``: the denoms its last own read showed;
    ``denoms``: ``relevant_denoms(account, leases, shown)`` where the caller has it already;
    ``height``: the composed account's (the read's lowest page's).
    """
    if account is None:
        return "no account listed"
    if account.active_lease_count != len({lease.uuid for lease in leases}):
        return (f"its account counts {account.active_lease_count} ACTIVE lease(s), the listings hold "
                f"{len(leases)} (a provider not listed, or a lease opened or closed meanwhile)")
    if kind != PLAIN_ACCOUNT and isolated(leases):
        return ("its credit address is not known to be a plain account (the current chain spends what is "
                "not vesting-locked; the bank lists raw balances)" if kind is None else
                f"its credit address is a {kind} account, whose locked coins the bank's listing counts")
    balances: dict[str, int] = {}
    address = account.credit_address
    for denom in relevant_denoms(account, leases, shown) if denoms is None else denoms:
        listed = holders.get(denom)
        if listed is None:
            return f"the holders of {denom} were not listed"
        amount = listed.get(address, 0)
        if amount:
            balances[denom] = amount
    reserved_amounts = account.reserved_amounts
    reserved = coins_to_dict(reserved_amounts) if reserved_amounts else {}
    available = {d: a - reserved.get(d, 0) for d, a in balances.items() if a > reserved.get(d, 0)}
    return CreditAccount(
        tenant=account.tenant,
        balances=coins(balances),
        active_lease_count=account.active_lease_count,
        pending_lease_count=account.pending_lease_count,
        credit_address=address,
        reserved_amounts=reserved_amounts,
        unattributed_reserved_amounts=account.unattributed_reserved_amounts,
        unattributed_lease_count=account.unattributed_lease_count,
        available_balances=coins(available),
        height=height,
    )
