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
from typing import Mapping

from messages.chain import CreditEstimate

__all__ = ["DEPLETION_HORIZON", "Estimate", "burn_estimate", "chain_estimate", "earliest"]

#: Estimates further out than this are clamped to it. Ten years is far beyond
#: any wake interval, and keeps ``now + horizon`` representable.
DEPLETION_HORIZON = timedelta(days=3650)
_HORIZON_SECONDS = int(DEPLETION_HORIZON.total_seconds())
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Estimate:
    at: datetime
    #: "burn rate" (our two samples) or "chain estimate" (CreditEstimate).
    source: str
    denom: str
    clamped: bool = False


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
    elapsed = (now - previous_at) // _SECOND
    if elapsed <= 0:
        return None
    best: Estimate | None = None
    best_seconds = 0
    for denom, before in previous.items():
        after = current.get(denom, 0)
        consumed = before - after
        if consumed <= 0:
            continue  # deposit or no settlement in between: no burn to read
        seconds = after * elapsed // consumed
        clamped = seconds > _HORIZON_SECONDS
        seconds = min(seconds, _HORIZON_SECONDS)
        if best is None or seconds < best_seconds:
            best_seconds = seconds
            best = Estimate(now + seconds * _SECOND, "burn rate", denom, clamped)
    return best


def chain_estimate(estimate: CreditEstimate | None, now: datetime) -> Estimate | None:
    """The chain's own estimate as a time; None when it has no rate to go by."""
    if estimate is None or not estimate.total_rate_per_second:
        return None
    seconds = estimate.estimated_duration_seconds
    clamped = seconds > _HORIZON_SECONDS
    seconds = min(seconds, _HORIZON_SECONDS)
    # The denom that runs out first: lowest balance / rate.
    rates = estimate.total_rate_per_second
    if len(rates) == 1:  # the common case: one denom, nothing to compare
        denom = rates[0].denom
    else:
        balances = {c.denom: c.amount for c in estimate.current_balance}
        per = {c.denom: c.amount for c in rates if c.amount > 0}
        denom = min(per, key=lambda d: balances.get(d, 0) // per[d], default="")
    return Estimate(now + seconds * _SECOND, "chain estimate", denom, clamped)


def earliest(*estimates: Estimate | None) -> Estimate | None:
    """The earliest of the estimates given (ties go to the first given)."""
    best: Estimate | None = None
    for e in estimates:
        if e is not None and (best is None or e.at < best.at):
            best = e
    return best
