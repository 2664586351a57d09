"""A withdraw cycle without the cursor (v2.1.0), and how a cycle learns which chain it is on.

Decision-level tests of ``actors.withdraw_cycle`` and
``actors.withdraw_failures``: each feeds the cycle the answers a chain
would give and checks the calls it makes next. The devnet tests
(tests/test_devnet_sidecar.py, tests/test_system_audit.py) run the same
cycle against both chain versions end to end.
"""

from __future__ import annotations

from datetime import timedelta

from actors.effects import Note, Send
from actors.withdraw_cycle import WithdrawCycle, named_batches
from actors.withdraw_failures import FIRST_RETRY, MAX_RETRIES_PER_CYCLE, FailingLeases
from chain.errors import BILLING, NO_WITHDRAWABLE
from chain.model import MAX_BATCH_LEASE_SIZE
from messages.chain import ChainFailure, Lease, LeaseItem, WithdrawPage
from messages.chain_actor import (
    ActiveLeasesCall,
    WithdrawableAnswered,
    WithdrawableCall,
    WithdrawLeasesCall,
    WithdrawPageAnswered,
    WithdrawPageCall,
)
from messages.coins import Coin
from messages.scheduler import ActiveLeasesRead, WithdrawFinished
from runtime.clock import utc
from tests.support import settings

T0 = utc(2026, 3, 1)
DUE = (Coin("umfx", 1),)
ITEM = (LeaseItem("sku", 1, Coin("umfx", 1)),)


def lease(n: int, reservation: tuple[Coin, ...] | None = None) -> Lease:
    return Lease(f"L{n:04d}", "tenant", "P", ITEM, reservation=reservation)


def only(effects, kind):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def notes(effects) -> str:
    return "\n".join(e.text for e in effects if isinstance(e, Note))


def answer(call, result=None, error=None) -> WithdrawPageAnswered:
    return WithdrawPageAnswered(call.cycle, call.page, call.attempt, result=result, error=error)


def settled(n: int, has_more: bool = False, next_key: bytes = b"", failed: tuple[str, ...] = ()) -> WithdrawPage:
    return WithdrawPage(f"TX{n}", (Coin("umfx", n),), n, has_more, next_key, failed_lease_uuids=failed)


def failure(message: str = "payout blocked", transient: bool = False, code: int = 1) -> ChainFailure:
    return ChainFailure("withdraw", message, codespace=BILLING, code=code, transient=transient)


def named(leases, cursor=False, alone=(), failing=None, s=None):
    """A cycle on a chain without the cursor, past its listing: (cycle, effects of the listing's answer)."""
    c = WithdrawCycle(1, s or settings(), cursor=cursor, failing=failing, alone=alone)
    c.begin()
    out = c.withdrawable(WithdrawableAnswered(1, DUE), T0)
    assert only(out, ActiveLeasesCall)
    return c, c.leases_read(ActiveLeasesRead(1, tuple(leases)), T0)


def drive(c, out, reply):
    """Answer every named call with ``reply(call)`` until the cycle finishes; the calls made, in order."""
    calls = []
    while True:
        finished = only(out, WithdrawFinished)
        if finished:
            return calls, finished[0]
        (call,) = only(out, WithdrawLeasesCall) + only(out, WithdrawPageCall)
        calls.append(call)
        out = c.answered(reply(call), T0)


def test_nothing_due_sends_no_paid_tx() -> None:
    c = WithdrawCycle(1, settings(), cursor=True)
    assert only(c.begin(), WithdrawableCall)
    out = c.withdrawable(WithdrawableAnswered(1, ()), T0)
    (done,) = only(out, WithdrawFinished)
    assert done.nothing_due and done.pages == 0
    assert not only(out, WithdrawPageCall) and not only(out, WithdrawLeasesCall)


def test_a_node_that_cannot_tell_what_is_due_still_gets_a_withdraw() -> None:
    # None (no error) is "cannot tell", not "nothing": the cycle goes on.
    c = WithdrawCycle(1, settings(), cursor=True)
    c.begin()
    assert only(c.withdrawable(WithdrawableAnswered(1, None), T0), WithdrawPageCall)


