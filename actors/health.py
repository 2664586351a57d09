"""``HealthActor``: the sidecar's health at address ``health``, for ``/healthz`` and ``/readyz``.

Its core, ``actors.readiness.Readiness``, decides which parts are ready;
this actor carries its effects out (the node status checks on a timer) and
answers ``ReadinessAsked``, an ask from the HTTP server, with the core's
report. That the ask is answered at all is what ``/healthz`` calls alive:
the dispatcher that runs every actor got to it.
"""

from __future__ import annotations

from typing import Any

from actors.readiness import Readiness
from actors.shell import CoreActor
from messages.health import HealthCheckDue, ReadinessAsked
from runtime.clock import Clock
from runtime.dispatch import Dispatcher, delivery_time, sending_as
from runtime.router import HEALTH, Router

__all__ = ["HealthActor"]


class HealthActor(CoreActor):
    def __init__(self, dispatcher: Dispatcher, router: Router, clock: Clock, core: Readiness) -> None:
        super().__init__(dispatcher, HEALTH, core, router, clock)

    def on_start(self) -> None:
        # The first check at once: a node unreachable at start shows not-ready from the start.
        with sending_as(HEALTH):
            self.router.tell(HEALTH, HealthCheckDue())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ReadinessAsked):
            return self.core.report(delivery_time() or self.clock.now())  # type: ignore[attr-defined]
        return super().on_receive(message)
