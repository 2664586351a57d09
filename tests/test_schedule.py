"""The scheduler's decisions: wakes, rate limit, triggers, stop, tenant supervision, events."""

from __future__ import annotations

import dataclasses
import random

import msgspec
import pytest

from datetime import timedelta

from actors.effects import Note, Retire, Send, Spawn
from actors.schedule import FOREIGN_READS, SchedulerDecisions, next_wake
from messages.chain import ChainFailure, Lease
from messages.chain_actor import ActiveLeasesCall, CreditReadsCall, FlushClosures, LeaseCall, WithdrawRequested
from messages.credit import LeaseGone, LeaseOpened, LeasesSynced
from messages.lease_events import LeaseEvent
from messages.scheduler import (
    LeaseRead,
    ActiveLeasesRead,
    ClosuresFlushed,
    CycleDeadline,
    LeaseEventReceived,
    Reconcile,
    RunCycle,
    StartSchedule,
    StopSchedule,
    TenantChecked,
    TriggerWithdraw,
    Wake,
    WithdrawFinished,
)
from runtime.clock import utc
from tests.support import OTHER, PROVIDER, item, settings

T0 = utc(2026, 3, 1)


def msgs(effects, kind):
    return [e for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def lease(uuid: str, tenant: str) -> Lease:
    return Lease(uuid, tenant, PROVIDER, (item(1),))


def run_cycle(core: SchedulerDecisions, now, leases, verdicts=None) -> list:
    """Drive one cycle through the core with the given chain answers. Returns all effects."""
    out: list = []
    c = core.cycle
    assert c is not None
    if c.withdraw:
        out += core.handle(WithdrawFinished(c.id, 1, (), 0, ()), now)
    out += core.handle(ActiveLeasesRead(c.id, tuple(leases)), now)
    for call in msgs(out, CreditReadsCall):
        for tenant in call.message.tenants:
            v = (verdicts or {}).get(tenant, {})
            out += core.handle(TenantChecked(c.id, tenant, **v), now)
    return out


def test_next_wake_takes_the_earliest_reason() -> None:
    s = settings()
    due = T0 + timedelta(hours=1)
    assert next_wake(T0, s, due, None, None) == (due, "interval")
    assert next_wake(T0, s, due, T0 + timedelta(minutes=10), None) == (T0 + timedelta(minutes=10) - s.depletion_check_buffer, "depletion")
    # a depletion already (nearly) past: now + buffer
    assert next_wake(T0, s, due, T0 + timedelta(seconds=5), None) == (T0 + s.depletion_check_buffer, "depletion")
    assert next_wake(T0, s, due, T0 + timedelta(minutes=10), T0 + timedelta(seconds=30)) == (T0 + timedelta(seconds=30), "recheck")
    short = settings(credit_check_interval="10m")
    assert next_wake(T0, short, due, None, None) == (T0 + timedelta(minutes=10), "check")


def test_start_schedules_the_first_withdraw_an_interval_away() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    out = core.handle(StartSchedule(), T0)
    (wake,) = msgs(out, Wake)
    assert wake.at == T0 + timedelta(hours=1) and wake.message.reason == "interval"


def test_shorter_check_interval_keeps_the_paid_withdraw_rate_limited() -> None:
    core = SchedulerDecisions(settings(credit_check_interval="15m"), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(RunCycle(), T0)
    out = run_cycle(core, T0, [lease("l1", "t1")])
    seen = []
    for _ in range(5):
        (wake,) = msgs(out, Wake)
        out = core.handle(wake.message, wake.at)
        withdrew = bool(msgs(out, WithdrawRequested))
        seen.append((wake.at - T0, wake.message.reason, withdrew))
        out = run_cycle(core, wake.at, [lease("l1", "t1")])
    m = timedelta(minutes=1)
    assert seen == [
        (15 * m, "check", False),
        (30 * m, "check", False),
        (45 * m, "check", False),
        (60 * m, "interval", True),
        (75 * m, "check", False),
    ]


def test_a_wake_with_an_old_token_does_nothing() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    assert core.handle(Wake("interval", core.wake_token - 1), T0 + timedelta(hours=1)) == []


def test_depletion_wake_withdraws_and_recheck_wake_reads_only_the_tenants_due() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(RunCycle(), T0)
    out = run_cycle(
        core,
        T0,
        [lease("l1", "t1"), lease("l2", "t2")],
        {"t1": {"depletion_at": T0 + timedelta(minutes=5)}, "t2": {"recheck_at": T0 + timedelta(seconds=30)}},
    )
    (wake,) = msgs(out, Wake)
    assert (wake.at, wake.message.reason) == (T0 + timedelta(seconds=30), "recheck")
    out = core.handle(wake.message, wake.at)
    assert not msgs(out, WithdrawRequested) and not msgs(out, ActiveLeasesCall)
    assert [c.message.tenants for c in msgs(out, CreditReadsCall)] == [("t2",)]
    out = core.handle(TenantChecked(core.cycle.id, "t2"), wake.at)
    (wake,) = msgs(out, Wake)
    assert (wake.at, wake.message.reason) == (T0 + timedelta(minutes=5, seconds=-10), "depletion")
    out = core.handle(wake.message, wake.at)
    assert msgs(out, WithdrawRequested)


def test_no_leases_clears_state_and_retires_monitors() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    out = run_cycle(core, T0, [lease("l1", "t1"), lease("l2", "t2")])
    assert sorted(e.tenant for e in out if isinstance(e, Spawn)) == ["t1", "t2"]
    core.handle(TriggerWithdraw("test"), T0)
    out = run_cycle(core, T0, [])
    # A listing alone ends nothing: each lease it no longer lists is read first.
    assert not [e for e in out if isinstance(e, Retire)]
    assert [m.message for m in msgs(out, LeasesSynced)] == [LeasesSynced((), ("l1",)), LeasesSynced((), ("l2",))]
    assert sorted(m.message.lease_uuid for m in msgs(out, LeaseCall)) == ["l1", "l2"]
    out = []
    for uuid, tenant in (("l1", "t1"), ("l2", "t2")):
        closed = msgspec.structs.replace(lease(uuid, tenant), state="CLOSED", closed_at=T0)
        out += core.handle(LeaseRead(uuid, closed), T0)
    assert sorted(e.tenant for e in out if isinstance(e, Retire)) == ["t1", "t2"]
    assert {m.message.lease_uuid for m in msgs(out, LeaseGone)} == {"l1", "l2"}
    assert core.tenants == {} and core.cycle is None


@pytest.mark.parametrize("seed", range(8))
def test_a_sync_of_the_same_listing_decides_what_a_full_sync_decides(seed: int) -> None:
    """The shortcut for a listing the last sync saw (``_Synced``) against the sync lease by lease.

    Two cores take the same messages: cycles whose listing is often the last
    one again (its leases' contents moved or not), and between them leases
    opened and ended, read or not, and reads ahead of the listing. One is made to sync lease by
    lease every time; every effect of the two must be the same.
    """
    rng = random.Random(seed)
    fast, full = SchedulerDecisions(settings(), PROVIDER), SchedulerDecisions(settings(), PROVIDER)
    pool = [lease(f"l{i:02d}", f"t{i % 7}") for i in range(30)]
    listing = rng.sample(pool, 12)
    now = T0
    quiet = 0

    def both(message) -> list:
        full._synced = None  # lease by lease, always
        before = fast._synced
        a, b = fast.handle(message, now), full.handle(message, now)
        assert a == b, f"seed {seed}: {message!r}"
        return [before, fast._synced]

    both(RunCycle())
    for step in range(40):
        now += timedelta(minutes=1)
        roll = rng.random()
        if roll < 0.15 and listing:  # a lease ended, and its read says so
            gone = rng.choice(listing)
            listing = [x for x in listing if x is not gone]
            if rng.random() < 0.7:
                both(LeaseRead(gone.uuid, msgspec.structs.replace(gone, state="CLOSED", closed_at=now)))
        elif roll < 0.3:  # a lease opened, read from its event
            opened = rng.choice(pool)
            if opened not in listing:
                listing = listing + [opened]
                both(LeaseRead(opened.uuid, opened))
        elif roll < 0.45:  # the same leases, their contents moved (a settlement)
            listing = [msgspec.structs.replace(x, last_settled_at=now) for x in listing]
        elif roll < 0.5:  # a lease the listing no longer shows, unread yet
            listing = listing[1:]
        elif roll < 0.6:  # a read ahead of the listing: a lease opened, or ended, that it still shows as before
            read = rng.choice(pool)
            if read in listing or rng.random() < 0.5:
                both(LeaseRead(read.uuid, msgspec.structs.replace(read, state="CLOSED", closed_at=now)))
            else:
                both(LeaseRead(read.uuid, read))
        if fast.cycle is None:
            both(Reconcile("test"))
        c = fast.cycle
        if c is not None and c.phase == "withdrawing":
            both(WithdrawFinished(c.id, 1, (), 0, ()))
        if c is None or c.phase != "reading":
            continue
        before, after = both(ActiveLeasesRead(c.id, tuple(listing)))
        quiet += before is not None and after is before
        for tenant in sorted(fast.tenants):
            both(TenantChecked(c.id, tenant))
        if fast.cycle is not None and fast.cycle.phase == "closing":
            both(ClosuresFlushed(c.id))
    assert fast.tenants == full.tenants
    assert quiet >= 3, f"seed {seed}: only {quiet} sync(s) of a listing already seen"


def test_a_listing_of_the_same_uuids_under_other_tenants_is_a_new_listing() -> None:
    """The chain never moves a lease to another tenant; a listing that did is synced lease by lease."""
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    run_cycle(core, T0, [lease("l1", "t1")])
    core.handle(Reconcile("test"), T0)
    out = run_cycle(core, T0, [lease("l1", "t2")])
    assert [e.tenant for e in out if isinstance(e, Spawn)] == ["t2"]
    assert [m.message for m in msgs(out, LeasesSynced)] == [LeasesSynced((), ("l1",))]  # t1, kept until read


def test_a_lease_no_longer_listed_but_read_as_active_stays_watched() -> None:
    """The listing and the lease's own read disagree: the read is the record."""
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    run_cycle(core, T0, [lease("l1", "t1"), lease("l2", "t1")])
    core.handle(TriggerWithdraw("test"), T0)
    run_cycle(core, T0, [lease("l1", "t1")])
    out = core.handle(LeaseRead("l2", lease("l2", "t1")), T0)  # still ACTIVE
    assert not msgs(out, LeaseGone) and core.tenants["t1"].leases == {"l1", "l2"}


def test_closures_are_flushed_once_every_tenant_answered() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    out = run_cycle(core, T0, [lease("l1", "t1"), lease("l2", "t2")], {"t1": {"closing": ("l1",)}})
    (flush,) = msgs(out, FlushClosures)
    assert core.cycle is not None and core.cycle.phase == "closing"
    out = core.handle(ClosuresFlushed(flush.message.cycle, closed=("l1",)), T0)
    assert [e.tenant for e in out if isinstance(e, Retire)] == ["t1"]
    assert core.cycle is None


def test_failed_closures_ask_for_a_recheck() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    run_cycle(core, T0, [lease("l1", "t1")], {"t1": {"closing": ("l1",)}})
    core.handle(ClosuresFlushed(core.cycle.id, failed=("l1",)), T0)
    assert core.tenants["t1"].recheck_at == T0 + settings().credit_check_retry_interval


def test_trigger_during_a_cycle_runs_right_after_it_and_is_ignored_after_stop() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(RunCycle(), T0)
    core.handle(TriggerWithdraw("listener"), T0)
    out = run_cycle(core, T0, [lease("l1", "t1")])
    assert msgs(out, WithdrawRequested)  # the queued trigger, at once
    core.handle(StopSchedule(), T0)
    out = core.handle(TriggerWithdraw("operator"), T0)
    assert not msgs(out, WithdrawRequested)
    assert any(isinstance(e, Note) and "ignored" in e.text for e in out)


def test_stop_ends_the_schedule() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    token = core.wake_token
    core.handle(StopSchedule(), T0)
    assert core.handle(Wake("interval", token), T0 + timedelta(hours=1)) == []
    assert core.handle(Reconcile("listener"), T0) == []


def test_cycle_deadline_goes_on_without_silent_tenants() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(RunCycle(), T0)
    core.handle(WithdrawFinished(1, 1, (), 0, ()), T0)
    core.handle(ActiveLeasesRead(1, (lease("l1", "t1"),)), T0)
    out = core.handle(CycleDeadline(1), T0 + timedelta(minutes=5))
    assert core.cycle is None and any(isinstance(e, Note) and "did not answer" in e.text for e in out)


def watched(core: SchedulerDecisions, uuid: str, tenant: str, state: str = "ACTIVE") -> list:
    """Our lease ``uuid`` of ``tenant`` heard of (an event), then read in ``state``: what the read did."""
    core.handle(LeaseEventReceived(LeaseEvent("acknowledged", uuid, tenant, PROVIDER)), T0)
    return core.handle(LeaseRead(uuid, msgspec.structs.replace(lease(uuid, tenant), state=state)), T0)


def test_a_lease_event_is_a_hint_the_monitors_change_only_once_the_lease_is_read() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    out = core.handle(LeaseEventReceived(LeaseEvent("acknowledged", "l9", "t9", PROVIDER)), T0)
    assert [m.message.lease_uuid for m in msgs(out, LeaseCall)] == ["l9"]
    assert not [e for e in out if isinstance(e, Spawn)] and "t9" not in core.tenants
    out = core.handle(LeaseRead("l9", lease("l9", "t9")), T0)
    (spawn,) = [e for e in out if isinstance(e, Spawn)]
    assert spawn.tenant == "t9" and spawn.first[0] == LeaseOpened(lease("l9", "t9"))  # the chain's lease, priced
    out = watched(core, "l10", "t9", "PENDING")
    assert [m.message.lease.uuid for m in msgs(out, LeaseOpened)] == ["l10"]
    # A close event: read; the lease ends for the monitor only when the read says it did.
    out = core.handle(LeaseEventReceived(LeaseEvent("closed", "l9", "t9", PROVIDER)), T0)
    assert [m.message.lease_uuid for m in msgs(out, LeaseCall)] == ["l9"] and not msgs(out, LeaseGone)
    closed = msgspec.structs.replace(lease("l9", "t9"), state="CLOSED", closure_reason="tenant left")
    assert msgs(core.handle(LeaseRead("l9", closed), T0), LeaseGone)[0].message == LeaseGone("l9", "closed")
    core.handle(LeaseEventReceived(LeaseEvent("expired", "l10", "t9", PROVIDER)), T0)
    out = core.handle(LeaseRead("l10", msgspec.structs.replace(lease("l10", "t9"), state="EXPIRED")), T0)
    assert [e.tenant for e in out if isinstance(e, Retire)] == ["t9"]


def test_a_forged_frame_changes_nothing_in_the_books_or_the_watch_until_a_read_confirms_it() -> None:
    from messages.coins import Coin

    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    for settled in ((Coin("umfx", -1_000_000),), (Coin("umfx", 10**26),)):
        for kind in ("closed", "auto_closed", "expired", "cancelled"):
            forged = LeaseEvent(kind, "l1", "t1", PROVIDER, "tenant left", 9, "AB" * 32, settled if kind == "closed" else ())
            out = core.handle(LeaseEventReceived(forged), T0)
            assert [type(e.message).__name__ for e in out if isinstance(e, Send)] in (["LeaseCall"], [])
            assert core.tenants["t1"].leases == {"l1"}
            # The chain says it is ACTIVE: the lease stays watched, nothing is booked.
            out = core.handle(LeaseRead("l1", lease("l1", "t1")), T0)
            assert not msgs(out, LeaseGone) and not [e for e in out if isinstance(e, Send) and e.to == "ledger"
                                                     and type(e.message).__name__ != "LeaseObserved"]
            assert core.tenants["t1"].leases == {"l1"}


def test_another_providers_auto_close_of_a_shared_tenant_triggers_a_withdraw() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    out = core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x1", "t1", OTHER, "credit_exhausted")), T0)
    assert msgs(out, WithdrawRequested)
    # a tenant we do not serve: nothing
    core2 = SchedulerDecisions(settings(), PROVIDER)
    assert not msgs(core2.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x1", "t7", OTHER)), T0), WithdrawRequested)


def test_our_withdraws_tenantless_auto_close_is_read_and_ends_the_lease_of_the_tenant_the_chain_names() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    out = core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "l1", "", PROVIDER, "credit_exhausted")), T0)
    assert [m.message.lease_uuid for m in msgs(out, LeaseCall)] == ["l1"] and not msgs(out, LeaseGone)
    closed = msgspec.structs.replace(lease("l1", "t1"), state="CLOSED", closure_reason="credit exhausted")
    out = core.handle(LeaseRead("l1", closed), T0)
    assert msgs(out, LeaseGone)[0].message == LeaseGone("l1", "closed")
    assert "t1" not in core.tenants


