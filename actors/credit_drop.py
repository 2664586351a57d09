"""Whether a credit read's balances could be true: no balance falls faster than its leases spend.

A tenant's credit leaves its account only when a lease of the tenant
settles (no message moves credit out otherwise), and a lease settles at
most its locked rate for each second since it last settled. So from one
accepted read to the next, a denom's raw balance can fall by at most what
every lease of the tenant had accrued unsettled at the first read, plus
what they accrue since. A read that falls further is a node's mistake (one
serving a state it has not filled in answers every balance zero while it
says it is synced): taken as fact, two of them a grace window apart closed
the leases of a tenant holding 10^15 umfx in a fault run.

Only a fall *to zero* is doubted: in the fault runs the bound also missed
real falls to a non-zero balance (about 40% of the reads it doubted; the
cause, likely the account and the leases being read at different moments
around a settlement, is not found yet), and a zero answer is the fault that
closes leases.

A lease created and closed entirely between two reads is seen by neither,
so a fall beyond the bound can still be true: the monitor takes it as a
failed read once and believes the next read that says the same
(``actors.tenant_credit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from messages.chain import CreditAccount, Lease
from messages.coins import Coin, coins_to_dict

__all__ = ["SpendReference", "implausible_drop", "reference"]

SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class SpendReference:
    """An accepted read: its time, balances (as the chain listed them) and leases.

    What its leases could still draw is worked out from them only when a
    later read has a balance fallen to zero (``implausible_drop``), which
    nearly no read has: worked out on every read, it cost a fifth of
    judging the tenant. The balances stay the chain's list for the same
    reason: a later read listing the very same coins fell nowhere, which
    one comparison tells.
    """

    at: datetime
    coins: tuple[Coin, ...]
    leases: tuple[Lease, ...]

    def unsettled(self) -> dict[str, int]:
        """Accrued and not yet settled at ``at``, per denom, over every lease of the read."""
        unsettled: dict[str, int] = {}
        for lease in self.leases:
            seconds = _seconds_up(self.at - lease.last_settled_at) + 1  # type: ignore[operator]
            for denom, rate in lease.rate_per_second().items():
                unsettled[denom] = unsettled.get(denom, 0) + rate * seconds
        return unsettled


def _seconds_up(span: timedelta) -> int:
    """Whole seconds, rounded up: the chain may carry a fraction of a second (current)."""
    return max(0, -(-span // SECOND))


def _rates(leases: Sequence[Lease]) -> dict[str, int]:
    rates: dict[str, int] = {}
    for lease in leases:
        for denom, rate in lease.rate_per_second().items():
            rates[denom] = rates.get(denom, 0) + rate
    return rates


def reference(account: CreditAccount, leases: Sequence[Lease], now: datetime) -> SpendReference | None:
    """The read at ``now`` as the reference for the next; None when a lease's last settlement is unknown."""
    for lease in leases:
        if lease.last_settled_at is None:
            return None  # what it owes is unknown: no bound
    return SpendReference(now, account.balances, tuple(leases))


def implausible_drop(ref: SpendReference, account: CreditAccount, leases: Sequence[Lease], now: datetime) -> str | None:
    """Why the read at ``now`` cannot be true, or None: the first denom whose balance fell to
    zero from more than every lease of either read could have spent since ``ref``."""
    if account.balances == ref.coins:
        return None  # the same balances (every read between two settlements): nothing fell
    balances = coins_to_dict(account.balances)
    bound: tuple[dict[str, int], dict[str, int], dict[str, int]] | None = None
    seconds = _seconds_up(now - ref.at) + 1
    for denom, before in sorted(coins_to_dict(ref.coins).items()):
        after = balances.get(denom, 0)
        fall = before - after
        if fall <= 0 or after > 0:
            continue  # a rise, or a fall to a balance the chain may well hold
        if bound is None:
            bound = (ref.unsettled(), _rates(ref.leases), _rates(leases))
        unsettled, rates_before, rates_now = bound
        # A lease of either read: one that ended since (its last settlement
        # counted in ``unsettled``) or one that began (at most ``seconds`` old).
        rate = rates_before.get(denom, 0) + rates_now.get(denom, 0)
        most = unsettled.get(denom, 0) + rate * seconds
        if fall > most:
            return (
                f"balance of {denom} fell from {before} to {after} in {seconds} s, more than the "
                f"tenant's leases could spend ({most} at most)"
            )
    return None
