"""The scheduler's decisions: cycles, wakes, tenants, lease events.

A *cycle* is: withdraw (when due), read the provider's active leases, have
every tenant's credit read and judged by its monitor, flush the closures
they asked for, then set the next wake. One cycle runs at a time; a trigger
or reconcile that arrives meanwhile runs right after it.

The next wake is the earliest of (seed 000):

- ``interval``: the paid withdraw is due (``withdraw_interval`` after the last one);
- ``check``: the regular credit check of every tenant is due
  (``credit_check_interval`` after the start of the last cycle that read
  them all);
- ``depletion``: ``depletion_check_buffer`` before the earliest estimated
  depletion, or that long from now if it is already past. This wake
  withdraws whatever the rate limit says: balances only move at settlement,
  so the follow-up must settle to see the depletion (seed: "schedules an
  earlier follow-up withdrawal");
- ``recheck``: the earliest early re-check a tenant asked for (read errors,
  zero-balance grace, failed closes);
- ``retry``: while the chain has not answered an active-lease read since
  the start (a node unreachable at start, with no tenant yet to ask for a
  re-check), the whole cycle again, backing off from ``initial_backoff``
  doubling to ``credit_check_retry_interval``, with the withdraw if the
  last one failed for a passing reason; rather than an hour's sleep until
  the next withdraw interval.

The three cadences cannot starve one another: the regular check, the paid
withdraw and the billing tick each keep their own deadline, anchored to
their own last run (the last full check, the last withdraw, the last tick),
and nothing else moves it. An early re-check reads only the tenants that
asked for it, and plans the next wake from those deadlines, never from its
own time; a re-check that comes when the regular check is due reads every
tenant. (Anchored to "now" instead, a tenant re-checked every 30 s pushed
the regular check forward from each re-check: a healthy tenant went 6 hours
without a read on a 1-hour cadence.)

The scheduler also supervises the tenant monitors: it starts one when a
tenant first has an active lease with us (chain read or lease event) and
retires it when the last lease is gone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Collection, NamedTuple

from actors.close_search import CloseSearches
from actors.effects import Effect, Note, Retire, Send, Spawn
from actors.lease_reads import LeaseReads, not_found, retry_delay
from actors.scheduler_settings import SchedulerSettings
from chain.model import MAX_BATCH_LEASE_SIZE
from messages.chain import Lease
from messages.chain_actor import (
    ActiveLeasesCall,
    CloseSearchAnswered,
    CreditReadsCall,
    FlushClosures,
    LeaseCall,
    WithdrawRequested,
)
from messages.coins import format_coins
from messages.credit import LeaseGone, LeaseOpened, LeasesSynced, TenantRestored
from messages.lease_events import ENDING_KINDS
from messages.ledger import BillingTickDue, LeasesReconciled
from messages.scheduler import (
    NO_CYCLE,
    ActiveLeasesRead,
    BillingTickTimer,
    ClosuresFlushed,
    CycleDeadline,
    LeaseEventReceived,
    LeaseRead,
    LeasesToRead,
    Reconcile,
    RunCycle,
    StartSchedule,
    StopSchedule,
    TenantChecked,
    TenantsRestored,
    TriggerWithdraw,
    Wake,
    WithdrawFinished,
)
from runtime.clock import EPOCH
from runtime.router import CHAIN, CHAIN_IO, LEDGER, SCHEDULER, tenant_address

__all__ = ["SchedulerDecisions", "TenantEntry", "Cycle", "next_wake", "MAX_ALONE", "FOREIGN_READS"]

#: Leases near the end of their credit a cycle asks to be withdrawn alone at
#: most, beyond the one each named batch carries (``actors.withdraw_cycle``):
#: each is a paid tx of its own, and a cycle must stay a bounded number of
#: txs whatever the tenants do.
MAX_ALONE = 50

#: Reads of another provider's auto-closed lease (to learn its tenant) tried
#: at most, with the lease reads' backoff (10, 20, 40 s): the read only
#: decides whether to withdraw early from a tenant we share, whose credit the
#: other providers are taking; a node down for longer leaves that to the
#: regular withdraw, which collects the same fees later.
FOREIGN_READS = 4

#: Such leases being read again at most: a flood of forged auto-close events
#: (each naming a lease of its own) must not grow the retries without bound.
MAX_FOREIGN_PENDING = 1_000


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class TenantEntry:
    """What the scheduler keeps per tenant: enough to plan wakes and supervise."""

    leases: frozenset[str]
    depletion_at: datetime | None = None
    recheck_at: datetime | None = None
    #: the monitor has been given the leases' details from a chain read
    synced: bool = False


class _Synced(NamedTuple):
    """What a lease sync saw and left: a later sync of the same listing, with no entry moved
    since, would find every tenant as this one left it."""

    #: ``_tenants_changed`` once this sync was done
    changes: int
    #: the listing's lease uuids, in its order, and each lease's tenant (which the chain never
    #: changes, but a listing that said otherwise would be a new listing)
    uuids: tuple[str, ...]
    tenants: tuple[str, ...]
    #: the tenants it listed
    listed: frozenset[str]
    #: the listed tenants it told of leases kept though no longer listed: told again each sync
    retold: frozenset[str]


_uuid_of = attrgetter("uuid")
_lease_tenant = attrgetter("tenant")


@dataclass
class Cycle:
    id: int
    reason: str
    withdraw: bool
    started: datetime
    phase: str = "withdrawing"  # withdrawing -> reading -> checking -> closing
    waiting: set[str] = field(default_factory=set)
    closing: int = 0


def next_wake(
    now: datetime,
    settings: SchedulerSettings,
    withdraw_due: datetime,
    depletion: datetime | None,
    recheck: datetime | None,
    retry: datetime | None = None,
    check_due: datetime | None = None,
) -> tuple[datetime, str]:
    """When to wake next and why (the earliest candidate; ties go to the first listed).

    ``check_due``: when the regular credit check is due, from its own last
    run; without it (a caller that keeps none), ``credit_check_interval``
    from now when it is shorter than the withdraw interval.
    """
    candidates: list[tuple[datetime, str]] = [(withdraw_due, "interval")]
    if check_due is not None:
        candidates.append((max(check_due, now), "check"))
    elif settings.check_interval < settings.withdraw_interval:
        candidates.append((now + settings.check_interval, "check"))
    if depletion is not None:
        at = depletion - settings.depletion_check_buffer
        candidates.append((at if at > now else now + settings.depletion_check_buffer, "depletion"))
    if recheck is not None:
        candidates.append((max(recheck, now), "recheck"))
    if retry is not None:
        candidates.append((max(retry, now), "retry"))
    best = candidates[0]
    for c in candidates[1:]:
        if c[0] < best[0]:
            best = c
    return best


class SchedulerDecisions:
    def __init__(
        self,
        settings: SchedulerSettings,
        provider_uuid: str,
        billing_tick_interval: timedelta | None = None,
    ) -> None:
        self.settings = settings
        self.provider_uuid = provider_uuid
        self.billing_tick_interval = billing_tick_interval or None
        self.tenants: dict[str, TenantEntry] = {}
        #: counts changes to ``tenants`` (an entry added, dropped, or its leases or ``synced``
        #: changed), so that a lease sync can tell whether anything moved since the last one
        self._tenants_changed = 0
        #: what the last lease sync saw and left (``_Synced``), for a sync of the same listing
        self._synced: _Synced | None = None
        self.cycle: Cycle | None = None
        #: cycles begun so far; a cycle's id is its number
        self.cycles_started = 0
        self.started_at: datetime | None = None
        self.last_withdraw_at: datetime | None = None
        #: the start of the last cycle that had every tenant's credit read: the regular check's anchor
        self.last_check_at: datetime | None = None
        self.stopped = False
        self.wake_token = 0
        self.wake_at: datetime | None = None
        self.pending: list[tuple[str, bool | None]] = []  # (reason, withdraw) to run after this cycle
        #: leases to be read from the chain for the books (``actors.lease_reads``)
        self.lease_reads = LeaseReads()
        #: leases found ended by a read: the tx that ended each is found and booked (``actors.close_search``)
        self.close_searches = CloseSearches()
        #: other providers' leases auto-closed without a tenant named, read to learn whose they
        #: were: lease uuid -> its failed reads so far (``FOREIGN_READS``)
        self._exhausted_elsewhere: dict[str, int] = {}
        #: an active-lease read has succeeded since the start: the chain has answered
        self.reached = False
        #: active-lease reads failed in a row before the chain first answered, and when to try again
        self.unreached_tries = 0
        self.retry_at: datetime | None = None
        #: the last withdraw ended on a passing error: a retry withdraws again
        self.withdraw_failed = False

    # -- dispatch ---------------------------------------------------------------
    def handle(self, message: Any, now: datetime) -> list[Effect]:
        handler = self._handlers.get(type(message))
        if handler is None:
            raise TypeError(f"SchedulerActor cannot handle {type(message).__name__}")
        return handler(self, message, now)

    def recover(self, message: Any, now: datetime) -> list[Effect]:
        """Handling ``message`` raised: keep the cadence alive.

        A tenant's verdict that could not be taken is asked for again soon
        (an early re-check: what it said, a depletion or a grace window, is
        lost), and its check cycle does not wait for it. The wake timer is
        set at the end of a cycle and the cycle's deadline at its start, each
        by the handler that failed: whichever was lost is set again (a second
        deadline for a cycle is harmless: the first to fire ends it, the
        other finds it gone).
        """
        if self.stopped:
            return []
        if isinstance(message, TenantChecked):
            entry = self.tenants.get(message.tenant)
            if entry is not None:
                retry = now + self.settings.credit_check_retry_interval
                entry.recheck_at = min(entry.recheck_at or retry, retry)
            checking = self._current(message.cycle, "checking")
            if checking is not None and message.tenant in checking.waiting:
                checking.waiting.discard(message.tenant)
                if not checking.waiting:
                    return self._end_check(now)
        c = self.cycle
        if c is not None:
            return [Send(SCHEDULER, CycleDeadline(c.id), at=now + self.settings.cycle_timeout)]
        return self._plan_wake(now)  # nothing before the start: the start plans the first wake

    # -- control ----------------------------------------------------------------
    def _start(self, message: StartSchedule, now: datetime) -> list[Effect]:
        if self.stopped or self.started_at is not None:
            return []
        self.started_at = now
        out: list[Effect] = [Note("scheduler started", event="scheduler_started")]
        if self.billing_tick_interval:
            out.append(Send(LEDGER, BillingTickDue(now)))
            out.append(Send(SCHEDULER, BillingTickTimer(), at=now + self.billing_tick_interval))
        if self.cycle is None:
            out += self._plan_wake(now)
        return out

    def _stop(self, message: StopSchedule, now: datetime) -> list[Effect]:
        self.stopped = True
        self.wake_token += 1  # any timer already set is now stale
        self.pending.clear()
        return [Note("scheduler stopped: no further cycles", event="scheduler_stopped")]

    def _wake(self, message: Wake, now: datetime) -> list[Effect]:
        if self.stopped or message.token != self.wake_token:
            return []  # superseded by a newer wake, or stopped
        self.wake_at = None
        return self._begin(message.reason, now)

    def _trigger(self, message: TriggerWithdraw, now: datetime) -> list[Effect]:
        if self.stopped:
            return [Note(f"withdraw trigger from {message.source} ignored: stopped", event="trigger_ignored")]
        return self._begin(f"trigger from {message.source}", now, withdraw=True)

    def _run_once(self, message: RunCycle, now: datetime) -> list[Effect]:
        if self.stopped:
            return [Note("withdraw_once ignored: stopped", event="trigger_ignored")]
        return self._begin("withdraw_once", now, withdraw=message.withdraw)

    def _reconcile(self, message: Reconcile, now: datetime) -> list[Effect]:
        if self.stopped:
            return []
        return self._begin(f"reconcile after {message.source}", now, withdraw=False)

    def _restored(self, message: TenantsRestored, now: datetime) -> list[Effect]:
        out: list[Effect] = []
        for snap in message.snapshots:
            if not snap.lease_uuids or snap.tenant in self.tenants:
                continue
            self.tenants[snap.tenant] = TenantEntry(
                frozenset(snap.lease_uuids), snap.depletion_at, snap.recheck_at
            )
            self._tenants_changed += 1
            out.append(Spawn(snap.tenant, (TenantRestored(snap),)))
        return [Note(f"restored {len(out)} tenant(s) from the ledger", event="tenants_restored", fields=(("tenants", len(out)),))] + out

    def _billing_tick(self, message: BillingTickTimer, now: datetime) -> list[Effect]:
        if self.stopped or not self.billing_tick_interval:
            return []
        return [
            Send(LEDGER, BillingTickDue(now)),
            Send(SCHEDULER, BillingTickTimer(), at=now + self.billing_tick_interval),
        ]

    # -- the cycle ----------------------------------------------------------------
    def _begin(self, reason: str, now: datetime, withdraw: bool | None = None) -> list[Effect]:
        if self.cycle is not None:
            self.pending.append((reason, withdraw))
            return [Note(
                f"{reason}: cycle {self.cycle.id} still running, runs after it",
                event="cycle_queued", fields=(("reason", reason), ("running", self.cycle.id)),
            )]
        if withdraw is None:
            withdraw = self._withdraws(reason, now)
        # An early re-check that is not also a due withdraw reads only the
        # tenants that asked for it: one tenant's grace window must not cost
        # a credit read of every tenant every 30 s.
        # When the regular check is due too, every tenant is read (its deadline
        # is its own: a re-check neither moves nor skips it).
        only = None
        if reason == "recheck" and not withdraw and now < self._check_due():
            only = {t for t, e in self.tenants.items() if e.recheck_at is not None and e.recheck_at <= now}
        self.cycles_started += 1
        self.cycle = Cycle(self.cycles_started, reason, withdraw, now)
        if withdraw:
            what = "withdraw, then credit check"
        elif only is not None:
            what = f"credit check of {len(only)} tenant(s) due a re-check"
        else:
            what = "credit check"
        out: list[Effect] = [
            Note(
                f"cycle {self.cycles_started} ({reason}): {what}",
                event="cycle_started",
                fields=(("cycle", self.cycles_started), ("reason", reason), ("withdraw", withdraw)),
                # A re-check reads only the tenants that asked for it, each of which said when.
                level="debug" if only is not None else "info",
            ),
            Send(SCHEDULER, CycleDeadline(self.cycles_started), at=now + self.settings.cycle_timeout),
        ]
        if withdraw:
            out.append(Send(CHAIN, WithdrawRequested(self.cycles_started, self._near_the_end(now))))
        elif only is not None:
            out += self._check(only, now)
        else:
            out += self._read_leases()
        return out

    def _near_the_end(self, now: datetime) -> tuple[str, ...]:
        """Leases of tenants whose credit runs out before the next check, or is gone: never two
        in one named withdraw, so that what an auto-close moves is known (see
        ``actors.withdraw_cycle``). Soonest first, as many as the named batches of every
        lease carry one each, and ``MAX_ALONE`` more."""
        horizon = now + self.settings.check_interval
        near = sorted(
            (e.depletion_at or now, u)
            for e in self.tenants.values()
            if e.recheck_at is not None or (e.depletion_at is not None and e.depletion_at <= horizon)
            for u in e.leases
        )
        leases = sum(len(e.leases) for e in self.tenants.values())
        batches = -(-leases // (MAX_BATCH_LEASE_SIZE - 1))
        return tuple(sorted(u for _, u in near[: batches + MAX_ALONE]))

    def _current(self, cycle: int, phase: str) -> Cycle | None:
        c = self.cycle
        return c if c is not None and c.id == cycle and c.phase == phase else None

    def _read_leases(self) -> list[Effect]:
        assert self.cycle is not None
        self.cycle.phase = "reading"
        return [Send(CHAIN_IO, ActiveLeasesCall(self.cycle.id, SCHEDULER))]

    def _withdraw_finished(self, message: WithdrawFinished, now: datetime) -> list[Effect]:
        c = self._current(message.cycle, "withdrawing")
        if c is None:
            return []
        out: list[Effect] = []
        # The interval runs from this attempt whatever its outcome (the seed's
        # ticker does not speed up on errors): a withdraw that keeps failing
        # must not leave the withdraw "due" and wake the scheduler at once,
        # over and over.
        self.last_withdraw_at = c.started
        self.withdraw_failed = message.error is not None and message.error.transient
        if message.error is not None:
            out.append(
                Note(
                    f"cycle {c.id}: withdraw ended early after {message.pages} page(s) "
                    f"({format_coins(message.total_amounts)} withdrawn): {message.error.message}",
                    event="withdraw_ended_early",
                    fields=(("cycle", c.id), ("pages", message.pages), ("withdrawn", message.total_amounts),
                            ("error", message.error.message)),
                    level="warning",
                )
            )
        return out + self._read_leases()

    def _leases_read(self, message: ActiveLeasesRead, now: datetime) -> list[Effect]:
        c = self._current(message.cycle, "reading")
        if c is None:
            return []
        out: list[Effect] = []
        if message.error is not None and not self.reached:
            out.append(self._unreached(c, message.error.message, now))
        elif message.error is not None:
            out.append(
                Note(
                    f"cycle {c.id}: could not read active leases ({message.error.message}); "
                    f"checking the {len(self.tenants)} tenant(s) already known",
                    event="active_leases_unread",
                    fields=(("cycle", c.id), ("error", message.error.message)),
                    level="warning",
                )
            )
        else:
            self.reached, self.unreached_tries, self.retry_at = True, 0, None
            out += self._sync(message.leases, now)
        self.last_check_at = c.started  # every tenant is read now: the regular check's next deadline runs from here
        return out + self._check(set(self.tenants), now)

    def _unreached(self, c: Cycle, error: str, now: datetime) -> Note:
        """The chain has not answered since the start: the next try is the ``retry`` wake."""
        s = self.settings
        self.unreached_tries += 1
        delay = min(s.initial_backoff * 2 ** (self.unreached_tries - 1), s.credit_check_retry_interval)
        self.retry_at = now + delay
        return Note(
            f"cycle {c.id}: the chain has not answered since the start ({error}); "
            f"{self.unreached_tries} tries, the next in {delay.total_seconds():g}s",
            event="chain_unreached",
            fields=(("cycle", c.id), ("tries", self.unreached_tries), ("retry_at", self.retry_at), ("error", error)),
            level="warning",
        )

    def _check(self, tenants: set[str], now: datetime) -> list[Effect]:
        """Have each tenant's credit read; its monitor answers with ``TenantChecked``."""
        c = self.cycle
        assert c is not None
        c.phase = "checking"
        c.waiting = set(tenants)
        if not c.waiting:
            return self._end_check(now)
        return [Send(CHAIN_IO, CreditReadsCall(c.id, tuple(sorted(tenants))))]

    def _sync(self, leases: tuple[Lease, ...], now: datetime) -> list[Effect]:
        """Make the tenant monitors match the chain's active leases."""
        uuids, owners = tuple(map(_uuid_of, leases)), tuple(map(_lease_tenant, leases))
        last = self._synced
        groups: defaultdict[str, list[Lease]] = defaultdict(list)
        if (last is not None and last.changes == self._tenants_changed
                and last.uuids == uuids and last.tenants == owners):
            # The same listing as the last sync's, and no entry moved since: every tenant it
            # left matching still matches (at 10,000 tenants, 40-60 ms a cycle to find that
            # out lease by lease). Only those it re-told are re-told, with this listing's leases.
            listed: Collection[str] = last.listed
            if last.retold:
                for lease in leases:
                    if lease.tenant in last.retold:
                        groups[lease.tenant].append(lease)
        else:
            for lease in leases:
                groups[lease.tenant].append(lease)
            listed = groups
        out: list[Effect] = []
        started = 0
        tenants = self.tenants
        vanished: list[str] = []  # leases ended unseen: kept until a read of each says so
        retold: set[str] = set()  # listed tenants a sync of the same listing tells again
        for tenant, tenant_leases in groups.items():
            uuids_of_tenant = frozenset([lease.uuid for lease in tenant_leases])
            entry = tenants.get(tenant)
            if entry is None:
                self.tenants[tenant] = TenantEntry(uuids_of_tenant, synced=True)
                out.append(Spawn(tenant, (LeasesSynced(tuple(tenant_leases)),)))
                started += 1
            elif not entry.synced or entry.leases != uuids_of_tenant:
                kept = entry.leases - uuids_of_tenant
                vanished += kept
                if kept:
                    retold.add(tenant)
                entry.leases, entry.synced = uuids_of_tenant | kept, True
                out.append(Send(tenant_address(tenant), LeasesSynced(tuple(tenant_leases), tuple(sorted(kept)))))
        for tenant in [t for t in self.tenants if t not in listed]:
            # No active lease listed any more: each is read before it counts as
            # ended, and the monitor retires when the last one has.
            entry = self.tenants[tenant]
            vanished += entry.leases
            out.append(Send(tenant_address(tenant), LeasesSynced((), tuple(sorted(entry.leases)))))
        if listed is groups:
            self._tenants_changed += 1
            self._synced = _Synced(self._tenants_changed, uuids, owners, frozenset(groups), frozenset(retold))
        # The complete set: the ledger learns the prices of leases first heard
        # of from an event; the leases it no longer lists are read, each, and
        # end for the monitors and the books only when that read says so.
        out.append(Send(LEDGER, LeasesReconciled(now, tuple(leases))))
        out += self.lease_reads.ask(sorted(vanished)) + self.lease_reads.retry()
        if started or vanished:
            out.append(Note(
                f"tenants: {started} new, {len(self.tenants)} watched; {len(vanished)} lease(s) no longer "
                "listed as active, read to confirm they ended",
                event="tenants_synced",
                fields=(("new", started), ("watched", len(self.tenants)), ("unlisted", len(vanished))),
            ))
        return out

    def _checked(self, message: TenantChecked, now: datetime) -> list[Effect]:
        entry = self.tenants.get(message.tenant)
        if entry is not None:
            entry.depletion_at = message.depletion_at
            entry.recheck_at = message.recheck_at
        c = self._current(message.cycle, "checking")
        if c is None or message.tenant not in c.waiting:
            return []
        c.waiting.discard(message.tenant)
        c.closing += len(message.closing)
        if not c.waiting:
            return self._end_check(now)
        return []

    def _end_check(self, now: datetime) -> list[Effect]:
        c = self.cycle
        assert c is not None
        if c.closing:
            c.phase = "closing"
            return [Send(CHAIN, FlushClosures(c.id))]
        return self._finish(now)

    def _flushed(self, message: ClosuresFlushed, now: datetime) -> list[Effect]:
        out: list[Effect] = []
        if message.failed:
            retry = message.retry_at or now + self.settings.credit_check_retry_interval
            failed = set(message.failed)
            for entry in self.tenants.values():
                if entry.leases & failed:
                    entry.recheck_at = min(entry.recheck_at or retry, retry)
        gone = set(message.closed) | set(message.already_closed)
        if gone:
            out += self._drop_leases(gone)
        # Ours were booked from their tx's answer; another's close (the tenant's) is read, and found.
        out += self.close_searches.booked_by_us(message.closed, looked_up=message.cycle == NO_CYCLE)
        out += self.lease_reads.ask(message.already_closed)
        if self._current(message.cycle, "closing") is None:
            return out
        if message.closed or message.already_closed or message.failed:
            out.append(
                Note(
                    f"cycle {message.cycle}: closed {len(message.closed)} lease(s), "
                    f"{len(message.already_closed)} already closed, {len(message.failed)} failed",
                    event="closures_done",
                    fields=(("cycle", message.cycle), ("closed", len(message.closed)),
                            ("already_closed", len(message.already_closed)), ("failed", len(message.failed))),
                    level="warning" if message.failed else "info",
                )
            )
        return out + self._finish(now)

    def _drop_leases(self, gone: set[str]) -> list[Effect]:
        out: list[Effect] = []
        for tenant in list(self.tenants):
            entry = self.tenants[tenant]
            if entry.leases & gone:
                entry.leases = entry.leases - gone
                self._tenants_changed += 1
                if not entry.leases:
                    del self.tenants[tenant]
                    out.append(Retire(tenant))
        return out

    def _deadline(self, message: CycleDeadline, now: datetime) -> list[Effect]:
        c = self.cycle
        if c is None or c.id != message.cycle:
            return []
        if c.phase == "checking":
            missing = sorted(c.waiting)
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            c.waiting.clear()
            return [Note(
                f"cycle {c.id}: {len(missing)} tenant(s) did not answer in time ({shown}); going on",
                event="tenants_late", fields=(("cycle", c.id), ("tenants", len(missing))), level="warning",
            )] + (
                self._end_check(now)
            )
        return [Note(
            f"cycle {c.id}: still {c.phase} after {self.settings.cycle_timeout}; abandoned",
            event="cycle_abandoned", fields=(("cycle", c.id), ("phase", c.phase)), level="warning",
        )] + self._finish(
            now
        )

    def _withdraws(self, reason: str, now: datetime) -> bool:
        """Whether a cycle begun for ``reason`` at ``now``, not told, withdraws first."""
        return reason == "depletion" or now >= self._withdraw_due() or (reason == "retry" and self.withdraw_failed)

    def _finish(self, now: datetime) -> list[Effect]:
        self.cycle = None
        if self.pending and not self.stopped:
            queued, self.pending = self.pending, []
            # One cycle does what each queued one would: a whole check if any is more than an early
            # re-check (which reads only the tenants that asked: a reconnect's reconcile queued
            # behind one read no lease list, and a lease opened in the gap went unwatched), and a
            # withdraw if any would withdraw (a trigger must not be lost behind a reconcile).
            whole = [q for q in queued if q[0] != "recheck"]
            reason, withdraw = (whole or queued)[0]
            if any(w or (w is None and self._withdraws(r, now)) for r, w in queued):
                withdraw = True
            return self._begin(reason, now, withdraw)
        return self._plan_wake(now)

    # -- wakes --------------------------------------------------------------------
    def _withdraw_due(self) -> datetime:
        """When the paid withdraw is next due; at once if none was ever done nor scheduled."""
        base = self.last_withdraw_at or self.started_at
        if base is None:
            return EPOCH
        return base + self.settings.withdraw_interval

    def _check_due(self) -> datetime:
        """When every tenant's credit is next due a read: ``check_interval`` after the last full check's start."""
        base = self.last_check_at or self.started_at
        if base is None:
            return EPOCH
        return base + self.settings.check_interval

    def _plan_wake(self, now: datetime) -> list[Effect]:
        if self.stopped or self.started_at is None:
            return []
        depletion = min((e.depletion_at for e in self.tenants.values() if e.depletion_at), default=None)
        recheck = min((e.recheck_at for e in self.tenants.values() if e.recheck_at), default=None)
        at, reason = next_wake(
            now, self.settings, self._withdraw_due(), depletion, recheck, self.retry_at, check_due=self._check_due()
        )
        self.wake_token += 1
        self.wake_at = at
        detail = ""
        if reason == "depletion" and depletion is not None:
            detail = f", {self.settings.depletion_check_buffer.total_seconds():g}s before a depletion at {_when(depletion)}"
        return [
            Note(
                f"next wake at {_when(at)} ({reason}{detail})",
                event="wake_planned",
                fields=(("at", at), ("reason", reason)),
                # An early re-check is the wake a tenant asked for, and said so.
                level="debug" if reason == "recheck" else "info",
            ),
            Send(SCHEDULER, Wake(reason, self.wake_token), at=at),
        ]

    # -- lease events -----------------------------------------------------------------
    def _lease_event(self, message: LeaseEventReceived, now: datetime) -> list[Effect]:
        """An event of ours is a hint: the lease is read, and only that read changes anything.

        What is watched (a monitor started, a lease ended) and what the books
        hold (the lease's price and times, what it settled) come from the
        chain's record, never from a frame's attributes: a forged but
        well-formed frame (a close of an ACTIVE lease, a settlement of
        -1,000,000 or 10^26) changes nothing until a read confirms it
        (``_lease_read``). The tx an ending event names is kept, a hint
        for finding what that tx settled (``actors.close_search``).
        """
        ev = message.event
        if ev.provider_uuid == self.provider_uuid:
            if ev.kind in ENDING_KINDS and ev.tx_hash:
                self.close_searches.hint(ev.lease_uuid, ev.tx_hash)
            return self.lease_reads.ask((ev.lease_uuid,))
        if ev.credit_exhausted:
            if not ev.tenant:
                if ev.lease_uuid in self.lease_reads.waiting:
                    return []  # a lease of ours being read (a forged event names it): its answer is ours
                # Another provider's named-withdraw auto-close names no tenant: read the lease for it.
                self._exhausted_elsewhere.setdefault(ev.lease_uuid, 0)
                return [Send(CHAIN_IO, LeaseCall(ev.lease_uuid))]
            return self._exhausted_elsewhere_for(ev.lease_uuid, ev.tenant, ev.reason, now)
        return []

    def _exhausted_elsewhere_for(self, lease_uuid: str, tenant: str, reason: str, now: datetime) -> list[Effect]:
        """Another provider's lease of ``tenant`` ended on exhausted credit: withdraw now if we share it."""
        if tenant not in self.tenants:
            return []
        out: list[Effect] = [
            Note(
                f"another provider's lease {lease_uuid} of shared tenant {tenant} was auto-closed "
                f"({reason or 'credit exhausted'}): withdrawing now",
                tenant,
                event="shared_tenant_auto_closed",
                fields=(("lease", lease_uuid), ("tenant", tenant)),
            )
        ]
        if not self.stopped:
            out += self._begin(f"auto-close elsewhere for {tenant}", now, withdraw=True)
        return out

    def _lease_read(self, message: LeaseRead, now: datetime) -> list[Effect]:
        failures = self._exhausted_elsewhere.pop(message.lease_uuid, None)
        # Our own read of it out too (a forged event named a lease of ours): the answer is that read's.
        if failures is not None and message.lease_uuid not in self.lease_reads.waiting:
            lease = message.lease
            if lease is None and not not_found(message):
                return self._foreign_read_failed(message, failures + 1, now)
            if lease is None or lease.provider_uuid == self.provider_uuid:
                return self._ended_by_read(message, now) + self._opened_by_read(message)
            return self._exhausted_elsewhere_for(lease.uuid, lease.tenant, lease.closure_reason, now)
        stale = message.lease_uuid in self.lease_reads.again  # an answer a newer read supersedes
        out = self.lease_reads.answered(message, now)
        if stale:
            return out
        lease = message.lease
        if lease is not None and lease.provider_uuid == self.provider_uuid:
            # Its closing tx, for what it settled: the search goes into the books ahead of the read.
            out = self.close_searches.ended(lease, now) + out
        return self._ended_by_read(message, now) + self._opened_by_read(message) + out

    def _foreign_read_failed(self, message: LeaseRead, failures: int, now: datetime) -> list[Effect]:
        """The read of another provider's auto-closed lease failed: no answer, so it is read again
        (``FOREIGN_READS`` in all, with the lease reads' backoff), not taken as "not ours to mind"."""
        uuid = message.lease_uuid
        why = message.error.message if message.error is not None else "no answer"
        if failures >= FOREIGN_READS or len(self._exhausted_elsewhere) >= MAX_FOREIGN_PENDING:
            return [Note(
                f"another provider's lease {uuid} was auto-closed (credit exhausted), and its read failed "
                f"{failures} time(s), the last: {why}: whether its tenant is one we share is not known, so no "
                "early withdraw; the regular withdraw collects what is owed",
                event="shared_tenant_unknown", fields=(("lease", uuid), ("failures", failures)), level="warning",
            )]
        self._exhausted_elsewhere[uuid] = failures
        delay = retry_delay(failures)
        return [
            Note(
                f"another provider's lease {uuid} was auto-closed (credit exhausted); the read for its tenant "
                f"failed ({why}), {failures} in a row: read again in {delay.total_seconds():g}s",
                event="shared_tenant_read_failed", fields=(("lease", uuid), ("failures", failures)), level="warning",
            ),
            Send(CHAIN_IO, LeaseCall(uuid), at=now + delay),
        ]

    def _close_searched(self, message: CloseSearchAnswered, now: datetime) -> list[Effect]:
        return self.close_searches.answered(message, now)

    def _opened_by_read(self, message: LeaseRead) -> list[Effect]:
        """A lease of ours the chain says is PENDING or ACTIVE, not watched yet: its tenant's monitor gets it."""
        lease = message.lease
        if lease is None or lease.state not in ("ACTIVE", "PENDING") or lease.provider_uuid != self.provider_uuid:
            return []
        entry = self.tenants.get(lease.tenant)
        if entry is None:
            self.tenants[lease.tenant] = TenantEntry(frozenset({lease.uuid}))
            self._tenants_changed += 1
            return [
                Spawn(lease.tenant, (LeaseOpened(lease),)),
                Note(
                    f"lease {lease.uuid} {lease.state.lower()}: now watching tenant {lease.tenant}", lease.tenant,
                    event="tenant_watched", fields=(("lease", lease.uuid),),
                ),
            ]
        if lease.uuid in entry.leases:
            return []
        entry.leases = entry.leases | {lease.uuid}
        entry.synced = False
        self._tenants_changed += 1
        return [Send(tenant_address(lease.tenant), LeaseOpened(lease))]

    def _ended_by_read(self, message: LeaseRead, now: datetime) -> list[Effect]:
        """A lease of ours the listing no longer shows ends once its own read says it did."""
        lease = message.lease
        if lease is None or lease.state in ("ACTIVE", "PENDING") or lease.provider_uuid != self.provider_uuid:
            return []
        entry = self.tenants.get(lease.tenant)
        if entry is None or lease.uuid not in entry.leases:
            return []
        why = f" ({lease.closure_reason})" if lease.closure_reason else ""
        out: list[Effect] = [
            Send(tenant_address(lease.tenant), LeaseGone(lease.uuid, lease.state.lower())),
            Note(
                f"lease {lease.uuid} of tenant {lease.tenant} {lease.state.lower()}{why}", lease.tenant,
                event="lease_ended", fields=(("lease", lease.uuid), ("kind", lease.state.lower()), ("reason", lease.closure_reason)),
            ),
        ]
        out += self._drop_leases({lease.uuid})
        c = self.cycle
        if lease.tenant not in self.tenants and c is not None and c.phase == "checking" and lease.tenant in c.waiting:
            # Retired: it will not answer this check.
            c.waiting.discard(lease.tenant)
            if not c.waiting:
                out += self._end_check(now)
        return out

    def _leases_to_read(self, message: LeasesToRead, now: datetime) -> list[Effect]:
        out = self.lease_reads.ask(message.lease_uuids)
        if out:
            out.insert(0, Note(
                f"reading {len(out)} lease(s) the books hold without a price or a chain close time",
                event="leases_to_read", fields=(("leases", len(out)),),
            ))
        return out

    _handlers = {
        StartSchedule: _start,
        StopSchedule: _stop,
        Wake: _wake,
        TriggerWithdraw: _trigger,
        RunCycle: _run_once,
        Reconcile: _reconcile,
        TenantsRestored: _restored,
        BillingTickTimer: _billing_tick,
        WithdrawFinished: _withdraw_finished,
        ActiveLeasesRead: _leases_read,
        TenantChecked: _checked,
        ClosuresFlushed: _flushed,
        CycleDeadline: _deadline,
        LeaseEventReceived: _lease_event,
        LeaseRead: _lease_read,
        LeasesToRead: _leases_to_read,
        CloseSearchAnswered: _close_searched,
    }
