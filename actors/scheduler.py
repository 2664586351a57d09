"""``SchedulerActor``: runs the cycles and supervises the tenant monitors.

Its core, ``actors.schedule.SchedulerDecisions``, decides everything; this
actor carries the effects out, and is the one that starts a
``CreditMonitorActor`` for a tenant (``Spawn``) and stops it (``Retire``).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import pykka

from actors.credit_monitor import CreditMonitorActor
from actors.effects import Effect, Retire, Spawn
from actors.schedule import SchedulerDecisions
from actors.scheduler_settings import SchedulerSettings
from actors.shell import CoreActor, start_actor
from runtime.clock import Clock
from runtime.dispatch import Dispatcher, stop_pooled
from runtime.router import SCHEDULER, Router, tenant_address

__all__ = ["SchedulerActor", "RECHECK_EVERY"]

#: The longest a ``wait_until`` sleeps between looks at its predicate even unnotified:
#: the scheduler's state can change outside ``on_receive`` (a proxy call, a stop).
RECHECK_EVERY = 0.05


class SchedulerActor(CoreActor):
    def __init__(
        self,
        dispatcher: Dispatcher,
        router: Router,
        clock: Clock,
        settings: SchedulerSettings,
        provider_uuid: str,
        billing_tick_interval: timedelta | None = None,
        start_monitor: Callable[[str], pykka.ActorRef[Any]] | None = None,
    ) -> None:
        core = SchedulerDecisions(settings, provider_uuid, billing_tick_interval)
        super().__init__(dispatcher, SCHEDULER, core, router, clock, lifecycle=self._lifecycle)
        self.settings = settings
        self._start_monitor = start_monitor or self._start_pooled_monitor
        #: Notified when a cycle starts or ends, so that a caller waiting for one
        #: (``Sidecar.wait_cycles_after``) sleeps until then instead of polling: a
        #: poll every few ms took the GIL from the workers hundreds of times a cycle.
        self._cycle_changed = threading.Condition()
        self._seen: tuple[int, Any] = (-1, None)
        #: monitors retired by the effects being applied, stopped together once they all are
        self._retiring: list[pykka.ActorRef[Any]] = []

    def on_receive(self, message: Any) -> Any:
        try:
            return super().on_receive(message)
        finally:
            core = self.core
            started, cycle = core.cycles_started, core.cycle  # type: ignore[attr-defined]
            seen_started, seen_cycle = self._seen
            if cycle is not seen_cycle or started != seen_started:
                self._seen = (started, cycle)
                with self._cycle_changed:
                    self._cycle_changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``predicate()`` (of the cycles' state) holds, or ``timeout`` seconds; its last value."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cycle_changed:
            while not predicate():
                remaining = RECHECK_EVERY if deadline is None else min(RECHECK_EVERY, deadline - time.monotonic())
                if remaining <= 0:
                    return False
                self._cycle_changed.wait(remaining)
            return True

    def _start_pooled_monitor(self, tenant: str) -> pykka.ActorRef[Any]:
        return start_actor(self.router, CreditMonitorActor, self.dispatcher, self.router, self.clock, tenant, self.settings)

    def apply(self, effects: list[Effect], now: datetime | None = None, decided_on: Any = None) -> None:
        try:
            super().apply(effects, now, decided_on)
        finally:
            # A cycle whose closures end a thousand tenants retires them in one handling:
            # stopped one by one, each would scan pykka's registry (``stop_pooled``).
            retiring, self._retiring = self._retiring, []
            stop_pooled(retiring)

    def _lifecycle(self, effect: Effect) -> None:
        if isinstance(effect, Spawn):
            ref = self._start_monitor(effect.tenant)
            for message in effect.first:
                ref.tell(message)
        elif isinstance(effect, Retire):
            # Out of the router at once: mail for it from the effects after this one is dropped,
            # as from a stopped monitor; the stop itself is asked once every effect is applied.
            ref = self.router.remove(tenant_address(effect.tenant))
            if ref is not None:
                self._retiring.append(ref)

    def on_stop(self) -> None:
        # The monitors are this actor's children: they go with it, all at once.
        super().on_stop()
        monitors = [self.router.remove(a) for a in self.router.addresses() if a.startswith("tenant/")]
        stop_pooled([ref for ref in monitors if ref is not None])
