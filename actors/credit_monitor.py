"""``CreditMonitorActor``: one per tenant with active leases.

A pykka actor (pooled: thousands of them share a few threads) with its own
mailbox, handling one message at a time. It holds the tenant's leases, its
last balance sample, ``consecutive_errs``, its zero-balance grace window and
its depletion estimate, all in ``actors.tenant_credit.TenantCredit``, which
makes every decision.
"""

from __future__ import annotations

from actors.scheduler_settings import SchedulerSettings
from actors.shell import CoreActor
from actors.tenant_credit import TenantCredit
from runtime.clock import Clock
from runtime.dispatch import Dispatcher
from runtime.router import Router, tenant_address

__all__ = ["CreditMonitorActor"]


class CreditMonitorActor(CoreActor):
    def __init__(
        self, dispatcher: Dispatcher, router: Router, clock: Clock, tenant: str, settings: SchedulerSettings
    ) -> None:
        super().__init__(dispatcher, tenant_address(tenant), TenantCredit(tenant, settings), router, clock)
        self.tenant = tenant
