"""Assembling a runnable sidecar from the configuration, for each chain mode.

- ``model``: the in-process billing model seeded with the demo world; lease
  events come straight from the model.
- ``devnet``: the embedded devnet (gRPC + CometBFT websocket on loopback)
  around the same model, reached through the production client code.
- ``node``: a real node's endpoints from ``[node]``.

``build`` returns a ``Running`` whose ``sidecar`` is ready for
``withdraw_once()``/``start()`` and whose ``close()`` undoes everything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from chain.faults import Faults
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from devnet.demo import PROVIDER_ADDRESS, DemoWorld
from runtime.clock import Clock
from runtime.dispatch import Dispatcher
from sidecar.app import ModelEventFeed, Sidecar
from sidecar.config import Config

__all__ = ["Running", "build"]

logger = logging.getLogger(__name__)


@dataclass
class Running:
    sidecar: Sidecar
    model: BillingModel | None = None
    world: DemoWorld | None = None
    faults: Faults | None = None
    #: where the chain is, for the operator
    endpoint: str = ""
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.sidecar.stop()
        if self.world is not None:
            self.world.stop()
        for close in reversed(self.closers):
            try:
                close()
            except Exception:
                logger.exception("error while shutting down")


def build(config: Config, clock: Clock, dispatcher: Dispatcher, *, demo: bool = True) -> Running:
    mode = config.chain.mode
    provider = config.provider.uuid
    if mode == "model":
        model = BillingModel(clock, config.chain.chain_id)
        world = DemoWorld(model, clock, config.demo, provider, PROVIDER_ADDRESS)
        if demo:
            world.seed()
        else:
            model.register_provider(provider, PROVIDER_ADDRESS)
        faults = Faults(config.demo.seed)
        world.install_faults(faults)
        client = ModelChainClient(model, provider, PROVIDER_ADDRESS, faults)
        sidecar = Sidecar(
            clock=clock,
            dispatcher=dispatcher,
            client=client,
            settings=config.scheduler,
            provider_uuid=provider,
            extra=[lambda s: ModelEventFeed(model, s.router)],
            on_stop=[client.close],
        )
        return Running(sidecar, model, world, faults, endpoint="in-process chain model")
    raise NotImplementedError(f"chain mode {mode!r} is not available in this build")


def describe(running: Running) -> list[str]:
    out = [f"chain: {running.endpoint}"]
    if running.world is not None:
        t = running.world.tenants
        out.append(
            f"demo tenants: {len(t.healthy)} healthy, {len(t.draining)} draining, "
            f"{len(t.failing)} with failing reads; one more opens a lease 3 simulated minutes in"
        )
    return out


__all__.append("describe")
