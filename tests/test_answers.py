"""``chain.answers``: each way a listing can be malformed is refused, naming what is wrong.

The listings are checked row by row on every cycle (50,000 leases at 10,000
tenants), with exact-type fast paths; these cases pin that every row the fast
path does not pass still reaches the full check and its message, wherever in
the listing it is.
"""

from __future__ import annotations

from typing import Any

import pytest

from chain.answers import MalformedAnswer, check_answer
from chain.client import AccountListing, HolderListing, Listing
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.coins import Coin


class Int(int):
    """An int subclass: a whole number, though not of the exact type the fast path tests."""


class Text(str):
    """A str subclass, likewise."""


def lease(**fields: Any) -> Lease:
    base: dict[str, Any] = dict(
        uuid="L1", tenant="manifest1t", provider_uuid="P", items=(LeaseItem("sku", 1, Coin("umfx", 2)),),
        reservation=(Coin("umfx", 7),),
    )
    base.update(fields)
    return Lease(**base)


def account(**fields: Any) -> CreditAccount:
    base: dict[str, Any] = dict(
        tenant="manifest1t", balances=(), active_lease_count=1, credit_address="manifest1c",
        reserved_amounts=(Coin("umfx", 7),),
    )
    base.update(fields)
    return CreditAccount(**base)


GOOD = lease()


@pytest.mark.parametrize(
    "bad,problem",
    [
        ("not a lease", "a str, not a lease"),
        (lease(uuid=""), "a lease with no uuid"),
        (lease(uuid=5), "a lease with no uuid"),
        (lease(tenant=None), "lease L1 has no tenant or provider"),
        (lease(provider_uuid=3), "lease L1 has no tenant or provider"),
        (lease(items=[]), "lease L1: items is not a list"),
        (lease(items=("x",)), "lease L1 has an item without a quantity and a price"),
        (lease(items=(LeaseItem("sku", -1, Coin("umfx", 2)),)), "lease L1 has an item without a quantity and a price"),
        (lease(items=(LeaseItem("sku", True, Coin("umfx", 2)),)), "lease L1 has an item without a quantity and a price"),
        (lease(items=(LeaseItem("sku", 1, "2umfx"),)), "lease L1 has an item without a quantity and a price"),
        (lease(items=(LeaseItem("sku", 1, Coin("umfx", -2)),)), "lease L1 has a negative price"),
        (lease(reservation=[Coin("umfx", 1)]), "lease L1's reservation is list, not a list of coins"),
        (lease(reservation=("7umfx",)), "lease L1's reservation holds a str, not a coin"),
        (lease(reservation=(Coin("umfx", -7),)), r"lease L1's reservation holds a negative amount \(-7umfx\)"),
    ],
)
def test_a_malformed_lease_anywhere_in_a_listing_is_refused_naming_it(bad: Any, problem: str) -> None:
    for leases in ((bad,), (GOOD, GOOD, bad), (bad, GOOD)):
        with pytest.raises(MalformedAnswer, match=f"leases_by_provider: malformed answer: {problem}$"):
            check_answer("leases_by_provider", Listing(leases, 5, 6))
    with pytest.raises(MalformedAnswer, match=problem):
        check_answer("lease", bad)


def test_leases_of_subclassed_values_and_no_reservation_are_answers() -> None:
    fine = (
        GOOD,
        lease(uuid=Text("L2"), items=(LeaseItem("sku", Int(3), Coin("umfx", 0)),)),
        lease(reservation=None),  # v2.1.0: no reservation field
        lease(reservation=(), items=()),
    )
    check_answer("leases_by_provider", Listing(fine, 5, 6))
    check_answer("leases_by_tenant", Listing(fine, 5))


@pytest.mark.parametrize(
    "bad,problem",
    [
        ("nope", "a credit account with no tenant"),
        (account(tenant=""), "a credit account with no tenant"),
        (account(tenant=4), "a credit account with no tenant"),
        (account(active_lease_count=-1), "credit account of manifest1t: no lease count or credit address"),
        (account(active_lease_count=False), "credit account of manifest1t: no lease count or credit address"),
        (account(credit_address=None), "credit account of manifest1t: no lease count or credit address"),
        (account(reserved_amounts=(Coin("umfx", -1),)), r"manifest1t's reserved_amounts holds a negative amount"),
        (account(unattributed_reserved_amounts=["x"]), "manifest1t's unattributed_reserved_amounts is list"),
    ],
)
def test_a_malformed_account_anywhere_in_the_accounts_listing_is_refused_naming_it(bad: Any, problem: str) -> None:
    good = account()
    for accounts in ((bad,), (good, bad), (bad, good)):
        with pytest.raises(MalformedAnswer, match=f"credit_accounts: malformed answer: {problem}"):
            check_answer("credit_accounts", AccountListing(accounts, 5, 6))
    check_answer("credit_accounts", AccountListing((good, account(tenant=Text("t2"), active_lease_count=Int(2))), 5, 6))


@pytest.mark.parametrize(
    "row", [("manifest1a", -3), ("manifest1a", True), ("manifest1a", "3"), (5, 3), ("manifest1a",), ["manifest1a", 3]]
)
def test_a_holder_row_that_is_not_an_address_and_an_amount_is_refused(row: Any) -> None:
    good = ("manifest1b", 4)
    for rows in ((row,), (good, row)):
        with pytest.raises(MalformedAnswer, match="a holder of umfx that is not an address and an amount"):
            check_answer("denom_owners", HolderListing("umfx", rows, 5, 6))
    check_answer("denom_owners", HolderListing("umfx", (good, (Text("manifest1c"), Int(0))), 5, 6))
