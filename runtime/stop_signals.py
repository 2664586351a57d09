"""How a long-running command is stopped: SIGINT or SIGTERM sets an event it waits on.

``run.py run`` and ``run.py devnet`` wait for their duration or for a stop
(Ctrl-C, the service manager's SIGTERM), then shut down in order. The
handlers are theirs only while they run: ``stopped_by_signals`` puts back
what was installed before, so a caller that runs them in-process (a test,
a bench) keeps its own Ctrl-C once they return. Run as the program, the
command keeps them to the end (``put_back=False``): a stop signal after it
returned, as the process exits, would otherwise meet Python's default
handlers and turn its exit status (0, or a crash loop's 3) into an
interrupt's.

Only the main thread may install a handler (and only it receives
signals): called from another thread, the command stops at its duration
alone, and installs nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

__all__ = ["STOP_SIGNALS", "stopped_by_signals"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stopped_by_signals(done: threading.Event, *, put_back: bool = True) -> Iterator[threading.Event]:
    """While inside, SIGINT and SIGTERM set ``done``; on the way out, the handlers before are back
    (``put_back``; else ours stay, setting an event no one waits on any more)."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        yield done
        return
    try:
        for s in STOP_SIGNALS:
            previous[s] = signal.signal(s, lambda *_: done.set())
        yield done
    finally:
        if not put_back:
            previous = {}
        for s, handler in previous.items():
            # None: a handler installed from outside Python, which cannot be put back; the default is.
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
