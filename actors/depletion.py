"""When will a tenant's credit run out? Integer estimates from two sources.

The seed's estimator extrapolates from the consumption seen between two
balance samples. A tenant's balance only moves at settlement (anyone's
withdraw or close), so two samples see the consumption that settlements
realised between them; that is why a sample whose balance has not moved
does not replace the baseline (see ``TenantCredit``).

Beyond the seed, the chain's ``CreditEstimate`` also sees unsettled accrual
and other providers' leases; where it answers, the earlier of the two
estimates wins.

Everything is integer arithmetic on whole seconds. A huge balance with a tiny
burn would put the estimate past ``datetime.max``: every estimate is clamped
to ``DEPLETION_HORIZON``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Collection, Mapping

from messages.chain import CreditEstimate
from messages.fast_init import fast_init

__all__ = [
    "DEPLETION_HORIZON", "Estimate", "burn_estimate", "chain_estimate", "earliest",
    "Seconds", "burn_seconds", "chain_seconds", "sooner", "estimate_at", "BURN_RATE", "CHAIN_ESTIMATE",
]

#: Estimates further out than this are clamped to it. Ten years is far beyond
#: any wake interval, and keeps ``now + horizon`` representable.
DEPLETION_HORIZON = timedelta(days=3650)
_HORIZON_SECONDS = int(DEPLETION_HORIZON.total_seconds())
_SECOND = timedelta(seconds=1)

#: The two sources an estimate comes from (``Estimate.source``).
BURN_RATE = "burn rate"
CHAIN_ESTIMATE = "chain estimate"


@fast_init
@dataclass(frozen=True, slots=True)
class Estimate:
    at: datetime
    #: "burn rate" (our two samples) or "chain estimate" (CreditEstimate).
    source: str
    denom: str
    clamped: bool = False


#: An estimate before it becomes a time: (seconds from now, clamped to the
#: horizon; the denom that runs out; whether it was clamped). The credit
#: check compares these and turns only the winner into a ``datetime``.
Seconds = tuple[int, str, bool]


def burn_seconds(
    previous: Mapping[str, int],
    previous_at: datetime,
    current: Mapping[str, int],
    now: datetime,
    denoms: Collection[str] | None = None,
) -> Seconds | None:
    """``burn_estimate`` as seconds from ``now``, over ``denoms`` only when given.

    ``denoms`` are the ones our leases are charged in: another provider
    burning a denom we do not charge in says nothing of when our leases run
    dry, and its past depletion would wake us every ``depletion_check_buffer``.
    """
    elapsed = (now - previous_at) // _SECOND
    if elapsed <= 0:
        return None
    best: Seconds | None = None
    for denom, before in previous.items():
        if denoms is not None and denom not in denoms:
            continue
        after = current.get(denom, 0)
        consumed = before - after
        if consumed <= 0:
            continue  # deposit or no settlement in between: no burn to read
        seconds = after * elapsed // consumed
        if best is None or min(seconds, _HORIZON_SECONDS) < best[0]:
            best = (seconds, denom, False) if seconds <= _HORIZON_SECONDS else (_HORIZON_SECONDS, denom, True)
    return best


def chain_seconds(estimate: CreditEstimate | None, denoms: Collection[str] | None = None) -> Seconds | None:
    """``chain_estimate`` as seconds from now, for ``denoms`` only when given.

    The chain's ``estimated_duration_seconds`` is when the *first* denom of
    the tenant's credit runs out, whoever's leases burn it. Where that denom
    is one we do not charge in (given ``denoms``), our leases run on: the
    estimate is then worked out for ours, balance over total rate (the same
    sum the chain makes, every provider's rate in that denom counted).
    """
    if estimate is None or not estimate.total_rate_per_second:
        return None
    seconds = estimate.estimated_duration_seconds
    rates = estimate.total_rate_per_second
    if len(rates) == 1:  # the common case: one denom, nothing to compare
        denom = rates[0].denom
        if denoms is not None and denom not in denoms:
            return None
    else:
        # The denom that runs out first: lowest balance / rate.
        balances = {c.denom: c.amount for c in estimate.current_balance}
        per = {c.denom: c.amount for c in rates if c.amount > 0}
        denom = min(per, key=lambda d: balances.get(d, 0) // per[d], default="")
        if denoms is not None and denom not in denoms:
            ours = [d for d in per if d in denoms]
            if not ours:
                return None
            denom = min(ours, key=lambda d: balances.get(d, 0) // per[d])
            seconds = balances.get(denom, 0) // per[denom]
    if seconds > _HORIZON_SECONDS:
        return (_HORIZON_SECONDS, denom, True)
    return (seconds, denom, False)


def sooner(first: Seconds | None, second: Seconds | None) -> Seconds | None:
    """The earlier of two estimates (a tie goes to ``first``)."""
    if first is None:
        return second
    if second is None or first[0] <= second[0]:
        return first
    return second


def estimate_at(now: datetime, seconds: Seconds, source: str) -> Estimate:
    return Estimate(now + seconds[0] * _SECOND, source, seconds[1], seconds[2])


def burn_estimate(
    previous: Mapping[str, int],
    previous_at: datetime,
    current: Mapping[str, int],
    now: datetime,
) -> Estimate | None:
    """Depletion extrapolated from consumption between two samples, earliest denom.

    A denom whose balance rose (a deposit) or did not move says nothing about
    its burn and is skipped. None when no denom shows consumption.
    """
    seconds = burn_seconds(previous, previous_at, current, now)
    return estimate_at(now, seconds, BURN_RATE) if seconds is not None else None


def chain_estimate(estimate: CreditEstimate | None, now: datetime) -> Estimate | None:
    """The chain's own estimate as a time; None when it has no rate to go by."""
    seconds = chain_seconds(estimate)
    return estimate_at(now, seconds, CHAIN_ESTIMATE) if seconds is not None else None


def earliest(*estimates: Estimate | None) -> Estimate | None:
    """The earliest of the estimates given (ties go to the first given)."""
    best: Estimate | None = None
    for e in estimates:
        if e is not None and (best is None or e.at < best.at):
            best = e
    return best
