"""``Sidecar``: the actor system, assembled, with the seed's controls.

It starts ``chain-io``, the ``ChainActor`` and the ``SchedulerActor`` (which
starts the tenant monitors) on one dispatcher and one clock, plus whatever
optional parts it is given (ledger writer, websocket listener, capture tap),
and offers the seed's controls:

- ``withdraw_once()``: one full cycle, before ``start()``;
- ``start()``: periodic wakes from now on;
- ``trigger_withdraw()``: a cycle now, bypassing the rate limit; ignored
  (returns False) after ``stop()``;
- ``stop()``: no new work, in-flight chain calls released and waited for,
  every actor stopped.

With a ``ManualDispatcher`` nothing runs until ``settle()`` (tests, replay);
with a ``ThreadedDispatcher`` the system runs on its own.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any, Callable, Sequence

import pykka

from actors.chain_actor import ChainActor
from actors.chain_io import ChainIO, Executor, InlineExecutor, pool
from actors.scheduler import SchedulerActor
from actors.scheduler_settings import SchedulerSettings
from actors.shell import start_actor
from actors.write_ahead import WriteAhead
from chain.client import ChainClient
from chain.events import lease_events_from_tx
from chain.model import BillingModel, BlockEvents, TxEvents
from messages.chain_actor import CloseLookupsRestored, WithdrawLookupsRestored
from messages.credit import TenantSnapshot
from messages.ledger import CloseLookupOpened, WithdrawLookupOpened
from messages.scheduler import (
    LeaseEventReceived,
    LeasesToRead,
    Reconcile,
    RunCycle,
    StartSchedule,
    StopSchedule,
    TenantsRestored,
    TriggerWithdraw,
)
from runtime.clock import Clock
from runtime.dispatch import Dispatcher, ManualDispatcher, sending_as
from runtime.router import CHAIN, LISTENER, SCHEDULER, Router

__all__ = ["Sidecar", "ModelEventFeed"]

logger = logging.getLogger(__name__)


class ModelEventFeed:
    """Lease events of the in-process chain model, delivered like the websocket's.

    The model calls back from whichever thread changed it; each lease event
    becomes a ``LeaseEventReceived`` for the scheduler, sent as ``listener``.
    """

    def __init__(self, model: BillingModel, router: Router, provider_uuid: str) -> None:
        self.router = router
        self.provider_uuid = provider_uuid
        self.active = True
        model.subscribe(self._on_tx)

    def _on_tx(self, tx: TxEvents | BlockEvents) -> None:
        if not self.active:
            return
        events = lease_events_from_tx(tx.pairs(), tx.height, tx.tx_hash)
        with sending_as(LISTENER):
            for ev in events:
                if ev.concerns(self.provider_uuid):  # as the websocket listener filters
                    self.router.tell(SCHEDULER, LeaseEventReceived(ev))

    def close(self) -> None:
        self.active = False


class Sidecar:
    def __init__(
        self,
        *,
        clock: Clock,
        dispatcher: Dispatcher,
        client: ChainClient,
        settings: SchedulerSettings,
        provider_uuid: str,
        billing_tick_interval: timedelta | None = None,
        reads: Executor | None = None,
        writes: Executor | None = None,
        restored: Sequence[TenantSnapshot] = (),
        restored_lookups: Sequence[WithdrawLookupOpened] = (),
        restored_close_lookups: Sequence[CloseLookupOpened] = (),
        leases_to_read: Sequence[str] = (),
        extra: Sequence[Callable[["Sidecar"], Any]] = (),
        on_stop: Sequence[Callable[[], None]] = (),
        start_monitor: Callable[[str], Any] | None = None,
        write_ahead: WriteAhead | None = None,
    ) -> None:
        self.clock = clock
        self.dispatcher = dispatcher
        self.client = client
        self.settings = settings
        self.provider_uuid = provider_uuid
        self.router = Router()
        manual = isinstance(dispatcher, ManualDispatcher)
        self._stopped = False
        self._stop_lock = threading.Lock()
        self._on_stop = list(on_stop)
        self.chain_io = start_actor(
            self.router,
            ChainIO,
            dispatcher,
            self.router,
            client,
            provider_uuid,
            reads or (InlineExecutor() if manual else pool(settings.max_queries_in_flight, "chain-read")),
            writes or (InlineExecutor() if manual else pool(1, "chain-tx")),
            write_ahead,
        )
        self.chain = start_actor(self.router, ChainActor, dispatcher, self.router, clock, settings)
        self.scheduler = start_actor(
            self.router,
            SchedulerActor,
            dispatcher,
            self.router,
            clock,
            settings,
            provider_uuid,
            billing_tick_interval,
            start_monitor,
        )
        if restored:
            self._tell(SCHEDULER, TenantsRestored(tuple(restored)))
        #: other parts (ledger writer, listener, event feed) started with this sidecar
        self.parts = [make(self) for make in extra]
        # After the parts: what a lookup finds goes to the ledger writer, which must be there
        # to take it (on an accelerated clock the first lookup fires milliseconds after this).
        if restored_lookups:
            self._tell(CHAIN, WithdrawLookupsRestored(tuple(restored_lookups)))
        if restored_close_lookups:
            self._tell(CHAIN, CloseLookupsRestored(tuple(restored_close_lookups)))
        if leases_to_read:
            # After the parts: the ledger writer must be there to take what the reads answer.
            self._tell(SCHEDULER, LeasesToRead(tuple(leases_to_read)))

    # -- controls ---------------------------------------------------------------------
    def _tell(self, address: str, message: Any) -> bool:
        with sending_as("operator"):
            return self.router.tell(address, message)

    def withdraw_once(self, timeout: float | None = 60.0) -> bool:
        """Run one full cycle and wait for it (the seed's ``WithdrawOnce``)."""
        core = self.scheduler_core
        before = core.cycles_started
        if not self._tell(SCHEDULER, RunCycle()):
            return False
        return self.wait_cycles_after(before, timeout)

    def wait_cycles_after(self, cycle: int, timeout: float | None = 60.0) -> bool:
        """Wait until every cycle numbered above ``cycle`` that has started has ended."""
        core = self.scheduler_core

        def done() -> bool:
            return core.cycles_started > cycle and core.cycle is None

        if isinstance(self.dispatcher, ManualDispatcher):
            self.settle()
            return done()
        return self.scheduler.actor_inbox.actor.wait_until(done, timeout)  # woken as a cycle starts or ends

    def start(self) -> None:
        self._tell(SCHEDULER, StartSchedule())

    def trigger_withdraw(self, source: str = "operator") -> bool:
        """A cycle now, bypassing the rate limit. False (ignored) once stopped."""
        if self._stopped:
            logger.info("withdraw trigger from %s ignored: the sidecar is stopped", source)
            return False
        return self._tell(SCHEDULER, TriggerWithdraw(source))

    def reconcile(self, source: str = "operator") -> bool:
        return self._tell(SCHEDULER, Reconcile(source))

    def settle(self) -> int:
        """Manual dispatcher: deliver everything pending. Returns messages delivered."""
        assert isinstance(self.dispatcher, ManualDispatcher)
        return self.dispatcher.run_until_idle()

    @property
    def scheduler_core(self) -> Any:
        return self.scheduler.actor_inbox.actor.core  # the live core, for status and tests

    def tenant_count(self) -> int:
        return sum(1 for a in self.router.addresses() if a.startswith("tenant/"))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop promptly: no new cycle, in-flight chain calls released and waited for."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._tell(SCHEDULER, StopSchedule())
        for hook in self._on_stop:
            hook()  # e.g. close the chain client: releases calls blocked on the chain
        # The deciding actors and the tenants' monitors first, and the parts (the ledger writer among
        # them) only once they are gone: what they send on their way out (a monitor's last snapshot,
        # a closed grace window) reaches a ledger still there to write it. (Closed first, the writer
        # dropped it, and a window cleared in the last cycle came back open at the next start.)
        monitors = [ref for a in self.router.addresses() if a.startswith("tenant/") and (ref := self.router.get(a))]
        refs = [self.scheduler, self.chain, self.chain_io]
        for ref in refs:
            try:
                ref.stop(block=False)
            except pykka.ActorDeadError:
                pass
        if isinstance(self.dispatcher, ManualDispatcher):
            self.settle()
        else:
            _wait_until(lambda: not any(r.is_alive() for r in refs + monitors), timeout)
            self.chain_io.actor_inbox.actor.wait_idle(timeout)
        for part in self.parts:
            close = getattr(part, "close", None) or getattr(part, "stop", None)
            if close is not None:
                close()
        if isinstance(self.dispatcher, ManualDispatcher):
            self.settle()  # the parts' own stops, on the shared dispatcher


def _wait_until(predicate: Callable[[], bool], timeout: float | None) -> bool:
    """Wait for ``predicate`` with short real-time naps (only the threaded runtime needs this)."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    event = threading.Event()
    while not predicate():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        event.wait(0.002)
    return True
