"""The actor shell: what it keeps of the timers its core sets."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from actors.effects import Send
from actors.shell import CoreActor, start_actor
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import Router


class EverySecond:
    """A core that plans its next wake one second after each one, as the scheduler does."""

    def __init__(self) -> None:
        self.wakes = 0

    def handle(self, message: Any, now: datetime) -> list[Send]:
        self.wakes += 1
        return [Send("ticker", "wake", at=now + timedelta(seconds=1))]


def test_a_fired_timer_is_done_and_a_pending_one_is_not() -> None:
    clock = ManualClock(utc(2026, 1, 1))
    fired = clock.call_at(utc(2026, 1, 1, 0, 0, 1), lambda: None)
    pending = clock.call_at(utc(2026, 1, 1, 0, 0, 5), lambda: None)
    clock.advance(timedelta(seconds=2))
    assert fired.done and not fired.cancelled
    assert not pending.done
    pending.cancel()
    assert pending.done


def test_the_shell_keeps_only_the_timers_still_to_fire() -> None:
    """Months of wakes must not pile up one handle each: only pending timers are held."""
    clock = ManualClock(utc(2026, 1, 1))
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    core = EverySecond()
    ref = start_actor(router, CoreActor, dispatcher, "ticker", core, router, clock)
    router.tell("ticker", "wake")
    dispatcher.run_until_idle()
    for _ in range(500):
        clock.advance(timedelta(seconds=1))
        dispatcher.run_until_idle()
    assert core.wakes == 501
    actor = ref.actor_inbox.actor  # type: ignore[attr-defined]
    assert len(actor._timers) <= 2
    ref.stop(block=False)
    dispatcher.run_until_idle()
