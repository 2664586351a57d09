"""The one clock: ``now()`` and timers, real, accelerated or manual.

Decision code never reads the wall clock; it is handed ``now``. Actors read
it from the clock they were given and set timers on it, so the same code runs
in production (``RealClock``), in the demo (``RealClock(speed=60)``: a
simulated minute per real second), and in tests and replay (``ManualClock``:
time moves only when the test says so, and due timers fire in the caller's
thread, in time order).

Two processes share one accelerated clock through a ``ClockAnchor``: chain
time ``origin`` at Unix time ``origin_unix``, running ``speed`` times the
wall clock. The embedded devnet writes it to a file (``write_clock_anchor``)
and a sidecar in another process reads it (``read_clock_anchor``, ``[node]
devnet_clock``): both clocks are then ``RealClock.anchored`` to the same
wall-clock instant, so their ``now()`` agree to the wall clock's precision.
That is for benchmarks and fault runs only: a real node runs on the wall
clock at speed 1.

All times are timezone-aware UTC ``datetime`` values: exact (integer
microseconds), so accrual arithmetic on them never rounds.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Protocol

__all__ = [
    "Clock", "TimerHandle", "RealClock", "ManualClock", "utc", "EPOCH",
    "ClockAnchor", "write_clock_anchor", "read_clock_anchor", "ANCHOR_FORMAT", "MIN_SPEED", "MAX_SPEED",
]

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

    By default elapsed time is measured on the monotonic clock from the
    moment the clock is made. ``anchored(anchor)`` measures it on the wall
    clock (``time.time()``) from the anchor's ``origin_unix`` instead, so that
    clocks made in two processes from one anchor tell the same time.
    """

    def __init__(self, speed: float = 1.0, start: datetime | None = None, *, origin_unix: float | None = None) -> None:
        if speed <= 0:
            raise ValueError("clock speed must be positive")
        self.speed = speed
        self._start_sim = start or datetime.now(timezone.utc)
        #: The anchor this clock was made from (``anchored``), else None.
        self.anchor: ClockAnchor | None = None
        if origin_unix is None:
            self._elapsed_source = time.monotonic
            self._start_real = time.monotonic()
        else:
            self._elapsed_source = time.time
            self._start_real = origin_unix
        self._timers = _TimerHeap()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="clock-timers", daemon=True)
        self._thread.start()

    @classmethod
    def anchored(cls, anchor: "ClockAnchor") -> "RealClock":
        """The clock ``anchor`` describes: the same ``now()`` in every process that makes one from it."""
        clock = cls(anchor.speed, anchor.origin, origin_unix=anchor.origin_unix)
        clock.anchor = anchor
        return clock

    def now(self) -> datetime:
        elapsed = (self._elapsed_source() - self._start_real) * self.speed
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


# -- a clock shared between processes ----------------------------------------------------
#: What an anchor file says it is, so that no other JSON file is taken for one.
ANCHOR_FORMAT = "leasewarden devnet clock 1"
#: Speeds an anchor may have: ``[demo] speed``'s bounds.
MIN_SPEED, MAX_SPEED = 0.001, 100_000.0
#: The largest anchor file read (it is a few hundred bytes).
_ANCHOR_MAX_BYTES = 4096


@dataclass(frozen=True)
class ClockAnchor:
    """An accelerated chain clock: ``origin`` at Unix time ``origin_unix``, ``speed`` x the wall clock.

    ``chain_id`` and ``block_time`` say whose clock it is: the devnet that
    wrote it, whose chain id a sidecar must be configured with, and how
    often that devnet cuts a block (a sidecar polls for inclusion a few
    times per block of real time).
    """

    origin: datetime
    origin_unix: float
    speed: float
    chain_id: str
    block_time: timedelta

    def now(self, wall: float | None = None) -> datetime:
        """The anchored clock's time at Unix time ``wall`` (default: now)."""
        elapsed = ((time.time() if wall is None else wall) - self.origin_unix) * self.speed
        return self.origin + timedelta(seconds=elapsed)


def write_clock_anchor(path: str | os.PathLike[str], anchor: ClockAnchor) -> Path:
    """Write ``anchor`` to ``path`` at once (a temporary file renamed over it): a reader never sees half of it."""
    target = Path(path)
    body = {
        "format": ANCHOR_FORMAT,
        "chain_id": anchor.chain_id,
        "origin": anchor.origin.astimezone(timezone.utc).isoformat(),
        "origin_unix": anchor.origin_unix,
        "speed": anchor.speed,
        "block_time_seconds": anchor.block_time.total_seconds(),
    }
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    os.replace(tmp, target)
    return target


def read_clock_anchor(path: str | os.PathLike[str]) -> ClockAnchor:
    """The anchor in ``path``; a ValueError saying in one line what is wrong with the file."""
    where = f"{path}"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_ANCHOR_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file (the devnet writes it: run.py devnet --clock-file PATH)") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) > _ANCHOR_MAX_BYTES:
        raise ValueError(f"{where}: larger than {_ANCHOR_MAX_BYTES} bytes: not a devnet clock file")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{where}: not a devnet clock file (not JSON)") from None
    if not isinstance(body, dict) or body.get("format") != ANCHOR_FORMAT:
        raise ValueError(f"{where}: not a devnet clock file (no \"format\": \"{ANCHOR_FORMAT}\")")
    try:
        chain_id = body["chain_id"]
        origin = datetime.fromisoformat(body["origin"])
        origin_unix = float(body["origin_unix"])
        speed = float(body["speed"])
        block_time = float(body["block_time_seconds"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: a devnet clock file with a missing or malformed field ({exc})") from None
    if not isinstance(chain_id, str) or not chain_id or origin.tzinfo is None:
        raise ValueError(f"{where}: a devnet clock file needs a chain_id and a timezone-aware origin")
    if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise ValueError(f"{where}: speed {speed!r} is outside {MIN_SPEED:g}..{MAX_SPEED:g}")
    if not (math.isfinite(origin_unix) and 0 < origin_unix <= time.time() + 60):
        raise ValueError(f"{where}: origin_unix {origin_unix!r} is not a Unix time up to now")
    if not (math.isfinite(block_time) and 0 < block_time <= 3600):
        raise ValueError(f"{where}: block_time_seconds {block_time!r} is outside (0, 3600]")
    return ClockAnchor(origin, origin_unix, speed, chain_id, timedelta(seconds=block_time))
