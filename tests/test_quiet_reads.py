"""A monitor's quiet reads (``TenantCredit._quiet_read``) decide what judging the read again decides.

Two monitors of one tenant take the same random messages, on four sets of
settings: reads of the tenant on the chain model at random later times
(settlements, top-ups, new and closed leases between), the same read again,
reads at the same or an earlier time (replay feeds the captured times),
failed, stale and implausible reads, reads listing a lease twice, reads
from the providers' listings, lease syncs, closures and their failures,
restores. One takes the quiet path where it may; the other is made to
judge every read (``_on_read``). After every message both must have given
the same effects and hold the same state. Every seed must take the quiet
path often, and meet every kind of message.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest

from actors.credit_rule import DEPLETION_HORIZON
from actors.effects import Effect
from actors.tenant_credit import TenantCredit
from chain.errors import ChainError
from chain.model import BillingModel, ChainParams
from messages.chain import ChainFailure, Lease
from messages.coins import Coin
from messages.credit import (CloseFailed, CreditRead, CreditReadFailed, LeaseGone, LeaseOpened, LeasesClosed,
                             LeasesSynced, TenantRestored)
from runtime.clock import ManualClock, utc
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item, settings

#: Every test here runs on both chain versions.
pytestmark = pytest.mark.usefixtures("chain_version")

T0 = utc(2026, 3, 1)
S = settings()
FAILURE = ChainFailure("credit_account", "unavailable", transient=True)

#: What a monitor holds that decides something (and ``_lease_changes``, which decides
#: what is saved); its caches and the quiet mark are left out.
DECIDING = ("leases", "last_balances", "last_sample_at", "consecutive_errs", "zero_since", "depletion_at",
            "recheck_at", "closing", "_closing_cycle", "_clamped", "read_height", "_doubted", "_lease_changes")

#: The defaults, and settings at their edges: no buffer, a day's; no grace window; a threshold of one.
SETTINGS = (S, settings(depletion_check_buffer="0s", credit_check_zero_grace_period="40s"),
            settings(depletion_check_buffer="24h", credit_check_error_threshold=1),
            settings(credit_check_zero_grace_period="0s"))


class JudgesEveryRead(TenantCredit):
    """The monitor as it was before quiet reads: every read judged by ``_on_read``."""

    __slots__ = ()

    def _quiet_read(self, message: CreditRead, now: datetime, out: list[Effect]) -> bool:
        return False


class CountsQuietReads(TenantCredit):
    __slots__ = ("quiet_reads",)

    def __init__(self, tenant: str, settings: Any) -> None:
        super().__init__(tenant, settings)
        self.quiet_reads = 0

    def _quiet_read(self, message: CreditRead, now: datetime, out: list[Effect]) -> bool:
        taken = super()._quiet_read(message, now, out)
        self.quiet_reads += taken
        return taken


def state(m: TenantCredit) -> tuple[Any, ...]:
    ref = m._reference
    return (tuple(getattr(m, name) for name in DECIDING), m.snapshot(),
            None if ref is None else (ref.at, ref.coins, ref.leases))


class Case:
    """One tenant on the chain model and the two monitors, fed alike."""

    def __init__(self, rnd: random.Random, seed: int) -> None:
        self.rnd = rnd
        self.clock = ManualClock(T0)
        self.model: BillingModel = chain_model(self.clock, params=ChainParams(min_lease_duration=rnd.choice((1, 30))))
        self.model.register_provider(PROVIDER, PROVIDER_ADDRESS)
        self.model.register_provider(OTHER, OTHER_ADDRESS)
        self.tenant = addr(f"quiet{seed}")
        # Credit for minutes (runways and grace windows inside the run), for days, or beyond the horizon.
        horizon = int(DEPLETION_HORIZON.total_seconds())
        self.model.fund_credit(self.tenant, [Coin("umfx", rnd.choice((
            rnd.randrange(2_000, 40_000), rnd.randrange(10**6, 10**7), 20 * horizon)))])
        # Some from before per-lease reservations: on the current chain they share the account's.
        self.ours = [self.model.create_lease(self.tenant, PROVIDER, [item(rnd.randrange(1, 9))],
                                             legacy=rnd.random() < 0.4)]
        if rnd.random() < 0.6:
            self.model.create_lease(self.tenant, OTHER, [item(rnd.randrange(0, 4))])
        chosen = SETTINGS[seed % len(SETTINGS)]
        self.fast = CountsQuietReads(self.tenant, chosen)
        self.slow = JudgesEveryRead(self.tenant, chosen)
        self.cycle = 0
        self.last_read: CreditRead | None = None
        self.kinds: set[str] = set()

    def feed(self, message: Any, kind: str, earlier: timedelta = timedelta(0)) -> None:
        now = self.clock.now() - earlier
        self.kinds.add(kind)
        got, want = self.fast.handle(message, now), self.slow.handle(message, now)
        assert got == want, (kind, now)
        assert state(self.fast) == state(self.slow), (kind, now)

    def read(self) -> CreditRead:
        account, _ = self.model.credit_account(self.tenant)
        records, _, _ = self.model.leases_by_tenant(self.tenant, "ACTIVE")
        self.cycle += 1
        return CreditRead(self.cycle, account, leases=tuple(r.lease for r in records),
                          height=self.model.height)

    def active_ours(self) -> tuple[Lease, ...]:
        records, _, _ = self.model.leases_by_tenant(self.tenant, "ACTIVE")
        return tuple(r.lease for r in records if r.lease.provider_uuid == PROVIDER)

    def step(self) -> None:
        rnd = self.rnd
        self.clock.advance(timedelta(microseconds=rnd.choice((
            0, rnd.randrange(1, 120_000_000), rnd.randrange(1, 120_000_000), rnd.randrange(1, 4 * 3600 * 10**6)))))
        roll = rnd.random()
        if roll < 0.42:
            self.last_read = self.read()
            self.feed(self.last_read, "read")
        elif roll < 0.44 and self.last_read is not None:
            self.feed(msgspec.structs.replace(self.last_read, cycle=self.cycle), "read earlier",
                      earlier=timedelta(microseconds=rnd.randrange(1, 30_000_000)))
        elif roll < 0.46:
            read = self.read()
            # Our leases from the provider's listing, read before the account.
            self.feed(msgspec.structs.replace(read, leases=self.active_ours(), leases_listed=True), "listed read")
        elif roll < 0.48 and self.active_ours():
            # One lease of ours on two pages of a listing, settled between them.
            read, lease = self.read(), self.active_ours()[0]
            moved = msgspec.structs.replace(lease, last_settled_at=lease.last_settled_at - timedelta(seconds=5))
            twice = msgspec.structs.replace(read, leases=read.leases + (moved,))
            self.feed(twice, "lease listed twice")
            # Read again at the same time: it changes the lease's details back and forth again.
            self.feed(msgspec.structs.replace(twice, cycle=twice.cycle + 1), "lease listed twice")
            self.feed(msgspec.structs.replace(twice, cycle=twice.cycle + 2), "lease listed twice")
        elif roll < 0.50:
            self.feed(msgspec.structs.replace(self.read(), height=0), "height unknown")
        elif roll < 0.60 and self.last_read is not None:
            # The very read again: the node answered from the same block.
            self.feed(msgspec.structs.replace(self.last_read, cycle=self.last_read.cycle + 1), "same read")
        elif roll < 0.64:
            self.feed(CreditReadFailed(self.cycle, FAILURE), "failed")
        elif roll < 0.67 and self.last_read is not None and self.fast.read_height > 1:
            self.feed(msgspec.structs.replace(self.read(), height=1), "stale")
        elif roll < 0.70 and self.last_read is not None:
            read = self.read()
            self.feed(msgspec.structs.replace(read, account=msgspec.structs.replace(read.account, balances=())),
                      "implausible")
        elif roll < 0.76:
            self.model.withdraw(PROVIDER_ADDRESS, provider_uuid=PROVIDER)  # settles: the next read differs
        elif roll < 0.79:
            self.model.fund_credit(self.tenant, [Coin("umfx", rnd.randrange(1, 20_000))])
        elif roll < 0.83:
            try:
                lease = self.model.create_lease(self.tenant, PROVIDER, [item(rnd.randrange(0, 5))])
            except ChainError:  # its credit cannot reserve another
                return
            self.feed(LeaseOpened(lease), "opened")
        elif roll < 0.86:
            self.feed(LeasesSynced(self.active_ours()), "synced")
        elif roll < 0.90 and self.fast.closing:
            doomed = self.fast.closing
            if rnd.random() < 0.5:
                self.feed(CloseFailed(self.tenant, doomed, FAILURE), "close failed")
            else:
                try:
                    self.model.close_leases(PROVIDER_ADDRESS, list(doomed), "credit gone")
                    gone = False
                except ChainError:  # the chain closed them first (a settlement found the credit gone)
                    gone = True
                self.feed(LeasesClosed(self.tenant, doomed, "credit gone", already_closed=gone), "closed")
        elif roll < 0.92:
            self.feed(TenantRestored(self.slow.snapshot()), "restored")
        elif roll < 0.94 and self.active_ours():
            # The same account with one lease more, of another provider: a read the chain
            # models here never give alone (a priced lease reserves), which only its leases tell.
            read = self.read()
            base = self.active_ours()[0]
            theirs = msgspec.structs.replace(base, uuid=f"{base.uuid}-theirs", provider_uuid=OTHER,
                                             items=(item(rnd.randrange(1, 9)),))
            self.feed(msgspec.structs.replace(read, leases=read.leases + (theirs,)), "their lease read")
        elif roll < 0.952 and self.last_read is not None:
            # The same read with more held back: only the account's reservations tell.
            read = self.read()
            held = (Coin("umfx", rnd.randrange(1, 40_000)),)
            field = rnd.choice(("reserved_amounts", "unattributed_reserved_amounts"))
            self.feed(msgspec.structs.replace(read, account=msgspec.structs.replace(read.account, **{field: held})),
                      "reserved read")
        elif roll < 0.965 and self.fast.leases:
            self.feed(LeaseGone(next(iter(self.fast.leases)), "expired"), "lease gone")
        elif roll < 0.98:
            # Another provider's lease comes or goes: the tenant's leases change, not always its balance.
            theirs = [r.lease for r in self.model.leases_by_tenant(self.tenant, "ACTIVE")[0]
                      if r.lease.provider_uuid == OTHER]
            try:
                if theirs and rnd.random() < 0.5:
                    self.model.close_leases(OTHER_ADDRESS, [theirs[0].uuid], "theirs")
                else:
                    self.model.create_lease(self.tenant, OTHER, [item(rnd.randrange(0, 4))])
            except ChainError:  # its credit cannot reserve another
                return
            self.kinds.add("their lease")


@pytest.mark.parametrize("seed", range(12))
def test_a_quiet_read_gives_what_judging_it_again_gives(seed: int) -> None:
    case = Case(random.Random(seed), seed)
    case.feed(LeasesSynced(case.active_ours()), "synced")
    for _ in range(500):
        case.step()
    assert case.fast.quiet_reads >= 40, case.fast.quiet_reads
    # The messages that end a run of quiet reads all came, and the changes that make a read another.
    assert {"same read", "read earlier", "listed read", "lease listed twice", "height unknown", "failed", "stale",
            "implausible", "synced", "lease gone", "restored", "their lease", "their lease read",
            "reserved read"} <= case.kinds, case.kinds


def _disk_gone(self: TenantCredit) -> Any:
    raise RuntimeError("disk gone")


def test_a_read_whose_handling_raised_is_followed_by_a_judged_read() -> None:
    """``recover`` after a raise (here the snapshot's) asks for a re-check: the next read must undo it."""
    case = Case(random.Random(3), 3)
    case.feed(LeasesSynced(case.active_ours()), "synced")
    for _ in range(4):  # the first is noted, the second marks the third and fourth quiet
        case.clock.advance(timedelta(seconds=30))
        case.feed(case.read(), "read")
    assert case.fast.quiet_reads == 2
    case.clock.advance(timedelta(seconds=30))
    read, now = case.read(), case.clock.now()
    for m in (case.fast, case.slow):
        m._saved_key = None  # so that a snapshot is made, and raises
        with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError):
            patch.setattr(type(m), "snapshot", _disk_gone)
            m.handle(read, now)
        assert m.recover(read, now)
        assert m.recheck_at is not None
    case.clock.advance(timedelta(seconds=30))
    case.feed(case.read(), "read")
    # Judged (the raise ended the quiet run), and the re-check is no more.
    assert case.fast.recheck_at is None and case.fast.quiet_reads == 3
