"""What the parts that decide nothing tell the ``health`` actor about themselves.

The listener, the ledger writer and the chain calls run on their own
threads or dispatchers; whether they work is what ``/readyz`` answers and
what the metrics count. Each says so in a message to ``health`` when it
changes (a subscription made or lost, a write refused or resumed, the books'
months walked), so readiness and the metrics come from messages like
everything else, and a capture shows when each part came and went.
"""

from __future__ import annotations

from datetime import datetime

from messages.codec import Message

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


class WebsocketSubscribed(Message, tag="websocket_subscribed"):
    """The listener's connection has every subscription acknowledged (each one is followed by a reconcile)."""

    url: str
    queries: int


class WebsocketLost(Message, tag="websocket_lost"):
    """A subscribed connection ended, or an attempt to make one failed; the listener reconnects."""

    reason: str
    #: whether a subscribed session ended (False: an attempt that never got that far)
    was_subscribed: bool = False


class LedgerWriteFailed(Message, tag="ledger_write_failed"):
    """The database refused a write for a passing reason; ``held`` facts wait for the next one."""

    error: str
    held: int


class LedgerWritesResumed(Message, tag="ledger_writes_resumed"):
    """A write went through again, with the ``written`` facts held since the failure."""

    written: int


class MonthStage(Message, tag="month_stage"):
    """One billing month and where it is: open, grace, metered or finalized."""

    month: str
    stage: str


class BooksTicked(Message, tag="books_ticked"):
    """The billing months after a tick of the books, oldest first."""

    at: datetime
    months: tuple[MonthStage, ...] = ()


class HealthCheckDue(Message, tag="health_check_due"):
    """The health actor's timer: ask the node's status again."""


class ReadinessAsked(Message, tag="readiness_asked"):
    """``/healthz`` and ``/readyz`` ask the health actor (an ask: its answer is the report)."""
