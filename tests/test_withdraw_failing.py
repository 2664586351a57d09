"""A lease whose withdraw failed is failing until a withdraw settles it, whichever tx reaches it.

Found by the system audit (``tests/test_system_audit.py``): once the cause
was fixed, the next provider-wide page (or named batch) settled the lease,
but it stayed in ``WithdrawFinished.failing`` until its retry by name came
due, up to a withdraw interval of backoff later.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from actors.withdraw_failures import FailingLeases
from messages.coins import Coin
from tests.support import PROVIDER, addr, item, world

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def test_a_settled_lease_leaves_the_failing_ones_and_an_unsettled_one_stays(clock) -> None:
    failing = FailingLeases(timedelta(hours=1))
    failing.failed(("l1", "l2"), "payout blocked", clock.now())
    notes = failing.settled(["l1", "l3"])
    assert failing.report() == (("l2", 1),)
    assert len(notes) == 1 and "lease l1: withdraw went through after 1 failure(s)" in notes[0].text


def test_the_withdraw_after_the_cause_is_fixed_reports_the_lease_recovered(clock) -> None:
    w = world(clock, withdraw_limit=2)
    w.model.fund_credit(addr("t1"), [Coin("umfx", 10**9)])
    leases = [w.model.create_lease(addr("t1"), PROVIDER, [item(3)]).uuid for _ in range(3)]
    failing = w.sidecar.chain.actor_inbox.actor.core.failing
    clock.advance(100)
    w.model.block_payouts([leases[1]])
    assert w.sidecar.withdraw_once()
    assert [u for u, _ in failing.report()] == [leases[1]]

    w.model.unblock_payouts()
    clock.advance(5)  # well before its retry by name (a minute after the failure)
    assert w.sidecar.withdraw_once()
    assert failing.report() == ()
    assert w.model.lease(leases[1]).last_settled_at > clock.now() - timedelta(seconds=1)  # this withdraw settled it
