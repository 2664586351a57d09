"""Supervision: a handler that raises is logged, counted and survived; a crash loop ends the process.

Every actor's handler runs under the dispatcher, and so do the calls
``chain-io`` makes on its thread pools and the listener's handling of a
websocket frame: each failure is reported here (``Supervisor.failed``). A
failure is one line at ERROR naming the actor, the message it could not
handle (its type and the start of its fields) and the message's capture
sequence number (``run.py replay`` of the capture re-runs that very
delivery), with the traceback at DEBUG. It is counted per actor kind (the
``message_failures_total{actor}`` metric) and the actor goes on with its
next message.

One bad message is survived; an actor that fails on everything it is given
is not helped by going on. ``CRASH_LOOP_FAILURES`` failures of the same actor
(its address: ``tenant/manifest1...``, ``chain``, ``chain-io``,
``listener``) within ``CRASH_LOOP_WINDOW`` of clock time is a crash loop:
the supervisor says so once (``on_crash_loop``), and ``run.py run`` stops
and exits with ``EXIT_CRASH_LOOP`` so that the service manager restarts the
process, which resumes from the ledger (the state every actor saved).

Why those numbers: a tenant's monitor gets a read and gives a verdict about
twice a minute at most (the 30 s re-check); the scheduler and the chain
actor get a few messages per tenant per cycle. Ten failures within a minute
is therefore an actor failing on most of what it is given, not one odd
chain answer now and then (which a restart would not mend either, and
which must not take down the sidecar of every other tenant); and a minute
is short enough that a broken actor ends the process within a cycle.
Clock time, not wall time: the cadences the numbers are measured against
are the clock's (an accelerated demo clock runs them faster).

Here, at the bottom, because the dispatcher (``runtime.dispatch``) reports
to it; it imports nothing of the project.
"""

from __future__ import annotations

import collections
import logging
import threading
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

__all__ = [
    "CRASH_LOOP_FAILURES",
    "CRASH_LOOP_WINDOW",
    "EXIT_CRASH_LOOP",
    "Failure",
    "CrashLoop",
    "Supervisor",
    "describe_message",
]

logger = logging.getLogger(__name__)

#: Failures of one actor within ``CRASH_LOOP_WINDOW`` that make a crash loop (see the module doc).
CRASH_LOOP_FAILURES = 10
#: The window those failures are counted in, of the clock's time.
CRASH_LOOP_WINDOW = timedelta(minutes=1)
#: ``run.py run``'s exit status after a crash loop: not 0 (the service manager
#: restarts a unit that fails), not 2 (a refused input) nor 70 (an error that
#: escaped every handler): an actor failed over and over and was stopped.
EXIT_CRASH_LOOP = 3

#: How much of a message a failure's line shows: enough to recognise it, not
#: a whole read of a tenant with a hundred leases (the capture has it whole).
MESSAGE_CHARS = 200


def describe_message(message: Any) -> str:
    """``TypeName(first fields...)``, at most ``MESSAGE_CHARS`` long: what a failure's line names."""
    try:
        text = repr(message)
    except Exception:  # a message whose repr fails is still named
        text = type(message).__name__
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 3] + "..."
    return text


def _where(exc: BaseException) -> str:
    """``file.py:123 in function``: where the error was raised, for the one-line report."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name}"


@dataclass(frozen=True)
class Failure:
    """One handler failure, as reported."""

    at: datetime
    address: str
    message: str
    #: the delivery's capture sequence number (0: not a delivery, e.g. a websocket frame)
    seq: int
    error: str


@dataclass(frozen=True)
class CrashLoop:
    """An actor that failed ``len(failures)`` times within ``window``: the process must restart."""

    address: str
    failures: tuple[Failure, ...]
    window: timedelta

    def line(self) -> str:
        """The operator's last line: who, how often, the last failure, and what happens now."""
        last = self.failures[-1]
        seq = f", capture seq {last.seq}" if last.seq else ""
        return (
            f"crash loop: {self.address} failed {len(self.failures)} times within "
            f"{self.window.total_seconds():g}s (last: {last.error} handling {last.message}{seq}); "
            f"stopping with exit status {EXIT_CRASH_LOOP} so that the service manager restarts the sidecar "
            "from its ledger"
        )


class Supervisor:
    """Counts and logs handler failures, and sees crash loops. Thread-safe."""

    def __init__(
        self,
        clock_now: Callable[[], datetime],
        *,
        limit: int = CRASH_LOOP_FAILURES,
        window: timedelta = CRASH_LOOP_WINDOW,
        on_crash_loop: Callable[[CrashLoop], None] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.clock_now = clock_now
        self.limit = limit
        self.window = window
        #: called once, with the first crash loop (from the failing actor's thread: it must not block)
        self.on_crash_loop = on_crash_loop
        #: failures by actor kind (``tenant``, ``chain``, ...): the metrics' label
        self.failures: collections.Counter[str] = collections.Counter()
        #: the first crash loop seen, if any
        self.tripped: CrashLoop | None = None
        self._recent: dict[str, collections.deque[Failure]] = {}
        self._lock = threading.Lock()

    def counts(self) -> dict[str, int]:
        """A copy of ``failures``, safe to take while actors fail on other threads."""
        with self._lock:
            return dict(self.failures)

    def failed(
        self, address: str, message: Any, seq: int, exc: BaseException, *, what: str = "could not handle", log: bool = True
    ) -> CrashLoop | None:
        """Report one failure of ``address`` on ``message``; the crash loop it completes, if it is the first.

        ``log``: False where the failure reaches someone else whole (an
        ``ask``'s caller gets the exception); it is still counted.
        """
        now = self.clock_now()
        error = f"{type(exc).__name__}: {exc}{_where(exc)}"
        text = describe_message(message)
        failure = Failure(now, address, text, seq, error)
        with self._lock:
            self.failures[address.partition("/")[0]] += 1
            recent = self._recent.setdefault(address, collections.deque(maxlen=self.limit))
            recent.append(failure)
            while recent and now - recent[0].at > self.window:
                recent.popleft()
            count = len(recent)
            loop = None
            if self.tripped is None and count >= self.limit:
                loop = self.tripped = CrashLoop(address, tuple(recent), self.window)
        if log:
            seq_text = f" (capture seq {seq})" if seq else ""
            logger.error(
                "%s %s %s%s: %s; dropped, the actor goes on (%d failure(s) of it in the last %gs)",
                address, what, text, seq_text, error, count, self.window.total_seconds(),
            )
            logger.debug("the failure of %s on %s", address, text, exc_info=exc)
        if loop is not None:
            logger.error("%s", loop.line())
            if self.on_crash_loop is not None:
                self.on_crash_loop(loop)
        return loop
