"""Log lines as text or JSON, stamped with the clock's UTC time.

A record may carry what the actors' decision lines carry (``actors.shell``):
``event`` (the decision's name), ``tenant``, ``fields`` (the decision's
values, as ``(name, value)`` pairs) and ``at`` (the clock time it was
decided at; the clock's now otherwise). Other records are named by their
logger.

- ``TextFormatter``: ``[2026-11-30 09:17:21 UTC] WARNING: tenant ...``; the
  level is left out at INFO, the decision lines an operator reads most.
- ``JsonFormatter``: one object a line, ``time`` (ISO 8601, ``Z``),
  ``level``, ``event``, ``message``, ``tenant`` and the fields. Coins are an
  object of denom to integer amount, times ISO 8601 in UTC: no float, no
  local time.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from messages.codec import to_plain
from messages.coins import Coin
from runtime.config import format_duration

__all__ = ["TextFormatter", "JsonFormatter", "event_of", "stamp_of", "utc_iso", "json_value"]

#: Keys every JSON line has; a decision field of the same name is written as ``field_<name>``
#: rather than overwrite them.
RESERVED = frozenset({"time", "level", "event", "logger", "message", "tenant", "exception"})


def utc_iso(at: datetime) -> str:
    """``2026-11-30T09:17:21.123456Z``: ISO 8601 in UTC, whatever zone ``at`` is in."""
    text = at.astimezone(timezone.utc).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def event_of(record: logging.LogRecord) -> str:
    """The record's event: a decision's name, else its logger's (``actors.listener``)."""
    return getattr(record, "event", "") or record.name


def stamp_of(record: logging.LogRecord, now: Callable[[], datetime]) -> datetime:
    """When the record happened on the clock: the decision's time when it has one."""
    at = getattr(record, "at", None)
    return at if at is not None else now()


def json_value(value: Any) -> Any:
    """A decision field as JSON: coins as {denom: int}, times in UTC, messages as their fields."""
    if isinstance(value, datetime):
        return utc_iso(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, Coin):
        return {value.denom: value.amount}
    if isinstance(value, tuple) and value and all(isinstance(v, Coin) for v in value):
        out: dict[str, int] = {}
        for c in value:
            out[c.denom] = out.get(c.denom, 0) + c.amount
        return out
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "MESSAGE_NAME"):
        return json_value(to_plain(value))
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return str(value)


class TextFormatter(logging.Formatter):
    def __init__(self, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.now = now

    def format(self, record: logging.LogRecord) -> str:
        stamp = stamp_of(record, self.now).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        level = "" if record.levelno == logging.INFO else f"{record.levelname}: "
        line = f"[{stamp}] {level}{record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def __init__(self, now: Callable[[], datetime]) -> None:
        super().__init__()
        self.now = now

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": utc_iso(stamp_of(record, self.now)),
            "level": record.levelname.lower(),
            "event": event_of(record),
            "logger": record.name,
            "message": record.getMessage(),
        }
        tenant = getattr(record, "tenant", "")
        if tenant:
            out["tenant"] = tenant
        for name, value in getattr(record, "fields", ()) or ():
            out[f"field_{name}" if name in RESERVED else name] = json_value(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"))
