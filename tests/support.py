"""Test helpers: probe actors that stand in for an actor's peers, and small worlds.

Chain worlds run the version ``chain_version()`` names: "current" unless a
test module asks for both (``pytestmark = pytest.mark.usefixtures(
"chain_version")``, the fixture in ``conftest.py``), when each test runs
once per version. Their billing params reserve one second of a lease's
rate at creation (``TEST_PARAMS``), so a test's funding is its runway;
tests of reservations ask for more.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass
from typing import Any, Callable

from actors.scheduler_settings import SchedulerSettings
from chain.model import BillingModel, ChainParams
from chain.model_client import ModelChainClient
from chain.versions import ChainVersion, chain_version as _version_named
from devnet.demo import demo_address
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock
from runtime.config import load_config
from runtime.dispatch import Dispatcher, ManualDispatcher, PooledActor
from runtime.router import Router
from sidecar.app import ModelEventFeed, Sidecar

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"

#: The smallest ``min_lease_duration`` the chain allows: a lease reserves one
#: second of its rate, so tests fund what they mean to spend.
TEST_PARAMS = ChainParams(min_lease_duration=1)

_VERSION: contextvars.ContextVar[str] = contextvars.ContextVar("chain_version", default="current")


def addr(label: str) -> str:
    """A valid ``manifest1...`` address, the same for the same ``label`` (the chain refuses others)."""
    return demo_address(f"test/{label}")


PROVIDER_ADDRESS = addr("provider")
OTHER_ADDRESS = addr("other")


def chain_version() -> ChainVersion:
    """The chain version this test runs on ("current" unless the ``chain_version`` fixture says)."""
    return _version_named(_VERSION.get())


def use_chain_version(name: str) -> contextvars.Token:
    return _VERSION.set(name)


def withdraw_operation() -> str:
    """The client call a withdraw goes through on this test's chain: pages with the cursor, by name without."""
    return "withdraw_by_provider" if chain_version().withdraw_cursor else "withdraw_leases"


def chain_model(clock: ManualClock, *, version: ChainVersion | None = None, params: ChainParams = TEST_PARAMS, **kw: Any) -> BillingModel:
    """A chain model on ``clock``, of this test's chain version, with ``TEST_PARAMS``."""
    return BillingModel(clock, version=version or chain_version(), params=params, **kw)


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


def settle_all(
    model: BillingModel, sender: str, provider: str, limit: int = 2, withdraw: Callable[..., Any] | None = None
) -> None:
    """Settle every ACTIVE lease of ``provider`` now, the way each chain version allows.

    With the withdraw cursor: provider-wide pages to the end, and the leases
    a page lists as failed by name. Without it (v2.1.0, whose every call
    restarts at the first lease): named withdraws of the ACTIVE leases, at
    most 100 each (CHAIN-VERSIONS.md 6.1). Nothing to withdraw is no error.
    ``withdraw`` stands in for ``model.withdraw`` (a test recording what each one answered).
    """
    from chain.errors import ChainError

    withdraw = withdraw or model.withdraw

    def named(uuids: list[str]) -> None:
        for i in range(0, len(uuids), 100):
            try:
                withdraw(sender, lease_uuids=uuids[i : i + 100])
            except ChainError:
                pass  # code 15: nothing was due

    if not model.version.withdraw_cursor:
        named([lease.uuid for lease in model.active_leases_by_provider(provider)])
        return
    key = b""
    while True:
        r = withdraw(sender, provider_uuid=provider, limit=limit, key=key)
        named(list(r.failed_lease_uuids))
        if not r.next_key:
            return
        key = r.next_key


def world(clock: ManualClock, withdraw_limit: int = 50, events: bool = True, **scheduler: Any) -> World:
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.register_provider(OTHER, OTHER_ADDRESS)
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS, withdraw_limit=withdraw_limit)
    dispatcher = ManualDispatcher(clock.now)
    extra = [lambda s: ModelEventFeed(model, s.router, s.provider_uuid)] if events else []
    sidecar = Sidecar(
        clock=clock,
        dispatcher=dispatcher,
        client=client,
        settings=settings(**scheduler),
        provider_uuid=PROVIDER,
        extra=extra,
    )
    return World(clock, model, client, dispatcher, sidecar)