def test_another_providers_tenantless_auto_close_is_read_and_withdraws_only_for_a_shared_tenant() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    out = core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x1", "", OTHER, "credit_exhausted")), T0)
    assert [m.message.lease_uuid for m in msgs(out, LeaseCall)] == ["x1"] and not msgs(out, WithdrawRequested)
    closed = msgspec.structs.replace(Lease("x1", "t1", OTHER, (item(1),)), state="CLOSED", closure_reason="credit exhausted")
    out = core.handle(LeaseRead("x1", closed), T0)
    assert msgs(out, WithdrawRequested)
    # the same for a tenant we do not serve: read, and nothing more
    out = core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x2", "", OTHER, "credit_exhausted")), T0)
    out = core.handle(LeaseRead("x2", msgspec.structs.replace(closed, uuid="x2", tenant="t7")), T0)
    assert not msgs(out, WithdrawRequested)


def test_a_failed_read_of_another_providers_tenantless_auto_close_is_read_again_then_given_up() -> None:
    """The read is the only way to learn the tenant (CHAIN-VERSIONS.md 2.5: a named withdraw's
    auto-close names none): a failed read is no answer, read again with backoff, a few times."""
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x1", "", OTHER, "credit_exhausted")), T0)
    down = ChainFailure("lease", "UNAVAILABLE: connection refused", transient=True)
    now, waits = T0, []
    for _ in range(FOREIGN_READS - 1):
        out = core.handle(LeaseRead("x1", None, down), now)
        (again,) = msgs(out, LeaseCall)
        assert again.message == LeaseCall("x1") and not msgs(out, WithdrawRequested)
        waits.append(again.at - now)
        now = again.at
    assert waits == [timedelta(seconds=10), timedelta(seconds=20), timedelta(seconds=40)][: FOREIGN_READS - 1]
    # the chain answers at last: the shared tenant's withdraw happens
    closed = msgspec.structs.replace(Lease("x1", "t1", OTHER, (item(1),)), state="CLOSED", closure_reason="credit exhausted")
    assert msgs(core.handle(LeaseRead("x1", closed), now), WithdrawRequested)
    # a read that keeps failing is given up, said so, and nothing is left owed
    core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x2", "", OTHER, "credit_exhausted")), T0)
    for _ in range(FOREIGN_READS - 1):
        core.handle(LeaseRead("x2", None, down), T0)
    out = core.handle(LeaseRead("x2", None, down), T0)
    assert not msgs(out, LeaseCall) and not msgs(out, WithdrawRequested)
    assert [n.event for n in out if isinstance(n, Note)] == ["shared_tenant_unknown"]
    assert not core._exhausted_elsewhere
    # NOT_FOUND is an answer: no such lease, nothing read again
    core.handle(LeaseEventReceived(LeaseEvent("auto_closed", "x3", "", OTHER, "credit_exhausted")), T0)
    gone = ChainFailure("lease", "NotFound: lease not found", codespace="grpc", code=5)
    assert core.handle(LeaseRead("x3", None, gone), T0) == []


