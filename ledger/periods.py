"""Billing months and instants: how the ledger names and stores time.

A billing month is the half-open UTC calendar month ``[from, to)``: a second
that starts at midnight on the 1st belongs to the month it opens, never to the
one before. Months are named ``YYYY-MM`` everywhere an operator sees them (the
CLI, the tick report, the database).

The ledger stores instants as integer microseconds since the Unix epoch: the
same resolution as ``datetime``, so no conversion rounds, and integers so
SQLite compares them without parsing text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterator

__all__ = [
    "Month",
    "PeriodError",
    "parse_month",
    "parse_instant",
    "to_us",
    "from_us",
    "iso",
    "MONTH_FORM",
    "INSTANT_FORM",
]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)

#: How a month is written, shown in every error about a malformed one.
MONTH_FORM = "YYYY-MM, e.g. 2026-03"
#: How an instant is written, shown in every error about a malformed one.
INSTANT_FORM = "ISO-8601 with a zone, e.g. 2026-04-02T01:00:00Z"

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class PeriodError(ValueError):
    """A month or instant that cannot be read; the message shows the expected form."""


@dataclass(frozen=True, order=True, slots=True)
class Month:
    """One billing month, ``[start, end)`` in UTC."""

    year: int
    month: int

    def __post_init__(self) -> None:
        if not 1 <= self.month <= 12 or not 1 <= self.year <= 9998:
            raise PeriodError(f"no such month {self.year:04d}-{self.month:02d} (expected {MONTH_FORM})")

    @classmethod
    def of(cls, instant: datetime) -> "Month":
        """The month ``instant`` falls in."""
        utc = _aware(instant).astimezone(timezone.utc)
        return cls(utc.year, utc.month)

    @property
    def start(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=timezone.utc)

    @property
    def end(self) -> datetime:
        """The first instant *after* the month (the start of the next one)."""
        return self.next().start

    def next(self) -> "Month":
        return Month(self.year + self.month // 12, self.month % 12 + 1)

    def previous(self) -> "Month":
        return Month(self.year - (self.month == 1), (self.month - 2) % 12 + 1)

    def index(self) -> int:
        """Months since year 0: ``b.index() - a.index()`` is how far apart two months are."""
        return self.year * 12 + self.month - 1

    @classmethod
    def from_index(cls, index: int) -> "Month":
        return cls(index // 12, index % 12 + 1)

    def until(self, last: "Month") -> Iterator["Month"]:
        """This month and every month after it up to ``last``, inclusive."""
        for i in range(self.index(), last.index() + 1):
            yield Month.from_index(i)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"


def parse_month(text: str) -> Month:
    """``"2026-03"`` -> ``Month(2026, 3)``; anything else raises ``PeriodError``."""
    m = _MONTH.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise PeriodError(f"not a month: {text!r} (expected {MONTH_FORM})")
    return Month(int(m.group(1)), int(m.group(2)))


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant with an explicit zone, as UTC. A naive time is refused:
    guessing its zone would shift which month a tick thinks has ended."""
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except (ValueError, AttributeError):
        raise PeriodError(f"not a timestamp: {text!r} (expected {INSTANT_FORM})") from None
    if value.tzinfo is None:
        raise PeriodError(f"timestamp {text!r} has no zone (expected {INSTANT_FORM})")
    return value.astimezone(timezone.utc)


def _aware(instant: datetime) -> datetime:
    if instant.tzinfo is None:
        raise ValueError(f"naive datetime {instant.isoformat()}: ledger times must be UTC-aware")
    return instant


def to_us(instant: datetime) -> int:
    """Microseconds since the epoch, exactly."""
    return (_aware(instant) - EPOCH) // _MICRO


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def iso(instant: datetime | None) -> str:
    """``2026-04-02T01:00:00Z`` (microseconds only where there are some); ``""`` for None."""
    if instant is None:
        return ""
    text = instant.astimezone(timezone.utc).isoformat()
    return text.replace("+00:00", "Z")
