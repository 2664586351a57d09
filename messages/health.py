"""What the parts that decide nothing tell the ``health`` actor about themselves.

The listener, the ledger writer and the chain calls run on their own
threads or dispatchers; whether they work is what ``/readyz`` answers and
what the metrics count. Each says so in a message to ``health`` when it
changes (a subscription made or lost, a write refused or resumed, the books'
months walked), so readiness and the metrics come from messages like
everything else, and a capture shows when each part came and went.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from messages.codec import message

__all__ = [
    "WebsocketSubscribed",
    "WebsocketLost",
    "LedgerWriteFailed",
    "LedgerWritesResumed",
    "MonthStage",
    "BooksTicked",
    "HealthCheckDue",
    "ReadinessAsked",
]


@message("websocket_subscribed")
@dataclass(frozen=True, slots=True)
class WebsocketSubscribed:
    """The listener's connection has every subscription acknowledged (each one is followed by a reconcile)."""

    url: str
    queries: int


@message("websocket_lost")
@dataclass(frozen=True, slots=True)
class WebsocketLost:
    """A subscribed connection ended, or an attempt to make one failed; the listener reconnects."""

    reason: str
    #: whether a subscribed session ended (False: an attempt that never got that far)
    was_subscribed: bool = False


@message("ledger_write_failed")
@dataclass(frozen=True, slots=True)
class LedgerWriteFailed:
    """The database refused a write for a passing reason; ``held`` facts wait for the next one."""

    error: str
    held: int


@message("ledger_writes_resumed")
@dataclass(frozen=True, slots=True)
class LedgerWritesResumed:
    """A write went through again, with the ``written`` facts held since the failure."""

    written: int


@message("month_stage")
@dataclass(frozen=True, slots=True)
class MonthStage:
    """One billing month and where it is: open, grace, metered or finalized."""

    month: str
    stage: str


@message("books_ticked")
@dataclass(frozen=True, slots=True)
class BooksTicked:
    """The billing months after a tick of the books, oldest first."""

    at: datetime
    months: tuple[MonthStage, ...] = ()


@message("health_check_due")
@dataclass(frozen=True, slots=True)
class HealthCheckDue:
    """The health actor's timer: ask the node's status again."""


@message("readiness_asked")
@dataclass(frozen=True, slots=True)
class ReadinessAsked:
    """``/healthz`` and ``/readyz`` ask the health actor (an ask: its answer is the report)."""
