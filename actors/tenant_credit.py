"""One tenant's credit watch: the decisions of a ``CreditMonitorActor``.

``TenantCredit.handle(message, now)`` takes one message and returns what to
do; it reads no clock and does no I/O. Its rules (seed 000 and issue 2):

- A failed credit read never closes anything. It counts in
  ``consecutive_errs``; from ``credit_check_error_threshold`` failures in a
  row the tenant asks for an early re-check after
  ``credit_check_retry_interval``. A successful read resets the count.
- A zero balance (in any denom our leases are charged in) starts a grace
  window of ``credit_check_zero_grace_period``, re-checked every retry
  interval. The leases charged in an empty denom are closed only when the
  balance stayed zero for the whole window; a lease charged only in denoms
  that still hold credit is not (the chain itself would not close it). A
  non-zero read clears the window and starts a fresh burn-rate baseline
  (the old baseline spans a deposit).
- A closure is asked for in the check cycle of the read that decided it.
  The chain actor sends only a cycle's own requests when that cycle ends,
  and drops older ones (a read that arrived after its cycle's deadline), so
  a request is never sent on a read from long before: the next read asks
  again if the credit is still gone, and a read that finds credit forgets it.
- Otherwise the depletion time is the earlier of the burn-rate estimate
  (two samples) and the chain's ``CreditEstimate``, both over the denoms our
  leases are charged in; the note says which won.
- A failed close leaves the window as it is, so the next check closes at once
  instead of waiting a new window.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from actors.depletion import BURN_RATE, CHAIN_ESTIMATE, Seconds, burn_seconds, chain_seconds, estimate_at, sooner
from actors.effects import Effect, Note, Send
from actors.scheduler_settings import SchedulerSettings
from messages.chain import CreditEstimate, Lease
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
from runtime.router import CHAIN, LEDGER, SCHEDULER

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


def _moved(before: datetime | None, after: datetime | None, tolerance: timedelta) -> bool:
    """Did an estimate change by more than ``tolerance`` (or appear, or vanish)?"""
    if before is None or after is None:
        return before is not after
    return abs(after - before) > tolerance


class TenantCredit:
    """The state a tenant actor holds, and the rules that move it."""

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
        self._saved: TenantSnapshot | None = None
        self._saved_key: tuple[Any, ...] | None = None
        self._charged: set[str] | None = None  # denoms our leases are charged in; None: recompute
        self._charged_unknown = False  # see _charged_denoms
        #: charged denoms as persisted, for leases whose details a restart lost
        self._restored_charged: set[str] = set()
        #: the last estimate was clamped to the horizon
        self._clamped = False
        #: (sorted lease uuids, sorted charged denoms) for snapshots; None: recompute
        self._sorted: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        #: counts changes to ``leases``, so ``_save`` sees one without copying the keys
        self._lease_changes = 0

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
            last_balances=coins(self.last_balances) if self.last_balances is not None else None,
            last_sample_at=self.last_sample_at,
            consecutive_errs=self.consecutive_errs,
            zero_since=self.zero_since,
            depletion_at=self.depletion_at,
            recheck_at=self.recheck_at,
            closing=self.closing,
            charged_denoms=charged,
        )

    def _restore(self, s: TenantSnapshot) -> None:
        for u in s.lease_uuids:
            self.leases.setdefault(u, None)
        self._restored_charged = set(s.charged_denoms)
        self._leases_changed()
        self.last_balances = coins_to_dict(s.last_balances) if s.last_balances is not None else None
        self.last_sample_at = s.last_sample_at
        self.consecutive_errs = s.consecutive_errs
        self.zero_since = s.zero_since
        self.depletion_at = s.depletion_at
        self.recheck_at = s.recheck_at
        # A closure in flight when the process died has an unknown outcome:
        # forget it as pending; the next check sees the chain's truth and,
        # with the window kept, closes at once if the leases are still active.
        self.closing = ()
        self._saved = self.snapshot()

    # -- messages -----------------------------------------------------------------
    def handle(self, message: Any, now: datetime) -> list[Effect]:
        out: list[Effect] = []
        if isinstance(message, CreditRead):
            self._on_read(message, now, out)
        elif isinstance(message, CreditReadFailed):
            self._on_read_failed(message, now, out)
        elif isinstance(message, LeasesSynced):
            self.leases = {lease.uuid: lease for lease in message.leases}
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
        )
        if key == self._saved_key:
            return
        self._saved_key = key
        snap = self.snapshot()
        self._saved = snap
        if self.leases:
            out.append(Send(LEDGER, TenantStateChanged(snap)))
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
            #: no denom known at all: details a restart lost, and none persisted
            self._charged_unknown = unknown and not denoms
        return self._charged

    def _exhausted(self, balances: dict[str, int], estimate: CreditEstimate | None) -> tuple[str, set[str]]:
        """Why the credit is gone ("" while it is not), and the charged denoms that are empty.

        Gone: a denom our leases are charged in is at zero, either settled
        (the account) or once every provider's unsettled accrual is counted
        (the chain's estimate). Without the second, a tenant whose credit
        other providers have already used up would look alive until they
        settle, and its near-past depletion would wake a paid withdraw every
        ``depletion_check_buffer``. With lease details unknown (restored, not
        yet re-read) only an empty balance counts as gone (no denoms named:
        every lease is unpaid).
        """
        charged = self._charged
        if charged is None:
            charged = self._charged_denoms()
        if not charged:
            if not self._charged_unknown:
                return "", set()  # leases that cost nothing: no balance runs out for them
            return ("", set()) if any(balances.values()) else ("balance zero", set())
        empty = {d for d in charged if balances.get(d, 0) <= 0}
        if empty:
            return "balance zero", empty
        if estimate is not None:
            for rate in estimate.total_rate_per_second:
                if rate.amount > 0 and rate.denom in charged:
                    left = 0
                    for c in estimate.current_balance:
                        if c.denom == rate.denom:
                            left = c.amount
                            break
                    if left <= 0:
                        empty.add(rate.denom)
            if empty:
                return "credit used up counting unsettled accrual", empty
        return "", empty

    def _unpaid(self, empty: set[str], balances: dict[str, int]) -> list[str]:
        """Our leases that the empty denoms leave unpaid: those charged in one of them.

        A lease whose details a restart lost is charged in some of the
        denoms persisted with the tenant (``charged_denoms``): it counts when
        all of those are empty, or the whole balance is.
        """
        everything = not empty or not any(balances.values())
        restored = self._restored_charged
        unknown_unpaid = everything or bool(restored and restored <= empty)
        unpaid = []
        for u, lease in self.leases.items():
            if lease is None or not lease.items:  # its price is not known (yet)
                if unknown_unpaid:
                    unpaid.append(u)
            elif any(r > 0 and (everything or d in empty) for d, r in lease.rate_per_second().items()):
                unpaid.append(u)  # a lease that costs nothing is never unpaid (the chain never closes it)
        return unpaid

    def _on_read_failed(self, message: CreditReadFailed, now: datetime, out: list[Effect]) -> None:
        s = self.settings
        self.consecutive_errs += 1
        if self.consecutive_errs >= s.credit_check_error_threshold:
            self.recheck_at = now + s.credit_check_retry_interval
            text = (
                f"tenant {self.tenant}: {self.consecutive_errs} failed credit reads in a row "
                f"({message.error.message}); nothing closed, re-check at {_when(self.recheck_at)}"
            )
        elif self.zero_since is not None:
            # Keep the grace window's re-checks going through a failed read.
            self.recheck_at = now + s.credit_check_retry_interval
            text = f"tenant {self.tenant}: credit read failed during the grace window; re-check at {_when(self.recheck_at)}"
        else:
            self.recheck_at = None
            text = f"tenant {self.tenant}: credit read failed ({self.consecutive_errs} in a row); nothing closed"
        fields = self._fields() + (("error", message.error.message),)
        out.append(Note(text, self.tenant, event="credit_read_failed", fields=fields, level="warning"))
        self._verdict(message.cycle, out, text)

    def _on_read(self, message: CreditRead, now: datetime, out: list[Effect]) -> None:
        s = self.settings
        self.consecutive_errs = 0
        balances = _nonzero(message.account.balances)
        closing: tuple[str, ...] = ()
        gone, empty = self._exhausted(balances, message.estimate)
        if gone:
            if self.zero_since is None:
                self.zero_since = now
            window_end = self.zero_since + s.credit_check_zero_grace_period
            self.depletion_at = None  # already depleted: the grace re-checks drive the wakes
            if self.closing and message.cycle != self._closing_cycle:
                # Asked for in an earlier cycle and not answered: if that
                # cycle ended without sending it, the chain actor dropped it.
                # This read is the fresh one to ask on.
                self.closing = ()
            open_leases = tuple(sorted(u for u in self._unpaid(empty, balances) if u not in self.closing))
            if now >= window_end and open_leases:
                closing = open_leases
                self.closing = self.closing + closing
                self._closing_cycle = message.cycle
                self.recheck_at = now + s.credit_check_retry_interval
                which = f" charged in {', '.join(sorted(empty))}" if len(open_leases) < len(self.leases) else ""
                text = (
                    f"tenant {self.tenant}: credit gone since {_when(self.zero_since)} for the whole "
                    f"grace window; closing {len(closing)} lease(s){which}"
                )
                out.append(Send(CHAIN, CloseRequested(message.cycle, self.tenant, closing, s.closure_reason)))
            elif self.closing:
                self.recheck_at = now + s.credit_check_retry_interval
                text = f"tenant {self.tenant}: credit gone; closure of {len(self.closing)} lease(s) pending"
            elif now >= window_end:
                # Only leases whose details a restart lost are charged in the
                # empty denom, as far as is known: nothing to close on that.
                self.recheck_at = now + s.credit_check_retry_interval
                text = (
                    f"tenant {self.tenant}: {gone} in {', '.join(sorted(empty))}, which none of its known "
                    f"leases is charged in; nothing closed, re-check at {_when(self.recheck_at)}"
                )
            else:
                self.recheck_at = min(now + s.credit_check_retry_interval, window_end)
                text = (
                    f"tenant {self.tenant}: {gone} (since {_when(self.zero_since)}); grace window "
                    f"ends {_when(window_end)}, re-check at {_when(self.recheck_at)}"
                )
            self.last_balances, self.last_sample_at = balances, now
        else:
            self.recheck_at = None
            if self.closing:
                # Credit again: a closure still waiting to be sent belongs to
                # an earlier cycle, which the chain actor drops.
                self.closing = ()
            charged = None if self._charged_unknown else self._charged  # none known: every denom counts
            # Both estimates as seconds from now; only the earlier becomes a time.
            remote = chain_seconds(message.estimate, charged)
            picked: Seconds | None
            if self.zero_since is not None:
                # Credit came back: the window is void and the old baseline
                # spans a deposit, so burn is measured afresh from here.
                self.zero_since = None
                self.last_balances, self.last_sample_at = balances, now
                picked, source = remote, CHAIN_ESTIMATE
                prefix = "credit back, grace window cleared; "
            else:
                local = None
                if self.last_balances is not None and self.last_sample_at is not None:
                    local = burn_seconds(self.last_balances, self.last_sample_at, balances, now, charged)
                picked = sooner(local, remote)
                source = BURN_RATE if picked is local else CHAIN_ESTIMATE
                if self.last_balances != balances or self.last_sample_at is None:
                    # An unmoved balance saw no settlement: keep the older
                    # baseline so the next burn spans the whole interval.
                    self.last_balances, self.last_sample_at = balances, now
                prefix = ""
            clamped = picked is not None and picked[2]
            if not prefix and clamped and self._clamped:
                # Beyond the horizon the clamped time moves with now: not news.
                self._verdict(message.cycle, out, "")
                return
            estimate = estimate_at(now, picked, source) if picked is not None else None
            new_at = estimate.at if estimate else None
            unchanged = not _moved(self.depletion_at, new_at, s.depletion_check_buffer)
            self._clamped = clamped
            if not prefix and unchanged:
                # Nothing an operator needs to read again; the estimate the
                # wakes are planned on stays the one already logged.
                self._verdict(message.cycle, out, "")
                return
            self.depletion_at = new_at
            if estimate is None:
                text = f"tenant {self.tenant}: {prefix}balance {format_coins(coins(balances))}, no burn seen yet"
            else:
                clamp = " (clamped to the horizon)" if estimate.clamped else ""
                text = (
                    f"tenant {self.tenant}: {prefix}balance {format_coins(coins(balances))}, "
                    f"depletes at {_when(estimate.at)}{clamp} ({estimate.denom}, by {estimate.source})"
                )
        event = "closing_requested" if closing else "credit_gone" if gone else "credit_checked"
        out.append(Note(text, self.tenant, event=event, fields=self._fields()))
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
