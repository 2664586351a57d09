"""The credit monitor's rules (TenantCredit), without threads or clocks."""

from __future__ import annotations

from datetime import datetime, timedelta

from actors.effects import Send
from actors.tenant_credit import TenantCredit
from messages.chain import ChainFailure, CreditAccount, CreditEstimate, Lease
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
from tests.support import PROVIDER, item, settings

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


def read(m: TenantCredit, at: datetime, umfx: int, upwr: int = 10**6, estimate: CreditEstimate | None = None,
         cycle: int = 1):
    return m.handle(CreditRead(cycle, CreditAccount("t", (Coin("umfx", umfx), Coin("upwr", upwr))), estimate), at)


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


def test_depletion_uses_the_earlier_estimate_and_says_which() -> None:
    m = monitor()
    read(m, T0, 1000)
    # burn: 100 used in 100 s -> 900 s left; the chain sees only 60 s left
    est = CreditEstimate("t", (Coin("umfx", 60), Coin("upwr", 10**6)), (Coin("umfx", 1),), 60)
    out = read(m, T0 + timedelta(seconds=100), 900, estimate=est)
    v = verdict(out)
    assert v.depletion_at == T0 + timedelta(seconds=160) and "chain estimate" in v.note
    out = read(m, T0 + timedelta(seconds=200), 800)
    assert verdict(out).depletion_at == T0 + timedelta(seconds=200 + 800) and "burn rate" in verdict(out).note


def test_unmoved_balance_keeps_the_older_baseline() -> None:
    m = monitor()
    read(m, T0, 1000)
    read(m, T0 + timedelta(seconds=50), 1000)  # no settlement in between
    out = read(m, T0 + timedelta(seconds=100), 900)
    # 100 consumed over the whole 100 s, not over the last 50
    assert verdict(out).depletion_at == T0 + timedelta(seconds=100 + 900)


def test_credit_used_up_by_unsettled_accrual_starts_the_window() -> None:
    m = monitor()
    est = CreditEstimate("t", (Coin("umfx", 0), Coin("upwr", 10**6)), (Coin("umfx", 5),), 0)
    out = read(m, T0, 700, estimate=est)
    assert m.zero_since == T0 and verdict(out).depletion_at is None
    assert "unsettled accrual" in verdict(out).note


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
    # unknown lease details after a restore: an empty balance still counts as gone
    out = back.handle(CreditRead(2, CreditAccount("t", ())), T0 + S.credit_check_zero_grace_period)
    (req,) = sent(out, CloseRequested)
    assert req.lease_uuids == ("l1", "l2")


def test_restored_inside_the_window_keeps_it_with_prices_still_unknown() -> None:
    m = TenantCredit("t", S)
    m.handle(LeasesSynced((Lease("l1", "t", PROVIDER, (item(2),)),)), T0)
    read(m, T0, umfx=0, upwr=10**6)  # umfx is what the lease is charged in
    back = TenantCredit("t", S)
    back.handle(TenantRestored(m.snapshot()), T0 + timedelta(minutes=2))
    out = back.handle(
        CreditRead(2, CreditAccount("t", (Coin("upwr", 10**6),))), T0 + timedelta(minutes=3)
    )
    assert back.zero_since == T0 and not sent(out, CloseRequested)  # the window goes on
    out = back.handle(CreditRead(3, CreditAccount("t", (Coin("upwr", 10**6),))), T0 + S.credit_check_zero_grace_period)
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
    u.handle(CreditRead(13, CreditAccount("u", ())), end + timedelta(minutes=15))
    to_chain(u.handle(CreditRead(14, CreditAccount("u", ())), end + timedelta(minutes=20) + S.credit_check_zero_grace_period))
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
    read(m, T0, umfx=10**6, upwr=1000)
    # upwr (not ours) is used up by another provider's unsettled lease: the chain's
    # estimate says 0 s; umfx lasts 10**6 / 4 s at every provider's umfx rate.
    est = CreditEstimate("t", (Coin("umfx", 10**6), Coin("upwr", 0)), (Coin("umfx", 4), Coin("upwr", 9)), 0)
    out = read(m, T0 + timedelta(seconds=100), umfx=10**6, upwr=0, estimate=est)
    v = verdict(out)
    assert m.zero_since is None and v.depletion_at == T0 + timedelta(seconds=100 + 250_000)
    assert "(umfx, by chain estimate)" in v.note
    # Our own denom first: the chain's figure stands.
    est = CreditEstimate("t", (Coin("umfx", 100), Coin("upwr", 10**9)), (Coin("umfx", 4), Coin("upwr", 9)), 25)
    out = read(m, T0 + timedelta(seconds=200), umfx=10**6, upwr=10**9, estimate=est)
    assert verdict(out).depletion_at == T0 + timedelta(seconds=225)


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
    est = CreditEstimate("t", (Coin("upwr", 0),), (Coin("upwr", 9),), 0)  # another provider's, used up
    out = alone.handle(CreditRead(1, CreditAccount("t", ()), est), T0)
    assert alone.zero_since is None and verdict(out).depletion_at is None and not sent(out, CloseRequested)


def test_a_lease_known_only_from_its_event_is_no_free_lease() -> None:
    """Its price is not known yet (no items): a zero balance still closes it, the chain's estimate still counts."""
    opened = Lease("l-new", "t", PROVIDER, (), state="ACTIVE")  # as the scheduler builds it from the event
    m = TenantCredit("t", S)
    m.handle(LeaseOpened(opened), T0)
    m.handle(CreditRead(1, CreditAccount("t", ())), T0)
    (req,) = sent(m.handle(CreditRead(2, CreditAccount("t", ())), T0 + S.credit_check_zero_grace_period), CloseRequested)
    assert req.lease_uuids == ("l-new",)
    other = TenantCredit("t", S)
    other.handle(LeaseOpened(opened), T0)
    est = CreditEstimate("t", (Coin("umfx", 1000),), (Coin("umfx", 1),), 1000)
    out = other.handle(CreditRead(1, CreditAccount("t", (Coin("umfx", 1000),)), est), T0)
    assert verdict(out).depletion_at == T0 + timedelta(seconds=1000)
