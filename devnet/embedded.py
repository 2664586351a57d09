"""Start the whole devnet in-process: node, gRPC server, websocket server, funded provider key.

``start_devnet(config, clock, model)`` puts ``model`` behind a ``DevnetNode``
(blocks on ``clock``), serves it over gRPC and the CometBFT-style websocket
on loopback (``[devnet]`` ports, 0 = free ports), and writes a fresh
provider key to a mode-0600 file in a private temp directory, with the
node account funded for fees and the ``[provider] uuid`` registered in the
model under that key's address (unless the model already has it under the
same address). The returned ``Devnet`` says where everything is; ``stop()``
shuts it down and deletes the key.

Seed the demo world (``devnet.demo``) with ``devnet.provider_address`` as
our provider's address.

``shared_clock`` makes an accelerated clock for a devnet whose sidecar runs
in another process (benchmarks, fault runs): its ``anchor``, written with
``runtime.clock.write_clock_anchor``, is what that sidecar's ``[node]
devnet_clock`` reads, so that both run on the same time.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from chain.keys import ProviderKey, load_provider_key, write_key_file
from chain.model import BillingModel
from devnet.grpc_server import DevnetGrpcServer, GrpcFaults
from devnet.node import DevnetNode
from devnet.settings import parse_error_rates
from runtime.clock import Clock, ClockAnchor, RealClock

__all__ = ["Devnet", "start_devnet", "shared_clock"]

log = logging.getLogger(__name__)


@dataclass
class Devnet:
    grpc_url: str
    websocket_url: str
    chain_id: str
    provider_key_file: Path
    provider_address: str
    node: DevnetNode
    model: BillingModel
    grpc_server: DevnetGrpcServer
    websocket_server: Any
    _key_dir: Path = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    @property
    def faults(self) -> GrpcFaults:
        """gRPC faults: latency, random or next-N failures, lost responses."""
        return self.grpc_server.faults

    def client(self, config: Any, **overrides: Any):
        """A ``CosmpyChainClient`` for our provider on this devnet, from ``config.node``."""
        from chain.cosmpy_client import CosmpyChainClient

        client = CosmpyChainClient.from_settings(
            config.node,
            self.chain_id,
            key=load_provider_key(self.provider_key_file),
            grpc_url=self.grpc_url,
        )
        for name, value in overrides.items():
            if not hasattr(client, name):
                raise AttributeError(f"CosmpyChainClient has no setting {name!r}")
            setattr(client, name, value)
        return client

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.websocket_server is not None:
            self.websocket_server.stop()
        self.grpc_server.stop()
        self.node.stop()
        shutil.rmtree(self._key_dir, ignore_errors=True)

    def __enter__(self) -> "Devnet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def shared_clock(config: Any, speed: float, start: datetime | None = None) -> RealClock:
    """A clock at ``speed`` from ``start`` (default: now) that a sidecar in another process can share.

    Its ``anchor`` names this devnet's chain id and block time (``[chain]``,
    ``[devnet]``); the clock is measured on the wall clock from that anchor,
    as the sidecar's will be.
    """
    anchor = ClockAnchor(
        start or datetime.now(timezone.utc), time.time(), speed, config.chain.chain_id, config.devnet.block_time
    )
    return RealClock.anchored(anchor)


def start_devnet(config: Any, clock: Clock, model: BillingModel, *, websocket: bool = True) -> Devnet:
    """Start the devnet for ``config`` (sections ``devnet``, ``chain``, ``node``, ``provider``)."""
    settings = config.devnet
    chain_id = config.chain.chain_id
    node = DevnetNode(
        model,
        clock,
        chain_id=chain_id,
        block_time=settings.block_time,
        min_gas_price=Decimal(settings.min_gas_price),
        fee_denom=config.node.fee_denom,
        catching_up=settings.catching_up,
        tx_index=settings.tx_index,
    )
    key = ProviderKey.generate("devnet provider")
    node.add_account(key.address, fee_balance=settings.provider_funds, kind=settings.signer_account)
    _register_provider(model, config.provider.uuid, key.address)

    key_dir = Path(tempfile.mkdtemp(prefix="leasewarden-devnet-"))
    grpc_server: DevnetGrpcServer | None = None
    ws: Any = None
    try:
        key_file = write_key_file(key_dir / "provider.key", key)
        grpc_server = DevnetGrpcServer(
            node,
            host=settings.host,
            port=settings.grpc_port,
            faults=GrpcFaults(
                latency=settings.latency.total_seconds(),
                error_rates=parse_error_rates(settings.error_rates),
                seed=settings.error_seed,
            ),
        )
        if settings.stale_read_rate:
            blocks = max(1, -(-settings.stale_read_lag // settings.block_time))  # ceil: at least that long ago
            grpc_server.faults.stale_reads(settings.stale_read_rate, blocks)
        if settings.zero_read_rate:
            grpc_server.faults.zero_reads(settings.zero_read_rate)
        grpc_server.start()
        websocket_url = ""
        if websocket:
            # Imported here: the websocket side is optional for gRPC-only uses.
            from devnet.websocket_server import WebsocketServer

            ws = WebsocketServer(
                model,
                node.status,
                host=settings.host,
                port=settings.websocket_port,
                max_subscriptions=settings.ws_max_subscriptions,
                slow_client_queue=settings.ws_slow_client_queue,
                drop_interval=settings.ws_drop_interval or None,
                tx_bytes=node.tx_bytes,
                tx_data=node.tx_data,
            )
            port = ws.start()
            websocket_url = f"ws://{settings.host}:{port}/websocket"
            from devnet.websocket_server import FailedTx

            node.failed_tx_listeners.append(lambda *failed: ws.publish(FailedTx(*failed)))
    except BaseException:
        if ws is not None:
            ws.stop()
        if grpc_server is not None:
            grpc_server.stop()
        node.stop()
        shutil.rmtree(key_dir, ignore_errors=True)
        raise
    devnet = Devnet(
        grpc_url=grpc_server.url,
        websocket_url=websocket_url,
        chain_id=chain_id,
        provider_key_file=key_file,
        provider_address=key.address,
        node=node,
        model=model,
        grpc_server=grpc_server,
        websocket_server=ws,
        _key_dir=key_dir,
    )
    log.info(
        "devnet %s: gRPC %s, websocket %s, provider %s (key file %s)",
        chain_id, devnet.grpc_url, websocket_url or "(off)", key.address, key_file,
    )
    return devnet


def _register_provider(model: BillingModel, provider_uuid: str, address: str) -> None:
    try:
        registered, _ = model.provider(provider_uuid)
    except KeyError:
        model.register_provider(provider_uuid, address)
        return
    if registered != address:
        raise ValueError(
            f"provider {provider_uuid} is already registered in the model as {registered}; "
            f"start the devnet before seeding the model, and register the provider as devnet.provider_address"
        )
