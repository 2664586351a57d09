"""One tenant's credit watch: the decisions of a ``CreditMonitorActor``.

``TenantCredit.handle(message, now)`` takes one message and returns what to
do; it reads no clock and does no I/O. Its rules (seed 000, issue 2, and the
real chain's arithmetic, ``actors.credit_rule``):

- A read is the tenant's credit account and every ACTIVE lease of the
  tenant, of every provider; it is judged per lease of ours and per denom
  the way the chain spends credit (reservation-aware on the current chain,
  raw balance on v2.1.0, others' unsettled accrual counted). A read missing
  either part is a failed read (``chain-io`` sends ``CreditReadFailed``).
- A read is stamped with the height the node answered at. One from below
  the highest height already read for the tenant (a node further behind
  than the last one asked) is stale: it is taken as a failed read, whatever
  it says (it never clears a grace window, never counts as credit back).
  A closure carries its read's height, and the chain actor closes nothing on
  a read further behind the chain than ``max_node_lag`` (``actors.closures``).
- A read whose balance fell more than the tenant's leases could have spent
  since the last accepted read (``actors.credit_drop``) is taken as a failed
  read, with an early re-check; the next read that says the same is believed
  (a lease created and closed between two reads is seen by neither).
- A failed credit read never closes anything. It counts in
  ``consecutive_errs``; from ``credit_check_error_threshold`` failures in a
  row the tenant asks for an early re-check after
  ``credit_check_retry_interval``. A successful read resets the count.
- A lease whose credit is gone starts the tenant's grace window of
  ``credit_check_zero_grace_period``, re-checked every retry interval. The
  leases still gone when the window is over are closed; a lease that is
  paid for is not (the chain would not close it either). A read on which no
  lease is gone clears the window.
- A closure is asked for in the check cycle of the read that decided it.
  The chain actor sends only a cycle's own requests when that cycle ends,
  and drops older ones (a read that arrived after its cycle's deadline), so
  a request is never sent on a read from long before: the next read asks
  again if the credit is still gone, and a read that finds credit forgets it.
  The note of every close names the rule and the numbers that decided it.
- Otherwise the depletion time is the earliest runway of our leases: the
  first second at which the same rule would find one gone.
- A failed close leaves the window as it is, so the next check closes at once
  instead of waiting a new window.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from actors.credit_drop import SpendReference, implausible_drop, reference
from actors.credit_rule import CreditJudge, LeaseCredit
from actors.effects import Effect, Note, Send
from actors.scheduler_settings import SchedulerSettings
from messages.chain import ChainFailure, CreditEstimate, Lease
from messages.chain_actor import CreditCall
from messages.coins import Coin, coins, coins_to_dict, format_coins
from messages.credit import (
    CloseFailed,
    CloseRequested,
    CreditRead,
    CreditReadFailed,
    LeaseGone,
    LeaseOpened,
    LeasesClosed,
    LeasesSynced,
    TenantRestored,
    TenantSnapshot,
)
from messages.ledger import TenantForgotten, TenantStateChanged
from messages.scheduler import TenantChecked
from runtime.router import CHAIN, CHAIN_IO, LEDGER, SCHEDULER

__all__ = ["TenantCredit"]


def _when(t: datetime | None) -> str:
    return t.isoformat(" ", "seconds")[:19] if t else "-"


def _nonzero(values: tuple[Coin, ...]) -> dict[str, int]:
    """denom -> amount, zero amounts dropped: a missing denom and a zero one mean the same."""
    out = {c.denom: c.amount for c in values}
    if len(out) != len(values):  # a denom listed twice (not a canonical list): add them up
        out = coins_to_dict(values)
    if 0 in out.values():
        out = {d: a for d, a in out.items() if a}
    return out


def _why(leases: list[LeaseCredit]) -> str:
    """The numbers that decided, lease by lease."""
    return "; ".join(f"{v.lease_uuid} {v.detail}" for v in leases)


def _moved(before: datetime | None, after: datetime | None, tolerance: timedelta) -> bool:
    """Did an estimate change by more than ``tolerance`` (or appear, or vanish)?"""
    if before is None or after is None:
        return before is not after
    return abs(after - before) > tolerance


#: What ``leases.get`` gives for a lease that is not ours (None stands for ours, details lost).
_NOT_OURS = object()

#: What a monitor whose leases never lost their details restores charged denoms from: nothing (shared).
_NONE_RESTORED: frozenset[str] = frozenset()


class TenantCredit:
    """The state a tenant actor holds, and the rules that move it.

    Slots, not a ``__dict__``: a sidecar holds one per tenant for its whole life.
    """

    __slots__ = (
        "tenant", "settings", "leases", "last_balances", "last_sample_at", "consecutive_errs", "zero_since",
        "depletion_at", "recheck_at", "closing", "_closing_cycle", "_saved_key", "_charged",
        "_restored_charged", "_clamped", "_sorted", "_lease_changes", "read_height", "_reference", "_doubted",
        "_judge", "_read_coins", "_listed", "_quiet",
    )

    def __init__(self, tenant: str, settings: SchedulerSettings) -> None:
        self.tenant = tenant
        self.settings = settings
        #: our active leases of this tenant; None details until a chain read gives them
        self.leases: dict[str, Lease | None] = {}
        self.last_balances: dict[str, int] | None = None
        self.last_sample_at: datetime | None = None
        self.consecutive_errs = 0
        self.zero_since: datetime | None = None
        self.depletion_at: datetime | None = None
        self.recheck_at: datetime | None = None
        #: leases asked to be closed and not yet answered for
        self.closing: tuple[str, ...] = ()
        #: the check cycle ``closing`` was asked for in
        self._closing_cycle: int | None = None
        self._saved_key: tuple[Any, ...] | None = None
        self._charged: set[str] | None = None  # denoms our leases are charged in; None: recompute
        #: charged denoms as persisted, for leases whose details a restart lost
        self._restored_charged: frozenset[str] = _NONE_RESTORED
        #: the last estimate was clamped to the horizon
        self._clamped = False
        #: (sorted lease uuids, sorted charged denoms) for snapshots; None: recompute
        self._sorted: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        #: counts changes to ``leases``, so ``_save`` sees one without copying the keys
        self._lease_changes = 0
        #: the highest height a read of this tenant was answered at (0: none known)
        self.read_height = 0
        #: the last accepted read, which bounds how far the next can fall; in memory only
        self._reference: SpendReference | None = None
        #: the last read fell too far and was taken as failed: the next that falls as far is believed
        self._doubted = False
        #: the credit rule, keeping the last read's verdicts while the same read would get them again;
        #: made at the first read (10,000 monitors start at once, and are read later)
        self._judge: CreditJudge | None = None
        #: the balances of the last read as the chain listed them: the same list again (every
        #: read between two settlements) keeps ``last_balances`` the very same dict
        self._read_coins: tuple[Coin, ...] | None = None
        #: (``last_balances``, it as a coin list) for the snapshot, made once per new balances
        self._listed: tuple[dict[str, int] | None, tuple[Coin, ...] | None] = (None, None)
        #: the last message was a quiet read (set by ``_on_read`` and ``_quiet_read``; every
        #: message clears it first, so no change can come between it and the next read)
        self._quiet = False

    def _leases_changed(self) -> None:
        self._charged = self._sorted = None
        self._lease_changes += 1

    # -- snapshot ---------------------------------------------------------------
    def snapshot(self) -> TenantSnapshot:
        if self._sorted is None:
            self._sorted = (tuple(sorted(self.leases)), tuple(sorted(self._charged_denoms())))
        lease_uuids, charged = self._sorted
        return TenantSnapshot(
            tenant=self.tenant,
            lease_uuids=lease_uuids,
            last_balances=self._balances_listed(),
            last_sample_at=self.last_sample_at,
            consecutive_errs=self.consecutive_errs,
            zero_since=self.zero_since,
            depletion_at=self.depletion_at,
            recheck_at=self.recheck_at,
            closing=self.closing,
            charged_denoms=charged,
            read_height=self.read_height,
        )

    def _balances_listed(self) -> tuple[Coin, ...] | None:
        if self._listed[0] is not self.last_balances:
            b = self.last_balances
            self._listed = (b, coins(b) if b is not None else None)
        return self._listed[1]

    def _restore(self, s: TenantSnapshot) -> None:
        for u in s.lease_uuids:
            self.leases.setdefault(u, None)
        self._restored_charged = frozenset(s.charged_denoms)
        self._leases_changed()
        self.last_balances = coins_to_dict(s.last_balances) if s.last_balances is not None else None
        self._read_coins = None
        self.last_sample_at = s.last_sample_at
        self.consecutive_errs = s.consecutive_errs
        self.zero_since = s.zero_since
        self.depletion_at = s.depletion_at
        self.recheck_at = s.recheck_at
        self.read_height = s.read_height
        # A closure in flight when the process died has an unknown outcome:
        # forget it as pending; the next check sees the chain's truth and,
        # with the window kept, closes at once if the leases are still active.
        self.closing = ()

    # -- messages -----------------------------------------------------------------
    def handle(self, message: Any, now: datetime) -> list[Effect]:
        out: list[Effect] = []
        # Any message but a quiet read ends the run of quiet reads: the mark is cleared before
        # the message is handled (and ``recover`` clears one set by a read whose save raised).
        quiet, self._quiet = self._quiet, False
        if isinstance(message, CreditRead):
            if 0 < message.height < self.read_height:
                self._on_read_failed(self._stale(message), now, out)
            elif (doubt := self._doubt(message, now)) is not None:
                self._on_read_failed(doubt, now, out, recheck=True)
            else:
                self.read_height = max(self.read_height, message.height)
                self._reference = reference(message.account, message.leases, now)
                if not (quiet and self._quiet_read(message, now, out)):
                    self._on_read(message, now, out)
        elif isinstance(message, CreditReadFailed):
            self._on_read_failed(message, now, out)
        elif isinstance(message, LeasesSynced):
            kept = {u: self.leases.get(u) for u in message.kept}
            self.leases = {**kept, **{lease.uuid: lease for lease in message.leases}}
            self._leases_changed()
            self.closing = tuple(u for u in self.closing if u in self.leases)
        elif isinstance(message, LeaseOpened):
            self.leases[message.lease.uuid] = message.lease
            self._leases_changed()
            out.append(Note(f"tenant {self.tenant}: new lease {message.lease.uuid}", self.tenant))
        elif isinstance(message, LeaseGone):
            self._drop((message.lease_uuid,))
        elif isinstance(message, LeasesClosed):
            self._drop(message.lease_uuids)
            how = "were already closed on chain" if message.already_closed else f"closed ({message.reason})"
            out.append(Note(f"tenant {self.tenant}: leases {', '.join(message.lease_uuids)} {how}", self.tenant))
        elif isinstance(message, CloseFailed):
            self.closing = tuple(u for u in self.closing if u not in message.lease_uuids)
            out.append(
                Note(
                    f"tenant {self.tenant}: closing {len(message.lease_uuids)} lease(s) failed "
                    f"({message.error.message}); grace window kept, retried at the next check",
                    self.tenant,
                    event="close_failed", fields=(("leases", len(message.lease_uuids)),), level="warning",
                )
            )
        elif isinstance(message, TenantRestored):
            self._restore(message.snapshot)
            return out
        else:
            raise TypeError(f"TenantCredit cannot handle {type(message).__name__}")
        self._save(out)
        return out

    def recover(self, message: Any, now: datetime) -> list[Effect]:
        """Handling a read raised: its check cycle still gets a verdict, a failed read's (nothing closed).

        Without it the cycle would wait for this tenant until its deadline.
        The tenant asks for the early re-check, as after a failed read.
        """
        self._quiet = False
        if not isinstance(message, (CreditRead, CreditReadFailed)):
            return []
        self.recheck_at = now + self.settings.credit_check_retry_interval
        text = f"tenant {self.tenant}: its credit read could not be judged (see the log); nothing closed, re-check at {_when(self.recheck_at)}"
        out: list[Effect] = [Note(text, self.tenant, event="credit_read_unjudged", level="warning")]
        self._verdict(message.cycle, out, text)
        return out

    def _drop(self, lease_uuids: tuple[str, ...]) -> None:
        self._leases_changed()
        for u in lease_uuids:
            self.leases.pop(u, None)
        self.closing = tuple(u for u in self.closing if u not in lease_uuids)

    def _save(self, out: list[Effect]) -> None:
        """Persist what changed; a tenant with no lease left is forgotten instead.

        The monitor, not the scheduler, says "forget": it is the one writer of
        this tenant's state, so the ledger can never see a stale snapshot
        arrive after the tenant was dropped.
        """
        # Compare the raw fields first: building a snapshot for every read of
        # every tenant costs more than the decision itself. A field that did
        # not change holds the very same object, so the comparison is by
        # identity, item by item.
        key = (
            self._lease_changes,
            self.last_balances,
            self.last_sample_at,
            self.consecutive_errs,
            self.zero_since,
            self.depletion_at,
            self.recheck_at,
            self.closing,
            self.read_height,
        )
        if key == self._saved_key:
            return
        self._saved_key = key
        if self.leases:
            out.append(Send(LEDGER, TenantStateChanged(self.snapshot())))
        else:
            out.append(Send(LEDGER, TenantForgotten(self.tenant)))

    def _charged_denoms(self) -> set[str]:
        if self._charged is None:
            denoms: set[str] = set()
            unknown = False
            for lease in self.leases.values():
                if lease is None or not lease.items:  # a restart lost it, or only its event is known
                    unknown = True
                else:
                    denoms.update(d for d, r in lease.rate_per_second().items() if r > 0)
            if unknown:
                denoms |= self._restored_charged
            self._charged = denoms
        return self._charged

    def _stale(self, message: CreditRead) -> CreditReadFailed:
        """A read from below a height already read: a failed read, saying why."""
        return CreditReadFailed(message.cycle, ChainFailure(
            "credit_read",
            f"stale read: answered at height {message.height}, below height {self.read_height} already read "
            "for this tenant (a node further behind); taken as a failed read, whatever it says",
            transient=True,
        ))

    def _doubt(self, message: CreditRead, now: datetime) -> CreditReadFailed | None:
        """A read that fell further than its leases could spend, the first time: a failed read, saying why."""
        why = implausible_drop(self._reference, message.account, message.leases, now) if self._reference else None
        if why is None or self._doubted:
            self._doubted = False  # believed: a second read that fell as far, or one that did not fall
            return None
        self._doubted = True
        return CreditReadFailed(message.cycle, ChainFailure(
            "credit_read",
            f"implausible read at height {message.height}: {why}; taken as a failed read, "
            "believed if the next read says the same",
            transient=True,
        ))

    def _on_read_failed(self, message: CreditReadFailed, now: datetime, out: list[Effect], recheck: bool = False) -> None:
        """``recheck``: ask for the early re-check even below the error threshold (a read to confirm)."""
        s = self.settings
        self.consecutive_errs += 1
        if self.consecutive_errs >= s.credit_check_error_threshold:
            self.recheck_at = now + s.credit_check_retry_interval
            text = (
                f"tenant {self.tenant}: {self.consecutive_errs} failed credit reads in a row "
                f"({message.error.message}); nothing closed, re-check at {_when(self.recheck_at)}"
            )
        elif self.zero_since is not None or recheck:
            # Keep the grace window's re-checks going through a failed read;
            # or confirm a read that could not be believed at once.
            self.recheck_at = now + s.credit_check_retry_interval
            during = " during the grace window" if self.zero_since is not None else ""
            text = (
                f"tenant {self.tenant}: credit read failed{during} ({message.error.message}); "
                f"re-check at {_when(self.recheck_at)}"
            )
        else:
            self.recheck_at = None
            text = (
                f"tenant {self.tenant}: credit read failed ({self.consecutive_errs} in a row); nothing closed "
                f"({message.error.message})"
            )
        fields = self._fields() + (("error", message.error.message),)
        out.append(Note(text, self.tenant, event="credit_read_failed", fields=fields, level="warning"))
        self._verdict(message.cycle, out, text)

    def _quiet_read(self, message: CreditRead, now: datetime, out: list[Effect]) -> bool:
        """A read after a quiet one, with no message between: if it is the same read, what ``_on_read`` does.

        Between two settlements nearly every read of a tenant is its last
        read again, later. A read is quiet when ``_on_read`` ended it on one
        of its two paths without a note (no lease gone, the estimate not worth
        a note) and it changed no lease's details. It may have changed other
        state (new balances, the failure count, a re-check, a closure or a
        grace window cleared), but it leaves it where the same read, judged
        again, finds the judge's kept verdicts, no lease gone, the same
        balances, details and estimate, and only stamps the sample and sends
        the scheduler a verdict with no note. So when the credit judge would
        give its kept verdicts again (``CreditJudge.holds``), this does only
        that. Judging the read again, to find nothing, took a quarter of the
        decision cores' time in a replay (``bench/replay_speed.py``: 13.8
        against 9.8 us a record).

        Not the same read (another balance, reservation or lease detail), or
        past the time its verdicts hold (a runway, or the horizon in reach):
        False, and ``_on_read`` judges it.
        """
        judge = self._judge
        if judge is None or not judge.holds(message.account, message.leases, now):
            return False
        self.last_sample_at = now
        self._verdict(message.cycle, out, "")
        self._quiet = True
        return True

    def _on_read(self, message: CreditRead, now: datetime, out: list[Effect]) -> None:
        s = self.settings
        judge = self._judge
        if judge is None:
            judge = self._judge = CreditJudge()
        verdicts = judge(message.account, message.leases, self.leases, now)
        # A read that changes lease details is not quiet. Judged again it would most often
        # change nothing more; but one listing a lease of ours twice with other details (two
        # pages of a listing apart) changes them back and forth every time, and each change
        # is saved. Leaving all such reads unmarked costs one judged read per settlement.
        changes = self._lease_changes
        gone = [v for v in verdicts if v.gone]
        if message.leases_listed and (self.zero_since is not None or self.closing or gone):
            # Leases from the provider's listing, read before the account: good for
            # credit to spare, not for opening, keeping, clearing or acting on a grace
            # window. Nothing changes on it; the tenant is read again in full.
            out.append(Send(CHAIN_IO, CreditCall(message.cycle, self.tenant, full=True)))
            return
        self.consecutive_errs = 0
        listed = message.account.balances
        if listed != self._read_coins or self.last_balances is None:
            self._read_coins = listed
            self.last_balances = _nonzero(listed)
        balances = self.last_balances
        # The read's leases are the freshest details of ours (price, cursor, tranche).
        ours = self.leases
        for lease in message.leases:
            known = ours.get(lease.uuid, _NOT_OURS)
            if known is not _NOT_OURS and known != lease:
                ours[lease.uuid] = lease
                self._leases_changed()
        self.last_sample_at = now
        closing: tuple[str, ...] = ()
        #: a re-check inside a grace window already told: its line is for --log-level debug
        level = "info"
        if gone:
            if self.zero_since is not None:
                level = "debug"
            if self.zero_since is None:
                self.zero_since = now
            window_end = self.zero_since + s.credit_check_zero_grace_period
            self.depletion_at = None  # already depleted: the grace re-checks drive the wakes
            if self.closing and message.cycle != self._closing_cycle:
                # Asked for in an earlier cycle and not answered: if that
                # cycle ended without sending it, the chain actor dropped it.
                # This read is the fresh one to ask on.
                self.closing = ()
            to_close = [v for v in gone if v.lease_uuid not in self.closing]
            why = _why(gone)
            if now >= window_end and to_close:
                closing = tuple(sorted(v.lease_uuid for v in to_close))
                level = "info"
                self.closing = self.closing + closing
                self._closing_cycle = message.cycle
                self.recheck_at = now + s.credit_check_retry_interval
                text = (
                    f"tenant {self.tenant}: credit gone since {_when(self.zero_since)} for the whole "
                    f"grace window; closing {len(closing)} lease(s) by the {gone[0].rule}: {_why(to_close)}"
                )
                out.append(Send(CHAIN, CloseRequested(
                    message.cycle, self.tenant, closing, s.closure_reason, read_height=message.height
                )))
            elif self.closing:
                self.recheck_at = now + s.credit_check_retry_interval
                text = f"tenant {self.tenant}: credit gone; closure of {len(self.closing)} lease(s) pending"
            else:
                self.recheck_at = min(now + s.credit_check_retry_interval, window_end)
                text = (
                    f"tenant {self.tenant}: credit gone for {len(gone)} lease(s) (since {_when(self.zero_since)}) "
                    f"by the {gone[0].rule}: {why}; grace window ends {_when(window_end)}, "
                    f"re-check at {_when(self.recheck_at)}"
                )
        else:
            self.recheck_at = None
            if self.closing:
                # Credit again: a closure still waiting to be sent belongs to
                # an earlier cycle, which the chain actor drops.
                self.closing = ()
            prefix = ""
            if self.zero_since is not None:
                self.zero_since = None
                prefix = "credit back, grace window cleared; "
            soonest = None  # the first of the earliest runways
            for v in verdicts:
                if v.runway_at is not None and (soonest is None or v.runway_at < soonest.runway_at):
                    soonest = v
            new_at = soonest.runway_at if soonest else None
            clamped = soonest is not None and soonest.clamped
            if not prefix and clamped and self._clamped:
                # Beyond the horizon the clamped time moves with now: not news. (A clamped
                # estimate is the soonest only when every runway is clamped, since one inside
                # the horizon is sooner: moved with now, it stays the soonest. So the same
                # read later is quiet too.)
                self._quiet = self._lease_changes == changes
                self._verdict(message.cycle, out, "")
                return
            unchanged = not _moved(self.depletion_at, new_at, s.depletion_check_buffer)
            self._clamped = clamped
            if not prefix and unchanged:
                # Nothing an operator needs to read again; the estimate the
                # wakes are planned on stays the one already logged.
                self._quiet = self._lease_changes == changes
                self._verdict(message.cycle, out, "")
                return
            self.depletion_at = new_at
            if soonest is None:
                text = f"tenant {self.tenant}: {prefix}balance {format_coins(coins(balances))}, no lease of ours costs anything"
            else:
                clamp = " (clamped to the horizon)" if clamped else ""
                text = (
                    f"tenant {self.tenant}: {prefix}balance {format_coins(coins(balances))}, lease "
                    f"{soonest.lease_uuid} runs dry at {_when(new_at)}{clamp} by the {soonest.rule} "
                    f"({soonest.detail})"
                )
        event = "closing_requested" if closing else "credit_gone" if gone else "credit_checked"
        out.append(Note(text, self.tenant, event=event, fields=self._fields(), level=level))
        self._verdict(message.cycle, out, text, closing)

    def _fields(self) -> tuple[tuple[str, Any], ...]:
        """The decision's values, for the JSON log."""
        return (
            ("consecutive_errs", self.consecutive_errs), ("zero_since", self.zero_since),
            ("depletion_at", self.depletion_at), ("recheck_at", self.recheck_at), ("closing", len(self.closing)),
        )

    def _verdict(self, cycle: int, out: list[Effect], text: str, closing: tuple[str, ...] = ()) -> None:
        out.append(
            Send(
                SCHEDULER,
                TenantChecked(
                    cycle=cycle,
                    tenant=self.tenant,
                    depletion_at=self.depletion_at,
                    recheck_at=self.recheck_at,
                    closing=closing,
                    note=text,
                ),
            )
        )
