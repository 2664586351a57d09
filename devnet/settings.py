"""``[devnet]``: the embedded chain: its version, billing params, block time, ports and faults.

Read by the chain model (``chain_version``: which of the two chain
versions providers run it behaves as; ``min_lease_duration`` and
``pending_timeout``, the billing params), by the devnet node and gRPC
server (block time, gRPC port, min gas price, the signer's account type,
latency and error rate per call, a syncing node, stale and zero reads from
a node that says it is synced) and by the devnet
websocket server (its port, the per-client subscription cap, periodic
drops, the slow-client limit). Ports default to 0: a free loopback port,
announced by ``start_devnet``. The version and params apply to the
in-process model mode too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from runtime.config import section, setting

__all__ = ["DevnetSettings", "parse_error_rates"]


def parse_error_rates(entries: tuple[str, ...]) -> dict[str, float]:
    """``("CreditAccount=0.05", "BroadcastTx=0.01")`` -> {method: probability}. Raises ValueError."""
    rates: dict[str, float] = {}
    for entry in entries:
        method, sep, value = entry.partition("=")
        method = method.strip()
        if not sep or not method:
            raise ValueError(f"error_rates: expected \"Method=probability\", got {entry!r}")
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"error_rates: {entry!r}: {value.strip()!r} is not a number") from None
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"error_rates: {entry!r}: probability must be between 0 and 1")
        rates[method] = rate
    return rates


@section("devnet")
@dataclass(frozen=True)
class DevnetSettings:
    chain_version: str = setting(
        "current",
        "which chain the embedded devnet behaves as: current (the newest source) or v2.1 (tag v2.1.0)",
        choices=("current", "v2.1"),
    )
    min_lease_duration: timedelta = setting(
        timedelta(minutes=2),
        "billing param: seconds of a lease's rate reserved at creation (the chain's default is 1h; the devnet's is "
        "short so that the demo's draining tenants run dry within minutes)",
        min=timedelta(seconds=1), max=timedelta(days=30),
    )
    pending_timeout: timedelta = setting(
        timedelta(minutes=10),
        "billing param: a PENDING lease expires at the end of the first block after this (the chain's default is 30m)",
        min=timedelta(seconds=60), max=timedelta(days=1),
    )
    signer_account: str = setting(
        "base", "account type the provider key's account has on the devnet (a vesting one tests the client)",
        choices=("base", "continuous_vesting", "delayed_vesting", "periodic_vesting", "permanent_locked"),
    )
    block_time: timedelta = setting(
        timedelta(seconds=5), "a block (with the pending txs) is cut this often on the clock",
        min=timedelta(milliseconds=1), max=timedelta(hours=1),
    )
    host: str = setting("127.0.0.1", "address the devnet's gRPC and websocket servers listen on")
    grpc_port: int = setting(0, "gRPC port; 0: a free port", min=0, max=65535)
    websocket_port: int = setting(0, "websocket port; 0: a free port", min=0, max=65535)
    latency: timedelta = setting(
        timedelta(0), "added to every gRPC call (real time), e.g. \"5ms\"", max=timedelta(minutes=1)
    )
    error_rates: tuple[str, ...] = setting(
        (), 'gRPC methods failing with UNAVAILABLE at random, e.g. ["CreditAccount=0.05", "BroadcastTx=0.01"]'
    )
    error_seed: int = setting(1, "seed of the random failures, so a run can be repeated", min=0, max=2**63 - 1)
    catching_up: bool = setting(False, "the node reports it is syncing (its state is stale)")
    tx_index: str = setting(
        "kv",
        "the node's tx indexer: kv (every event searchable with GetTxsEvent), hash_only (txs by hash only: a search "
        "finds nothing) or null (GetTx and GetTxsEvent answer \"transaction indexing is disabled\")",
        choices=("kv", "hash_only", "null"),
    )
    stale_read_rate: float = setting(
        0.0,
        "fraction of CreditAccount and LeasesByTenant answers served from an older height while the node says it is "
        "synced (a lagging node behind a load balancer): the answer given to the same request stale_read_lag before",
        min=0.0, max=1.0,
    )
    stale_read_lag: timedelta = setting(
        timedelta(minutes=10), "how far behind a stale read is (at least one block)",
        min=timedelta(seconds=1), max=timedelta(days=1),
    )
    zero_read_rate: float = setting(
        0.0, "fraction of CreditAccount answers with every balance zero at the current height, the node saying it is synced",
        min=0.0, max=1.0,
    )
    min_gas_price: str = setting(
        "0.000025", "smallest fee per gas the node accepts, in umfx (a decimal; the network's is 0.000025)"
    )
    provider_funds: int = setting(
        10**12, "umfx the devnet's provider account starts with, for fees", min=0, max=10**30
    )
    ws_max_subscriptions: int = setting(5, "subscriptions one websocket client may hold", min=1, max=1000)
    ws_drop_interval: timedelta = setting(
        timedelta(0), "drop every websocket client this often; 0: never", max=timedelta(days=30)
    )
    ws_slow_client_queue: int = setting(
        1000, "frames queued for one websocket client before it is dropped as slow", min=1, max=10_000_000
    )

    def validate(self) -> None:
        parse_error_rates(self.error_rates)
        try:
            price = Decimal(self.min_gas_price)
        except InvalidOperation:
            raise ValueError(f"min_gas_price: not a decimal number: {self.min_gas_price!r}") from None
        if not price.is_finite() or price < 0:
            raise ValueError(f"min_gas_price: must be a non-negative decimal, got {self.min_gas_price!r}")