def test_a_listing_without_reservations_is_v2_1_and_every_lease_goes_by_name_in_batches() -> None:
    n = 2 * MAX_BATCH_LEASE_SIZE + 5
    c, out = named([lease(i) for i in range(n)], cursor=None)
    assert "no withdraw cursor" in notes(out)
    calls, done = drive(c, out, lambda call: answer(call, settled(len(call.lease_uuids))))
    assert [len(call.lease_uuids) for call in calls] == [MAX_BATCH_LEASE_SIZE, MAX_BATCH_LEASE_SIZE, 5]
    assert sorted(u for call in calls for u in call.lease_uuids) == [f"L{i:04d}" for i in range(n)]
    assert c.cursor is False and done.error is None and done.withdrawal_count == n


def test_a_listing_with_reservations_is_the_current_chain_and_pages_provider_wide() -> None:
    c, out = named([lease(1, reservation=(Coin("umfx", 5),))], cursor=None)
    (call,) = only(out, WithdrawPageCall)
    assert call.key == b"" and c.cursor is True


def test_a_first_page_with_has_more_and_no_key_means_no_cursor_and_the_rest_go_by_name() -> None:
    c = WithdrawCycle(1, settings(), cursor=None)
    c.begin()
    out = c.withdrawable(WithdrawableAnswered(1, DUE), T0)
    # unknown chain, empty listing would say nothing: it asks for the listing first
    assert only(out, ActiveLeasesCall)
    out = c.leases_read(ActiveLeasesRead(1, ()), T0)
    (call,) = only(out, WithdrawPageCall)
    out = c.answered(answer(call, settled(1, has_more=True, next_key=b"")), T0)
    assert c.cursor is False and only(out, ActiveLeasesCall)
    # The key the server did not return is never sent: the next call names leases.
    out = c.leases_read(ActiveLeasesRead(1, (lease(1), lease(2))), T0)
    (call,) = only(out, WithdrawLeasesCall)
    assert call.lease_uuids == ("L0001", "L0002")


def test_a_page_with_a_key_confirms_the_cursor_and_the_key_is_threaded() -> None:
    c = WithdrawCycle(1, settings(), cursor=None)
    c.begin()
    c.withdrawable(WithdrawableAnswered(1, DUE), T0)
    (call,) = only(c.leases_read(ActiveLeasesRead(1, ()), T0), WithdrawPageCall)
    (call,) = only(c.answered(answer(call, settled(1, True, b"k1")), T0), WithdrawPageCall)
    assert call.key == b"k1" and c.cursor is True


def test_leases_near_their_runway_ride_one_per_batch_and_the_rest_of_them_go_alone_first() -> None:
    leases = [lease(i) for i in range(6)]
    c, out = named(leases, alone=("L0003", "L0005"))
    calls, _ = drive(c, out, lambda call: answer(call, settled(len(call.lease_uuids))))
    # One batch of the others: it carries the first; the second has no batch left and goes alone.
    assert [call.lease_uuids for call in calls] == [("L0005",), ("L0000", "L0001", "L0002", "L0004", "L0003")]


def test_no_named_batch_holds_two_leases_near_their_runway() -> None:
    rest = [f"R{i:04d}" for i in range(250)]
    near = [f"N{i:04d}" for i in range(5)]
    batches = named_batches(rest, near)
    assert [len(b) for b in batches] == [1, 1, 100, 100, 53]  # 99, 99 and 52 others, and one near each
    assert all(sum(u.startswith("N") for u in b) <= 1 for b in batches)
    assert sorted(u for b in batches for u in b) == sorted(rest + near)  # each lease once
    assert all(b[0].startswith("R") for b in batches[2:])  # a batch starts where a resume points
    assert [len(b) for b in named_batches(rest, [])] == [100, 100, 50]


