"""Repeats folded: a warning that keeps coming is logged at its start, summarised, and at its end.

A tenant whose credit reads fail is re-checked every 30 s for as long as
they fail: printed each time, one such tenant filled nine tenths of a
2-hour log. ``RepeatFolder`` decides, line by line, with the clock's
``now``, what a handler prints instead:

- a *streak* is the lines of one key, ``(event, tenant)``, at WARNING or
  above (a decision's event; a library line's logger and message template);
- its first line is printed; the next ones are folded, and every
  ``summary_every`` a summary says how many were and shows the latest;
- it ends when the same tenant logs something ordinary (below WARNING)
  that is not itself recurring (its reads work again; a line it also
  logged within ``summary_every`` is part of the repeating round, as a
  dry run's "closing 2 leases" before each "would close"; another warning
  is a trouble of its own, with its own streak), when it has been quiet
  for ``summary_every``, or at the end of the run;
  a streak that folded something gets an end line saying how many lines it
  held from when to when.

Lines below WARNING are never folded (they are the decisions an operator
reads), but they do end their tenant's streaks. ``FoldingHandler`` applies
the folder's verdicts in front of the handler that writes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from logs.format import event_of, stamp_of
from runtime.config import format_duration

__all__ = ["Streak", "RepeatFolder", "FoldingHandler", "Verdict"]

#: Ordinary lines between prunes of their record: a cycle of 10,000 tenants logs a few
#: per tenant, so the record stays within a few cycles' worth.
PRUNE_EVERY = 50_000


@dataclass
class Streak:
    event: str
    tenant: str
    level: int
    first_at: datetime
    last_at: datetime
    last_text: str
    #: lines in the streak, the first included
    count: int = 1
    #: lines folded since the start or the last summary
    folded: int = 0
    summarised_at: datetime | None = None

    def summary_text(self, every: timedelta) -> str:
        who = f" for tenant {self.tenant}" if self.tenant else ""
        return (
            f"{self.last_text} [repeated {self.folded} more time(s){who} in the last {format_duration(every)}; "
            f"{self.count} since {self.first_at:%Y-%m-%d %H:%M:%S}]"
        )

    def end_text(self) -> str:
        who = f" of tenant {self.tenant}" if self.tenant else ""
        return (
            f"repeats ended: {self.event}{who} was logged {self.count} times from "
            f"{self.first_at:%Y-%m-%d %H:%M:%S} to {self.last_at:%Y-%m-%d %H:%M:%S}; last: {self.last_text}"
        )


@dataclass(frozen=True)
class Verdict:
    """What to print for one line: the ends it caused, then the line itself (or not), then a summary."""

    ended: tuple[Streak, ...] = ()
    show: bool = True
    summary: Streak | None = None


class RepeatFolder:
    def __init__(self, summary_every: timedelta) -> None:
        self.summary_every = summary_every
        self.streaks: dict[tuple[str, str], Streak] = {}
        #: when each tenant's ordinary lines were last logged, by (event, tenant); pruned of the old
        self.ordinary: dict[tuple[str, str], datetime] = {}
        self._seen = 0

    def observe(self, event: str, tenant: str, level: int, text: str, now: datetime) -> Verdict:
        ended = self._quiet(now)
        key = (event, tenant)
        if tenant and level < logging.WARNING:
            before = self.ordinary.get(key)
            self.ordinary[key] = now
            self._prune(now)
            if before is None or now - before >= self.summary_every:
                # Something ordinary, and not part of the round: its troubles are over.
                ended += [self.streaks.pop(k) for k in [k for k in self.streaks if k[1] == tenant]]
        streak = self.streaks.get(key)
        if level < logging.WARNING:
            return Verdict(tuple(s for s in ended if s.count > 1))
        if streak is None:
            self.streaks[key] = Streak(event, tenant, level, now, now, text, summarised_at=now)
            return Verdict(tuple(s for s in ended if s.count > 1))
        streak.count += 1
        streak.folded += 1
        streak.last_at, streak.last_text = now, text
        summary = None
        if streak.summarised_at is None or now - streak.summarised_at >= self.summary_every:
            summary = replace(streak)  # what it says now, before the count restarts
            streak.folded, streak.summarised_at = 0, now
        return Verdict(tuple(s for s in ended if s.count > 1), show=False, summary=summary)

    def _quiet(self, now: datetime) -> list[Streak]:
        """Streaks with no line for ``summary_every``: whatever repeated has stopped."""
        return [self.streaks.pop(k) for k, s in list(self.streaks.items()) if now - s.last_at >= self.summary_every]

    def _prune(self, now: datetime) -> None:
        """Every so many lines, drop the ordinary lines too old to be part of any round."""
        self._seen += 1
        if self._seen % PRUNE_EVERY == 0:
            self.ordinary = {k: at for k, at in self.ordinary.items() if now - at < self.summary_every}

    def close(self) -> list[Streak]:
        """The end of the run: every streak that folded something ends."""
        out = [s for s in self.streaks.values() if s.count > 1]
        self.streaks.clear()
        self.ordinary.clear()
        return out


class FoldingHandler(logging.Handler):
    """Hands ``target`` what the folder lets through, the summaries and the end lines, at ``level`` and above.

    It takes records from INFO up whatever ``level`` is, because an INFO
    line of a tenant ends that tenant's streaks even where it is not shown.
    """

    def __init__(self, target: logging.Handler, folder: RepeatFolder, now: Callable[[], datetime], level: int) -> None:
        super().__init__(min(level, logging.INFO))
        self.target = target
        self.folder = folder
        self.now = now
        self.shown = level
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        at = stamp_of(record, self.now)
        record.at = at
        with self._lock:
            verdict = self.folder.observe(
                event_of(record) if getattr(record, "event", "") else f"{record.name}:{record.msg}",
                getattr(record, "tenant", "") or "",
                record.levelno,
                record.getMessage(),
                at,
            )
        for streak in verdict.ended:
            self._write(streak, "repeats_ended", streak.end_text(), at)
        if verdict.show and record.levelno >= self.shown:
            self.target.handle(record)
        if verdict.summary is not None:
            self._write(verdict.summary, "repeats", verdict.summary.summary_text(self.folder.summary_every), at)

    def _write(self, streak: Streak, event: str, text: str, at: datetime) -> None:
        if streak.level < self.shown:
            return
        record = logging.LogRecord("leasewarden.repeats", streak.level, __file__, 0, text, None, None)
        record.event, record.tenant, record.at = event, streak.tenant, at
        record.fields = (
            ("of", streak.event), ("folded", streak.folded), ("count", streak.count),
            ("since", streak.first_at), ("last_at", streak.last_at),
        )
        self.target.handle(record)

    def close(self) -> None:
        with self._lock:
            ended = self.folder.close()
        now = self.now()
        for streak in ended:
            self._write(streak, "repeats_ended", streak.end_text(), now)
        self.target.flush()
        super().close()
