"""A dry run: every read and decision as usual, what would be withdrawn and closed logged, no tx sent."""

from __future__ import annotations

import logging

import pytest

from chain.errors import ChainError
from chain.read_only import ReadOnlyClient
from messages.coins import Coin
from tests.support import OTHER, PROVIDER, addr, item, world
from tests.test_system_model import credit_used_up_elsewhere

T1 = addr("t1")


def test_a_dry_run_withdraws_nothing_and_says_what_it_would(clock, caplog) -> None:
    w = world(clock, dry_run=True)
    w.model.fund_credit(T1, [Coin("umfx", 10**9)])
    lease = w.model.create_lease(T1, PROVIDER, [item(3)])
    w.run_for(100)
    with caplog.at_level(logging.INFO, logger="leasewarden.decisions"):
        assert w.sidecar.withdraw_once()
    assert w.model.balance(T1) == {"umfx": 10**9}  # nothing settled: no MsgWithdraw
    assert w.model.lease_totals(lease.uuid) == ({}, {})
    assert "dry run: would withdraw 300umfx (what the provider can withdraw now); no tx sent" in caplog.messages, caplog.messages
    assert T1 in w.sidecar.scheduler_core.tenants  # the reads and checks went on


def test_a_dry_run_closes_nothing_and_keeps_saying_it_would_while_the_credit_stays_gone(clock, caplog) -> None:
    w = world(clock, dry_run=True)
    with caplog.at_level(logging.WARNING, logger="leasewarden.decisions"):
        (ours,), _ = credit_used_up_elsewhere(w)
        w.run_for(6 * 60)  # past the grace window
        w.run_for(60)
    assert w.model.lease(ours.uuid).state == "ACTIVE"
    would = [m for m in caplog.messages if m.startswith(f"dry run: would close 1 lease(s) of tenant {T1} (credit depleted)")]
    assert len(would) >= 2  # asked again at the next checks, as after a refused close
    assert w.sidecar.scheduler_core.tenants[T1].recheck_at is not None


def test_the_read_only_client_refuses_every_tx_and_passes_every_read(clock) -> None:
    w = world(clock)
    w.model.fund_credit(T1, [Coin("umfx", 5)])
    client = ReadOnlyClient(w.client)
    assert client.credit_account(T1).balances == (Coin("umfx", 5),)
    with pytest.raises(ChainError, match="dry run: no tx is sent"):
        client.withdraw_by_provider(PROVIDER, b"")
    with pytest.raises(ChainError, match="dry run"):
        client.close_leases(["x"], "r")
    assert OTHER  # the model's other provider is untouched