def test_a_forged_tenantless_auto_close_naming_a_lease_of_ours_being_read_leaves_its_answers_to_our_read() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    down = ChainFailure("lease", "UNAVAILABLE", transient=True)
    core.handle(LeaseEventReceived(LeaseEvent("closed", "l1", "t1", PROVIDER, "")), T0)  # our read of l1 is out
    forged = LeaseEventReceived(LeaseEvent("auto_closed", "l1", "", OTHER, "credit_exhausted"))
    assert core.handle(forged, T0) == [] and "l1" not in core._exhausted_elsewhere  # no second read of it
    core._exhausted_elsewhere["l1"] = 0  # as if the forged event had come first, before our read was asked
    for n in range(1, FOREIGN_READS + 1):  # each answer is our read's: retried by it, with its backoff
        out = core.handle(LeaseRead("l1", None, down), T0)
        assert core.lease_reads.failed == {"l1": n} and [m.message for m in msgs(out, LeaseCall)] == [LeaseCall("l1")]
    assert "l1" not in core._exhausted_elsewhere


def test_another_providers_close_on_exhausted_credit_triggers_but_an_ordinary_close_does_not() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    watched(core, "l1", "t1")
    ordinary = LeaseEvent("closed", "x1", "t1", OTHER, by="manifest1someone")
    assert not msgs(core.handle(LeaseEventReceived(ordinary), T0), WithdrawRequested)
    exhausted = msgspec.structs.replace(ordinary, by="credit_exhaustion")
    assert msgs(core.handle(LeaseEventReceived(exhausted), T0), WithdrawRequested)


