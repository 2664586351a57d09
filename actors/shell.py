"""``CoreActor``: the thin actor around a core.

It receives a message, asks its core what to do with the clock's ``now``,
and carries the effects out: sends (now, or at a time through the clock),
decision lines to the log (``log_decision``: at the note's level, with its
event, tenant, fields and the decision's time, which ``logs.format``
writes), and, for the scheduler, starting and stopping tenant monitors. It
holds no decision of its own.

A core whose ``handle`` raises has the dispatcher report it (logged with
the message and its capture sequence, counted, the actor goes on). A core
may also say what to do about it (``recover(message, now)``: the chain
actor ends the withdraw cycle or the closure round the message belonged
to, so that no cycle waits for good on a step that will never come);
the shell carries that out before the failure goes on to the dispatcher.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable

from actors.effects import Core, Effect, Note, Retire, Send, Spawn
from runtime.clock import Clock, TimerHandle
from runtime.dispatch import Dispatcher, PooledActor, current_sender, delivery_time
from runtime.router import Router

__all__ = ["CoreShell", "CoreActor", "decisions", "start_actor", "log_decision"]

#: The decision lines: one readable line per decision (``python run.py`` prints them).
decisions = logging.getLogger("leasewarden.decisions")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def log_decision(note: Note, now: datetime | None, decided_on: Any = None) -> None:
    """Log one note; its event is the message's name it was decided on when the note names none."""
    level = _LEVELS[note.level]
    if not decisions.isEnabledFor(level):
        return
    event = note.event or getattr(type(decided_on), "MESSAGE_NAME", "decision")
    decisions.log(level, note.text, extra={"event": event, "tenant": note.tenant, "fields": note.fields, "at": now})


def start_actor(router: Router, actor_cls: type[PooledActor], *args: Any, **kwargs: Any) -> Any:
    """Start a pooled actor and give it its address at once.

    Registering here rather than in ``on_start`` matters: mail sent to the
    address right after the start (a tenant's first credit read) must find
    it, even though ``on_start`` only runs when the dispatcher gets to it.
    """
    ref = actor_cls.start(*args, **kwargs)
    router.add(ref.actor_inbox.actor.address, ref)  # type: ignore[attr-defined]
    return ref


class CoreShell:
    """The shell's behaviour, for any pykka actor class that has ``address``, ``core``, ``router``, ``clock``."""

    address: str
    core: Core
    router: Router
    clock: Clock
    _lifecycle: Callable[[Effect], None] | None = None
    _timers: list[TimerHandle]

    def on_receive(self, message: Any) -> Any:
        # The delivery's time, as captured: replay decides with the same now.
        now = delivery_time() or self.clock.now()
        try:
            effects = self.core.handle(message, now)
        except Exception:
            self._recover(message, now)
            raise  # the dispatcher logs it with its capture sequence, counts it, and the actor goes on
        self.apply(effects, now, message)

    def _recover(self, message: Any, now: datetime) -> None:
        recover = getattr(self.core, "recover", None)
        if recover is None:
            return
        try:
            self.apply(recover(message, now), now, message)
        except Exception as exc:  # reported too; the original failure still goes on to the dispatcher
            seq = current_sender()[1]  # the delivery being handled
            self.dispatcher.supervisor.failed(self.address, message, seq, exc, what="could not recover from")  # type: ignore[attr-defined]

    def apply(self, effects: list[Effect], now: datetime | None = None, decided_on: Any = None) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                if effect.at is None:
                    self.router.tell(effect.to, effect.message)
                else:
                    self._timers = [t for t in self._timers if not t.done]
                    self._timers.append(self.router.tell_at(self.clock, effect.at, effect.to, effect.message))
            elif isinstance(effect, Note):
                log_decision(effect, now, decided_on)
            elif isinstance(effect, (Spawn, Retire)) and self._lifecycle is not None:
                self._lifecycle(effect)
            else:
                raise TypeError(f"{self} cannot carry out {effect!r}")

    def on_stop(self) -> None:
        for t in self._timers:
            t.cancel()
        if self.router.get(self.address) is self.actor_ref:  # type: ignore[attr-defined]
            self.router.remove(self.address)


class CoreActor(CoreShell, PooledActor):
    def __init__(
        self,
        dispatcher: Dispatcher,
        address: str,
        core: Core,
        router: Router,
        clock: Clock,
        lifecycle: Callable[[Effect], None] | None = None,
    ) -> None:
        PooledActor.__init__(self, dispatcher, address)
        self.core = core
        self.router = router
        self.clock = clock
        self._lifecycle = lifecycle
        self._timers = []
