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

import grpc

from chain.billing_pb import query_pb2_grpc as billing_grpc, tx_pb2 as billing_tx
from chain.cosmpy_client import CosmpyChainClient
from chain.keys import ProviderKey, load_provider_key
from chain.model import BillingModel
from cosmpy.aerial.tx import SigningCfg, Transaction, TxFee
from cosmpy.protos.cosmos.auth.v1beta1 import auth_pb2, query_pb2 as auth_query, query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service, service_pb2_grpc as tx_grpc
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


class Raw:
    """Plain gRPC stubs and a hand signer for the devnet's provider account."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.channel = grpc.insecure_channel(world.devnet.grpc_url.split("://", 1)[1])
        self.txs = tx_grpc.ServiceStub(self.channel)
        self.auth = auth_grpc.QueryStub(self.channel)
        self.tm = tm_grpc.ServiceStub(self.channel)
        self.billing = billing_grpc.QueryStub(self.channel)
        self.key: ProviderKey = load_provider_key(world.devnet.provider_key_file)

    def account(self) -> auth_pb2.BaseAccount:
        r = self.auth.Account(auth_query.QueryAccountRequest(address=self.key.address))
        acct = auth_pb2.BaseAccount()
        r.account.Unpack(acct)
        return acct

    def sign(self, msgs, *, sequence=None, account_number=None, chain_id=None, gas=2_000_000, fee=100_000, key=None) -> bytes:
        acct = self.account()
        key = key or self.key
        tx = Transaction()
        for m in msgs:
            tx.add_message(m)
        tx.seal(
            SigningCfg.direct(key.public_key, acct.sequence if sequence is None else sequence),
            fee=TxFee(amount=f"{fee}umfx" if fee else None, gas_limit=gas),
        )
        tx.sign(key.signer, chain_id or self.world.devnet.chain_id,
                acct.account_number if account_number is None else account_number)
        tx.complete()
        return tx.tx.SerializeToString()

    def broadcast(self, raw: bytes) -> abci_pb2.TxResponse:
        req = tx_service.BroadcastTxRequest(tx_bytes=raw, mode=tx_service.BROADCAST_MODE_SYNC)
        return self.txs.BroadcastTx(req).tx_response

    def included(self, raw: bytes) -> abci_pb2.TxResponse:
        """Broadcast ``raw`` (CheckTx must pass) and wait for the block that includes it."""
        sent = self.broadcast(raw)
        assert sent.code == 0, sent.raw_log
        wait_until(lambda: self.world.node.get_tx(sent.txhash) is not None, what="inclusion")
        return self.world.node.get_tx(sent.txhash)

    def close_msg(self, *uuids: str) -> billing_tx.MsgCloseLease:
        return billing_tx.MsgCloseLease(sender=self.key.address, lease_uuids=list(uuids), reason="test")

    def close(self) -> None:
        self.channel.close()
