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
  starts at once, from the lease event), and a second one the provisioner
  never acknowledges, which the chain expires at the end of a block
  ``pending_timeout`` later (``lease_expired``);
- a tenant whose own lease is exhausted while its balance stays above
  zero: a PENDING lease it asked another provider for keeps part of the
  credit reserved, which the current chain's settlement may not spend
  (CHAIN-VERSIONS.md 2.6). On v2.1.0 nothing is isolated: the balance runs
  to zero instead.

Every lease reserves ``rate x min_lease_duration`` at creation (2.6), so a
tenant's credit covers its reservations first; the shipped ``config.toml``
sets a short ``min_lease_duration`` so that the draining tenants run dry
within the demo's minutes.

Everything is derived from ``DemoSettings.seed``, so two runs see the same world.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from chain.addresses import address_of, uuid7
from chain.errors import ChainError
from chain.faults import Faults
from chain.model import BillingModel
from devnet.demo_settings import DemoSettings
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import Clock, TimerHandle

__all__ = ["DemoWorld", "demo_address", "OTHER_PROVIDER_UUID", "PROVIDER_ADDRESS", "OTHER_PROVIDER_ADDRESS"]

logger = logging.getLogger("leasewarden.demo")


def demo_address(label: str) -> str:
    """A stable, valid ``manifest1...`` address for a demo account (20 bytes of a hash of ``label``)."""
    return address_of(hashlib.sha256(label.encode()).digest()[:20])


OTHER_PROVIDER_UUID = "019bbef3-b000-7002-bef5-ba743a73a80e"
PROVIDER_ADDRESS = demo_address("demo/provider")
OTHER_PROVIDER_ADDRESS = demo_address("demo/other provider")


@dataclass
class DemoTenants:
    healthy: list[str]
    draining: list[str]
    failing: list[str]
    late: str
    #: Exhausted while a PENDING lease elsewhere keeps credit reserved (current chain).
    reserved: list[str]


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
        self.tenants = DemoTenants([], [], [], demo_address(f"{settings.seed}/late"), [])

    def _items(self, price: int) -> list[LeaseItem]:
        sku = uuid7(self.clock.now(), self._random.randrange(1, 5), "demo/sku")
        return [LeaseItem(sku, self._random.randrange(1, 4), Coin("umfx", price))]

    def _reservation(self, items: list[list[LeaseItem]]) -> int:
        """What creating leases of ``items`` reserves: their rate for ``min_lease_duration``."""
        rate = sum(i.quantity * i.locked_price.amount for its in items for i in its)
        return rate * self.model.params.min_lease_duration

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
            other = self._items(5)
            rate = sum(it[0].quantity * it[0].locked_price.amount for it in items)
            # The reservations, then enough for 3 + 4*i simulated minutes of
            # our leases alone; the other provider's lease makes it sooner.
            m.fund_credit(t, [Coin("umfx", self._reservation(items + [other]) + rate * 60 * (3 + 4 * i))])
            for its in items:
                m.create_lease(t, self.provider_uuid, its)
            m.create_lease(t, OTHER_PROVIDER_UUID, other)
            self.tenants.draining.append(t)
        for i in range(s.reserved_tenants):
            t = demo_address(f"{s.seed}/reserved/{i}")
            ours = self._items(self._random.randrange(5, 20))
            elsewhere = self._items(50)
            rate = ours[0].quantity * ours[0].locked_price.amount
            m.fund_credit(t, [Coin("umfx", self._reservation([ours, elsewhere]) + rate * 60 * (4 + 2 * i))])
            m.create_lease(t, self.provider_uuid, ours)
            # Asked of the other provider, never acknowledged: its tranche stays
            # reserved until the chain expires it.
            m.create_lease(t, OTHER_PROVIDER_UUID, elsewhere, acknowledge=False)
            self.tenants.reserved.append(t)
        for i in range(s.failing_tenants):
            t = demo_address(f"{s.seed}/failing/{i}")
            m.fund_credit(t, [Coin("umfx", 10**12)])
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
        # One the provisioner never gets to: PENDING until the chain expires it.
        self.model.create_lease(t, self.provider_uuid, self._items(8), acknowledge=False)

    def stop(self) -> None:
        for t in self._timers:
            t.cancel()
