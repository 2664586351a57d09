"""``LedgerActor``: the one writer of the ledger, at address ``ledger``.

It receives the facts of ``messages/ledger.py`` (leases observed, lease
events, settlements, withdrawals, closures, tenant state) and writes them to
the SQLite ledger, and on ``BillingTickDue(at)`` from the scheduler it runs
the billing-month tick with ``now=at`` and logs what each month did.

It does blocking disk I/O (a commit is an fsync; metering a month takes
seconds), so it runs on a ``ThreadedDispatcher`` of its own with one worker:
the shared dispatcher that runs the scheduler and 10,000 tenant actors is
never held up by the disk. ``start_ledger_writer`` builds that dispatcher
unless it is given one (tests give the ``ManualDispatcher`` they drive).

Writes are batched: facts are buffered while more mail is waiting and written
in one transaction when the mailbox runs dry (or ``BATCH_MAX`` facts are
buffered). At 10,000 tenants a cycle produces 10,000 ``TenantStateChanged``;
in one transaction that is one fsync instead of 10,000. Nothing that has
reached the actor waits longer than the mail already queued behind it, and a
stop writes what is buffered.

A write the database refuses for a reason that passes (locked by another
process past the busy timeout, disk full, an I/O error: SQLite's
``OperationalError``) loses nothing: the facts are held, in order, and
tried again first at the next write. Only a fact the ledger refuses for
what it is (a settlement without a tx hash) is logged whole and dropped.

It tells ``health`` what the sidecar's readiness and metrics need of the
books: a write refused (``LedgerWriteFailed``, with the facts held), the
first write that went through after (``LedgerWritesResumed``), and the
months' stages after each tick (``BooksTicked``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

import pykka

from ledger.metering import meter_month
from ledger.runs import Periods
from ledger.settings import LedgerSettings
from ledger.store import FACT_TYPES, Ledger
from ledger.tick import Options, Report, tick
from messages.codec import to_plain
from messages.health import BooksTicked, LedgerWriteFailed, LedgerWritesResumed, MonthStage
from messages.ledger import BillingTickDue
from runtime.clock import Clock
from runtime.dispatch import Dispatcher, DeliveryTap, PooledActor, ThreadedDispatcher
from runtime.router import HEALTH, LEDGER, Router
from runtime.supervision import Supervisor

__all__ = ["LedgerActor", "LedgerWriter", "start_ledger_writer", "BATCH_MAX"]

logger = logging.getLogger(__name__)
#: Month steps are decisions: they go where the other actors' decision lines go.
decisions = logging.getLogger("leasewarden.decisions")

#: Facts per transaction at most: bounds what a failing batch has to retry
#: one by one, and how long one commit holds SQLite's write lock.
BATCH_MAX = 5_000

#: Facts held for another try at most (see the module doc). A database that
#: stays unwritable that long loses the oldest, each logged whole, rather
#: than the process its memory.
HELD_MAX = 200_000

_FACTS = frozenset(FACT_TYPES)


class LedgerActor(PooledActor):
    def __init__(
        self,
        dispatcher: Dispatcher,
        ledger: Ledger,
        settings: LedgerSettings,
        stop: threading.Event | None = None,
        close_ledger_on_stop: bool = True,
        router: Router | None = None,
    ) -> None:
        super().__init__(dispatcher, LEDGER)
        #: where ``health`` is told of refused writes and ticks (None: nobody is)
        self.router = router
        self.ledger = ledger
        self.settings = settings
        #: Set when the sidecar stops: a tick in progress stops between months.
        self.stop_event = stop or threading.Event()
        self.close_ledger_on_stop = close_ledger_on_stop
        self.periods = Periods(ledger)
        self._pending: list[Any] = []
        self.written = 0
        #: facts held back after a write the database refused (see ``_hold``)
        self.held = 0
        self.last_report: Report | None = None

    def on_receive(self, message: Any) -> Any:
        if type(message) in _FACTS:
            self._pending.append(message)
            if len(self._pending) >= BATCH_MAX or self.actor_inbox.empty():
                self._flush()
        elif isinstance(message, BillingTickDue):
            self._flush()
            self._tick(message)
        else:
            logger.warning("ledger: ignored a %s (not a ledger fact)", type(message).__name__)

    def _flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        try:
            self.written += self.ledger.record_all(batch)
            if self.held:
                logger.warning("ledger: wrote the %d fact(s) held back after a failed write", self.held)
                self._tell_health(LedgerWritesResumed(self.held))
                self.held = 0
            return
        except sqlite3.OperationalError as exc:
            self._hold(batch, exc)  # the database, not the facts: one by one would fail alike
            return
        except Exception:
            logger.exception("ledger: a batch of %d facts failed; writing them one by one", len(batch))
        for i, fact in enumerate(batch):
            try:
                self.ledger.record(fact)
                self.written += 1
            except sqlite3.OperationalError as exc:
                self._hold(batch[i:], exc)
                return
            except Exception as exc:
                # Logged whole, so an operator can see and re-enter what was lost
                # (the capture holds it too).
                logger.error("ledger: could not record %s: %s", to_plain(fact), exc)

    def _hold(self, facts: list[Any], exc: Exception) -> None:
        """Keep ``facts`` (in order, before any that came since) for the next write."""
        self._pending = facts + self._pending
        over = len(self._pending) - HELD_MAX
        if over > 0:
            for fact in self._pending[:over]:
                logger.error("ledger: dropped %s, held too long (the ledger stays unwritable)", to_plain(fact))
            del self._pending[:over]
        self.held = len(self._pending)
        logger.error("ledger: could not write (%s); %d fact(s) held for the next write", exc, self.held)
        self._tell_health(LedgerWriteFailed(str(exc), self.held))

    def _tell_health(self, message: Any) -> None:
        if self.router is not None:
            self.router.tell(HEALTH, message)

    def _tick(self, message: BillingTickDue) -> None:
        if self.stop_event.is_set():
            return
        options = Options(
            grace_hours=self.settings.grace_hours,
            auto_finalize=self.settings.auto_finalize,
            execute=lambda month, now: meter_month(self.ledger, month, now, periods=self.periods, only_if_unmetered=True),
        )
        report = tick(self.periods, message.at, options, self.stop_event)
        self.last_report = report
        for m in report:
            parts = [p for p in (m.transition, f"metered: run {m.run_id}" if m.run_id and not m.error else "") if p]
            if m.finalized:
                parts.append("finalized")
            if m.retry_after is not None:
                parts.append(f"held back after {m.failures} failure(s) until {m.retry_after.isoformat()}")
            if m.held:
                parts.append(
                    f"{m.held} lease(s) held back, no known price (run.py periods lists them): metered again once "
                    "they are read" + (", and finalized then" if self.settings.auto_finalize else "")
                )
            if m.skipped_before:
                parts.append(f"{m.skipped_before} older month(s) left out (bill them with meter --period)")
            if m.warning:
                parts.append(f"warning: {m.warning}")
            if m.error:
                parts.append(f"failed: {m.error}")
            if parts:
                decisions.info("billing month %s: %s", m.month, "; ".join(parts))
            else:
                logger.debug("billing month %s: %s, nothing due", m.month, m.status)
        if report.stopped:
            decisions.info("billing tick stopped between months (the sidecar is stopping)")
        months = tuple(MonthStage(p.period, p.stage) for p in self.periods.list())
        self._tell_health(BooksTicked(message.at, months))

    def on_stop(self) -> None:
        try:
            self._flush()
            for fact in self._pending:  # still unwritable at the stop: what is lost, whole
                logger.error("ledger: could not record %s before stopping", to_plain(fact))
        finally:
            if self.close_ledger_on_stop:
                self.ledger.close()


@dataclass
class LedgerWriter:
    """A started ``LedgerActor``, its dispatcher and how to stop them."""

    ref: Any
    ledger: Ledger
    dispatcher: Dispatcher
    stop_event: threading.Event
    owns_dispatcher: bool
    router: Router

    @property
    def actor(self) -> LedgerActor:
        return self.ref.actor_inbox.actor  # the live actor, for status and tests

    def close(self, timeout: float = 30.0) -> None:
        """Stop: a running tick stops between months, buffered facts are written, the file is closed."""
        self.stop_event.set()
        if self.router.get(LEDGER) is self.ref:
            self.router.remove(LEDGER)
        if self.owns_dispatcher:
            try:
                self.ref.stop(block=True, timeout=timeout)
            except pykka.ActorDeadError:
                pass
            self.dispatcher.shutdown()
        else:
            # A shared (manual) dispatcher: the stop is delivered when its owner runs it.
            try:
                self.ref.stop(block=False)
            except pykka.ActorDeadError:
                pass

    stop = close


def start_ledger_writer(
    router: Router,
    clock: Clock,
    ledger: Ledger,
    settings: LedgerSettings,
    *,
    dispatcher: Dispatcher | None = None,
    tap: DeliveryTap | None = None,
    supervisor: Supervisor | None = None,
) -> LedgerWriter:
    """Start the ``ledger`` actor and register it with ``router``.

    With no ``dispatcher`` it gets a ``ThreadedDispatcher(workers=1)`` of its
    own (``tap`` captures its deliveries like the shared dispatcher's, and
    ``supervisor`` sees its failures like the other actors').
    """
    owns = dispatcher is None
    disp = dispatcher or ThreadedDispatcher(clock.now, workers=1, tap=tap, supervisor=supervisor)
    stop = threading.Event()
    ref = LedgerActor.start(disp, ledger, settings, stop, router=router)
    router.add(LEDGER, ref)
    return LedgerWriter(ref, ledger, disp, stop, owns, router)
