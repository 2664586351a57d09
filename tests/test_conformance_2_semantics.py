"""Conformance, CHAIN-VERSIONS.md section 2: the billing semantics a sidecar depends on.

Each test is named by the fact it checks (``test_2_4_...`` checks 2.4) and
runs once per chain version; where the versions differ it asserts each
version's own behaviour, so both runs check something that could be false.
They run on the chain model directly (no network): the devnet executes the
same model, and its wire is checked in ``test_conformance_1_wire.py``.
Money is exact: every amount below is worked out by hand from the fact.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

import chain.model as chain_model_module
from chain.addresses import uuid7
from chain.errors import BILLING, ChainError
from chain.model import BillingModel, PageRequest
from messages.chain import LeaseItem
from messages.coins import Coin
from runtime.clock import ManualClock
from tests.conformance_support import (
    AUTHORITY, NOBODY, P, PA, funded, lease, model_of, query_status, refused, umfx,
)
from tests.support import OTHER, OTHER_ADDRESS, addr, chain_model, chain_version

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

SECOND = timedelta(seconds=1)


@pytest.fixture
def m(clock: ManualClock) -> BillingModel:
    return model_of(clock)


# -- 2.1 provider-wide withdraw ------------------------------------------------------------


def test_2_1_provider_wide_validation_codes(m: BillingModel) -> None:
    t = funded(m, "t", 100)
    u = lease(m, t)
    assert refused(lambda: m.withdraw(PA, provider_uuid=P, lease_uuids=[u])) == (BILLING, 25)
    assert refused(lambda: m.withdraw(PA)) == (BILLING, 25)
    assert refused(lambda: m.withdraw(PA, provider_uuid=P.upper())) == (BILLING, 12)  # not canonical lowercase
    assert refused(lambda: m.withdraw(PA, provider_uuid=P, limit=101)) == (BILLING, 9)
    assert refused(lambda: m.withdraw(OTHER_ADDRESS, provider_uuid=P)) == (BILLING, 6)
    assert refused(lambda: m.withdraw(PA, provider_uuid=NOBODY)) == (BILLING, 12)
    m.withdraw(PA, provider_uuid=P, limit=100)  # 100 is the most
    m.withdraw(AUTHORITY, provider_uuid=P)  # the authority may too
    if chain_version().withdraw_cursor:
        assert refused(lambda: m.withdraw(PA, lease_uuids=[u], key=b"k")) == (BILLING, 25)
        assert refused(lambda: m.withdraw(PA, provider_uuid=P, key=b"k" * 65)) == (BILLING, 25)
        m.withdraw(PA, provider_uuid=P, key=b"k" * 64)
    else:
        # v2.1.0's MsgWithdraw has no field 5: the tx does not even decode.
        assert refused(lambda: m.withdraw(PA, provider_uuid=P, key=b"k")) == ("sdk", 2)


def test_2_1_limit_zero_means_50(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    for _ in range(60):
        lease(m, t)
    clock.advance(10)
    first = m.withdraw(PA, provider_uuid=P)
    assert (first.withdrawal_count, first.has_more) == (50, True)
    assert first.total_amounts == umfx(500)
    # The first 50 were just settled: at the same time only the other 10 have anything.
    rest = m.withdraw(PA, provider_uuid=P, limit=100)
    assert (rest.withdrawal_count, rest.has_more, rest.total_amounts) == (10, False, umfx(100))


def test_2_1_cursor_is_exclusive_over_active_leases_and_moves_past_failed_ones(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(5))
    closed, active = leases[0], leases[1:]
    m.close_leases(PA, [closed])
    m.block_payouts([active[1]])
    clock.advance(10)
    t0 = m.lease(active[1]).last_settled_at
    if chain_version().withdraw_cursor:
        p1 = m.withdraw(PA, provider_uuid=P, limit=2)
        assert (p1.withdrawal_count, p1.has_more, p1.failed_lease_uuids) == (1, True, (active[1],))
        assert p1.next_key == active[1].encode()  # the last lease processed, though it failed
        p2 = m.withdraw(PA, provider_uuid=P, limit=2, key=p1.next_key)
        assert (p2.withdrawal_count, p2.has_more, p2.next_key, p2.failed_lease_uuids) == (2, False, b"", ())
        assert p2.total_amounts == umfx(20)  # this page only
        assert m.lease(active[1]).last_settled_at == t0  # the failed lease's changes were discarded
        # The closed lease never took a page slot: exactly 4 ACTIVE leases fit a limit of 4.
        clock.advance(1)
        whole = m.withdraw(PA, provider_uuid=P, limit=4)
        assert (whole.has_more, whole.next_key) == (False, b"")
    else:
        # No cursor: each call starts again at the first ACTIVE lease, then the CLOSED ones.
        for _ in range(2):
            page = m.withdraw(PA, provider_uuid=P, limit=2)
            assert (page.withdrawal_count, page.has_more, page.next_key, page.failed_lease_uuids) == (1, True, b"", ())
            assert page.total_amounts == umfx(10)
            clock.advance(10)
        assert m.lease(active[2]).last_settled_at == t0  # never reached
        assert m.lease(active[1]).last_settled_at == t0  # its failure was silent
        # CLOSED leases are collected after the ACTIVE ones: four ACTIVE and one CLOSED exceed 4.
        assert m.withdraw(PA, provider_uuid=P, limit=4).has_more is True
        assert m.withdraw(PA, provider_uuid=P, limit=5).has_more is False


def test_2_1_the_cursor_still_works_when_its_lease_has_closed(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(4))
    clock.advance(10)
    if not chain_version().withdraw_cursor:
        assert m.withdraw(PA, provider_uuid=P, limit=2).next_key == b""  # nothing to resume from
        return
    p1 = m.withdraw(PA, provider_uuid=P, limit=2)
    assert p1.next_key == leases[1].encode()
    m.close_leases(PA, [leases[1]])
    p2 = m.withdraw(PA, provider_uuid=P, limit=2, key=p1.next_key)
    assert (p2.withdrawal_count, p2.total_amounts, p2.has_more) == (2, umfx(20), False)


def test_2_1_withdrawal_count_counts_settled_and_auto_closed_leases_only(clock: ManualClock, m: BillingModel) -> None:
    rich, poor = funded(m, "rich", 10**6), funded(m, "poor", 5)
    settled, exhausted, failing = lease(m, rich), lease(m, poor), lease(m, rich)
    m.block_payouts([failing])
    clock.advance(10)
    fresh = lease(m, rich)  # acknowledged now: nothing accrued yet
    r = m.withdraw(PA, provider_uuid=P)
    assert r.withdrawal_count == 2  # settled + auto-closed; not the fresh lease nor the failure
    assert r.total_amounts == umfx(15)
    assert m.lease(exhausted).state == "CLOSED" and m.lease(fresh).state == "ACTIVE"
    assert m.lease(settled).last_settled_at == clock.now()
    assert r.failed_lease_uuids == ((failing,) if chain_version().lists_failed_leases else ())


def test_2_1_one_failing_lease_never_fails_the_provider_wide_tx(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    u = lease(m, t)
    m.block_payouts([u])
    clock.advance(10)
    r = m.withdraw(PA, provider_uuid=P)
    assert (r.withdrawal_count, r.total_amounts) == (0, ())
    assert m.balance(t) == {"umfx": 10**6}


# -- 2.2 named withdraw ------------------------------------------------------------------------


def test_2_2_named_withdraw_validation_codes(m: BillingModel) -> None:
    t = funded(m, "t", 100)
    ours, theirs = lease(m, t), lease(m, t, provider=OTHER)
    # An empty list is no mode at all (25); the batch rules give 9.
    assert refused(lambda: m.withdraw(PA, lease_uuids=[])) == (BILLING, 25)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[""])) == (BILLING, 9)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[ours, ours])) == (BILLING, 9)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[ours.upper()])) == (BILLING, 9)
    too_many = [uuid7(m.clock.now(), i, "x") for i in range(101)]
    assert refused(lambda: m.withdraw(PA, lease_uuids=too_many)) == (BILLING, 9)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[NOBODY])) == (BILLING, 2)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[ours, theirs])) == (BILLING, 9)  # mixed providers
    assert refused(lambda: m.withdraw(OTHER_ADDRESS, lease_uuids=[ours])) == (BILLING, 6)


def test_2_2_named_withdraw_is_atomic_and_settles_active_leases_to_block_time(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    a, b = lease(m, t, rate=2), lease(m, t, rate=3)
    m.block_payouts([b])
    clock.advance(10)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[a, b])) == (BILLING, 19)
    assert m.lease(a).last_settled_at == clock.now() - 10 * SECOND  # a's settlement was undone too
    assert m.balance(t) == {"umfx": 10**6}
    m.unblock_payouts()
    block_time = clock.now() + 5 * SECOND
    with m.in_tx(7, "AB" * 32, block_time):
        r = m.withdraw(PA, lease_uuids=[a, b])
    assert (r.withdrawal_count, r.total_amounts) == (2, umfx(15 * 5))
    assert (r.has_more, r.next_key, r.failed_lease_uuids) == (False, b"", ())
    assert m.lease(a).last_settled_at == m.lease(b).last_settled_at == block_time


def test_2_2_code_15_when_nothing_was_withdrawn(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 100)
    pending = lease(m, t, acknowledge=False)
    active = lease(m, t)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[pending])) == (BILLING, 15)  # other states add nothing
    assert refused(lambda: m.withdraw(PA, lease_uuids=[active])) == (BILLING, 15)  # no time passed
    clock.advance(0.5)
    assert refused(lambda: m.withdraw(PA, lease_uuids=[active, pending])) == (BILLING, 15)  # no whole second
    clock.advance(0.5)
    assert m.withdraw(PA, lease_uuids=[active, pending]).withdrawal_count == 1


# -- 2.3 MsgCloseLease -----------------------------------------------------------------------------


def test_2_3_close_validation_codes(m: BillingModel) -> None:
    t = funded(m, "t", 100)
    u, pending = lease(m, t), lease(m, t, acknowledge=False)
    assert refused(lambda: m.close_leases("manifest1notanaddress", [u])) == (BILLING, 9)
    assert refused(lambda: m.close_leases(t, [])) == (BILLING, 9)
    assert refused(lambda: m.close_leases(t, [u, u])) == (BILLING, 9)
    assert refused(lambda: m.close_leases(t, [u.upper()])) == (BILLING, 9)
    assert refused(lambda: m.close_leases(t, [uuid7(m.clock.now(), i, "x") for i in range(101)])) == (BILLING, 9)
    assert refused(lambda: m.close_leases(t, [u], "é" * 129)) == (BILLING, 26)  # 129 characters, 258 UTF-8 bytes
    assert refused(lambda: m.close_leases(t, [NOBODY])) == (BILLING, 2)
    assert refused(lambda: m.close_leases(t, [pending])) == (BILLING, 3)
    assert refused(lambda: m.close_leases(addr("stranger"), [u])) == (BILLING, 6)
    m.close_leases(t, [u], "é" * 128)  # exactly 256 bytes
    assert m.lease(u).closure_reason == "é" * 128


def test_2_3_a_sender_must_hold_one_role_for_the_whole_batch(m: BillingModel) -> None:
    # Our provider's address is also a tenant of the other provider.
    m.fund_credit(PA, [Coin("umfx", 100)])
    as_tenant = lease(m, PA, provider=OTHER)
    as_provider = lease(m, funded(m, "t", 100))
    try:
        m.close_leases(PA, [as_tenant, as_provider])
    except ChainError as exc:
        assert (exc.codespace, exc.code) == (BILLING, 6) and "inconsistent authorization" in exc.message
    else:
        raise AssertionError("closed with two roles")
    # The authority has one role for every lease.
    r = m.close_leases(AUTHORITY, [as_tenant, as_provider])
    assert [e.get("closed_by") for e in r.events] == ["authority"] * 3  # two lease_closed, one batch_closed


def test_2_3_the_whole_message_fails_on_any_lease(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    good, gone = lease(m, t), lease(m, t)
    m.close_leases(t, [gone])
    clock.advance(10)
    assert refused(lambda: m.close_leases(t, [good, gone])) == (BILLING, 3)
    assert m.lease(good).state == "ACTIVE" and m.balance(t) == {"umfx": 10**6}
    m.block_payouts([good])
    assert refused(lambda: m.close_leases(t, [good])) == (BILLING, 19)  # a failed transfer rolls back too
    assert m.lease(good).state == "ACTIVE"


def test_2_3_roles_reason_reservation_and_block_time(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 10**6)
    mine, ours, any_ = lease(m, t), lease(m, t), lease(m, t, provider=OTHER)
    assert m.reserved(t) == {"umfx": 30}
    clock.advance(4)
    roles = {}
    for sender, u in ((t, mine), (PA, ours), (AUTHORITY, any_)):
        r = m.close_leases(sender, [u], f"by {sender[:12]}")
        (closed,) = r.events
        roles[closed.get("closed_by")] = u
        assert (r.closed_at, r.closed_count, r.total_settled_amounts) == (clock.now(), 1, umfx(4))
        assert m.lease(u).closed_at == clock.now() and m.lease(u).closure_reason == f"by {sender[:12]}"
    assert roles == {"tenant": mine, "provider": ours, "authority": any_}
    assert m.reserved(t) == {}  # each close released what its lease still reserved


def test_2_3_closing_an_exhausted_lease_closes_it_for_credit_exhaustion(clock: ManualClock, m: BillingModel) -> None:
    under, exact = funded(m, "under", 10), funded(m, "exact", 10)
    a = lease(m, under)
    clock.advance(10)
    b = lease(m, exact)
    clock.advance(10)
    # a owes 20 of 10: underpaid, closed for credit exhaustion on both versions.
    (ev,) = m.close_leases(under, [a], "bye").events
    assert (ev.get("closed_by"), ev.get("settled_amounts")) == ("credit_exhaustion", "10umfx")
    assert m.lease(a).closure_reason == "credit exhausted"
    # b owes exactly its 10: exhausted (accrued >= spendable), but paid in full.
    (ev,) = m.close_leases(exact, [b], "bye").events
    if chain_version().close_keeps_role_when_paid:
        assert (ev.get("closed_by"), m.lease(b).closure_reason) == ("tenant", "bye")
    else:
        assert (ev.get("closed_by"), m.lease(b).closure_reason) == ("credit_exhaustion", "credit exhausted")
    assert ev.get("settled_amounts") == "10umfx"


# -- 2.4 settlement arithmetic ------------------------------------------------------------------


def test_2_4_v21_drops_the_fraction_current_carries_it(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    u = lease(m, t, rate=7)
    start = clock.now()
    clock.advance(10.5)
    assert m.withdraw(PA, lease_uuids=[u]).total_amounts == umfx(70)  # whole seconds only
    clock.advance(0.5)
    if chain_version().carries_fraction:
        assert m.lease(u).last_settled_at == start + 10 * SECOND  # the half second carries
        assert m.withdraw(PA, lease_uuids=[u]).total_amounts == umfx(7)  # the carried half second completes one
    else:
        assert m.lease(u).last_settled_at == start + 10.5 * SECOND  # the half second is gone
        assert refused(lambda: m.withdraw(PA, lease_uuids=[u])) == (BILLING, 15)
    clock.advance(0.25)
    # A close drops the fraction on both versions: the cursor becomes the close time.
    m.close_leases(t, [u])
    assert m.lease(u).last_settled_at == clock.now()
    accrued, paid = m.lease_totals(u)
    assert accrued == paid == {"umfx": 77 if chain_version().carries_fraction else 70}


def test_2_4_transfer_is_min_accrued_b_or_b_minus_r_minus_a(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 30)
    a, _b = lease(m, t), lease(m, t)  # R = 20: each lease's own 10
    clock.advance(25)
    r = m.withdraw(PA, lease_uuids=[a])
    if chain_version().reservation_isolation:
        # spendable = B - (R - A) = 30 - (20 - 10) = 20 <= 25 owed: paid 20 and auto-closed.
        assert r.total_amounts == umfx(20) and m.lease(a).state == "CLOSED"
        assert m.balance(t) == {"umfx": 10} and m.reserved(t) == {"umfx": 10}  # b's tranche is untouched
    else:
        # min(accrued, B) = min(25, 30): paid 25, the lease lives on; R does not protect b.
        assert r.total_amounts == umfx(25) and m.lease(a).state == "ACTIVE"
        assert m.balance(t) == {"umfx": 5} and m.reserved(t) == {"umfx": 20}


# -- 2.5 auto-close ----------------------------------------------------------------------------------


def test_2_5_auto_close_is_lazy_queries_and_end_blocks_never_close(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10)
    u = lease(m, t)
    clock.advance(100)  # owes 100 of 10
    assert m.lease(u).state == "ACTIVE"
    assert [r.lease.uuid for r in m.leases_by_provider(P, "ACTIVE")[0]] == [u]
    assert m.credit_estimate(t).active_lease_count == 1
    assert m.withdrawable_amount(u) == umfx(10)
    assert m.provider_withdrawable(P)[:2] == (umfx(10), 1)  # a dry run, put back
    m.end_block(99, clock.now())
    assert m.lease(u).state == "ACTIVE" and m.balance(t) == {"umfx": 10}
    m.withdraw(PA, provider_uuid=P)  # the first touch closes it
    assert (m.lease(u).state, m.lease(u).closed_at, m.lease(u).closure_reason) == ("CLOSED", clock.now(), "credit exhausted")


def test_2_5_accrued_reaching_what_may_be_spent_closes(clock: ManualClock, m: BillingModel) -> None:
    exact, more = funded(m, "exact", 10), funded(m, "more", 11)
    a, b = lease(m, exact), lease(m, more)
    clock.advance(10)
    m.withdraw(PA, provider_uuid=P)
    assert (m.lease(a).state, m.lease(b).state) == ("CLOSED", "ACTIVE")  # 10 >= 10 closes; 10 < 11 does not


def test_2_5_each_path_signals_the_auto_close_its_own_way(clock: ManualClock, m: BillingModel) -> None:
    by_close, by_name, by_page = (lease(m, funded(m, name, 10)) for name in ("close", "name", "page"))
    clock.advance(20)
    version = chain_version()

    closed = m.close_leases(PA, [by_close]).events
    assert [(e.type, e.get("closed_by"), e.get("closure_reason")) for e in closed] == [
        ("lease_closed", "credit_exhaustion", "credit exhausted")
    ]

    (named,) = m.withdraw(PA, lease_uuids=[by_name]).events  # only provider_withdraw: no lease_closed
    if version.named_auto_close_amount:
        assert named.attributes == (
            ("lease_uuid", by_name), ("amount", "10umfx"), ("provider_uuid", P), ("payout_address", PA),
            ("auto_closed", "true"),
        )
    else:
        assert named.attributes == (("lease_uuid", by_name), ("amount", "0"), ("provider_uuid", P), ("auto_closed", "true"))

    page = m.withdraw(PA, provider_uuid=P).events
    types = [e.type for e in page]
    if version.provider_wide_lease_events:
        assert types == ["provider_withdraw", "lease_auto_closed", "batch_withdraw"]
        assert page[0].get("auto_closed") == "true" and page[0].get("amount") == "10umfx"
    else:
        assert types == ["lease_auto_closed", "batch_withdraw"]
    assert page[-2].get("reason") == "credit_exhausted" and page[-1].get("auto_closed") == "1"
    assert all(m.lease(u).closure_reason == "credit exhausted" for u in (by_close, by_name, by_page))


def test_2_5_no_time_elapsed_closes_when_nothing_is_spendable(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10)
    a = lease(m, t)
    clock.advance(20)
    b = lease(m, t)  # acknowledged now: no time has elapsed for it
    m.withdraw(PA, lease_uuids=[a])  # a takes what it may and closes
    if chain_version().reservation_isolation:
        # a could not spend b's tranche: b keeps 1 to spend, so it is not exhausted.
        assert m.balance(t) == {"umfx": 1}
        assert refused(lambda: m.withdraw(PA, lease_uuids=[b])) == (BILLING, 15)
        assert m.lease(b).state == "ACTIVE"
    else:
        assert m.balance(t) == {}
        (ev,) = m.withdraw(PA, lease_uuids=[b]).events
        assert ev.get("auto_closed") == "true" and m.lease(b).state == "CLOSED"


def test_2_5_a_last_settlement_after_block_time_is_an_invalid_lease(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 100)
    u = lease(m, t)

    def in_block_before(call):
        with m.in_tx(9, "CD" * 32, clock.now() - SECOND):
            return call()

    assert refused(lambda: in_block_before(lambda: m.withdraw(PA, lease_uuids=[u]))) == (BILLING, 9)
    assert refused(lambda: in_block_before(lambda: m.close_leases(t, [u]))) == (BILLING, 9)
    page = in_block_before(lambda: m.withdraw(PA, provider_uuid=P))  # one lease's failure, not the tx's
    assert page.withdrawal_count == 0
    assert page.failed_lease_uuids == ((u,) if chain_version().lists_failed_leases else ())
    assert m.lease(u).state == "ACTIVE"


# -- 2.6 reservations ---------------------------------------------------------------------------------


def test_2_6_creation_reserves_rate_times_min_lease_duration(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=60)
    t = funded(m, "t", 1000)
    u = lease(m, t, rate=3, acknowledge=False)
    assert m.reserved(t) == {"umfx": 180}
    assert m.lease(u).min_lease_duration_at_creation == 60
    if chain_version().reservation_isolation:
        assert m.lease(u).reservation == umfx(180)  # its own tranche
    else:
        assert m.lease(u).reservation is None  # no field 16
    account, _ = m.credit_account(t)
    assert account.available_balances == umfx(820)  # balances - R
    assert refused(lambda: lease(m, t, rate=14)) == (BILLING, 4)  # needs 840 of 820 available
    lease(m, t, rate=13)  # 780 fits


def test_2_6_terminal_transitions_release_the_reservation(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=60)
    t = funded(m, "t", 10**4)
    closed = lease(m, t)
    rejected, cancelled, expired = (lease(m, t, acknowledge=False) for _ in range(3))
    assert m.reserved(t) == {"umfx": 240}
    m.close_leases(t, [closed])
    assert m.reserved(t) == {"umfx": 180}
    m.reject_lease(rejected, "no capacity")
    assert m.reserved(t) == {"umfx": 120}
    m.cancel_lease(cancelled)
    assert m.reserved(t) == {"umfx": 60}
    m.end_block(2, clock.now() + timedelta(seconds=m.params.pending_timeout, microseconds=1))
    assert m.lease(expired).state == "EXPIRED" and m.reserved(t) == {}
    assert (m.lease(rejected).state, m.lease(cancelled).state) == ("REJECTED", "REJECTED")


def test_2_6_current_spends_the_tranche_first_v21_reservation_is_nominal(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 30)
    a, _b = lease(m, t), lease(m, t)
    clock.advance(4)
    assert m.withdraw(PA, lease_uuids=[a]).total_amounts == umfx(4)
    if chain_version().reservation_isolation:
        assert m.lease(a).reservation == umfx(6) and m.reserved(t) == {"umfx": 16}
    else:
        assert m.lease(a).reservation is None and m.reserved(t) == {"umfx": 20}  # settlement ignores R


def test_2_6_legacy_leases_share_the_unattributed_cohort_on_current(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 1000)
    one, two = lease(m, t, legacy=True), lease(m, t, rate=2, legacy=True)
    account, _ = m.credit_account(t)
    assert m.lease(one).min_lease_duration_at_creation == 0
    assert account.reserved_amounts == umfx(30)
    if chain_version().unattributed_fields:
        assert (account.unattributed_reserved_amounts, account.unattributed_lease_count) == (umfx(30), 2)
        assert m.lease(one).reservation == ()  # present, empty: its tranche is the shared U
        clock.advance(5)
        m.withdraw(PA, lease_uuids=[one])  # paid from U first
        account, _ = m.credit_account(t)
        assert account.unattributed_reserved_amounts == account.reserved_amounts == umfx(25)
        m.close_leases(t, [one])
        account, _ = m.credit_account(t)
        assert (account.unattributed_reserved_amounts, account.unattributed_lease_count) == (umfx(25), 1)
        m.close_leases(t, [two])  # the cohort's last lease releases U
        account, _ = m.credit_account(t)
        assert (account.unattributed_reserved_amounts, account.unattributed_lease_count, account.reserved_amounts) == ((), 0, ())
    else:
        assert (account.unattributed_reserved_amounts, account.unattributed_lease_count) == ((), 0)
        m.close_leases(t, [one])
        assert m.reserved(t) == {"umfx": 20}  # the nominal rate x the params' duration
        m.close_leases(t, [two])
        assert m.reserved(t) == {}


def test_2_6_a_lease_is_exhausted_while_the_balance_is_above_zero_on_current(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 20)
    a = lease(m, t)
    lease(m, t, acknowledge=False)  # a pending lease elsewhere reserves 10 more: R = 20
    clock.advance(15)
    isolated = chain_version().reservation_isolation
    assert m.withdrawable_amount(a) == umfx(10 if isolated else 15)  # min(accrued, B - (R - A)) or min(accrued, B)
    assert m.withdraw(PA, lease_uuids=[a]).total_amounts == umfx(10 if isolated else 15)
    assert m.lease(a).state == ("CLOSED" if isolated else "ACTIVE")
    assert m.balance(t) == {"umfx": 10 if isolated else 5}


# -- 2.7 CreditEstimate ---------------------------------------------------------------------------------


def test_2_7_credit_estimate_is_the_gross_runway_of_the_balance(clock: ManualClock) -> None:
    m = model_of(clock, min_lease_duration=10)
    t = funded(m, "t", 1000)
    lease(m, t, rate=3)
    lease(m, t, rate=4)
    lease(m, t, rate=5, acknowledge=False)  # its reservation is not subtracted
    clock.advance(50)  # 350 unsettled: not subtracted either
    e = m.credit_estimate(t)
    assert (e.current_balance, e.total_rate_per_second) == (umfx(1000), umfx(7))
    assert (e.estimated_duration_seconds, e.active_lease_count) == (1000 // 7, 2)


def test_2_7_an_empty_denom_or_no_active_lease_reads_zero(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    m.fund_credit(t, [Coin("upwr", 10)])
    assert m.credit_estimate(t).estimated_duration_seconds == 0  # no ACTIVE lease
    drains = lease(m, t, denom="upwr", legacy=True)
    lease(m, t, denom="upwr", legacy=True)
    lease(m, t)
    clock.advance(100)
    m.withdraw(PA, lease_uuids=[drains])  # takes all 10 upwr (the legacy cohort's share is all of it)
    assert m.balance(t) == {"umfx": 10**6}
    e = m.credit_estimate(t)
    assert e.estimated_duration_seconds == 0  # upwr is charged and empty
    assert e.current_balance == umfx(10**6)  # only denoms with a balance
    assert e.total_rate_per_second == (Coin("umfx", 1), Coin("upwr", 1))


def test_2_7_v21_stops_after_100_leases_current_counts_them_all(clock: ManualClock) -> None:
    m = model_of(clock, max_leases_per_tenant=200)
    t = funded(m, "t", 10**6)
    for _ in range(105):
        lease(m, t)
    e = m.credit_estimate(t)
    if chain_version().estimate_saturates:
        assert (e.active_lease_count, e.total_rate_per_second, e.estimated_duration_seconds) == (105, umfx(105), 10**6 // 105)
    else:
        assert (e.active_lease_count, e.total_rate_per_second, e.estimated_duration_seconds) == (101, umfx(100), 10**6 // 100)


def test_2_7_a_quotient_past_uint64_saturates_on_current_and_reads_zero_on_v21(m: BillingModel) -> None:
    t = funded(m, "t", 2**70)
    lease(m, t)
    expected = 2**64 - 1 if chain_version().estimate_saturates else 0
    assert m.credit_estimate(t).estimated_duration_seconds == expected


def test_2_7_current_refuses_past_its_work_bounds(clock: ManualClock, monkeypatch) -> None:
    """The real bounds (11,000 leases, 100,000 items) are too big to build here; the model takes
    the lease bound from the version and the item bound from a module constant, so both are lowered."""
    assert (chain_model_module.CURRENT.estimate_lease_cap, chain_model_module.MAX_ESTIMATE_ITEMS) == (11_000, 100_000)
    m = chain_model(clock, version=replace(chain_version(), estimate_lease_cap=3))
    m.register_provider(P, PA)
    t = funded(m, "t", 10**6)
    for _ in range(4):
        lease(m, t)
    if chain_version().reservation_isolation:
        assert query_status(lambda: m.credit_estimate(t)) == "RESOURCE_EXHAUSTED"
    else:
        assert m.credit_estimate(t).active_lease_count == 4  # v2.1.0 stops after the cap instead
    monkeypatch.setattr(chain_model_module, "MAX_ESTIMATE_ITEMS", 1)
    few = chain_model(clock)
    few.register_provider(P, PA)
    u = funded(few, "u", 10**6)
    few.create_lease(u, P, [LeaseItem("a", 1, Coin("umfx", 1)), LeaseItem("b", 1, Coin("umfx", 1))])
    if chain_version().reservation_isolation:
        assert query_status(lambda: few.credit_estimate(u)) == "RESOURCE_EXHAUSTED"
    else:
        assert few.credit_estimate(u).total_rate_per_second == umfx(2)


def test_2_7_no_credit_account_is_not_found(m: BillingModel) -> None:
    assert query_status(lambda: m.credit_estimate(addr("nobody"))) == "NOT_FOUND"


# -- 2.8 pagination ---------------------------------------------------------------------------------------


def uuids(page) -> list[str]:
    return [r.lease.uuid for r in page[0]]


def test_2_8_leases_by_provider_next_key_is_the_first_unread_lease(m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(5))
    p1 = m.leases_by_provider(P, "ACTIVE", PageRequest(limit=2))
    assert (uuids(p1), p1[1]) == (leases[:2], leases[2].encode())  # inclusive: the next page starts there
    p2 = m.leases_by_provider(P, "ACTIVE", PageRequest(key=p1[1], limit=2))
    assert (uuids(p2), p2[1]) == (leases[2:4], leases[4].encode())
    p3 = m.leases_by_provider(P, "ACTIVE", PageRequest(key=p2[1], limit=2))
    assert (uuids(p3), p3[1]) == (leases[4:], b"")


def test_2_8_a_listing_is_cut_short_when_its_next_lease_leaves_the_filter(m: BillingModel) -> None:
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(4))
    p1 = m.leases_by_provider(P, "ACTIVE", PageRequest(limit=2))
    m.close_leases(t, [leases[2]])  # the first unread lease leaves the ACTIVE filter
    p2 = m.leases_by_provider(P, "ACTIVE", PageRequest(key=p1[1], limit=2))
    assert (p2[0], p2[1]) == ((), b"")  # an empty last page: leases[3] is never listed


def test_2_8_list_limits_per_version(m: BillingModel, monkeypatch) -> None:
    """Current: limit capped at 1000, key with offset refused, offset scans bounded at 20,000 rows;
    v2.1.0: none of these. The bounds are lowered (they are module constants) to need five leases."""
    assert (chain_model_module.MAX_PAGE_LIMIT, chain_model_module.MAX_OFFSET_SCAN) == (1000, 20_000)
    monkeypatch.setattr(chain_model_module, "MAX_PAGE_LIMIT", 3)
    monkeypatch.setattr(chain_model_module, "MAX_OFFSET_SCAN", 4)
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(5))
    big = m.leases_by_provider(P, "", PageRequest(limit=10))
    with_both = lambda: m.leases_by_provider(P, "", PageRequest(key=leases[1].encode(), offset=1))  # noqa: E731
    offset = lambda: m.leases_by_provider(P, "", PageRequest(offset=1))  # noqa: E731
    if chain_version().list_limit_cap:
        assert len(big[0]) == 3
        assert query_status(with_both) == "INVALID_ARGUMENT"
        assert query_status(offset) == "RESOURCE_EXHAUSTED"
    else:
        assert len(big[0]) == 5
        assert uuids(with_both())[0] == leases[1]  # the key wins
        assert uuids(offset()) == leases[1:]


def test_2_8_provider_withdrawable_per_version(clock: ManualClock, m: BillingModel, monkeypatch) -> None:
    t = funded(m, "t", 10**6)
    leases = sorted(lease(m, t) for _ in range(4))
    lease(m, t, acknowledge=False)
    m.close_leases(t, [leases[0]])
    m.block_payouts([leases[2]])
    clock.advance(10)
    if chain_version().withdrawable_pagination:
        assert chain_model_module.CURRENT_WITHDRAWABLE_LIMIT == (50, 100)
        monkeypatch.setattr(chain_model_module, "CURRENT_WITHDRAWABLE_LIMIT", (2, 3))
        amounts, count, _, next_key, failed = m.provider_withdrawable(P)  # default page: 2 ACTIVE leases
        assert (amounts, count, failed, next_key) == (umfx(10), 1, (leases[2],), leases[3].encode())
        assert m.provider_withdrawable(P, page=PageRequest(key=next_key))[:2] == (umfx(10), 1)
        assert m.provider_withdrawable(P, page=PageRequest(limit=50))[3] == b""  # capped at 3: all ACTIVE fit
        assert m.provider_withdrawable(P, limit=1)[3] == leases[3].encode()  # limit is not read: the default page
        assert query_status(lambda: m.provider_withdrawable(P, page=PageRequest(offset=1))) == "INVALID_ARGUMENT"
        assert query_status(lambda: m.provider_withdrawable(P, page=PageRequest(count_total=True))) == "INVALID_ARGUMENT"
        assert query_status(lambda: m.provider_withdrawable(NOBODY)) == "NOT_FOUND"
        # lease_count is the tx's withdrawal_count: the same dry run.
        whole = m.provider_withdrawable(P, page=PageRequest(limit=3))
        assert whole[:2] == (lambda r: (r.total_amounts, r.withdrawal_count))(m.withdraw(PA, provider_uuid=P, limit=3))
    else:
        assert chain_model_module.V21_WITHDRAWABLE_LIMIT == (100, 1000)
        monkeypatch.setattr(chain_model_module, "V21_WITHDRAWABLE_LIMIT", (2, 3))
        # Every state counts toward the limit, in uuid order: the CLOSED lease and leases[1] fill 2.
        amounts, count, has_more, next_key, failed = m.provider_withdrawable(P)
        assert (amounts, count, has_more, next_key, failed) == (umfx(10), 1, True, b"", ())
        assert m.provider_withdrawable(P, limit=50)[:3] == (umfx(20), 2, True)  # capped at 3 of 5
        assert m.provider_withdrawable(P, page=PageRequest(limit=50))[:3] == (umfx(10), 1, True)  # pagination unread
        assert m.provider_withdrawable(NOBODY)[:3] == ((), 0, False)
        assert m.lease(leases[1]).last_settled_at == clock.now() - 10 * SECOND  # read-only


def test_2_8_credit_account_pages_its_balances_on_current(m: BillingModel) -> None:
    t = funded(m, "t", 1)
    m.fund_credit(t, [Coin("uatom", 2), Coin("upwr", 3)])
    account, next_key = m.credit_account(t, PageRequest(limit=2))
    if chain_version().credit_account_pagination:
        assert (account.balances, next_key) == ((Coin("uatom", 2), Coin("umfx", 1)), b"upwr")
        account, next_key = m.credit_account(t, PageRequest(key=next_key, limit=2))
        assert (account.balances, next_key) == ((Coin("upwr", 3),), b"")
        assert query_status(lambda: m.credit_account(t, PageRequest(offset=1))) == "INVALID_ARGUMENT"
    else:
        assert (len(account.balances), next_key) == (3, b"")  # no pagination: every balance


# -- 2.9 pending leases and acknowledgement -------------------------------------------------------------


def test_2_9_acknowledging_after_the_deadline_fails_on_current_only(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 100)
    on_time, late = lease(m, t, acknowledge=False), lease(m, t, acknowledge=False)
    clock.advance(m.params.pending_timeout)
    m.acknowledge_lease(on_time)  # exactly at created_at + pending_timeout
    clock.advance(0.000001)
    if chain_version().ack_deadline:
        assert refused(lambda: m.acknowledge_lease(late)) == (BILLING, 34)
        assert m.lease(late).state == "PENDING"  # EndBlock has not expired it yet
    else:
        m.acknowledge_lease(late)
        assert m.lease(late).state == "ACTIVE"


def test_2_9_end_block_expires_strictly_after_the_deadline(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 100)
    u = lease(m, t, acknowledge=False)
    deadline = clock.now() + timedelta(seconds=m.params.pending_timeout)
    assert m.end_block(2, deadline) is None and m.lease(u).state == "PENDING"
    block = m.end_block(3, deadline + timedelta(microseconds=1))
    assert block is not None and [e.type for e in block.events] == ["lease_expired"]
    assert m.lease_record(u).expired_at == deadline + timedelta(microseconds=1)


def test_2_9_at_most_100_leases_expire_per_block(clock: ManualClock) -> None:
    m = model_of(clock, max_pending_leases_per_tenant=200)
    t = funded(m, "t", 10**6)
    for _ in range(105):
        lease(m, t, acknowledge=False)
    after = clock.now() + timedelta(seconds=m.params.pending_timeout + 1)
    assert len(m.end_block(2, after).events) == 100
    assert len(m.end_block(3, after).events) == 5
    assert m.end_block(4, after) is None


def test_2_9_acknowledgement_is_one_atomic_batch_of_one_provider(clock: ManualClock, m: BillingModel) -> None:
    t = funded(m, "t", 100)
    ours = [lease(m, t, acknowledge=False) for _ in range(2)]
    theirs = lease(m, t, provider=OTHER, acknowledge=False)
    active = lease(m, t)
    assert refused(lambda: m.acknowledge_leases([ours[0], theirs], PA)) == (BILLING, 14)
    assert refused(lambda: m.acknowledge_leases([ours[0], active], PA)) == (BILLING, 22)
    assert refused(lambda: m.acknowledge_leases([ours[0], ours[0]], PA)) == (BILLING, 9)
    assert refused(lambda: m.acknowledge_leases([theirs], PA)) == (BILLING, 6)
    assert refused(lambda: m.reject_leases([ours[0], theirs], "no", PA)) == (BILLING, 14)
    late = lease(m, t, acknowledge=False)
    clock.advance(m.params.pending_timeout - 1)
    fresh = lease(m, t, acknowledge=False)
    clock.advance(1.5)  # late is past its deadline (not yet expired by an end of block), fresh is not
    if chain_version().ack_deadline:
        assert refused(lambda: m.acknowledge_leases([fresh, late], PA)) == (BILLING, 34)
        assert m.lease(fresh).state == "PENDING"  # the whole batch failed
    else:
        m.acknowledge_leases([fresh, late], PA)
        assert (m.lease(fresh).state, m.lease(late).state) == ("ACTIVE", "ACTIVE")
    assert m.lease(ours[0]).state == "PENDING"


def test_2_9_acknowledging_past_the_active_lease_cap_fails_on_current_only(clock: ManualClock) -> None:
    m = model_of(clock, max_leases_per_tenant=2)
    t = funded(m, "t", 100)
    lease(m, t)
    pending = [lease(m, t, acknowledge=False) for _ in range(2)]  # creation counts ACTIVE leases only: 1 < 2
    if chain_version().ack_active_cap:
        assert refused(lambda: m.acknowledge_leases(pending, PA)) == (BILLING, 35)  # 1 + 2 > 2
        m.acknowledge_leases(pending[:1], PA)  # 1 + 1 = 2 is allowed
        assert m.credit_account(t)[0].active_lease_count == 2
    else:
        m.acknowledge_leases(pending, PA)
        assert m.credit_account(t)[0].active_lease_count == 3
