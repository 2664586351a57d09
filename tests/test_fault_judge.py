"""What the fault run judges (``audit.faults``): deadlines that skip the paused stretches, the books
against the chain per denom, tracebacks, the seeded fault instants."""

from __future__ import annotations

import random
from datetime import timedelta
from types import SimpleNamespace

from audit.faults import compare_books, count_tracebacks, counted, deadline, fault_times, landed_closes, lateness, merge
from audit.world import Episode, JudgedClose
from runtime.clock import utc

T0 = utc(2026, 3, 31, 18)
MIN = timedelta(minutes=1)


def test_a_deadline_is_its_allowance_of_time_that_counts() -> None:
    allowed = 6 * MIN
    assert deadline(T0, allowed, []) == T0 + 6 * MIN
    # Down for two minutes inside the window: two more.
    assert deadline(T0, allowed, [(T0 + MIN, T0 + 3 * MIN)]) == T0 + 8 * MIN
    # Down since before the depletion: only what follows it counts.
    assert deadline(T0, allowed, [(T0 - 10 * MIN, T0 + MIN)]) == T0 + 7 * MIN
    # A stretch after the deadline changes nothing; one inside the grown window does.
    assert deadline(T0, allowed, [(T0 + 7 * MIN, T0 + 9 * MIN)]) == T0 + 6 * MIN
    assert deadline(T0, allowed, [(T0 + MIN, T0 + 3 * MIN), (T0 + 7 * MIN, T0 + 8 * MIN)]) == T0 + 9 * MIN
    assert deadline(T0, allowed, [(T0 - 5 * MIN, T0 - MIN)]) == T0 + 6 * MIN


def test_the_time_that_counts_leaves_out_each_pause_once() -> None:
    pauses = [(T0 + MIN, T0 + 3 * MIN), (T0 + 2 * MIN, T0 + 4 * MIN), (T0 - MIN, T0 + timedelta(seconds=30))]
    # 10 minutes, of which 0:00-0:30 and 1:00-4:00 paused.
    assert counted(T0, T0 + 10 * MIN, pauses) == 10 * MIN - 30 * timedelta(seconds=1) - 3 * MIN
    assert counted(T0, T0 + 10 * MIN, []) == 10 * MIN
    assert counted(T0 + 5 * MIN, T0 + 6 * MIN, pauses) == MIN


def test_overlapping_pauses_count_once() -> None:
    down = [(T0 + 5 * MIN, T0 + 6 * MIN), (T0, T0 + 2 * MIN), (T0 + MIN, T0 + 3 * MIN)]
    assert merge(down) == [(T0, T0 + 3 * MIN), (T0 + 5 * MIN, T0 + 6 * MIN)]


def test_the_books_against_the_chain_per_lease_and_denom() -> None:
    chain = {"a": {"umfx": 100, "upwr": 7}, "b": {"umfx": 50}, "c": {"umfx": 10}}
    books = {"a": {"umfx": 100, "upwr": 5}, "b": {"umfx": 80}, "d": {"upwr": 1}}
    result = compare_books(chain, books, {"a": 1_000, "b": 2_000, "c": 3_000}, {"a": 1_000, "b": 2_001})
    assert result.lost == {"upwr": 2, "umfx": 10}
    assert result.doubled == {"umfx": 30, "upwr": 1}
    assert all(isinstance(v, int) for v in (*result.lost.values(), *result.doubled.values()))
    assert result.differences["a"] == {"upwr": (7, 5)} and "d" in result.differences
    assert result.closes == 3
    assert result.closes_missing == ["c"] and result.closes_wrong_time == ["b"]
    clean = compare_books(chain, chain, {"a": 1}, {"a": 1})
    assert not clean.lost and not clean.doubled and not clean.closes_missing and not clean.differences


def test_tracebacks_are_counted_in_the_output() -> None:
    lines = ["[1] ok\n", "[2] stderr: Traceback (most recent call last):\n", "  File x\n",
             "[3] Traceback (most recent call last): Traceback (most recent call last)\n"]
    assert count_tracebacks(lines) == 3
    assert count_tracebacks([]) == 0


def test_fault_instants_are_seeded_sorted_and_inside_the_span() -> None:
    first, last = T0, T0 + timedelta(days=3)
    times = fault_times(random.Random(5), 10, first, last)
    assert times == sorted(times) and len(times) == 10
    assert all(first <= t < last and t.microsecond == 0 for t in times)
    assert times == fault_times(random.Random(5), 10, first, last)


def test_lateness_tells_late_from_on_time_and_from_the_chains_own_closes() -> None:
    def episode(uuid: str, start_min: int, how: str | None, closed_min: int | None = None) -> Episode:
        closed = T0 + closed_min * MIN if closed_min is not None else None
        return Episode(uuid, T0 + start_min * MIN, closed, how, closed)

    watch = SimpleNamespace(episodes=[
        episode("on-time", 0, "closed", 5),
        episode("late-ours", 0, "closed", 9),
        episode("late-chain", 0, "closed", 9),
        episode("back", 0, "credit back"),
        episode("open", 10, None),
        episode("paused", 20, "closed", 29),
    ])
    ours = {"on-time", "late-ours", "paused"}
    stopped = T0 + 60 * MIN
    result = lateness(watch, ours, {}, 6 * MIN, [(T0 + 21 * MIN, T0 + 25 * MIN)], stopped)  # type: ignore[arg-type]
    assert result.late == ["late-ours", "open"]
    assert result.chain_first == 1 and result.on_time == 2 and result.episodes == 5
    # "paused" took 9 minutes, 5 of them counted: "on-time" (5, nothing paused) is as slow.
    assert result.slowest == 5 * MIN and result.slowest_in_all == 9 * MIN
    assert "still open" in result.details[1]


def test_the_close_that_landed_is_the_last_judged_while_the_lease_was_active() -> None:
    def judged(uuid: str, seconds: int, exhausted: bool, detail: str = "umfx: ...") -> JudgedClose:
        return JudgedClose(uuid, T0 + timedelta(seconds=seconds), exhausted, False, detail)

    # a: its gas estimate (rolled back) with credit, then the block's run exhausted, then a retry
    # that finds it closed. b: a close of ours asked an hour before the chain closed it by itself.
    # c: simulated, never closed.
    judge = SimpleNamespace(closes=[
        judged("a", 0, False), judged("a", 4, True), judged("a", 6, False, "not active (CLOSED)"),
        judged("b", 0, False), judged("c", 0, False),
    ])
    closed = {"a": T0 + timedelta(seconds=5), "b": T0 + timedelta(hours=1)}
    landed = landed_closes(judge, closed, timedelta(seconds=5))  # type: ignore[arg-type]
    assert list(landed) == ["a"] and landed["a"].exhausted and landed["a"].at == T0 + timedelta(seconds=4)
