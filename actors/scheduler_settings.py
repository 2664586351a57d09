"""``[scheduler]``: the cadence of withdraws and credit checks, retries, and when leases close.

Read by every actor that decides (the scheduler's cycles, each tenant's
credit monitor, the chain actor's withdraw and closures), so it sits in
``actors/`` beside them rather than in the wiring that only passes it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["SchedulerSettings"]


@section("scheduler")
@dataclass(frozen=True)
class SchedulerSettings:
    """The withdraw scheduler seed's settings, under its names, with its defaults."""

    withdraw_interval: timedelta = setting(
        timedelta(hours=1), "paid-withdraw cadence", min=timedelta(seconds=1), max=timedelta(days=30)
    )
    credit_check_interval: timedelta = setting(
        timedelta(0), "credit-check / wake cadence; 0 means equal to withdraw_interval", max=timedelta(days=30)
    )
    max_withdraw_iterations: int = setting(100, "pages of MsgWithdraw per cycle at most", min=1, max=100_000)
    credit_check_error_threshold: int = setting(
        3, "failed credit reads in a row before an early re-check", min=1, max=1000
    )
    credit_check_retry_interval: timedelta = setting(
        timedelta(seconds=30), "delay of an early re-check", min=timedelta(seconds=1), max=timedelta(days=1)
    )
    credit_check_zero_grace_period: timedelta = setting(
        timedelta(minutes=5), "how long a balance must stay zero before its leases are closed", max=timedelta(days=30)
    )
    depletion_check_buffer: timedelta = setting(
        timedelta(seconds=10), "wake this long before an estimated depletion", max=timedelta(days=1)
    )
    max_retries: int = setting(3, "tries of a transient chain error (first try included)", min=1, max=20)
    initial_backoff: timedelta = setting(
        timedelta(seconds=1), "first retry delay, doubled each try", max=timedelta(hours=1)
    )
    max_backoff: timedelta = setting(timedelta(seconds=10), "retry delay cap", max=timedelta(days=1))
    max_queries_in_flight: int = setting(32, "credit reads in flight at once", min=1, max=1024)
    cycle_timeout: timedelta = setting(
        timedelta(minutes=5), "a cycle whose tenants have not all answered by then is closed out",
        min=timedelta(seconds=1), max=timedelta(days=1),
    )
    # The chain refuses a longer reason (billing code 26) and so every close.
    closure_reason: str = setting(
        "credit depleted", "reason put on MsgCloseLease (at most 256 bytes, the chain's limit)", max_bytes=256
    )
    max_node_lag: timedelta = setting(
        timedelta(minutes=2), "a node whose latest block is older than this is treated as syncing",
        max=timedelta(days=1),
    )
    dry_run: bool = setting(
        False, "read and decide as usual, log what would be withdrawn and closed, and send no tx (a first deployment)"
    )

    def validate(self) -> None:
        if self.max_backoff < self.initial_backoff:
            raise ValueError("max_backoff must not be shorter than initial_backoff")

    @property
    def check_interval(self) -> timedelta:
        return self.credit_check_interval or self.withdraw_interval
