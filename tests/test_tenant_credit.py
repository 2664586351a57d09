"""The credit monitor's rules (TenantCredit), without threads or clocks."""

from __future__ import annotations

import dataclasses

import msgspec
from datetime import datetime, timedelta

from actors.effects import Send
from actors.tenant_credit import TenantCredit
from messages.chain import ChainFailure, CreditAccount, Lease
from messages.coins import Coin
from messages.credit import (
    CloseFailed,
    CloseRequested,
    CreditRead,
    CreditReadFailed,
    LeaseOpened,
    LeasesClosed,
    LeasesSynced,
    TenantRestored,
)
from messages.ledger import TenantForgotten, TenantStateChanged
from messages.scheduler import TenantChecked
from runtime.clock import utc
from tests.support import OTHER, PROVIDER, item, settings

T0 = utc(2026, 3, 1)
S = settings()
LEASES = (
    Lease("l1", "t", PROVIDER, (item(2),)),
    Lease("l2", "t", PROVIDER, (item(3, denom="upwr"),)),
)


def monitor() -> TenantCredit:
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES), T0)
    return m


def read(m: TenantCredit, at: datetime, umfx: int, upwr: int = 10**6, cycle: int = 1, leases=None, height: int = 1,
         **account):
    """A read of the balances given, and of ``leases`` (default: the monitor's, none of them accrued yet), at ``height``."""
    if leases is None:
        leases = tuple(lease for lease in m.leases.values() if lease is not None)
    balances = (Coin("umfx", umfx), Coin("upwr", upwr))
    return m.handle(CreditRead(cycle, CreditAccount("t", balances, **account), leases=tuple(leases), height=height), at)


def sent(effects, kind):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def verdict(effects) -> TenantChecked:
    (v,) = sent(effects, TenantChecked)
    return v


def test_failed_reads_never_close_and_ask_an_early_recheck_at_the_threshold() -> None:
    m = monitor()
    fail = CreditReadFailed(1, ChainFailure("credit_account", "unavailable", transient=True))
    for n in (1, 2):
        out = m.handle(fail, T0 + timedelta(seconds=n))
        assert verdict(out).recheck_at is None and not sent(out, CloseRequested)
        assert m.consecutive_errs == n
    out = m.handle(fail, T0 + timedelta(seconds=3))
    assert verdict(out).recheck_at == T0 + timedelta(seconds=3) + S.credit_check_retry_interval
    assert not sent(out, CloseRequested)
    read(m, T0 + timedelta(seconds=4), 1000)
    assert m.consecutive_errs == 0  # a good read resets the streak


def test_failed_reads_at_zero_balance_never_close_even_past_the_window() -> None:
    m = monitor()
    read(m, T0, 0)
    fail = CreditReadFailed(1, ChainFailure("credit_account", "unavailable", transient=True))
    out = m.handle(fail, T0 + S.credit_check_zero_grace_period * 2)
    assert not sent(out, CloseRequested)
    assert verdict(out).recheck_at is not None  # grace re-checks continue through a failed read


def test_zero_balance_closes_only_after_the_whole_grace_window() -> None:
    m = monitor()
    out = read(m, T0, 0)
    assert m.zero_since == T0 and not sent(out, CloseRequested)
    assert verdict(out).recheck_at == T0 + S.credit_check_retry_interval
    out = read(m, T0 + timedelta(minutes=4, seconds=59), 0)
    assert not sent(out, CloseRequested)
    assert verdict(out).recheck_at == T0 + S.credit_check_zero_grace_period  # not past the window end
    out = read(m, T0 + S.credit_check_zero_grace_period, 0)
    (req,) = sent(out, CloseRequested)
    # Only the umfx lease: l2 is charged in upwr, which still holds credit
    # (the chain would not close it either).
    assert req.lease_uuids == ("l1",) and req.reason == S.closure_reason
    assert verdict(out).closing == ("l1",)
    # The close request goes out before the verdict, so the chain actor has it before the flush.
    kinds = [type(e.message) for e in out if isinstance(e, Send)]
    assert kinds.index(CloseRequested) < kinds.index(TenantChecked)


def test_a_grace_window_is_told_when_it_opens_and_when_it_closes_the_rechecks_between_are_debug() -> None:
    from actors.effects import Note

    def levels(out) -> list[str]:  # type: ignore[no-untyped-def]
        return [e.level for e in out if isinstance(e, Note)]

    m = monitor()
    assert levels(read(m, T0, 0)) == ["info"]
    assert levels(read(m, T0 + timedelta(seconds=30), 0)) == ["debug"]
    assert levels(read(m, T0 + S.credit_check_zero_grace_period, 0)) == ["info"]  # closing


