"""``[node]``: how the sidecar reaches a chain node and signs for the provider.

The gRPC and websocket endpoints, where the provider key comes from, the fee
(gas price in the fee denom, simulated gas times an adjustment, as the
production client fred computes them: CHAIN-VERSIONS.md 5) and the time
limits of queries and of waiting for a tx to be included. In devnet mode
the endpoints and key file are the embedded devnet's and the URLs here are
ignored; pointing them at a real node is the only change for production.

``devnet_clock`` is for benchmarks and fault runs: a sidecar in a process of
its own, pointed at an embedded devnet that runs on an accelerated clock,
runs on that same clock (``runtime.clock.ClockAnchor``) instead of the wall
clock. Off by default; the wiring refuses it in any mode but ``node`` and
for a file of another chain id.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from runtime.clock import ClockAnchor, read_clock_anchor
from runtime.config import section, setting
from runtime.urls import shown_url

__all__ = ["NodeSettings", "read_tls_ca"]

#: What a PEM certificate starts with. gRPC reads the CA bytes only at the
#: first handshake, so a wrong file would surface as a node that is merely
#: unreachable; it is checked when read instead.
_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


def read_tls_ca(path: str) -> bytes:
    """The PEM certificates of ``[node] tls_ca_file``; a ValueError naming the setting and the problem."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ValueError(f"tls_ca_file {path!r}: no such file") from None
    except OSError as exc:
        raise ValueError(f"tls_ca_file {path!r}: cannot be read: {exc.strerror or exc}") from None
    if _PEM_CERTIFICATE not in data:
        raise ValueError(f"tls_ca_file {path!r}: holds no PEM certificate ({_PEM_CERTIFICATE.decode()} ...)")
    return data

