"""Every ``config.toml`` section, registered in one place.

A section that belongs to one part of the sidecar is declared beside that
part; this module only imports them all so the loader sees every section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from sidecar.config import SchedulerSettings, section, setting  # noqa: F401

__all__ = ["ProviderSettings", "ChainSettings", "DemoSettings", "UUID_RE"]

#: Provider UUIDs are interpolated into websocket queries: only this shape passes.
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@section("provider")
@dataclass(frozen=True)
class ProviderSettings:
    uuid: str = setting("0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10", "our provider UUID (its account is the signing key's)")

    def validate(self) -> None:
        if not UUID_RE.match(self.uuid):
            raise ValueError(f"uuid: {self.uuid!r} is not a lowercase UUID")


@section("chain")
@dataclass(frozen=True)
class ChainSettings:
    mode: str = setting(
        "model",
        "model: in-process chain model; devnet: embedded devnet over gRPC+websocket; node: a real node",
        choices=("model", "devnet", "node"),
    )
    chain_id: str = setting("leasewarden-devnet", "chain id transactions are signed for")


@section("demo")
@dataclass(frozen=True)
class DemoSettings:
    """The demo world the embedded chain is seeded with (model and devnet modes)."""

    speed: float = setting(60.0, "simulated seconds per real second", min=0.001, max=100_000.0)
    healthy_tenants: int = setting(4, "tenants with plenty of credit", min=0)
    draining_tenants: int = setting(2, "tenants that run dry within simulated minutes", min=0)
    failing_tenants: int = setting(1, "tenants whose credit reads fail", min=0)
    leases_per_tenant: int = setting(2, "our leases per tenant", min=1, max=1000)
    other_provider_interval: timedelta = setting(
        timedelta(minutes=10), "how often another provider withdraws from shared tenants; 0: never"
    )
    seed: int = setting(7, "random seed of the demo world")


import actors.settings  # noqa: E402,F401  (sections declared beside their parts)
import chain.node_settings  # noqa: E402,F401  ([node])
import devnet.settings  # noqa: E402,F401  ([devnet])
import ledger.settings  # noqa: E402,F401  ([ledger])
import capture.settings  # noqa: E402,F401  ([capture])
