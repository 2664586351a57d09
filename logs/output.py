"""Where the log goes: one handler on stdout, in the ``[log]`` format, with repeats folded.

``start_log`` sets it up for a program (``run.py``) and returns what
``close()`` ends: the streaks still open get their end lines, so a run's
log never stops in the middle of a fold, and the logging set-up before the
start is put back. Without that, a ``main()`` called in-process (the tests,
a bench) left its handler on the root logger, writing at interpreter exit
to a stream that was already closed, and left the sidecar's loggers at
INFO for whatever ran next.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from typing import Callable, TextIO

from logs.folding import FoldingHandler, RepeatFolder
from logs.format import JsonFormatter, TextFormatter
from logs.settings import LogSettings

__all__ = ["LogOutput", "start_log"]

#: The sidecar's own loggers; everything else (libraries) shows from WARNING up.
OWN = "leasewarden"


#: The loggers whose level ``start_log`` sets, and ``LogOutput.close`` puts back.
TUNED = (OWN, "websockets")


class LogOutput:
    def __init__(self, handler: FoldingHandler) -> None:
        self.handler = handler
        root = logging.getLogger()
        self._before = (root.handlers[:], root.level, [logging.getLogger(name).level for name in TUNED])

    def close(self) -> None:
        """The folds ended and the log set-up of before the start restored; a second call does nothing."""
        if self._before is None:
            return
        handlers, level, levels = self._before
        self._before = None
        root = logging.getLogger()
        if self.handler in root.handlers:
            root.removeHandler(self.handler)
        self.handler.close()
        root.handlers[:] = handlers + [h for h in root.handlers if h not in handlers]  # and any added since
        root.setLevel(level)
        for name, before in zip(TUNED, levels):
            logging.getLogger(name).setLevel(before)


def start_log(
    settings: LogSettings, now: Callable[[], datetime], level: str | None = None, stream: TextIO | None = None
) -> LogOutput:
    """The process's log from now on; ``level`` (``--log-level``) overrides ``[log] level``."""
    shown = getattr(logging, (level or settings.level).upper())
    out = logging.StreamHandler(stream or sys.stdout)
    out.setFormatter(JsonFormatter(now) if settings.format == "json" else TextFormatter(now))
    handler = FoldingHandler(out, RepeatFolder(settings.repeat_summary), now, shown)
    output = LogOutput(handler)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, shown))
    # INFO at least: an INFO line of a tenant ends its streak even where it is not shown.
    logging.getLogger(OWN).setLevel(min(shown, logging.INFO))
    # The listener reports its own connects and drops; the library's are noise.
    logging.getLogger("websockets").setLevel(logging.WARNING)
    return output
