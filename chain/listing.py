"""Walking a paged chain listing to the end, and never taking a cut-short walk for the whole set.

The billing module's list queries (``LeasesByProvider``, ``LeasesByTenant``)
answer ``next_key`` = the first unread lease, and the next page must start
at exactly that lease. If it left the state filter between the two pages
(a lease closed meanwhile), the next page comes back empty with an empty
``next_key``: the walk ends early and looks complete (CHAIN.md, "Query
pagination"; CHAIN-VERSIONS.md 2.8). Taken for the whole ACTIVE set, such a
listing would have every lease after that point marked closed.

A real end never looks like that: the last page either holds leases or was
asked for without a key. So an empty page for a non-empty key means "cut
short", and the walk starts over, a few times; a listing that keeps being
cut short is a failed read, never a short set.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from chain.errors import ChainError
from messages.coins import Coin

__all__ = ["walk_pages", "withdrawable_due", "MAX_RELISTS"]

T = TypeVar("T")

#: Walks started over after a cut-short page before the read counts as
#: failed. A lease closing between two pages is rare; one closing during
#: every one of four walks means the set is changing faster than it can be read.
MAX_RELISTS = 3


def walk_pages(operation: str, fetch: Callable[[bytes], tuple[Sequence[T], bytes]]) -> tuple[T, ...]:
    """Every item of a listing: ``fetch(key)`` answers (items, next_key); b"" is the first page."""
    for _ in range(MAX_RELISTS + 1):
        items: list[T] = []
        key = b""
        seen: set[bytes] = set()
        while True:
            page, next_key = fetch(key)
            if key and not page and not next_key:
                break  # cut short: the lease the page starts at left the filter
            items.extend(page)
            if not next_key:
                return tuple(items)
            if next_key in seen:  # a node that loops would otherwise hang the sidecar
                raise ChainError(
                    f"{operation}: the node repeated page key {next_key!r}", codespace="protocol", transient=False
                )
            seen.add(next_key)
            key = next_key
    raise ChainError.transport(
        f"{operation}: the listing was cut short {MAX_RELISTS + 1} times (leases leaving it between pages); "
        "not taken as the whole set"
    )


def withdrawable_due(
    operation: str, fetch: Callable[[bytes], tuple[tuple[Coin, ...], bool, bool, bytes]]
) -> tuple[Coin, ...] | None:
    """What ``ProviderWithdrawable`` says is due: () when nothing is, None when it cannot tell.

    ``fetch(key)`` answers one page as (amounts, has_more, paged, next_key);
    ``paged``: the answer came with ``pagination`` (the current chain).

    The current chain's pages are each a dry run of one withdraw page from
    the current state, so they are not summed: the first page with anything
    to pay answers. A page with leases to settle but nothing to pay (auto-
    closes of tenants whose credit is gone, which transfer nothing) is
    passed over like an empty one: stopping there as "nothing due" left
    every later page's fees uncollected, cycle after cycle, while such a
    lease sat first. v2.1.0 answers once, over its first ``limit`` leases of
    every state: past them (``has_more``) what is due cannot be told.
    """
    key = b""
    seen: set[bytes] = set()
    while True:
        amounts, has_more, paged, next_key = fetch(key)
        if amounts:
            return amounts
        if not paged:  # v2.1.0
            return None if has_more else ()
        if not next_key:
            return ()
        if next_key in seen:  # a node that loops would otherwise hang the withdraw cycle
            raise ChainError(f"{operation}: the node repeated page key {next_key!r}", codespace="protocol", transient=False)
        seen.add(next_key)
        key = next_key