def test_recovery_clears_the_window_and_restarts_the_baseline() -> None:
    m = monitor()
    read(m, T0, 0)
    read(m, T0 + timedelta(minutes=2), 500)
    assert m.zero_since is None and m.last_balances == {"umfx": 500, "upwr": 10**6}
    assert m.last_sample_at == T0 + timedelta(minutes=2)
    read(m, T0 + timedelta(minutes=3), 0)
    assert m.zero_since == T0 + timedelta(minutes=3)  # a fresh window, not the old one
    out = read(m, T0 + timedelta(minutes=7), 0)
    assert not sent(out, CloseRequested)


def test_zero_in_one_charged_denom_is_credit_gone() -> None:
    m = monitor()
    read(m, T0, umfx=10**9, upwr=0)
    assert m.zero_since == T0


def test_failed_close_keeps_the_window_so_the_next_check_closes_at_once() -> None:
    m = monitor()
    read(m, T0, 0)
    end = T0 + S.credit_check_zero_grace_period
    assert sent(read(m, end, 0), CloseRequested)
    m.handle(CloseFailed("t", ("l1",), ChainFailure("close_leases", "out of gas")), end + timedelta(seconds=5))
    assert m.zero_since == T0 and m.closing == ()
    (req,) = sent(read(m, end + timedelta(seconds=30), 0), CloseRequested)
    assert req.lease_uuids == ("l1",)


def test_closure_pending_is_not_requested_twice() -> None:
    m = monitor()
    read(m, T0, 0)
    end = T0 + S.credit_check_zero_grace_period
    assert sent(read(m, end, 0), CloseRequested)
    assert not sent(read(m, end + timedelta(seconds=30), 0), CloseRequested)


def settled(lease: Lease, at: datetime, reservation=None, **kw) -> Lease:
    """``lease`` as a chain read shows it: last settled at ``at`` (and its tranche, on the current chain)."""
    if reservation is not None:
        kw.setdefault("min_lease_duration_at_creation", 60)  # its own tranche, not the legacy cohort's
    return msgspec.structs.replace(lease, last_settled_at=at, reservation=reservation, **kw)


def test_depletion_is_the_runway_of_the_lease_that_runs_dry_first() -> None:
    """v2.1.0 (no reservation field): balance over every lease's rate, unsettled accrual counted."""
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES[:1]), T0)  # 2 umfx/s
    other = Lease("o1", "t", OTHER, (item(3),))  # another provider's, 3 umfx/s, drawing on the same credit
    out = read(m, T0 + timedelta(seconds=100), 1000, leases=(settled(LEASES[0], T0), settled(other, T0)))
    v = verdict(out)
    # 1000 umfx at 5 umfx/s from T0: the 200th second; 500 of it already accrued at the read.
    assert v.depletion_at == T0 + timedelta(seconds=200) and "raw-balance rule" in v.note and "l1" in v.note


def test_on_the_current_chain_other_leases_reservations_are_not_ours_to_spend() -> None:
    """Reservation-aware: the lease spends its own tranche and the unreserved pool, never another's tranche."""
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES[:1]), T0)
    ours = settled(LEASES[0], T0, reservation=(Coin("umfx", 100),))
    pending_elsewhere = 600  # a PENDING lease of another provider reserves it; B stays above it
    out = read(m, T0, 1000, leases=(ours,), reserved_amounts=(Coin("umfx", 100 + pending_elsewhere),))
    # S = 1000 - (700 - 100) = 400 at 2 umfx/s: dry in 200 s, while the balance never falls below 600.
    assert verdict(out).depletion_at == T0 + timedelta(seconds=200)
    assert "reservation-aware rule" in verdict(out).note
    out = read(m, T0 + timedelta(seconds=200), 1000, leases=(ours,), reserved_amounts=(Coin("umfx", 700),))
    assert m.zero_since == T0 + timedelta(seconds=200)  # exhausted with 1000 umfx on the account
    assert "accrued 400 >= spendable 400" in verdict(out).note


def test_credit_used_up_by_another_providers_unsettled_accrual_starts_the_window() -> None:
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES[:1]), T0)
    other = Lease("o1", "t", OTHER, (item(100),))
    out = read(m, T0 + timedelta(seconds=10), 700, leases=(settled(LEASES[0], T0), settled(other, T0)))
    assert m.zero_since == T0 + timedelta(seconds=10) and verdict(out).depletion_at is None
    assert "other leases' unsettled accrual 1000" in verdict(out).note