def test_a_failed_withdraw_waits_the_interval_rather_than_waking_at_once() -> None:
    from messages.chain import ChainFailure

    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(Wake("interval", core.wake_token), T0 + timedelta(hours=1))
    busy = ChainFailure("withdraw", "withdraw cycle 1 still running")
    core.handle(WithdrawFinished(core.cycle.id, 0, (), 0, (), error=busy), T0 + timedelta(hours=1))
    out = core.handle(ActiveLeasesRead(core.cycle.id, ()), T0 + timedelta(hours=1))
    (wake,) = msgs(out, Wake)
    assert wake.at == T0 + timedelta(hours=2)


def test_a_chain_unreachable_at_start_is_retried_with_backoff_not_at_the_next_interval() -> None:
    from messages.chain import ChainFailure

    core = SchedulerDecisions(settings(), PROVIDER)
    down = ChainFailure("active_leases_by_provider", "UNAVAILABLE: connection refused", transient=True)
    core.handle(RunCycle(), T0)
    core.handle(WithdrawFinished(1, 0, (), 0, (), error=ChainFailure("withdraw", "UNAVAILABLE", transient=True)), T0)
    out = core.handle(ActiveLeasesRead(1, error=down), T0)
    assert [n.level for n in out if isinstance(n, Note) and n.event == "chain_unreached"] == ["warning"]
    out = core.handle(StartSchedule(), T0)
    waits = []
    now = T0
    for _ in range(7):
        (wake,) = msgs(out, Wake)
        assert wake.message.reason == "retry"
        waits.append((wake.at - now).total_seconds())
        now = wake.at
        out = core.handle(wake.message, now)
        assert msgs(out, WithdrawRequested)  # the start's withdraw failed: each retry withdraws too
        out = core.handle(WithdrawFinished(core.cycle.id, 0, (), 0, (), error=down), now)
        out += core.handle(ActiveLeasesRead(core.cycle.id, error=down), now)
    assert waits == [1, 2, 4, 8, 16, 30, 30]  # initial_backoff doubling, capped at the re-check interval
    # the chain answers: the withdraw works, the read too, and the next wake is the interval's again
    (wake,) = msgs(out, Wake)
    out = core.handle(wake.message, wake.at)
    out = core.handle(WithdrawFinished(core.cycle.id, 1, (), 1, ()), wake.at)
    out += core.handle(ActiveLeasesRead(core.cycle.id, (lease("l1", "manifest1t"),)), wake.at)
    out += core.handle(TenantChecked(core.cycle.id, "manifest1t"), wake.at)
    (nxt,) = msgs(out, Wake)
    assert (nxt.message.reason, nxt.at) == ("interval", wake.at + timedelta(hours=1))
    assert core.retry_at is None


