"""One withdraw cycle: paging provider-wide ``MsgWithdraw`` through ``next_key``.

A cycle sends page 1 with an empty key and threads each answer's
``next_key`` into the next page, until the key comes back empty (drained) or
``max_withdraw_iterations`` pages are done (reported as hitting the bound,
not as an error: the next cycle resumes from the start).

Failure rules:

- A transient error on a page that cannot have been applied (refused before
  inclusion) is retried with exponential backoff: ``max_retries`` tries in
  all, delays ``initial_backoff`` doubling, capped at ``max_backoff``.
- A page that may have committed (broadcast, inclusion unknown) is never
  re-driven: re-sending it with the same key would settle leases twice over
  the cursor. The cycle ends there, with the error.
- Any other error ends the cycle.
- "No withdrawable amount" on the first page is a drained provider, not an error.

Each included page is told to the ledger: the page (``WithdrawalRecorded``)
and what it settled on each lease (the page's ``LeaseSettled``, read by the
chain client from the tx's ``provider_withdraw`` events).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from actors.scheduler_settings import SchedulerSettings
from chain.errors import BILLING, NO_WITHDRAWABLE
from messages.chain import ChainFailure, WithdrawPage
from messages.coins import Coin, add_coins, format_coins
from messages.chain_actor import RetryWithdrawPage, WithdrawPageAnswered, WithdrawPageCall
from messages.ledger import SettlementsRecorded, WithdrawalRecorded
from messages.scheduler import WithdrawFinished
from actors.effects import Effect, Note, Send
from runtime.router import CHAIN, CHAIN_IO, LEDGER, SCHEDULER

__all__ = ["WithdrawCycle", "backoff_delay", "page_to_ledger"]


def backoff_delay(attempt: int, initial: timedelta, cap: timedelta) -> timedelta:
    """Delay before try ``attempt + 1`` after try ``attempt`` failed (1-based): initial x 2^(attempt-1), capped."""
    return min(initial * (2 ** (attempt - 1)), cap)


def page_to_ledger(cycle: int, page_no: int, page: WithdrawPage, now: datetime) -> list[Effect]:
    """What the ledger is told of an applied page: the page, and what it took from each lease."""
    out: list[Effect] = [
        Send(
            LEDGER,
            WithdrawalRecorded(
                at=now,
                cycle=cycle,
                page=page_no,
                tx_hash=page.tx_hash,
                amounts=page.total_amounts,
                withdrawal_count=page.withdrawal_count,
            ),
        )
    ]
    # What the page took from each lease: the statement's "withdrawn" column.
    if page.settlements:
        out.append(Send(LEDGER, SettlementsRecorded(page.settlements)))
    return out


class WithdrawCycle:
    """The state of one cycle's paging; created per ``WithdrawRequested``."""

    def __init__(self, cycle: int, settings: SchedulerSettings) -> None:
        self.cycle = cycle
        self.settings = settings
        self.page = 1
        self.attempt = 1
        self.key = b""
        self.total: tuple[Coin, ...] = ()
        self.withdrawal_count = 0
        self.tx_hashes: list[str] = []
        self.done = False

    def begin(self) -> list[Effect]:
        return [Send(CHAIN_IO, WithdrawPageCall(self.cycle, self.page, self.attempt, self.key))]

    def retry(self, message: RetryWithdrawPage) -> list[Effect]:
        if self.done or (message.page, message.attempt) != (self.page, self.attempt):
            return []  # a retry timer left over from an earlier state
        return [Send(CHAIN_IO, WithdrawPageCall(self.cycle, self.page, self.attempt, self.key))]

    def answered(self, message: WithdrawPageAnswered, now: datetime) -> list[Effect]:
        if self.done or (message.page, message.attempt) != (self.page, self.attempt):
            return []
        if message.error is not None:
            return self._failed(message.error, now)
        page = message.result
        assert page is not None
        self.total = add_coins(self.total, page.total_amounts)
        self.withdrawal_count += page.withdrawal_count
        self.tx_hashes.append(page.tx_hash)
        out = page_to_ledger(self.cycle, self.page, page, now)
        if not page.next_key:
            return out + self._finish()
        if self.page >= self.settings.max_withdraw_iterations:
            return out + self._finish(hit_bound=True)
        self.page += 1
        self.attempt = 1
        self.key = page.next_key
        out.append(Send(CHAIN_IO, WithdrawPageCall(self.cycle, self.page, self.attempt, self.key)))
        return out

    def _failed(self, error: ChainFailure, now: datetime) -> list[Effect]:
        s = self.settings
        if error.codespace == BILLING and error.code == NO_WITHDRAWABLE and self.page == 1:
            return self._finish()
        if error.transient and not error.may_have_committed and self.attempt < s.max_retries:
            delay = backoff_delay(self.attempt, s.initial_backoff, s.max_backoff)
            self.attempt += 1
            return [
                Note(
                    f"withdraw page {self.page} failed ({error.message}); try {self.attempt} of "
                    f"{s.max_retries} in {delay.total_seconds():g}s",
                    event="withdraw_page_retry", fields=(("page", self.page), ("error", error.message)), level="warning",
                ),
                Send(CHAIN, RetryWithdrawPage(self.cycle, self.page, self.attempt), at=now + delay),
            ]
        if error.may_have_committed:
            why = "it may have been applied, so it is not sent again (the chain actor looks its tx up)"
        elif error.transient:
            why = f"gave up after {self.attempt} tries"
        else:
            why = "not retryable"
        return [Note(
            f"withdraw page {self.page} failed ({error.message}); {why}; cycle ends",
            event="withdraw_page_failed", fields=(("page", self.page), ("error", error.message)), level="warning",
        )] + self._finish(
            error=error
        )

    def _finish(self, hit_bound: bool = False, error: ChainFailure | None = None) -> list[Effect]:
        self.done = True
        pages = len(self.tx_hashes)
        out: list[Effect] = []
        if error is None:
            bound = (
                f"; stopped at the bound of {self.settings.max_withdraw_iterations} pages with leases left"
                if hit_bound
                else ""
            )
            out.append(
                Note(
                    f"withdrew {format_coins(self.total)} from {self.withdrawal_count} lease(s) "
                    f"in {pages} page(s){bound}",
                    event="withdrawn",
                    fields=(("cycle", self.cycle), ("withdrawn", self.total), ("leases", self.withdrawal_count),
                            ("pages", pages), ("hit_page_bound", hit_bound)),
                )
            )
        out.append(
            Send(
                SCHEDULER,
                WithdrawFinished(
                    cycle=self.cycle,
                    pages=pages,
                    total_amounts=self.total,
                    withdrawal_count=self.withdrawal_count,
                    tx_hashes=tuple(self.tx_hashes),
                    hit_page_bound=hit_bound,
                    error=error,
                ),
            )
        )
        return out