def test_a_failing_batch_is_split_until_the_failing_lease_stands_alone_and_the_rest_are_withdrawn() -> None:
    leases = [lease(i) for i in range(8)]
    c, out = named(leases)

    def reply(call):
        if "L0006" in call.lease_uuids:
            return answer(call, error=failure())
        return answer(call, settled(len(call.lease_uuids)))

    calls, done = drive(c, out, reply)
    withdrawn = sorted(u for call in calls if "L0006" not in call.lease_uuids for u in call.lease_uuids)
    assert withdrawn == [f"L{i:04d}" for i in range(8) if i != 6]
    assert done.error is None and done.failing == (("L0006", 1),)
    # one tx for the batch, then halves: 8 -> 4 -> 2 -> 1, each failing half split again
    assert len(calls) <= 1 + 2 * 3


def test_a_transient_failure_of_a_named_batch_is_retried_not_split() -> None:
    c, out = named([lease(1), lease(2)])
    (call,) = only(out, WithdrawLeasesCall)
    out = c.answered(answer(call, error=failure("unavailable", transient=True)), T0)
    (retry,) = [e for e in out if isinstance(e, Send) and e.at is not None]
    assert retry.at > T0 and "try 2" in notes(out)
    (again,) = only(c.retry(retry.message), WithdrawLeasesCall)
    assert again.lease_uuids == call.lease_uuids and again.attempt == 2


def test_nothing_to_withdraw_on_a_batch_is_not_a_failure() -> None:
    c, out = named([lease(1), lease(2)])
    calls, done = drive(c, out, lambda call: answer(call, error=failure("no withdrawable", code=NO_WITHDRAWABLE)))
    assert len(calls) == 1 and done.error is None and done.failing == ()


def test_failed_leases_of_a_provider_wide_page_are_retried_by_name_after_their_backoff() -> None:
    failing = FailingLeases(timedelta(hours=1))
    c = WithdrawCycle(1, settings(), cursor=True, failing=failing)
    c.begin()
    (call,) = only(c.withdrawable(WithdrawableAnswered(1, DUE), T0), WithdrawPageCall)
    out = c.answered(answer(call, settled(3, failed=("LX",))), T0)
    (done,) = only(out, WithdrawFinished)
    assert done.failing == (("LX", 1),) and "LX" in failing
    # Not retried before its backoff...
    c2 = WithdrawCycle(2, settings(), cursor=True, failing=failing)
    c2.begin()
    (call,) = only(c2.withdrawable(WithdrawableAnswered(2, DUE), T0 + FIRST_RETRY / 2), WithdrawPageCall)
    out = c2.answered(answer(call, settled(1)), T0 + FIRST_RETRY / 2)
    assert only(out, WithdrawFinished) and not only(out, WithdrawLeasesCall)
    # ...then alone, by name, and a success ends its count.
    c3 = WithdrawCycle(3, settings(), cursor=True, failing=failing)
    c3.begin()
    later = T0 + FIRST_RETRY
    (call,) = only(c3.withdrawable(WithdrawableAnswered(3, DUE), later), WithdrawPageCall)
    (retry,) = only(c3.answered(answer(call, settled(1)), later), WithdrawLeasesCall)
    assert retry.lease_uuids == ("LX",)
    out = c3.answered(answer(retry, settled(1)), later)
    assert only(out, WithdrawFinished)[0].failing == () and "LX" not in failing
    assert "recovered after 1 failure" in notes(out)


def test_a_failing_lease_backs_off_doubling_up_to_the_withdraw_interval_and_is_never_dropped() -> None:
    cap = timedelta(minutes=10)
    failing = FailingLeases(cap)
    now = T0
    delays = []
    for _ in range(8):
        failing.failed(("LX",), "payout blocked", now)
        (retry_at,) = [e.retry_at for e in failing._leases.values()]
        delays.append(retry_at - now)
        now = retry_at
    assert delays[:4] == [FIRST_RETRY, 2 * FIRST_RETRY, 4 * FIRST_RETRY, 8 * FIRST_RETRY]
    assert delays[-1] == cap and failing.report() == (("LX", 8),)


def test_at_most_max_retries_per_cycle_failing_leases_are_retried_in_one_cycle() -> None:
    failing = FailingLeases(timedelta(hours=1))
    failing.failed(tuple(f"F{i:03d}" for i in range(3 * MAX_RETRIES_PER_CYCLE)), "blocked", T0)
    assert len(failing.due(T0 + FIRST_RETRY)) == MAX_RETRIES_PER_CYCLE
    assert failing.due(T0) == []