def test_a_read_failing_after_the_chain_once_answered_waits_for_the_tenants_rechecks() -> None:
    from messages.chain import ChainFailure

    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(RunCycle(), T0)
    run_cycle(core, T0, [lease("l1", "manifest1t")])
    core.handle(Wake("interval", core.wake_token), T0 + timedelta(hours=1))
    core.handle(WithdrawFinished(core.cycle.id, 0, (), 0, ()), T0 + timedelta(hours=1))
    out = core.handle(ActiveLeasesRead(core.cycle.id, error=ChainFailure("x", "down", transient=True)), T0 + timedelta(hours=1))
    assert not [n for n in out if isinstance(n, Note) and n.event == "chain_unreached"] and core.retry_at is None


def test_a_reconcile_queued_behind_an_early_recheck_still_reads_the_lease_list() -> None:
    """A re-check wake and then a websocket reconnect, both while a cycle runs: the queued cycles ran as one,
    the first queued one's, and a re-check reads only the tenants that asked for it, no lease list, so a
    lease opened during the reconnect's gap went unwatched until the next hour's check."""
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(StartSchedule(), T0)
    core.handle(RunCycle(), T0)
    out = run_cycle(core, T0, [lease("l1", "t1")], {"t1": {"recheck_at": T0 + timedelta(seconds=30)}})
    (wake,) = msgs(out, Wake)
    assert wake.message.reason == "recheck"
    core.handle(Reconcile("listener"), T0 + timedelta(seconds=10))  # a reconnect: a cycle reads the leases
    running = core.cycle
    core.handle(ActiveLeasesRead(running.id, (lease("l1", "t1"),)), T0 + timedelta(seconds=11))
    core.handle(wake.message, wake.at)  # the re-check is due while that cycle waits for t1: queued
    core.handle(Reconcile("listener"), T0 + timedelta(seconds=31))  # cut again: a lease may have opened
    out = core.handle(TenantChecked(running.id, "t1"), T0 + timedelta(seconds=32))
    assert core.cycle is not None and core.cycle.id == running.id + 1
    assert msgs(out, ActiveLeasesCall), [e for e in out if isinstance(e, Note)]  # the lease list is read again
    # ... and a trigger that withdraws, queued behind a re-check, still withdraws.
    running = core.cycle
    core.handle(ActiveLeasesRead(running.id, (lease("l1", "t1"),)), T0 + timedelta(seconds=33))
    core.handle(wake.message, T0 + timedelta(seconds=34))
    core.handle(TriggerWithdraw(), T0 + timedelta(seconds=35))
    out = core.handle(TenantChecked(running.id, "t1"), T0 + timedelta(seconds=36))
    assert msgs(out, WithdrawRequested)
