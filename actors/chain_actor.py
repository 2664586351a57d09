"""``ChainActor``: the only sender of transactions.

Its core, ``ChainDecisions``, runs at most one withdraw cycle at a time
(``actors.withdraw_cycle``) and the closure rounds (``actors.closures``);
the calls themselves go to ``chain-io`` and come back as messages. Reads
that decide nothing here (credit, active leases) go to ``chain-io``
directly from the scheduler. In a dry run (``[scheduler] dry_run``) the
withdraws and closures go to ``actors.dry_run`` instead: read, told, not sent.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime
from typing import Any, Callable

from actors import dry_run
from actors.close_lookup import CloseLookups, closed_after_its_round, closure_facts
from actors.closures import ClosureBuffer, CloseRound
from actors.effects import Effect, Note, Send
from actors.scheduler_settings import SchedulerSettings
from actors.shell import CoreActor
from actors.withdraw_cycle import WithdrawCycle, WithdrawResume, page_to_ledger
from actors.withdraw_failures import FailingLeases
from actors.withdraw_lookup import WithdrawLookups
from messages.chain import ChainFailure
from messages.chain_actor import (
    CloseBatchAnswered,
    CloseLookupsRestored,
    CloseTxAnswered,
    CloseTxSigned,
    FlushClosures,
    LeaseCheckAnswered,
    NodeStatusAnswered,
    RetryWithdrawPage,
    WithdrawPageAnswered,
    WithdrawableAnswered,
    WithdrawRequested,
    WithdrawLookupsRestored,
    WithdrawTxAnswered,
    WithdrawTxSigned,
)
from messages.credit import CloseRequested
from messages.scheduler import ActiveLeasesRead, ClosuresFlushed, WithdrawFinished
from runtime.clock import Clock
from runtime.dispatch import Dispatcher
from runtime.router import CHAIN, SCHEDULER, Router

__all__ = ["ChainDecisions", "ChainActor", "ABORTED_ROUNDS_KEPT"]

#: Ended rounds kept for their late answers. A round's calls answer within the client's
#: tx timeout; rounds ended faster than that are a crash loop, which ends the process.
ABORTED_ROUNDS_KEPT = 64


class ChainDecisions:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.settings = settings
        self.withdraw: WithdrawCycle | None = None
        self.buffer = ClosureBuffer()
        self.rounds: dict[int, CloseRound] = {}
        #: Rounds ``recover`` ended while batch calls were out: their late answers are still
        #: facts for the books (the tx applied or may have), and need the round's tenants.
        self.aborted: OrderedDict[int, CloseRound] = OrderedDict()
        self._round_counter = 0
        self.lookups = WithdrawLookups()
        self.close_lookups = CloseLookups()
        #: Whether the chain has the withdraw cursor: None until a cycle learns it.
        self.cursor: bool | None = None
        #: Leases whose withdraw keeps failing, across cycles.
        self.failing = FailingLeases(settings.withdraw_interval)
        #: Where the next withdraw cycle starts (the last one stopped at the bound there).
        self.resume = WithdrawResume()

    def handle(self, message: Any, now: datetime) -> list[Effect]:
        if isinstance(message, WithdrawRequested):
            if self.withdraw is not None and not self.withdraw.done:
                busy = ChainFailure("withdraw", f"withdraw cycle {self.withdraw.cycle} still running")
                return [Send(SCHEDULER, WithdrawFinished(message.cycle, 0, (), 0, (), error=busy))]
            self.withdraw = WithdrawCycle(
                message.cycle, self.settings, self.cursor, self.failing, message.alone, self.resume
            )
            if self.settings.dry_run:
                self.withdraw.done = True  # a cycle of no pages: the dry run only reads
                return dry_run.withdraw(message.cycle)
            return self.withdraw.begin()
        if isinstance(message, WithdrawableAnswered):
            if self.settings.dry_run:
                return dry_run.withdrawable(message)
            return self._in_cycle(message.cycle, lambda w: w.withdrawable(message, now))
        if isinstance(message, ActiveLeasesRead):
            return self._in_cycle(message.cycle, lambda w: w.leases_read(message, now))
        if isinstance(message, WithdrawTxSigned):
            return self.lookups.signed(message, now)
        if isinstance(message, WithdrawPageAnswered):
            w = self.withdraw
            if w is None or w.cycle != message.cycle or w.done:
                # Its cycle is over (aborted), but what the tx applied is a fact all the same.
                late = page_to_ledger(message.cycle, message.page, message.result, now) if message.result else []
                closed, recorded = self.lookups.settled(message)
                error = message.error
                if error is not None and error.may_have_committed:
                    closed += self.lookups.begin(message.cycle, message.page, error.tx_hash, now, recorded)
                return late + closed
            was_done = w.done
            out = w.answered(message, now)
            self.cursor, self.resume = w.cursor, w.resume
            closed, recorded = self.lookups.settled(message)
            out += closed
            error = message.error
            if w.done and not was_done and error is not None and error.may_have_committed:
                # The cycle ended on a page that may have been applied: find out.
                out += self.lookups.begin(w.cycle, message.page, error.tx_hash, now, recorded)
            return out
        if isinstance(message, WithdrawTxAnswered):
            return self.lookups.answered(message, now)
        if isinstance(message, CloseTxAnswered):
            # A lookup can answer before a round that holds one of its leases failed has ended (its
            # other batches still out): that round then reports the lease closed, not the failure.
            holding = self._rounds_holding_failed(message.lease_uuids) if message.result is not None else []
            pending = message.tx_hash in self.close_lookups.pending
            held = frozenset(u for _, leases in holding for u in leases)
            out = self.close_lookups.answered(message, now, held=held)
            if pending and message.result is not None:
                for rnd, leases in holding:
                    rnd.closed_after_all(leases, message.result.tx_hashes)
            return out
        if isinstance(message, CloseTxSigned):
            rnd = self.rounds.get(message.round) or self.aborted.get(message.round)
            batch = rnd.batches.get(message.batch) if rnd is not None else None
            if rnd is None or batch is None:
                return []  # no round to say whose leases: it cannot happen while its call is out
            return self.close_lookups.signed(message, rnd.by_tenant(batch.leases), batch.reason, now)
        if isinstance(message, CloseLookupsRestored):
            return self.close_lookups.restore(message.lookups, now)
        if isinstance(message, WithdrawLookupsRestored):
            return self.lookups.restore(message.lookups, now)
        if isinstance(message, RetryWithdrawPage):
            if self.withdraw is None or self.withdraw.cycle != message.cycle:
                return []
            return self.withdraw.retry(message)
        if isinstance(message, CloseRequested):
            self.buffer.add(message)
            return []
        if isinstance(message, FlushClosures):
            requests, stale = self.buffer.take(message.cycle)
            out: list[Effect] = []
            if stale:
                tenants = sorted({r.tenant for r in stale})
                out.append(Note(
                    f"dropped the closure requests of {len(tenants)} tenant(s) ({', '.join(tenants[:5])}"
                    f"{' ...' if len(tenants) > 5 else ''}) made in a check cycle that ended before "
                    "sending them; each asks again on its next read if its credit is still gone",
                    event="closure_requests_dropped", fields=(("tenants", len(tenants)),), level="warning",
                ))
            if not requests:
                return out + [Send(SCHEDULER, ClosuresFlushed(cycle=message.cycle))]
            if self.settings.dry_run:
                return out + dry_run.closures(message.cycle, requests)
            self._round_counter += 1
            rnd = CloseRound(self._round_counter, message.cycle, self.settings, requests)
            self.rounds[rnd.round] = rnd
            leases = sum(len(r.lease_uuids) for r in requests)
            closing = Note(
                f"closing {leases} lease(s) of {len(requests)} tenant(s)",
                event="closing", fields=(("cycle", message.cycle), ("leases", leases), ("tenants", len(requests))),
            )
            return out + [closing] + rnd.begin()
        if isinstance(message, (NodeStatusAnswered, CloseBatchAnswered, LeaseCheckAnswered)):
            rnd = self.rounds.get(message.round)
            if rnd is None:
                late = self.aborted.get(message.round)
                if late is not None and isinstance(message, CloseBatchAnswered):
                    return self._late_batch(late, message, now)
                return []
            if isinstance(message, NodeStatusAnswered):
                out = rnd.on_status(message, now)
            elif isinstance(message, CloseBatchAnswered):
                out = rnd.on_batch(message, now)
            else:
                out = rnd.on_check(message, now)
            if isinstance(message, CloseBatchAnswered):
                closed, recorded = self.close_lookups.settled(message)
                out += closed + self._look_up_close(rnd, message, now, recorded)
            if rnd.finished:
                del self.rounds[rnd.round]
            return out
        raise TypeError(f"ChainActor cannot handle {type(message).__name__}")

    #: Messages that are steps of the withdraw cycle they name (``cycle``).
    _WITHDRAW_STEPS = (WithdrawRequested, WithdrawableAnswered, ActiveLeasesRead, WithdrawPageAnswered, RetryWithdrawPage)
    #: Messages that are steps of the closure round they name (``round``).
    _ROUND_STEPS = (NodeStatusAnswered, CloseBatchAnswered, LeaseCheckAnswered)

    def recover(self, message: Any, now: datetime) -> list[Effect]:
        """Handling ``message`` raised: end the withdraw cycle or closure round it was a step of.

        Left as it was, the cycle would wait for good for an answer it
        already had: every later withdraw would be refused as "still
        running", and the scheduler's cycle would only end at its deadline.
        Ended, the scheduler hears of it at once (a passing failure: the
        next cycle withdraws again) and the tenants whose closes were in
        the round re-check and ask again.
        """
        failure = ChainFailure(
            "chain", f"an internal error handling {type(message).__name__} ended it (see the log)", transient=True
        )
        w = self.withdraw
        if isinstance(message, self._WITHDRAW_STEPS) and w is not None and not w.done and message.cycle == w.cycle:
            return [Note(
                f"withdraw cycle {w.cycle} ended: {failure.message}",
                event="withdraw_cycle_failed", fields=(("cycle", w.cycle),), level="warning",
            )] + w.abort(failure)
        if isinstance(message, self._ROUND_STEPS):
            rnd = self.rounds.pop(message.round, None)
            if rnd is not None and not rnd.finished:
                if any(not b.done for b in rnd.batches.values()):
                    self.aborted[rnd.round] = rnd
                    while len(self.aborted) > ABORTED_ROUNDS_KEPT:
                        self.aborted.popitem(last=False)
                return rnd.abort(failure, now)
        return []

    def _rounds_holding_failed(self, leases: tuple[str, ...]) -> list[tuple[CloseRound, tuple[str, ...]]]:
        """The rounds not yet ended that hold some of ``leases`` failed, each with those leases."""
        holding = ((rnd, tuple(u for u in leases if u in rnd.failed)) for rnd in self.rounds.values() if not rnd.finished)
        return [(rnd, failed) for rnd, failed in holding if failed]

    def _late_batch(self, rnd: CloseRound, m: CloseBatchAnswered, now: datetime) -> list[Effect]:
        """A batch of a round ``recover`` ended answers: book what its tx did; the round stays over.

        Its tenants were told the round failed and re-check on their own; the
        books still need the close's facts, and its write-ahead record closed
        only behind them (or a lookup, if the tx may have been applied).
        """
        batch = rnd.batches.get(m.batch)
        if batch is None or batch.done:
            return []
        batch.done = True
        out: list[Effect] = []
        if m.outcome is not None:
            out += closure_facts(m.outcome, rnd.by_tenant(m.lease_uuids), batch.reason, now)
        closed, recorded = self.close_lookups.settled(m)
        out += closed + self._look_up_close(rnd, m, now, recorded)
        if m.outcome is not None:  # after the books: the round's end told its tenants these failed
            out += closed_after_its_round(m.outcome, rnd.by_tenant(m.lease_uuids), batch.reason, rnd.cycle)
        if all(b.done for b in rnd.batches.values()):
            del self.aborted[rnd.round]
        return out

    def _in_cycle(self, cycle: int, step: Callable[[WithdrawCycle], list[Effect]]) -> list[Effect]:
        w = self.withdraw
        if w is None or w.cycle != cycle:
            return []  # an answer for a cycle that is over
        out = step(w)
        self.cursor, self.resume = w.cursor, w.resume
        return out

    def _look_up_close(self, rnd: CloseRound, m: CloseBatchAnswered, now: datetime, recorded: bool) -> list[Effect]:
        """A batch that failed here but may have been applied there: find out what it settled."""
        error = m.error
        batch = rnd.batches.get(m.batch)
        if error is None or not error.may_have_committed or not error.tx_hash or batch is None:
            return []
        return self.close_lookups.begin(error.tx_hash, rnd.by_tenant(m.lease_uuids), batch.reason, now, recorded)


class ChainActor(CoreActor):
    """The chain actor at address ``chain``."""

    def __init__(self, dispatcher: Dispatcher, router: Router, clock: Clock, settings: SchedulerSettings) -> None:
        super().__init__(dispatcher, CHAIN, ChainDecisions(settings), router, clock)
