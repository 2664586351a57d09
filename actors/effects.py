"""What a core decides: the effects an actor carries out.

Every actor is a thin shell around a *core*: a plain object whose
``handle(message, now)`` returns a list of effects and touches nothing else.
The shell delivers the effects. Replay feeds captured messages to the same
cores and compares the effects they return with what was captured.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from messages.fast_init import fast_init

__all__ = ["Send", "Note", "Spawn", "Retire", "Effect", "Core"]


@fast_init
@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` to the actor at ``to``; at ``at`` if given (a timer), else now."""

    to: str
    message: Any
    at: datetime | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class Note:
    """One readable decision line ("tenant X depletes at ..."). ``tenant`` for filtering.

    ``event`` names the decision in the JSON log and is what a repeat is
    known by (``logs.folding``; the name of the message decided on when
    empty); ``fields`` are the decision's values, ``(name, value)`` pairs;
    ``level`` is ``debug``, ``info``, ``warning`` (something is wrong and
    may keep being: it is folded while it repeats) or ``error``.
    """

    text: str
    tenant: str = ""
    event: str = ""
    fields: tuple[tuple[str, Any], ...] = ()
    level: str = "info"


@fast_init
@dataclass(frozen=True, slots=True)
class Spawn:
    """Start a tenant's credit monitor; ``first`` are its first messages, in order."""

    tenant: str
    first: tuple[Any, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class Retire:
    """Stop a tenant's credit monitor (its last lease is gone)."""

    tenant: str


Effect = Send | Note | Spawn | Retire


class Core(Protocol):
    def handle(self, message: Any, now: datetime) -> list[Effect]: ...