def test_state_is_persisted_and_a_tenant_without_leases_is_forgotten() -> None:
    m = TenantCredit("t", S)
    out = m.handle(LeasesSynced(LEASES), T0)
    (saved,) = sent(out, TenantStateChanged)
    assert saved.snapshot.lease_uuids == ("l1", "l2")
    out = m.handle(LeasesClosed("t", ("l1", "l2"), "credit depleted"), T0)
    assert sent(out, TenantForgotten) == [TenantForgotten("t")]


def test_restore_keeps_the_window_and_the_streak() -> None:
    m = monitor()
    read(m, T0, 0)
    m.handle(CreditReadFailed(1, ChainFailure("x", "y")), T0 + timedelta(seconds=30))
    snap = m.snapshot()
    back = TenantCredit("t", S)
    back.handle(TenantRestored(snap), T0 + timedelta(minutes=1))
    assert (back.zero_since, back.consecutive_errs, back.last_balances) == (T0, 1, m.last_balances)
    # Lease details lost with the restart come back with the read itself.
    out = back.handle(CreditRead(2, CreditAccount("t", ()), leases=LEASES), T0 + S.credit_check_zero_grace_period)
    (req,) = sent(out, CloseRequested)
    assert req.lease_uuids == ("l1", "l2")


def test_restored_inside_the_window_keeps_it() -> None:
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES[:1]), T0)
    read(m, T0, umfx=0, upwr=10**6)  # umfx is what the lease is charged in
    back = TenantCredit("t", S)
    back.handle(TenantRestored(m.snapshot()), T0 + timedelta(minutes=2))
    gone = CreditAccount("t", (Coin("upwr", 10**6),))
    out = back.handle(CreditRead(2, gone, leases=LEASES[:1]), T0 + timedelta(minutes=3))
    assert back.zero_since == T0 and not sent(out, CloseRequested)  # the window goes on
    out = back.handle(CreditRead(3, gone, leases=LEASES[:1]), T0 + S.credit_check_zero_grace_period)
    assert sent(out, CloseRequested)


def test_every_lease_closes_when_every_denom_it_is_charged_in_is_empty() -> None:
    m = monitor()
    read(m, T0, umfx=0, upwr=0)
    (req,) = sent(read(m, T0 + S.credit_check_zero_grace_period, umfx=0, upwr=0), CloseRequested)
    assert req.lease_uuids == ("l1", "l2")


def test_a_closure_left_unanswered_from_an_earlier_cycle_is_asked_again_or_forgotten() -> None:
    """A read that came after its cycle's deadline asked for a closure the chain actor then drops."""
    end = T0 + S.credit_check_zero_grace_period
    m = TenantCredit("t", S)
    m.handle(LeasesSynced(LEASES[:1]), T0)  # one lease, charged in umfx
    read(m, T0, 0, cycle=10)
    (late,) = sent(read(m, end, 0, cycle=11), CloseRequested)  # no answer ever comes for it
    assert late.cycle == 11 and m.closing == ("l1",)
    out = read(m, end + timedelta(seconds=10), 0, cycle=11)  # the same cycle: still pending, not asked twice
    assert not sent(out, CloseRequested) and "pending" in verdict(out).note
    (again,) = sent(read(m, end + timedelta(seconds=30), 0, cycle=12), CloseRequested)  # still gone: asked on this read
    assert (again.cycle, again.lease_uuids) == (12, ("l1",))
    out = read(m, end + timedelta(seconds=60), 500, cycle=13)  # paid again: nothing pending any more
    assert m.closing == () and m.zero_since is None and not sent(out, CloseRequested)


