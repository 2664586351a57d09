"""``[node]``: how the sidecar reaches a chain node and signs for the provider.

The gRPC and websocket endpoints, where the provider key comes from, the fee
(gas price in the fee denom, simulated gas times a margin) and the time
limits of queries and of waiting for a tx to be included. In devnet mode
the endpoints and key file are the embedded devnet's and the URLs here are
ignored; pointing them at a real node is the only change for production.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from runtime.config import section, setting

__all__ = ["NodeSettings"]

#: The Cosmos SDK's denom rule: the chain refuses a fee in any other.
_DENOM = re.compile(r"[a-zA-Z][a-zA-Z0-9/:._-]{2,127}")
#: What a shell can export.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@section("node")
@dataclass(frozen=True)
class NodeSettings:
    grpc_url: str = setting(
        "grpc+http://127.0.0.1:9090", "node gRPC endpoint: grpc+http://host:port or grpc+https://host:port"
    )
    websocket_url: str = setting("ws://127.0.0.1:26657/websocket", "CometBFT websocket endpoint (ws:// or wss://)")
    key_file: str = setting(
        "", "file holding the provider key (mnemonic or hex); must be mode 0600; relative to the config file's folder",
        path=True,
    )
    key_env: str = setting("", "name of an environment variable holding the provider key (instead of key_file)")
    fee_denom: str = setting("umfx", "denom fees are paid in")
    gas_price: str = setting(
        "0.025", "fee per unit of gas in fee_denom, a decimal (fee = ceil(gas_limit x gas_price))"
    )
    gas_multiplier: float = setting(1.5, "gas limit = simulated gas x this margin", min=1.1, max=10.0)
    out_of_gas_multiplier: float = setting(
        1.5, "after an out-of-gas failure the margin is multiplied by this", min=1.1, max=10.0
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

    def validate(self) -> None:
        try:
            price = Decimal(self.gas_price)
        except InvalidOperation:
            raise ValueError(f"gas_price: not a decimal number: {self.gas_price!r}") from None
        if not price.is_finite() or price < 0:
            raise ValueError(f"gas_price: must be a non-negative decimal, got {self.gas_price!r}")
        if not self.grpc_url.startswith(("grpc+http://", "grpc+https://")):
            raise ValueError(f"grpc_url: expected grpc+http://host:port or grpc+https://host:port, got {self.grpc_url!r}")
        if not self.websocket_url.startswith(("ws://", "wss://")):
            raise ValueError(f"websocket_url: expected ws://... or wss://..., got {self.websocket_url!r}")
        if not _DENOM.fullmatch(self.fee_denom):
            raise ValueError(f"fee_denom: {self.fee_denom!r} is not a Cosmos denom (e.g. umfx)")
        if self.key_env and not _ENV_NAME.fullmatch(self.key_env):
            raise ValueError(
                f"key_env: {self.key_env!r} is not the name of an environment variable "
                f"(letters, digits and _, e.g. LEASEWARDEN_KEY): it names the variable, it does not hold the key"
            )
        if self.key_file and self.key_env:
            raise ValueError("key_file and key_env: give one source of the provider key, not both")
