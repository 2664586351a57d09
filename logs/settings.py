"""``[log]``: what the sidecar's log looks like and how much of it there is.

``format`` picks one readable line per decision (``text``) or one JSON
object a line (``json``, for a log shipper); ``level`` how much is shown;
``repeat_summary`` how often a line that keeps repeating (a tenant whose
credit reads keep failing, every 30 s for hours) is summarised instead of
printed again (``logs.folding``). ``--log-level`` overrides ``level``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["LogSettings", "LOG_FORMATS", "LOG_LEVELS"]

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


@section("log")
@dataclass(frozen=True)
class LogSettings:
    format: str = setting(
        "text", "text: one readable line per decision; json: one JSON object a line (UTC times, event, fields)",
        choices=LOG_FORMATS,
    )
    level: str = setting("info", "the least severe lines shown: debug | info | warning | error", choices=LOG_LEVELS)
    repeat_summary: timedelta = setting(
        timedelta(minutes=10),
        "a warning that keeps repeating is shown at its start, summarised this often (clock time), and at its end",
        min=timedelta(seconds=1), max=timedelta(days=1),
    )
