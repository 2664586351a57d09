"""``[demo]``: the demo world's tenants, the other provider, and the clock's speed.

Read by ``devnet.demo.DemoWorld`` (its tenants, leases and the other
provider) and by ``run.py`` (the clock's speed). A module of its own, beside
the world it describes, so that loading the configuration does not import
the world itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["DemoSettings", "MAX_DEMO_TENANTS", "MAX_DEMO_LEASES"]

#: Tenants of one kind at most, and leases of the whole world: the benches'
#: scale (10,000 tenants, 50,000 leases) with room to spare. 2**31 tenants
#: is a start that never ends.
MAX_DEMO_TENANTS = 10_000
MAX_DEMO_LEASES = 100_000


@section("demo")
@dataclass(frozen=True)
class DemoSettings:
    """The demo world the embedded chain is seeded with (model and devnet modes)."""

    speed: float = setting(60.0, "simulated seconds per real second", min=0.001, max=100_000.0)
    healthy_tenants: int = setting(4, "tenants with plenty of credit", min=0, max=MAX_DEMO_TENANTS)
    draining_tenants: int = setting(2, "tenants that run dry within simulated minutes", min=0, max=MAX_DEMO_TENANTS)
    failing_tenants: int = setting(1, "tenants whose credit reads fail", min=0, max=MAX_DEMO_TENANTS)
    reserved_tenants: int = setting(
        1, "tenants exhausted while a pending lease elsewhere keeps credit reserved (current chain)",
        min=0, max=MAX_DEMO_TENANTS,
    )
    leases_per_tenant: int = setting(2, "our leases per tenant", min=1, max=1000)
    other_provider_interval: timedelta = setting(
        timedelta(minutes=10), "how often another provider withdraws from shared tenants; 0: never",
        max=timedelta(days=30),
    )
    seed: int = setting(7, "random seed of the demo world", min=0, max=2**63 - 1)

    def validate(self) -> None:
        tenants = self.healthy_tenants + self.draining_tenants + self.failing_tenants + self.reserved_tenants
        leases = tenants * self.leases_per_tenant
        if leases > MAX_DEMO_LEASES:
            raise ValueError(
                f"the demo world would have {leases:,} leases (tenants x leases_per_tenant); at most "
                f"{MAX_DEMO_LEASES:,}: fewer tenants or fewer leases per tenant"
            )
