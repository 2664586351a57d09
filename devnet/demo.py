"""The demo world the embedded chain starts with.

What a newcomer sees with ``python run.py``: our provider and another one
sharing tenants, and tenants of every kind the sidecar must handle:

- healthy tenants with credit for years;
- draining tenants whose credit runs out within simulated minutes (their
  leases get closed, by the chain's auto-close at our withdraw or by us
  after the grace window);
- a tenant whose credit reads always fail (the sidecar must never close it);
- the other provider withdrawing on its own schedule from shared tenants,
  which can exhaust them (our listener then triggers a withdrawal);
- a new tenant opening a lease a few simulated minutes in (its monitor
  starts at once, from the lease event).

Everything is derived from ``DemoSettings.seed``, so two runs see the same world.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from chain.errors import ChainError
from chain.faults import Faults
from chain.model import BillingModel
from devnet.demo_settings import DemoSettings
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import Clock, TimerHandle

__all__ = ["DemoWorld", "demo_address", "OTHER_PROVIDER_UUID", "PROVIDER_ADDRESS", "OTHER_PROVIDER_ADDRESS"]

logger = logging.getLogger("leasewarden.demo")

OTHER_PROVIDER_UUID = "5d1c2b3a-0f4e-4c6d-8b7a-9e8f7a6b5c4d"
PROVIDER_ADDRESS = "manifest1provider0000000000000000000000000"
OTHER_PROVIDER_ADDRESS = "manifest1otherprovider00000000000000000000"
_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def demo_address(label: str) -> str:
    """A stable manifest1... address for a demo account."""
    digest = hashlib.sha256(label.encode()).digest()
    return "manifest1" + "".join(_BECH32[b % 32] for b in digest[:38])


@dataclass
class DemoTenants:
    healthy: list[str]
    draining: list[str]
    failing: list[str]
    late: str


class DemoWorld:
    """Seeds a ``BillingModel`` and keeps the other provider and late tenant going."""

    def __init__(
        self,
        model: BillingModel,
        clock: Clock,
        settings: DemoSettings,
        provider_uuid: str,
        provider_address: str = PROVIDER_ADDRESS,
    ) -> None:
        self.model = model
        self.clock = clock
        self.settings = settings
        self.provider_uuid = provider_uuid
        self.provider_address = provider_address
        self._random = random.Random(settings.seed)
        self._timers: list[TimerHandle] = []
        self.tenants = DemoTenants([], [], [], demo_address(f"{settings.seed}/late"))

    def _items(self, price: int) -> list[LeaseItem]:
        sku = f"sku-{self._random.randrange(1, 5)}"
        return [LeaseItem(sku, self._random.randrange(1, 4), Coin("umfx", price))]

    def seed(self) -> DemoTenants:
        s = self.settings
        m = self.model
        m.register_provider(self.provider_uuid, self.provider_address)
        m.register_provider(OTHER_PROVIDER_UUID, OTHER_PROVIDER_ADDRESS)
        for i in range(s.healthy_tenants):
            t = demo_address(f"{s.seed}/healthy/{i}")
            m.fund_credit(t, [Coin("umfx", 10**12), Coin("upwr", 10**9)])
            for _ in range(s.leases_per_tenant):
                m.create_lease(t, self.provider_uuid, self._items(self._random.randrange(5, 50)))
            m.create_lease(t, OTHER_PROVIDER_UUID, self._items(10))
            self.tenants.healthy.append(t)
        for i in range(s.draining_tenants):
            t = demo_address(f"{s.seed}/draining/{i}")
            items = [self._items(self._random.randrange(5, 20)) for _ in range(s.leases_per_tenant)]
            rate = sum(it[0].quantity * it[0].locked_price.amount for it in items)
            # Enough credit for 3 + 4*i simulated minutes of our leases alone;
            # the other provider's lease makes it sooner.
            m.fund_credit(t, [Coin("umfx", rate * 60 * (3 + 4 * i))])
            for its in items:
                m.create_lease(t, self.provider_uuid, its)
            m.create_lease(t, OTHER_PROVIDER_UUID, self._items(5))
            self.tenants.draining.append(t)
        for i in range(s.failing_tenants):
            t = demo_address(f"{s.seed}/failing/{i}")
            m.fund_credit(t, [Coin("umfx", 10**10)])
            for _ in range(s.leases_per_tenant):
                m.create_lease(t, self.provider_uuid, self._items(7))
            self.tenants.failing.append(t)
        return self.tenants

    def install_faults(self, faults: Faults) -> None:
        """The failing tenants' credit reads fail, always."""
        if self.tenants.failing:
            faults.fail_rate("credit_account", 1.0, only=frozenset(self.tenants.failing))

    def start(self) -> None:
        """Schedule the other provider's withdrawals and the late tenant's lease."""
        now = self.clock.now()
        if self.settings.other_provider_interval:
            self._timers.append(self.clock.call_at(now + self.settings.other_provider_interval, self._other_withdraw))
        self._timers.append(self.clock.call_at(now + timedelta(minutes=3), self._late_tenant))

    def _other_withdraw(self) -> None:
        try:
            key = b""
            while True:
                r = self.model.withdraw(OTHER_PROVIDER_ADDRESS, provider_uuid=OTHER_PROVIDER_UUID, key=key)
                key = r.next_key
                if not key:
                    break
        except ChainError as exc:
            logger.debug("other provider's withdraw: %s", exc)
        self._timers.append(
            self.clock.call_at(self.clock.now() + self.settings.other_provider_interval, self._other_withdraw)
        )

    def _late_tenant(self) -> None:
        t = self.tenants.late
        self.model.fund_credit(t, [Coin("umfx", 10**9)])
        self.model.create_lease(t, self.provider_uuid, self._items(12))

    def stop(self) -> None:
        for t in self._timers:
            t.cancel()
