"""What one settlement may have moved from a lease: the books refuse more.

A settlement is what one tx moved from one lease to us (``LeaseSettled``,
read from that tx's result). The chain never moves more than the lease
accrued since its last settlement, ``locked_price x quantity`` per whole
second (CHAIN-VERSIONS.md 2.4), and never a negative amount. A settlement
outside that (a node's answer that is not the chain's record, a bug here)
would put units in the books that no tenant paid: it is refused, and the
books say so for that lease (``LeaseIssue`` ``settlement_refused``).

The bound is generous where it must be: one second more than the whole
seconds since the lease's previous settlement (the current chain carries a
fraction of a second from one settlement to the next), counted up to the
tx's block time even for a lease closed before it (v2.1.0 settles a closed
lease up to its close at a later withdraw). Where the books do not know the
lease's price yet (it was never read), nothing bounds the amount but its
sign; its read comes, and its month is billed from the settlements as they
stand.
"""

from __future__ import annotations

__all__ = ["refusal", "MAX_SETTLEMENT_SECONDS_SLACK"]

_SECOND_US = 1_000_000
#: Whole seconds of accrual allowed beyond those since the previous settlement.
MAX_SETTLEMENT_SECONDS_SLACK = 1


def refusal(amount: int, denom: str, rate: dict[str, int] | None, since_us: int | None, at_us: int) -> str:
    """Why a settlement of ``amount`` ``denom`` at ``at_us`` is refused ("" when it is not).

    ``rate``: the lease's accrual per second per denom (None: not known);
    ``since_us``: its previous settlement, or its start (None: not known).
    """
    if amount < 0:
        return f"a negative amount ({amount}{denom})"
    if rate is None or since_us is None or not amount:
        return ""
    per_second = rate.get(denom, 0)
    seconds = max(0, at_us - since_us) // _SECOND_US + MAX_SETTLEMENT_SECONDS_SLACK
    most = per_second * seconds
    if amount > most:
        return (
            f"{amount}{denom} is more than the lease could have accrued since its previous settlement "
            f"({most}{denom}: {per_second}{denom}/s for at most {seconds}s)"
        )
    return ""
