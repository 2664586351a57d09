"""A withdraw cycle stopped at ``max_withdraw_iterations`` is gone on with by the next one.

Found by the system audit at 10,000 leases (``bench/audit_run.py``): with
50 leases a page and 100 pages a cycle, every cycle started again from the
first lease, so the leases past the 5,000th (in uuid order; past the
10,000th by name on v2.1.0) were never withdrawn at all: their accrual sat
on the chain, unsettled, until something else closed them.
"""

from __future__ import annotations

import pytest

from actors.chain_actor import ChainDecisions
from actors.effects import Send
from actors.withdraw_cycle import WithdrawResume
from messages.chain import WithdrawPage
from messages.chain_actor import WithdrawableAnswered, WithdrawPageAnswered, WithdrawPageCall, WithdrawRequested
from messages.coins import Coin
from messages.scheduler import WithdrawFinished
from runtime.clock import utc
from tests.support import PROVIDER, addr, chain_version, item, settings, world

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

T0 = utc(2026, 3, 1)
DUE = (Coin("umfx", 1),)


def sent(effects, kind):  # type: ignore[no-untyped-def]
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def page(n: int, next_key: bytes) -> WithdrawPage:
    return WithdrawPage(f"TX{n}", (Coin("umfx", n),), 1, bool(next_key), next_key)


def test_the_chain_actor_starts_the_next_cycle_where_the_last_stopped_and_then_from_the_start() -> None:
    chain = ChainDecisions(settings(max_withdraw_iterations=2))
    chain.cursor = True

    def cycle(n: int, answers: list[bytes]) -> tuple[list[bytes], WithdrawFinished]:
        """Cycle ``n``, each page answered with the next key of ``answers``: (keys sent, its end)."""
        chain.handle(WithdrawRequested(n), T0)
        out = chain.handle(WithdrawableAnswered(n, DUE), T0)
        keys: list[bytes] = []
        for i, next_key in enumerate(answers, 1):
            keys += [c.key for c in sent(out, WithdrawPageCall)]
            out = chain.handle(WithdrawPageAnswered(n, i, 1, result=page(i, next_key)), T0)
        (done,) = sent(out, WithdrawFinished)
        return keys, done

    keys, done = cycle(1, [b"k1", b"k2"])
    assert keys == [b"", b"k1"] and done.hit_page_bound
    keys, done = cycle(2, [b"k3", b""])  # from the key the chain returned last, to the end
    assert keys == [b"k2", b"k3"] and not done.hit_page_bound
    keys, _ = cycle(3, [b"k1", b"k2"])  # the end was reached: from the first lease again
    assert keys == [b"", b"k1"]
    assert chain.resume == WithdrawResume(key=b"k2")


def test_leases_past_the_bound_are_withdrawn_by_the_next_cycle(clock) -> None:  # type: ignore[no-untyped-def]
    if chain_version().withdraw_cursor:
        w = world(clock, withdraw_limit=2, max_withdraw_iterations=2)
        tenants, per_tenant = [addr("t1")], 5  # pages of 2: 4 leases a cycle
    else:
        w = world(clock, max_withdraw_iterations=1)
        tenants, per_tenant = [addr("t1"), addr("t2")], 75  # one named tx of 100 a cycle
    leases = []
    for t in tenants:
        w.model.fund_credit(t, [Coin("umfx", 10**9)])
        leases += [w.model.create_lease(t, PROVIDER, [item(3)]).uuid for _ in range(per_tenant)]
    leases.sort()
    reached = len(leases) - (1 if chain_version().withdraw_cursor else 50)

    def settled_now() -> list[str]:
        return [u for u in leases if w.model.lease(u).last_settled_at == clock.now()]

    clock.advance(100)
    w.sidecar.withdraw_once()
    first = settled_now()
    assert first == leases[:reached]
    clock.advance(100)
    w.sidecar.withdraw_once()
    second = settled_now()
    assert set(leases[reached:]) <= set(second)  # the ones the first cycle left, not the first ones only
    assert set(first) | set(second) == set(leases)
    if chain_version().withdraw_cursor:
        assert second == leases[reached:]  # from the key the chain returned, to the end
        clock.advance(100)
        w.sidecar.withdraw_once()
        assert settled_now() == first  # and round again from the first lease
