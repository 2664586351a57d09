"""What a fault run (``bench/fault_run.py``) judges, apart from the run itself, so that it can be tested.

A fault run has the sidecar down (killed, restarting) and the node saying it
is catching up for stretches of time during which nothing may be closed, by
design; a depleted lease's deadline (``deadline``) is its allowance of time
that counts, the paused stretches added on. ``lateness`` judges the
``audit.world.ExhaustionWatch``'s episodes against such deadlines;
``compare_books`` sets what the ledger booked beside what the chain paid,
per lease and denom (integers, never floats), and the chain's closes beside
the ledger's; ``count_tracebacks`` reads the sidecar's output.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from audit.world import CloseJudge, ExhaustionWatch, JudgedClose

__all__ = [
    "Interval", "counted", "deadline", "merge", "Books", "compare_books", "count_tracebacks", "fault_times",
    "Lateness", "lateness", "landed_closes", "when", "TRACEBACK",
]

TRACEBACK = "Traceback (most recent call last)"

Interval = tuple[datetime, datetime]


def deadline(start: datetime, allowed: timedelta, paused: Iterable[Interval]) -> datetime:
    """``start`` + ``allowed`` of time that counts: the stretches in ``paused`` (the sidecar down, the
    node catching up) are added on where they overlap the window, as the window grows."""
    spans = sorted((max(a, start), b) for a, b in paused if b > start)
    end = start + allowed
    for a, b in spans:
        if a >= end:
            break
        end += b - a if a >= start else b - start
    return end


def counted(start: datetime, end: datetime, paused: Iterable[Interval]) -> timedelta:
    """The time from ``start`` to ``end`` that counts: the stretches in ``paused`` taken out."""
    out = end - start
    for a, b in merge(paused):
        lo, hi = max(a, start), min(b, end)
        if hi > lo:
            out -= hi - lo
    return out


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Overlapping stretches as one (the sidecar down while the node catches up counts once)."""
    out: list[Interval] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


@dataclass
class Books:
    """The units per denom the books and the chain disagree on, and the closes the books lack."""

    lost: dict[str, int] = field(default_factory=dict)
    doubled: dict[str, int] = field(default_factory=dict)
    #: lease -> denom -> (chain, books), where they differ
    differences: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    closes: int = 0
    closes_missing: list[str] = field(default_factory=list)
    #: leases closed in the books at another instant than the chain's
    closes_wrong_time: list[str] = field(default_factory=list)


def compare_books(
    chain_paid: dict[str, dict[str, int]],
    booked: dict[str, dict[str, int]],
    chain_closed_us: dict[str, int],
    books_closed_us: dict[str, int],
) -> Books:
    """Per lease and denom, what the chain paid us against what the books settled; every lease the
    chain closed (after it was active) against its close in the books, at the chain's instant."""
    result = Books()
    for lease in sorted(set(chain_paid) | set(booked)):
        paid, held = chain_paid.get(lease, {}), booked.get(lease, {})
        for denom in sorted(set(paid) | set(held)):
            c, b = paid.get(denom, 0), held.get(denom, 0)
            if c == b:
                continue
            result.differences.setdefault(lease, {})[denom] = (c, b)
            into = result.doubled if b > c else result.lost
            into[denom] = into.get(denom, 0) + abs(b - c)
    for lease, at in sorted(chain_closed_us.items()):
        result.closes += 1
        if lease not in books_closed_us:
            result.closes_missing.append(lease)
        elif books_closed_us[lease] != at:
            result.closes_wrong_time.append(lease)
    return result


def count_tracebacks(lines: Iterable[str]) -> int:
    return sum(line.count(TRACEBACK) for line in lines)


def fault_times(rng: random.Random, count: int, first: datetime, last: datetime) -> list[datetime]:
    """``count`` seeded instants in [first, last), in order, to the second."""
    span = int((last - first).total_seconds())
    return sorted(first + timedelta(seconds=rng.randrange(max(1, span))) for _ in range(count))


def when(t: datetime | None) -> str:
    return t.strftime("%m-%d %H:%M:%S.%f")[:-3] if t else "-"


@dataclass
class Lateness:
    """Exhausted episodes judged against one allowance: those still open past it, and the fastest."""

    allowed: timedelta
    episodes: int = 0
    late: list[str] = field(default_factory=list)
    #: late, but the chain's own auto-close ended them (a tx of anyone's touched the tenant first)
    chain_first: int = 0
    on_time: int = 0
    #: of the depletions closed on time, the longest time that counts (``counted``) to the close
    slowest: timedelta = timedelta(0)
    #: and the longest from exhaustion to close, paused stretches included
    slowest_in_all: timedelta = timedelta(0)
    details: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.late)}   (chain closed first: {self.chain_first}; of {self.episodes} depletions, "
                f"{self.on_time} closed on time, slowest {self.slowest.total_seconds():.0f}s of uptime "
                f"({self.slowest_in_all.total_seconds():.0f}s in all); allowed {self.allowed.total_seconds():.0f}s of uptime)")


def lateness(
    watch: ExhaustionWatch, closed_by_us: set[str], kind: dict[str, str], allowed: timedelta,
    paused: list[Interval], stopped: datetime,
) -> Lateness:
    result = Lateness(allowed)
    for e in watch.episodes:
        if e.how == "credit back":
            continue
        result.episodes += 1
        closed = e.closed_at if e.how == "closed" else None
        due = deadline(e.start, allowed, paused)
        if (closed or stopped) <= due:
            if closed is not None:
                result.on_time += 1
                result.slowest = max(result.slowest, counted(e.start, closed, paused))
                result.slowest_in_all = max(result.slowest_in_all, closed - e.start)
            continue
        if closed is not None and e.lease_uuid not in closed_by_us:
            result.chain_first += 1
            continue
        result.late.append(e.lease_uuid)
        result.details.append(
            f"late: {e.lease_uuid} ({kind.get(e.lease_uuid)}) exhausted {when(e.start)}, due {when(due)}, "
            + (f"closed {when(closed)}" if closed else f"still open at {when(stopped)}")
        )
    return result


def landed_closes(
    judge: CloseJudge, closed_at: dict[str, datetime], within: timedelta
) -> dict[str, JudgedClose]:
    """Per lease the chain closed (``closed_at``), the chain's test at our close that ended it, if
    one of ours did: the leases our provider closed, and whether each had credit left.

    The lease's closure reason cannot say: a close tx of ours that finds the
    lease exhausted has the chain auto-close it (reason "credit exhausted"),
    as any other tx would. ``CloseJudge`` sees every run of ``close_leases``
    by our provider, and on the devnet a close tx runs twice: its gas
    estimate (``Simulate``, rolled back) and then in its block. So ours is the
    last judgement made while the lease was still ACTIVE within ``within``
    (a block) of the chain's close; a later one (a retry, a gas estimate
    after the block) sees it closed and is not a close.
    """
    landed: dict[str, JudgedClose] = {}
    for c in judge.closes:
        at = closed_at.get(c.lease_uuid)
        if at is not None and not c.detail.startswith("not active") and abs(c.at - at) <= within:
            landed[c.lease_uuid] = c
    return landed
