"""Test helpers: probe actors that stand in for an actor's peers, and small worlds."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from actors.scheduler_settings import SchedulerSettings
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock
from runtime.config import load_config
from runtime.dispatch import Dispatcher, ManualDispatcher, PooledActor
from runtime.router import Router
from sidecar.app import ModelEventFeed, Sidecar

PROVIDER = "0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10"
PROVIDER_ADDRESS = "manifest1provider"
OTHER = "5d1c2b3a-0f4e-4c6d-8b7a-9e8f7a6b5c4d"
OTHER_ADDRESS = "manifest1other"


def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether ``predicate`` holds within ``timeout`` seconds, polled every few ms.

    Only for what another thread or process does in its own time (a socket,
    a server); decisions are tested on the manual clock, never by waiting.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


class Probe(PooledActor):
    """Records every message it receives, in order."""

    def __init__(self, dispatcher: Dispatcher, address: str) -> None:
        super().__init__(dispatcher, address)
        self.received: list[Any] = []

    def on_receive(self, message: Any) -> None:
        self.received.append(message)


def probe(router: Router, dispatcher: Dispatcher, address: str) -> Probe:
    ref = Probe.start(dispatcher, address)
    router.add(address, ref)
    return ref.actor_inbox.actor  # type: ignore[attr-defined]


def settings(**overrides: Any) -> SchedulerSettings:
    return load_config(overrides={"scheduler": overrides} if overrides else None).scheduler


def item(price: int, quantity: int = 1, denom: str = "umfx") -> LeaseItem:
    return LeaseItem("sku-1", quantity, Coin(denom, price))


@dataclass
class World:
    clock: ManualClock
    model: BillingModel
    client: ModelChainClient
    dispatcher: ManualDispatcher
    sidecar: Sidecar

    def run_for(self, seconds: float, max_steps: int = 10_000) -> None:
        """Advance the clock, firing timers in order and delivering all mail after each."""
        end = self.clock.now() + __import__("datetime").timedelta(seconds=seconds)
        self.sidecar.settle()
        for _ in range(max_steps):
            nxt = self.clock.next_timer()
            if nxt is None or nxt > end:
                break
            self.clock.advance_to(nxt)
            self.sidecar.settle()
        self.clock.advance_to(end)
        self.sidecar.settle()


def world(clock: ManualClock, withdraw_limit: int = 50, events: bool = True, **scheduler: Any) -> World:
    model = BillingModel(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.register_provider(OTHER, OTHER_ADDRESS)
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS, withdraw_limit=withdraw_limit)
    dispatcher = ManualDispatcher(clock.now)
    extra = [lambda s: ModelEventFeed(model, s.router)] if events else []
    sidecar = Sidecar(
        clock=clock,
        dispatcher=dispatcher,
        client=client,
        settings=settings(**scheduler),
        provider_uuid=PROVIDER,
        extra=extra,
    )
    return World(clock, model, client, dispatcher, sidecar)
