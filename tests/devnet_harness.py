"""A devnet on a manual clock for tests that go through real gRPC on loopback.

Blocks are cut on the injected clock; in tests that clock is a
``ManualClock``, so something must move it. ``BlockProducer`` does what a
validator set does for the chain: whenever a tx waits in the mempool, it
advances the clock by one ``block_time``, which fires the node's block
timer. Time therefore moves only when a tx needs a block, and the amounts
settled by a tx are exact functions of the tx sequence.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from chain.cosmpy_client import CosmpyChainClient
from chain.model import BillingModel
from devnet.embedded import Devnet, start_devnet
from devnet.model import new_model
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock, utc
from runtime.config import Config, load_config
from tests.support import addr, chain_version, eventually

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER_PROVIDER = "019bbef3-b000-7002-bef5-ba743a73a80e"
OTHER_ADDRESS = addr("other")


class BlockProducer:
    """Advances the manual clock one block whenever the node's mempool holds a tx."""

    def __init__(self, devnet: Devnet, clock: ManualClock) -> None:
        self.devnet = devnet
        self.clock = clock
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="block-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        node = self.devnet.node
        while not self._stop.is_set():
            if not self._running.wait(0.05):
                continue
            if node.wait_for_mempool(0.05) and self._running.is_set() and not self._stop.is_set():
                self.clock.advance(node.block_time)

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


@dataclass
class World:
    config: Config
    clock: ManualClock
    model: BillingModel
    devnet: Devnet
    blocks: BlockProducer

    @property
    def node(self):
        return self.devnet.node

    def client(self, **overrides: Any) -> CosmpyChainClient:
        return self.devnet.client(self.config, **overrides)

    def lease(self, tenant: str, price: int = 10, provider: str = PROVIDER, quantity: int = 1) -> str:
        return self.model.create_lease(tenant, provider, [LeaseItem("sku-1", quantity, Coin("umfx", price))]).uuid

    def tenant(self, name: str, umfx: int = 10**9) -> str:
        address = addr(name)
        self.model.fund_credit(address, [Coin("umfx", umfx)])
        return address

    def close(self) -> None:
        self.blocks.stop()
        self.devnet.stop()


def make_world(websocket: bool = False, **devnet_settings: Any) -> World:
    """A devnet of this test's chain version (``tests.support.chain_version``), with one-second reservations."""
    config = load_config(
        overrides={
            "provider": {"uuid": PROVIDER},
            "devnet": {
                "block_time": "5s",
                "chain_version": chain_version().name,
                "min_lease_duration": "1s",
                **devnet_settings,
            },
            "node": {"tx_poll_interval": "2ms", "tx_timeout": "10s", "query_timeout": "5s"},
        }
    )
    clock = ManualClock(utc(2026, 3, 1))
    model = new_model(config, clock)
    devnet = start_devnet(config, clock, model, websocket=websocket)
    model.register_provider(OTHER_PROVIDER, OTHER_ADDRESS)
    return World(config, clock, model, devnet, BlockProducer(devnet, clock))


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    if not eventually(predicate, timeout):
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")
