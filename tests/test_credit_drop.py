"""A read whose balance fell faster than the tenant's leases spend is not believed at once (issue 13)."""

from __future__ import annotations

from datetime import timedelta

from actors.credit_drop import implausible_drop, reference
from actors.effects import Send
from actors.tenant_credit import TenantCredit
from messages.chain import CreditAccount, Lease
from messages.coins import Coin
from messages.credit import CloseRequested, CreditRead, LeaseOpened
from messages.scheduler import TenantChecked
from runtime.clock import utc
from tests.support import OTHER, PROVIDER, item, settings

T0 = utc(2026, 3, 1)
S = settings()
RICH = 10**15


def lease(uuid: str = "l1", rate: int = 10, provider: str = PROVIDER, settled=T0) -> Lease:
    return Lease(uuid, "t", provider, (item(rate),), last_settled_at=settled)


def account(umfx: int) -> CreditAccount:
    return CreditAccount("t", (Coin("umfx", umfx),) if umfx else ())


def sent(effects, kind):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def test_a_fall_within_what_the_leases_spend_is_plausible_and_one_to_zero_beyond_it_is_not() -> None:
    leases = (lease(rate=10), lease("o1", rate=5, provider=OTHER, settled=T0 - timedelta(seconds=100)))
    ref = reference(account(100_000), leases, T0)
    assert ref is not None
    # 100 s unsettled of the other lease (and a second of rounding), then 15 a second for 60 s
    assert implausible_drop(ref, account(100_000 - 1_000), leases, T0 + timedelta(seconds=60)) is None
    why = implausible_drop(ref, account(0), leases, T0 + timedelta(seconds=60))
    assert why is not None and "umfx fell from 100000 to 0" in why
    # a fall beyond the bound to a balance above zero is not doubted (see the module)
    assert implausible_drop(ref, account(10), leases, T0 + timedelta(seconds=60)) is None
    # a balance that rose (credit funded) is never doubted
    assert implausible_drop(ref, account(200_000), leases, T0 + timedelta(seconds=1)) is None
    # the bound exactly: 515 unsettled at the reference, then 61 s (rounded up, and one more)
    # of both reads' leases, 15 + 15 a second: 2,345 may fall to zero, one more may not
    at = T0 + timedelta(seconds=60)
    assert implausible_drop(reference(account(2_345), leases, T0), account(0), leases, at) is None
    assert "(2345 at most)" in implausible_drop(reference(account(2_346), leases, T0), account(0), leases, at)


def test_a_lease_whose_last_settlement_is_unknown_gives_no_bound() -> None:
    assert reference(account(1_000), (lease(settled=None),), T0) is None


def test_one_zero_read_of_a_rich_tenant_is_a_failed_read_that_asks_a_recheck() -> None:
    m = TenantCredit("t", S)
    m.handle(LeaseOpened(lease()), T0)
    m.handle(CreditRead(1, account(RICH), leases=(lease(),), height=10), T0)
    out = m.handle(CreditRead(2, account(0), leases=(lease(),), height=11), T0 + timedelta(seconds=60))
    (v,) = sent(out, TenantChecked)
    assert m.zero_since is None and m.consecutive_errs == 1
    assert v.recheck_at == T0 + timedelta(seconds=60) + S.credit_check_retry_interval
    assert "implausible read at height 11" in v.note
    # a true read afterwards is believed and clears the doubt
    m.handle(CreditRead(3, account(RICH - 1_000), leases=(lease(),), height=12), T0 + timedelta(seconds=90))
    assert m.consecutive_errs == 0 and m.zero_since is None


def test_two_zero_reads_a_grace_window_apart_with_true_reads_missing_close_nothing() -> None:
    """The fault run's wrong closure: zero, failed reads, zero at the window's end."""
    m = TenantCredit("t", S)
    m.handle(LeaseOpened(lease()), T0)
    m.handle(CreditRead(1, account(RICH), leases=(lease(),), height=10), T0)
    m.handle(CreditRead(2, account(0), leases=(lease(),), height=11), T0 + timedelta(seconds=60))
    # a true read between them resets the doubt; the second zero read is doubted again
    m.handle(CreditRead(3, account(RICH), leases=(lease(),), height=12), T0 + timedelta(seconds=90))
    late = T0 + timedelta(seconds=90) + S.credit_check_zero_grace_period
    out = m.handle(CreditRead(4, account(0), leases=(lease(),), height=13), late)
    assert not sent(out, CloseRequested) and m.zero_since is None


def test_a_fall_said_twice_is_believed_and_opens_the_grace_window() -> None:
    """A lease created and closed between two reads is seen by neither: the second read decides."""
    m = TenantCredit("t", S)
    m.handle(LeaseOpened(lease()), T0)
    m.handle(CreditRead(1, account(RICH), leases=(lease(),), height=10), T0)
    m.handle(CreditRead(2, account(0), leases=(lease(),), height=11), T0 + timedelta(seconds=60))
    second = T0 + timedelta(seconds=90)
    m.handle(CreditRead(3, account(0), leases=(lease(),), height=12), second)
    assert m.zero_since == second and m.consecutive_errs == 0
    (req,) = sent(
        m.handle(CreditRead(4, account(0), leases=(lease(),), height=13), second + S.credit_check_zero_grace_period),
        CloseRequested,
    )
    assert req.lease_uuids == ("l1",)