def test_a_refunded_tenant_is_not_closed_by_its_request_from_a_cycle_that_ended_unflushed() -> None:
    """The tenant monitor and the chain actor together: the late request never reaches the chain."""
    from actors.chain_actor import ChainDecisions
    from messages.chain import NodeStatus
    from messages.chain_actor import CloseBatchCall, FlushClosures, NodeStatusAnswered

    end = T0 + S.credit_check_zero_grace_period
    chain = ChainDecisions(S)
    t, u = monitor(), TenantCredit("u", S)
    u.handle(LeasesSynced((Lease("lu", "u", PROVIDER, (item(1),)),)), T0)

    def to_chain(effects) -> None:
        for request in sent(effects, CloseRequested):
            chain.handle(request, end)

    read(t, T0, 0, cycle=10)
    to_chain(read(t, end, 0, cycle=11))  # cycle 11 had ended: the scheduler sends no FlushClosures(11)
    read(t, end + timedelta(minutes=10), 10**9, cycle=12)  # the tenant pays again
    lu = tuple(u.leases.values())
    u.handle(CreditRead(13, CreditAccount("u", ()), leases=lu, height=1), end + timedelta(minutes=15))
    to_chain(u.handle(CreditRead(14, CreditAccount("u", ()), leases=lu, height=1), end + timedelta(minutes=20) + S.credit_check_zero_grace_period))
    out = chain.handle(FlushClosures(14), end + timedelta(minutes=30))
    assert any("dropped the closure requests of 1 tenant(s) (t)" in getattr(e, "text", "") for e in out)
    (status_call,) = [e.message for e in out if isinstance(e, Send)]
    out = chain.handle(NodeStatusAnswered(status_call.round, NodeStatus(1, end + timedelta(minutes=30), False)),
                       end + timedelta(minutes=30))
    batches = [e.message for e in out if isinstance(e, Send) and isinstance(e.message, CloseBatchCall)]
    assert [b.lease_uuids for b in batches] == [("lu",)]


def test_depletion_counts_only_the_denoms_our_leases_are_charged_in() -> None:
    """Another provider's denom running out must not drive our wakes (it would wake a paid withdraw every 10 s)."""
    m = TenantCredit("t", S)
    m.handle(LeasesSynced((Lease("l1", "t", PROVIDER, (item(2),)),)), T0)  # umfx only
    theirs = Lease("o1", "t", OTHER, (item(9, denom="upwr"), item(2)))  # upwr and umfx
    leases = (settled(LEASES[0], T0), settled(theirs, T0))
    out = read(m, T0 + timedelta(seconds=100), umfx=10**6, upwr=0, leases=leases)
    v = verdict(out)
    # upwr (not ours) is gone; umfx lasts 10**6 / 4 s at both leases' umfx rate.
    assert m.zero_since is None and v.depletion_at == T0 + timedelta(seconds=250_000) and "umfx" in v.note


def test_a_lease_that_costs_nothing_is_never_closed_nor_woken_for() -> None:
    """The chain never closes a lease charged nothing; another provider's empty denom is no depletion of ours."""
    free = Lease("free", "t", PROVIDER, (item(0),))
    m = TenantCredit("t", S)
    m.handle(LeasesSynced((free, LEASES[0])), T0)
    read(m, T0, umfx=0, upwr=0)
    (req,) = sent(read(m, T0 + S.credit_check_zero_grace_period, umfx=0, upwr=0), CloseRequested)
    assert req.lease_uuids == ("l1",)
    alone = TenantCredit("t", S)
    alone.handle(LeasesSynced((free,)), T0)
    theirs = settled(Lease("o1", "t", OTHER, (item(9, denom="upwr"),)), T0)  # another provider's, used up
    out = alone.handle(CreditRead(1, CreditAccount("t", ()), leases=(free, theirs)), T0 + timedelta(seconds=5))
    assert alone.zero_since is None and verdict(out).depletion_at is None and not sent(out, CloseRequested)


def test_a_lease_known_only_from_its_event_is_judged_on_the_details_the_read_brings() -> None:
    """Its price is not known yet (no items): the read's own copy of the lease has them."""
    opened = Lease("l-new", "t", PROVIDER, (), state="ACTIVE")  # as the scheduler builds it from the event
    full = Lease("l-new", "t", PROVIDER, (item(1),), last_settled_at=T0)
    m = TenantCredit("t", S)
    m.handle(LeaseOpened(opened), T0)
    out = m.handle(CreditRead(1, CreditAccount("t", (Coin("umfx", 1000),)), leases=(full,)), T0)
    assert verdict(out).depletion_at == T0 + timedelta(seconds=1000) and m.leases["l-new"] == full
    dry = T0 + timedelta(seconds=1000)  # its 1,000 umfx spent, at 1 a second
    m.handle(CreditRead(2, CreditAccount("t", ()), leases=(full,)), dry)
    (req,) = sent(m.handle(CreditRead(3, CreditAccount("t", ()), leases=(full,)), dry + S.credit_check_zero_grace_period), CloseRequested)
    assert req.lease_uuids == ("l-new",)


