"""One withdraw cycle, on a chain with or without the withdraw cursor.

A cycle first asks ``ProviderWithdrawable`` whether anything is due; when
the node says nothing is, no paid tx is sent (as the production client
does). Then it reaches every active lease one of two ways (CHAIN-VERSIONS.md
2.1, 2.2, 6.1):

- **with the cursor** (the current chain): provider-wide ``MsgWithdraw``
  pages, each answer's ``next_key`` threaded into the next page, until the
  key comes back empty (drained) or ``max_withdraw_iterations`` pages are
  done (reported as hitting the bound, not as an error; see below). Every
  page's ``failed_lease_uuids`` go to the failing leases
  (``actors.withdraw_failures``): the cursor moved past them; a failing
  lease that a page or batch settles leaves them.
- **without it** (v2.1.0, whose provider-wide call restarts at the first
  lease every time, ``has_more`` stuck true): the ACTIVE leases are listed
  and withdrawn by name, at most ``MAX_BATCH_LEASE_SIZE`` a tx, and no two
  leases near the end of their credit (``alone``) in one tx: v2.1.0 books an
  auto-close in a named withdraw as amount 0, and what the tx's total holds
  beyond its events is a lease's own only when that lease is the tx's one
  auto-close. So each batch of the others carries one of them (a tx of 99
  others and one near its end), and those left over go in a tx of their
  own: at 10,000 leases a cycle's hundred batches carry a hundred of them
  at no extra tx. A batch that fails for a reason of its own is split until
  the failing lease stands alone.

A cycle that stops at the bound leaves a ``WithdrawResume``: the next cycle
goes on from there (the ``next_key`` the chain returned, or the first lease
of the first batch not sent) instead of from the first lease again, so a
provider with more leases than ``max_withdraw_iterations`` txs reach still
has every one withdrawn, each within a few cycles. A cycle that reaches the
end starts the next one from the beginning; one that ends on an error
leaves the resume point as it was.

Which one is learned at run time, never assumed: a listing whose leases
carry no ``reservation`` (field 16, on every lease of the current chain)
is v2.1.0; otherwise the first page says, and a first page with
``has_more`` and an empty ``next_key`` means no cursor. A ``key`` the
server did not return is never sent. Then the failing leases whose backoff
has passed are retried, each alone.

Failure rules, for pages and named batches alike:

- A transient error on a tx that cannot have been applied (refused before
  inclusion) is retried with exponential backoff: ``max_retries`` tries in
  all, delays ``initial_backoff`` doubling, capped at ``max_backoff``.
- A tx that may have committed (broadcast, inclusion unknown) is never
  re-driven: re-sending a page with the same key would settle leases twice
  over the cursor. The cycle ends there, with the error, and the chain actor
  looks the tx up.
- "No withdrawable amount" (15) is nothing due, not an error.
- Any other error ends a provider-wide cycle; a named batch is split (see
  above), a single lease goes to the failing leases.

Each included tx is told to the ledger: the tx (``WithdrawalRecorded``) and
what it settled on each lease (the page's ``LeaseSettled``, read by the
chain client from the tx's ``provider_withdraw`` events).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from actors.scheduler_settings import SchedulerSettings
from chain.errors import BILLING, NO_WITHDRAWABLE
from messages.chain import ChainFailure, WithdrawPage
from messages.coins import Coin, add_coins, format_coins
from chain.model import MAX_BATCH_LEASE_SIZE
from messages.chain_actor import (
    ActiveLeasesCall,
    RetryWithdrawPage,
    WithdrawableAnswered,
    WithdrawableCall,
    WithdrawLeasesCall,
    WithdrawPageAnswered,
    WithdrawPageCall,
)
from messages.ledger import SettlementsRecorded, WithdrawalRecorded
from messages.scheduler import ActiveLeasesRead, WithdrawFinished
from actors.effects import Effect, Note, Send
from actors.withdraw_failures import FailingLeases
from runtime.router import CHAIN, CHAIN_IO, LEDGER, SCHEDULER

__all__ = ["WithdrawCycle", "WithdrawResume", "backoff_delay", "named_batches", "page_to_ledger"]

#: A page answered with neither a result nor an error: it may have been sent.
_NO_ANSWER = ChainFailure(
    "withdraw", "the chain answered no page and no error", codespace="protocol", transient=True, may_have_committed=True
)


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


@dataclass(frozen=True)
class WithdrawResume:
    """Where the next cycle starts, after one that stopped at the bound: the page key the chain
    returned (with the cursor), or the lease whose batch was the first not sent (by name)."""

    key: bytes = b""
    lease: str = ""


def named_batches(rest: list[str], near: list[str]) -> list[tuple[str, ...]]:
    """The named withdraws of a cycle: ``rest`` in batches, each with at most one lease of ``near``
    (last, so that a batch still starts where a resume points); the ``near`` left over alone, first."""
    size = MAX_BATCH_LEASE_SIZE - 1 if near else MAX_BATCH_LEASE_SIZE
    batches = [rest[i : i + size] for i in range(0, len(rest), size)]
    riding = near[: len(batches)]
    for batch, u in zip(batches, riding):
        batch.append(u)
    return [(u,) for u in near[len(riding):]] + [tuple(b) for b in batches]


class WithdrawCycle:
    """The state of one cycle; created per ``WithdrawRequested``.

    ``cursor`` is what the chain actor knows of the chain (True, False, or
    None while unknown); the cycle may learn it, and the actor keeps it.
    ``resume`` is where the previous cycle stopped; once ``done``, the
    cycle's own ``resume`` is where the next one starts (the actor keeps it).
    """

    def __init__(
        self,
        cycle: int,
        settings: SchedulerSettings,
        cursor: bool | None = None,
        failing: FailingLeases | None = None,
        alone: tuple[str, ...] = (),
        resume: WithdrawResume = WithdrawResume(),
    ) -> None:
        self.cycle = cycle
        self.settings = settings
        self.cursor = cursor
        self.failing = failing if failing is not None else FailingLeases(settings.withdraw_interval)
        self.alone = frozenset(alone)
        self.resume = resume
        self.page = 0
        self.attempt = 1
        # A key the chain returned, to a chain known to have the cursor (never one it did not).
        self.key = resume.key if cursor else b""
        self.total: tuple[Coin, ...] = ()
        self.withdrawal_count = 0
        self.tx_hashes: list[str] = []
        self.done = False
        self.nothing_due = False
        #: "due", "listing", "pages", "named", "retrying"
        self.phase = "due"
        #: named batches still to send (the first is in flight in "named"/"retrying")
        self.queue: list[tuple[str, ...]] = []
        self.batch: tuple[str, ...] = ()

    def begin(self) -> list[Effect]:
        return [Send(CHAIN_IO, WithdrawableCall(self.cycle))]

    def withdrawable(self, message: WithdrawableAnswered, now: datetime) -> list[Effect]:
        if self.done or self.phase != "due":
            return []
        if message.error is None and message.due == ():
            self.nothing_due = True
            return [Note("nothing is due by ProviderWithdrawable: no paid withdraw this cycle")] + self._finish()
        if self.cursor:
            return self._next_page()
        self.phase = "listing"
        return [Send(CHAIN_IO, ActiveLeasesCall(self.cycle, CHAIN))]

    def leases_read(self, message: ActiveLeasesRead, now: datetime) -> list[Effect]:
        if self.done or self.phase != "listing":
            return []
        if message.error is not None:
            return [Note(f"withdraw: could not list the active leases ({message.error.message}); cycle ends")] + self._finish(
                error=message.error
            )
        out: list[Effect] = []
        if self.cursor is None:
            if message.leases and all(lease.reservation is None for lease in message.leases):
                self.cursor = False
                out.append(Note(
                    "the chain has no withdraw cursor (its leases carry no reservation field: v2.1.0); "
                    "every lease is withdrawn by name"
                ))
            else:
                if any(lease.reservation is not None for lease in message.leases):
                    self.cursor = True  # field 16 is newer than the cursor: the current chain
                return self._next_page()
        uuids = sorted(lease.uuid for lease in message.leases)
        near = [u for u in uuids if u in self.alone]
        rest = [u for u in uuids if u not in self.alone]
        if self.resume.lease:  # from where the previous cycle stopped, round to the start
            rest = [u for u in rest if u >= self.resume.lease] + [u for u in rest if u < self.resume.lease]
        self.queue = named_batches(rest, near)
        self.phase = "named"
        return out + self._next_batch(now)

    def retry(self, message: RetryWithdrawPage) -> list[Effect]:
        if self.done or (message.page, message.attempt) != (self.page, self.attempt):
            return []  # a retry timer left over from an earlier state
        return [self._call()]

    def _call(self) -> Send:
        if self.phase == "pages":
            return Send(CHAIN_IO, WithdrawPageCall(self.cycle, self.page, self.attempt, self.key))
        return Send(CHAIN_IO, WithdrawLeasesCall(self.cycle, self.page, self.attempt, self.batch))

    def _next_page(self) -> list[Effect]:
        self.phase = "pages"
        self.page += 1
        self.attempt = 1
        return [self._call()]

    def _next_batch(self, now: datetime) -> list[Effect]:
        if self.phase == "named" and not self.queue:
            self.phase = "retrying"
            self.resume = WithdrawResume()  # every lease reached: the next cycle starts from the first
            self.queue = [(u,) for u in self.failing.due(now)]
        if not self.queue:
            return self._finish()
        if self.page >= self.settings.max_withdraw_iterations:
            if self.phase == "named":
                self.resume = WithdrawResume(lease=self.queue[0][0])
            return self._finish(hit_bound=True)
        self.batch = self.queue.pop(0)
        self.page += 1
        self.attempt = 1
        return [self._call()]

    def answered(self, message: WithdrawPageAnswered, now: datetime) -> list[Effect]:
        if self.done or (message.page, message.attempt) != (self.page, self.attempt):
            return []
        page = message.result
        if message.error is not None or page is None:
            # No page and no error is a failed call too (chain-io says so
            # itself; a capture from before it did may not).
            return self._failed(message.error or _NO_ANSWER, now)
        self.total = add_coins(self.total, page.total_amounts)
        self.withdrawal_count += page.withdrawal_count
        self.tx_hashes.append(page.tx_hash)
        out = page_to_ledger(self.cycle, self.page, page, now)
        # A lease this tx settled is failing no more, however the tx reached it.
        out += self.failing.settled(s.lease_uuid for s in page.settlements)
        if self.phase == "pages":
            if page.failed_lease_uuids:
                out += self.failing.failed(page.failed_lease_uuids, "its settlement failed in a provider-wide page", now)
            if self.page == 1 and page.has_more and not page.next_key:
                # has_more with no key to go on: a chain without the cursor (v2.1.0).
                self.cursor = False
                self.phase = "listing"
                return out + [
                    Note("the chain has no withdraw cursor (has_more without next_key); the other leases go by name"),
                    Send(CHAIN_IO, ActiveLeasesCall(self.cycle, CHAIN)),
                ]
            if page.next_key:
                self.cursor = True
            if not page.next_key:
                self.resume = WithdrawResume()  # the end: the next cycle starts from the first lease
                return out + self._after_pages(now)
            if self.page >= self.settings.max_withdraw_iterations:
                self.resume = WithdrawResume(key=page.next_key)
                return out + self._finish(hit_bound=True)
            self.key = page.next_key
            return out + self._next_page()
        if self.phase == "retrying":
            out += self.failing.recovered(self.batch[0], "recovered")
        return out + self._next_batch(now)

    def _after_pages(self, now: datetime) -> list[Effect]:
        self.phase = "named"
        return self._next_batch(now)

    def _failed(self, error: ChainFailure, now: datetime) -> list[Effect]:
        s = self.settings
        if error.codespace == BILLING and error.code == NO_WITHDRAWABLE:
            if self.phase == "pages":
                return self._after_pages(now)
            if self.phase == "retrying":
                return self.failing.recovered(self.batch[0], "has nothing left to withdraw") + self._next_batch(now)
            return self._next_batch(now)  # nothing due on these leases
        what = f"withdraw page {self.page}" if self.phase == "pages" else f"withdraw of {len(self.batch)} lease(s) by name"
        if error.transient and not error.may_have_committed and self.attempt < s.max_retries:
            delay = backoff_delay(self.attempt, s.initial_backoff, s.max_backoff)
            self.attempt += 1
            return [
                Note(
                    f"{what} failed ({error.message}); try {self.attempt} of {s.max_retries} in {delay.total_seconds():g}s",
                    event="withdraw_page_retry", fields=(("page", self.page), ("error", error.message)), level="warning",
                ),
                Send(CHAIN, RetryWithdrawPage(self.cycle, self.page, self.attempt), at=now + delay),
            ]
        if error.may_have_committed:
            why = "it may have been applied, so it is not sent again (the chain actor looks its tx up)"
        elif self.phase != "pages" and not error.transient:
            if len(self.batch) > 1:
                half = len(self.batch) // 2
                self.queue[:0] = [self.batch[:half], self.batch[half:]]
                return [Note(f"{what} failed ({error.message}); split in two to find the lease that fails")] + self._next_batch(now)
            return self.failing.failed(self.batch, error, now) + self._next_batch(now)
        elif error.transient:
            why = f"gave up after {self.attempt} tries"
        else:
            why = "not retryable"
        return [Note(
            f"{what} failed ({error.message}); {why}; cycle ends",
            event="withdraw_page_failed", fields=(("page", self.page), ("error", error.message)), level="warning",
        )] + self._finish(error=error)

    def abort(self, error: ChainFailure) -> list[Effect]:
        """End the cycle where it stands with ``error`` (the chain actor failed on one of its steps)."""
        if self.done:
            return []
        return self._finish(error=error)

    def _finish(self, hit_bound: bool = False, error: ChainFailure | None = None) -> list[Effect]:
        self.done = True
        pages = len(self.tx_hashes)
        out: list[Effect] = []
        if error is None and not self.nothing_due:
            bound = (
                f"; stopped at the bound of {self.settings.max_withdraw_iterations} txs with leases left, "
                "which the next cycle goes on with"
                if hit_bound
                else ""
            )
            failing = f"; {len(self.failing)} lease(s) whose withdraw keeps failing" if len(self.failing) else ""
            out.append(
                Note(
                    f"withdrew {format_coins(self.total)} from {self.withdrawal_count} lease(s) "
                    f"in {pages} tx(s){bound}{failing}",
                    event="withdrawn",
                    fields=(("cycle", self.cycle), ("withdrawn", self.total), ("leases", self.withdrawal_count),
                            ("pages", pages), ("hit_page_bound", hit_bound), ("failing", len(self.failing))),
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
                    failing=self.failing.report(),
                    nothing_due=self.nothing_due,
                ),
            )
        )
        return out
