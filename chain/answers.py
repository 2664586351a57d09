"""What a chain client's answer must be before anything decides on it.

A client that returns nothing and raises nothing (a withdraw answered with
no response and no error), or returns a value missing what the sidecar
reads (a page with no tx hash, an amount that is not a whole number, a
listing that is not a list of leases), has not answered. ``check_answer``
turns each such answer into a ``MalformedAnswer``, a ``ChainError`` like
any other failed call, whose message names the call and what was wrong, so
that ``chain-io`` answers with a failure (``ChainFailure``) the cores know
how to handle, instead of an actor tripping over a ``None`` later.

Every client goes through it (``actors.chain_io``): the cosmpy client, the
in-process model's, and whatever a test puts in their place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable

from chain.client import AccountListing, HolderListing, Listing
from chain.errors import ChainError
from messages.chain import CloseOutcome, CreditAccount, Lease, LeaseItem, LeaseSettled, NodeStatus, WithdrawPage
from messages.coins import Coin

__all__ = ["MalformedAnswer", "check_answer", "PROTOCOL"]

#: The codespace of an answer the sidecar cannot read (the cosmpy client's decoding errors use it too).
PROTOCOL = "protocol"


class MalformedAnswer(ChainError):
    """A chain call answered nothing, or something that is not what it answers."""

    def __init__(self, operation: str, problem: str) -> None:
        # Transient: the next call may well answer properly (a proxy, a node
        # restarting); what a write may have applied is chain-io's to say.
        super().__init__(f"{operation}: malformed answer: {problem}", codespace=PROTOCOL, transient=True)


def _first(problems: Iterable[str]) -> str:
    """The first problem found ("" for none): checks run lazily, stopping there."""
    return next((p for p in problems if p), "")


def _int(value: Any, *, positive: bool = False) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (value > 0 if positive else value >= 0)


def _coins_ok(value: Any) -> bool:
    """Whether ``value`` is a list of coins with no negative amount: ``_coins`` without its message,
    so that a check run per lease or per account makes no text unless there is a problem."""
    if type(value) is not tuple and not isinstance(value, tuple):
        return False
    for c in value:
        if type(c) is not Coin and not isinstance(c, Coin) or c.amount < 0:
            return False
    return True


def _coins(what: str, value: Any) -> str:
    if not isinstance(value, tuple):
        return f"{what} is {type(value).__name__}, not a list of coins"
    for c in value:
        if type(c) is not Coin and not isinstance(c, Coin):
            return f"{what} holds a {type(c).__name__}, not a coin"
        if c.amount < 0:
            return f"{what} holds a negative amount ({c.amount}{c.denom})"
    return ""


def _strings(what: str, value: Any, *, nonempty: bool = False) -> str:
    if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
        return f"{what} is not a list of names"
    if nonempty and not value:
        return f"{what} is empty"
    return ""


def _settlements(value: Any) -> str:
    if not isinstance(value, tuple) or not all(isinstance(s, LeaseSettled) for s in value):
        return "settlements is not a list of lease settlements"
    return _first(_coins(f"the settlement of lease {s.lease_uuid}", s.amounts) for s in value)


def _lease(value: Any) -> str:
    # Every check of a listing runs once per lease (50,000 a cycle at 10,000 tenants): the
    # exact types are tested first (``type(x) is``), the general test only where they fail.
    if type(value) is not Lease and not isinstance(value, Lease):
        return f"a {type(value).__name__}, not a lease"
    uuid = value.uuid
    if type(uuid) is not str and not isinstance(uuid, str) or not uuid:
        return "a lease with no uuid"
    if not isinstance(value.tenant, str) or not isinstance(value.provider_uuid, str):
        return f"lease {uuid} has no tenant or provider"
    items = value.items
    if type(items) is not tuple and not isinstance(items, tuple):
        return f"lease {uuid}: items is not a list"
    for item in items:
        if type(item) is not LeaseItem and not isinstance(item, LeaseItem):
            return f"lease {uuid} has an item without a quantity and a price"
        quantity, price = item.quantity, item.locked_price
        if (type(quantity) is not int or quantity < 0) and not _int(quantity):
            return f"lease {uuid} has an item without a quantity and a price"
        if type(price) is not Coin and not isinstance(price, Coin):
            return f"lease {uuid} has an item without a quantity and a price"
        if price.amount < 0:
            return f"lease {uuid} has a negative price"
    reservation = value.reservation
    if reservation is not None and not _coins_ok(reservation):
        return _coins(f"lease {uuid}'s reservation", reservation)
    return ""


def _leases(value: Any) -> str:
    if not isinstance(value, tuple):
        return f"a {type(value).__name__}, not a list of leases"
    for lease in value:  # a loop, not ``_first`` over a generator: a third of the cost
        problem = _lease(lease)
        if problem:
            return problem
    return ""


def _listing(value: Any) -> str:
    if not isinstance(value, Listing):
        return f"a {type(value).__name__}, not a listing of leases at a height"
    if not _int(value.height):
        return f"height is {value.height!r}, not a block height"
    return _leases(value.leases)


def _heights(value: Any) -> str:
    if not _int(value.height) or not _int(value.top_height) or value.top_height < value.height:
        return f"heights are {value.height!r} to {value.top_height!r}, not block heights"
    return ""


def _provider_listing(value: Any) -> str:
    return _listing(value) or _heights(value)


def _account_listing(value: Any) -> str:
    if not isinstance(value, AccountListing):
        return f"a {type(value).__name__}, not a listing of credit accounts"
    if not isinstance(value.accounts, tuple):
        return "accounts is not a list"
    for account in value.accounts:
        if type(account) is not CreditAccount and not isinstance(account, CreditAccount):
            return "a credit account with no tenant"
        tenant, count = account.tenant, account.active_lease_count
        if type(tenant) is not str and not isinstance(tenant, str) or not tenant:
            return "a credit account with no tenant"
        if (type(count) is not int or count < 0) and not _int(count) or not isinstance(account.credit_address, str):
            return f"credit account of {tenant}: no lease count or credit address"
        if not (_coins_ok(account.reserved_amounts) and _coins_ok(account.unattributed_reserved_amounts)):
            problem = _first(_coins(f"{tenant}'s {n}", getattr(account, n))
                             for n in ("reserved_amounts", "unattributed_reserved_amounts"))
            if problem:
                return problem
    return _heights(value)


def _holder_listing(value: Any) -> str:
    if not isinstance(value, HolderListing):
        return f"a {type(value).__name__}, not a listing of a denom's holders"
    if not isinstance(value.balances, tuple):
        return "balances is not a list"
    for row in value.balances:
        if type(row) is tuple and len(row) == 2 and type(row[0]) is str and type(row[1]) is int and row[1] >= 0:
            continue  # the common row, tested by exact types first: one a holder of the denom
        if not (isinstance(row, tuple) and len(row) == 2 and isinstance(row[0], str) and _int(row[1])):
            return f"a holder of {value.denom} that is not an address and an amount: {row!r}"
    return _heights(value)


def _account_kind(value: Any) -> str:
    return "" if isinstance(value, str) else f"a {type(value).__name__}, not an account kind"


def _withdraw_page(value: Any) -> str:
    if not isinstance(value, WithdrawPage):
        return f"a {type(value).__name__}, not a withdraw page"
    if not isinstance(value.tx_hash, str) or not value.tx_hash:
        return "a withdraw page with no tx hash"
    if not _int(value.withdrawal_count):
        return f"withdrawal_count is {value.withdrawal_count!r}, not a whole number"
    if not isinstance(value.has_more, bool) or not isinstance(value.next_key, bytes):
        return "a withdraw page without has_more and next_key"
    if not isinstance(value.failed_lease_uuids, tuple) or not all(isinstance(u, str) for u in value.failed_lease_uuids):
        return "failed_lease_uuids is not a list of names"
    return _coins("total_amounts", value.total_amounts) or _settlements(value.settlements)


def _close_outcome(value: Any) -> str:
    if not isinstance(value, CloseOutcome):
        return f"a {type(value).__name__}, not a close outcome"
    if not _int(value.closed_count):
        return f"closed_count is {value.closed_count!r}, not a whole number"
    return _strings("tx_hashes", value.tx_hashes, nonempty=True) or _settlements(value.settlements)


def _credit_account(value: Any) -> str:
    if not isinstance(value, CreditAccount):
        return f"a {type(value).__name__}, not a credit account"
    if not _int(value.height):
        return f"height is {value.height!r}, not a block height"
    names = ("balances", "reserved_amounts", "unattributed_reserved_amounts", "available_balances")
    return _first(_coins(name, getattr(value, name)) for name in names)


def _node_status(value: Any) -> str:
    if not isinstance(value, NodeStatus):
        return f"a {type(value).__name__}, not a node status"
    if not _int(value.latest_block_height, positive=True):
        return f"latest block height is {value.latest_block_height!r}"
    if not isinstance(value.latest_block_time, datetime) or value.latest_block_time.tzinfo is None:
        return "no latest block time"
    if not isinstance(value.catching_up, bool):
        return "no catching_up"
    return ""


def _time(value: Any) -> str:
    if not isinstance(value, datetime) or value.tzinfo is None:
        return f"a {type(value).__name__}, not a block time"
    return ""


def _provider_withdrawable(value: Any) -> str:
    return "" if value is None else _coins("the amounts due", value)


def _yes_or_no(value: Any) -> str:
    return "" if isinstance(value, bool) else f"a {type(value).__name__}, not yes or no"


#: Per client call: the check of its answer, and whether "no answer" (None) is an answer.
_CHECKS: dict[str, tuple[Callable[[Any], str], bool]] = {
    "provider_withdrawable": (_provider_withdrawable, True),  # None: the node cannot tell
    "withdraw": (_withdraw_page, False),
    "withdraw_leases": (_withdraw_page, False),
    "withdraw_outcome": (_withdraw_page, True),  # None: no node knows the tx yet
    "close_leases": (_close_outcome, False),
    "close_outcome": (_close_outcome, True),  # None: no node knows the tx yet
    "lease_end_tx": (_close_outcome, True),  # None: the node's search finds no tx that ended the lease
    "active_leases_by_provider": (_leases, False),
    "leases_by_tenant": (_listing, False),
    "leases_by_provider": (_provider_listing, False),
    "credit_accounts": (_account_listing, False),
    "denom_owners": (_holder_listing, False),
    "account_kind": (_account_kind, False),
    "lease": (_lease, False),
    "credit_account": (_credit_account, False),
    "node_status": (_node_status, False),
    "block_time": (_time, False),
    "keeps_tx_index": (_yes_or_no, False),
}


def check_answer(operation: str, answer: Any) -> None:
    """Raise ``MalformedAnswer`` unless ``answer`` is what ``operation`` answers. Unknown operations pass."""
    check = _CHECKS.get(operation)
    if check is None:
        return
    validate, may_be_none = check
    if answer is None:
        if may_be_none:
            return
        raise MalformedAnswer(operation, "no answer and no error")
    problem = validate(answer)
    if problem:
        raise MalformedAnswer(operation, problem)
