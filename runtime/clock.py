"""The one clock: ``now()`` and timers, real, accelerated or manual.

Decision code never reads the wall clock; it is handed ``now``. Actors read
it from the clock they were given and set timers on it, so the same code runs
in production (``RealClock``), in the demo (``RealClock(speed=60)``: a
simulated minute per real second), and in tests and replay (``ManualClock``:
time moves only when the test says so, and due timers fire in the caller's
thread, in time order).

All times are timezone-aware UTC ``datetime`` values: exact (integer
microseconds), so accrual arithmetic on them never rounds.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, Protocol

__all__ = ["Clock", "TimerHandle", "RealClock", "ManualClock", "utc", "EPOCH"]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def utc(*args: int) -> datetime:
    """``utc(2026, 1, 1)``: a UTC datetime, for tests and fixtures."""
    return datetime(*args, tzinfo=timezone.utc)


class TimerHandle:
    """A pending timer; ``cancel()`` makes sure it never fires.

    ``done`` once it has been cancelled or taken off its clock to fire: a
    holder of many handles (an actor's timers) drops the done ones, or a
    sidecar running for months would keep every timer it ever set.
    """

    __slots__ = ("when", "callback", "cancelled", "fired", "_seq")

    def __init__(self, when: datetime, callback: Callable[[], None], seq: int) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False
        self.fired = False
        self._seq = seq

    def cancel(self) -> None:
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self.cancelled or self.fired

    def __lt__(self, other: "TimerHandle") -> bool:
        return (self.when, self._seq) < (other.when, other._seq)


class Clock(Protocol):
    def now(self) -> datetime: ...

    def call_at(self, when: datetime, callback: Callable[[], None]) -> TimerHandle: ...

    def close(self) -> None: ...


class _TimerHeap:
    def __init__(self) -> None:
        self._heap: list[TimerHandle] = []
        self._seq = itertools.count()

    def push(self, when: datetime, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(when, callback, next(self._seq))
        heapq.heappush(self._heap, handle)
        return handle

    def pop_due(self, now: datetime) -> TimerHandle | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        if self._heap and self._heap[0].when <= now:
            handle = heapq.heappop(self._heap)
            handle.fired = True
            return handle
        return None

    def next_when(self) -> datetime | None:
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].when if self._heap else None

    def clear(self) -> None:
        for h in self._heap:
            h.cancelled = True
        self._heap.clear()


class ManualClock:
    """Time moves only on ``advance``/``advance_to``; due timers fire then, in order."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or utc(2026, 1, 1)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock start must be timezone-aware")
        self._timers = _TimerHeap()
        self._lock = threading.RLock()

    def now(self) -> datetime:
        return self._now

    def call_at(self, when: datetime, callback: Callable[[], None]) -> TimerHandle:
        with self._lock:
            return self._timers.push(when, callback)

    def next_timer(self) -> datetime | None:
        with self._lock:
            return self._timers.next_when()

    def advance(self, delta: timedelta | float) -> None:
        if not isinstance(delta, timedelta):
            delta = timedelta(seconds=delta)
        self.advance_to(self._now + delta)

    def advance_to(self, when: datetime) -> None:
        """Move to ``when``, firing each due timer at its own time, in order."""
        while True:
            with self._lock:
                handle = self._timers.pop_due(when)
                if handle is None:
                    break
                self._now = max(self._now, handle.when)
            handle.callback()
        with self._lock:
            self._now = max(self._now, when)

    def close(self) -> None:
        with self._lock:
            self._timers.clear()


class RealClock:
    """Wall-clock time, optionally accelerated: ``speed`` simulated seconds per real second.

    Timers run on one daemon thread. Callbacks must be quick (they only post
    a message to an actor).
    """

    def __init__(self, speed: float = 1.0, start: datetime | None = None) -> None:
        if speed <= 0:
            raise ValueError("clock speed must be positive")
        self.speed = speed
        self._start_sim = start or datetime.now(timezone.utc)
        self._start_mono = time.monotonic()
        self._timers = _TimerHeap()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="clock-timers", daemon=True)
        self._thread.start()

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._start_mono) * self.speed
        return self._start_sim + timedelta(seconds=elapsed)

    def call_at(self, when: datetime, callback: Callable[[], None]) -> TimerHandle:
        with self._cond:
            handle = self._timers.push(when, callback)
            self._cond.notify()
            return handle

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                handle = self._timers.pop_due(self.now())
                if handle is None:
                    nxt = self._timers.next_when()
                    wait = None
                    if nxt is not None:
                        wait = max(0.0, (nxt - self.now()).total_seconds() / self.speed)
                    self._cond.wait(timeout=wait)
                    continue
            try:
                handle.callback()
            except Exception:  # a timer callback must never kill the clock
                import logging

                logging.getLogger(__name__).exception("timer callback failed")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._timers.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)