#: The Cosmos SDK's denom rule: the chain refuses a fee in any other.
_DENOM = re.compile(r"[a-zA-Z][a-zA-Z0-9/:._-]{2,127}")
#: What a shell can export.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@section("node")
@dataclass(frozen=True)
class NodeSettings:
    grpc_url: str = setting(
        "grpc+http://127.0.0.1:9090", "node gRPC endpoint: grpc+http://host:port or grpc+https://host:port",
        url=True,
    )
    tls_ca_file: str = setting(
        "",
        "PEM file of the CA(s) a grpc+https node's certificate is checked against; empty: the system's CAs; "
        "relative to the config file's folder",
        path=True,
        node_file=True,
    )
    websocket_url: str = setting(
        "ws://127.0.0.1:26657/websocket", "CometBFT websocket endpoint (ws:// or wss://)", url=True
    )
    key_file: str = setting(
        "", "file holding the provider key (mnemonic or hex); must be mode 0600; relative to the config file's folder",
        path=True,
    )
    key_env: str = setting("", "name of an environment variable holding the provider key (instead of key_file)")
    fee_denom: str = setting("umfx", "denom fees are paid in")
    gas_price: str = setting(
        "0.000025",
        "fee per unit of gas in fee_denom, a decimal: fee = ceil(gas limit x gas_price), at least 1 "
        "(0.000025 umfx is the network's minimum and fred's price)",
    )
    gas_adjustment: float = setting(
        1.2, "gas limit = simulated gas used x this, truncated (fred's gas_adjustment)", min=1.0, max=3.0
    )
    gas_limit: int = setting(
        1_500_000,
        "fallback gas when Simulate fails (or is not asked after 5 failures in a row): the tx declares "
        "gas_limit x gas_adjustment",
        min=1, max=100_000_000,
    )
    max_gas_limit: int = setting(
        0,
        "most gas a tx may declare; 0: no cap. A simulated tx over it is not sent; out-of-gas retries stop at it",
        min=0, max=100_000_000,
    )
    out_of_gas_multiplier: float = setting(
        1.5, "after an out-of-gas failure the gas is multiplied by this (up to max_gas_limit) and signed again",
        min=1.1, max=10.0,
    )
    simulate_gas: int = setting(
        200_000,
        "gas the Simulate tx declares; keep it under the chain's block max gas, which a node refuses "
        "a simulation above (the gas measured does not depend on it)",
        min=1, max=100_000_000,
    )
    tx_timeout: timedelta = setting(
        timedelta(seconds=30), "how long to wait for a broadcast tx to be included", min=timedelta(milliseconds=100),
        max=timedelta(hours=1),
    )
    tx_poll_interval: timedelta = setting(
        timedelta(milliseconds=200), "how often GetTx is asked while waiting for inclusion",
        min=timedelta(milliseconds=1), max=timedelta(seconds=10),
    )
    query_timeout: timedelta = setting(
        timedelta(seconds=10), "deadline of one gRPC query", min=timedelta(milliseconds=10), max=timedelta(hours=1)
    )
    max_tx_retries: int = setting(
        5, "re-signs of one tx after a sequence mismatch, out of gas or lost broadcast", min=0, max=50
    )
    withdraw_limit: int = setting(50, "leases settled per provider-wide MsgWithdraw page", min=1, max=100)
    page_size: int = setting(100, "leases per LeasesByProvider page", min=1, max=1000)
    devnet_clock: str = setting(
        "",
        "for benchmarks and fault runs only: the clock file an embedded devnet on an accelerated clock wrote "
        "(run.py devnet --clock-file PATH); the sidecar then runs on that devnet's clock, not the wall clock. "
        "Empty (the default): the wall clock, as against every real node",
        path=True,
        node_file=True,
    )

    def validate(self) -> None:
        for name in ("gas_adjustment", "out_of_gas_multiplier"):
            value = getattr(self, name)
            if not math.isfinite(value):  # NaN passes the min/max comparisons
                raise ValueError(f"{name}: must be a finite number, got {value!r}")
        if self.max_gas_limit and self.max_gas_limit < self.gas_limit:
            raise ValueError(
                f"max_gas_limit: {self.max_gas_limit} is below gas_limit {self.gas_limit} (0 means no cap)"
            )
        try:
            price = Decimal(self.gas_price)
        except InvalidOperation:
            raise ValueError(f"gas_price: not a decimal number: {self.gas_price!r}") from None
        if not price.is_finite() or price < 0:
            raise ValueError(f"gas_price: must be a non-negative decimal, got {self.gas_price!r}")
        if not self.grpc_url.startswith(("grpc+http://", "grpc+https://")):
            raise ValueError(f"grpc_url: expected grpc+http://host:port or grpc+https://host:port, got {shown_url(self.grpc_url)!r}")
        if self.tls_ca_file:
            if not self.grpc_url.startswith("grpc+https://"):
                raise ValueError(
                    f"tls_ca_file: set, but grpc_url {shown_url(self.grpc_url)!r} does not use TLS (grpc+https://host:port)"
                )
            read_tls_ca(self.tls_ca_file)
        if not self.websocket_url.startswith(("ws://", "wss://")):
            raise ValueError(f"websocket_url: expected ws://... or wss://..., got {shown_url(self.websocket_url)!r}")
        if not _DENOM.fullmatch(self.fee_denom):
            raise ValueError(f"fee_denom: {self.fee_denom!r} is not a Cosmos denom (e.g. umfx)")
        if self.key_env and not _ENV_NAME.fullmatch(self.key_env):
            raise ValueError(
                f"key_env: {self.key_env!r} is not the name of an environment variable "
                f"(letters, digits and _, e.g. LEASEWARDEN_KEY): it names the variable, it does not hold the key"
            )
        if self.key_file and self.key_env:
            raise ValueError("key_file and key_env: give one source of the provider key, not both")
        if self.devnet_clock:
            self.clock_anchor()

    def clock_anchor(self) -> ClockAnchor | None:
        """The devnet clock ``devnet_clock`` names (None when it is empty); a ValueError naming the setting."""
        if not self.devnet_clock:
            return None
        try:
            return read_clock_anchor(self.devnet_clock)
        except ValueError as exc:
            raise ValueError(f"devnet_clock: {exc}") from None
