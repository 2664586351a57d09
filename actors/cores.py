"""The decision cores by address, built from a configuration.

The running sidecar builds its actors around these cores; replay builds the
same cores from a capture's recorded configuration, so both decide with the
same code and the same settings.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from actors.chain_actor import ChainDecisions
from actors.schedule import SchedulerDecisions
from actors.tenant_credit import TenantCredit
from runtime.config import Config
from runtime.router import CHAIN, SCHEDULER

__all__ = ["build_core", "billing_tick_interval"]

_TENANT = "tenant/"


def billing_tick_interval(config: Config) -> timedelta | None:
    """How often the scheduler asks the ledger for a billing tick; None without a ledger."""
    ledger = config.sections.get("ledger")
    if ledger is None or not ledger.path:
        return None
    return ledger.tick_interval


def build_core(address: str, config: Config) -> Any:
    if address == SCHEDULER:
        return SchedulerDecisions(config.scheduler, config.provider.uuid, billing_tick_interval(config))
    if address == CHAIN:
        return ChainDecisions(config.scheduler)
    if address.startswith(_TENANT):
        return TenantCredit(address[len(_TENANT):], config.scheduler)
    raise KeyError(f"no decision core at address {address!r}")
