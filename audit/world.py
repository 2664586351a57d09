"""The audit's world: the sidecar as ``run.py`` builds it in model mode, on tenants of every kind.

``AuditWorld(version, leases, directory)`` builds, with ``sidecar.runner.build``
(the very wiring ``run.py`` uses: the in-process chain model, its event and
ledger feeds, a SQLite ledger in ``directory``, inline chain reads; here on
a ``ManualClock`` and a ``ManualDispatcher``), a sidecar for one chain
version, and seeds the chain (``Scenario``) with ``leases`` leases of ours:

- healthy tenants (some in two denoms, some sharing another provider);
- draining tenants whose own leases use their credit up during the run;
- tenants whose credit is used up by another provider's costly lease,
  which that provider settles every ``OTHER_SETTLES_EVERY``;
- tenants whose umfx lease is paid for while their upwr lease runs dry;
- tenants exhausted while their balance stays above zero: a PENDING lease
  they asked of another provider keeps part of it reserved, which the
  current chain's settlement may not spend (CHAIN-VERSIONS.md 2.6);
- two leases whose settlement fails (``BillingModel.block_payouts``) for
  ``BLOCKED`` and then recovers;
- leases their tenants close themselves, leases opened during the run, and
  one lease of ours never acknowledged, which the chain expires after
  ``pending_timeout`` (its own end of block, a ``lease_expired`` block event).

``run()`` steps the clock timer by timer from ``START`` to ``END`` (the end
of March), delivering all mail after each step, as ``tests.support.World``
does. Meanwhile it watches what the sidecar cannot be asked about:

- ``ExhaustionWatch``: when each of our leases becomes exhausted by the
  chain's own test (``BillingModel._plan``: what it accrued since its last
  settlement reached what it may spend), to the microsecond, and when that
  ends (closed, or credit back);
- ``CloseJudge``: for every close our provider sends, the chain's test at
  that instant, before the chain applies it;
- every ``WithdrawFinished`` the scheduler receives (its ``failing`` field).

``end_month()`` has the sidecar withdraw at ``END`` exactly (so that the
chain's accrual of every lease is settled to the month's end, as the books
count it) and keeps the chain's totals; ``meter()`` meters March with
``ledger.metering.meter_month``; ``audit.report.audit`` compares.
"""

from __future__ import annotations

import heapq
import random
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable

import sidecar.settings  # noqa: F401  (every section registered before the configuration is loaded)
from chain.errors import ChainError
from chain.model import CREDIT_EXHAUSTED_REASON, BillingModel
from devnet.demo import OTHER_PROVIDER_ADDRESS, OTHER_PROVIDER_UUID, PROVIDER_ADDRESS, demo_address
from ledger.metering import MeterResult, meter_month
from ledger.periods import Month
from messages.chain import LeaseItem
from messages.coins import Coin
from messages.scheduler import WithdrawFinished
from runtime.clock import ManualClock, utc
from runtime.config import Config, load_config
from runtime.dispatch import Delivery
from runtime.router import SCHEDULER
from sidecar.runner import Running, build

__all__ = [
    "AuditWorld",
    "Scenario",
    "ExhaustionWatch",
    "CloseJudge",
    "Episode",
    "JudgedClose",
    "audit_config",
    "MONTH",
    "START",
    "END",
    "BLOCKED",
    "SLACK",
]

MONTH = Month(2026, 3)
#: The sidecar starts at a sub-second offset, so that settlements are too (v2.1.0 drops fractions).
START = utc(2026, 3, 31, 18) + timedelta(microseconds=250_000)
END = MONTH.end
#: Billing params: each lease reserves five minutes of its rate; a PENDING lease expires after an hour.
MIN_LEASE_DURATION = timedelta(minutes=5)
PENDING_TIMEOUT = timedelta(hours=1)
#: Draining tenants are funded for a whole number of these beyond their reservations.
RUNWAY_STEP = timedelta(minutes=15)
#: How often the other provider settles its leases (by name, on both versions).
OTHER_SETTLES_EVERY = timedelta(minutes=20)
#: When the two failing leases' payouts are blocked, and when they are unblocked: an hour.
BLOCKED = (START + timedelta(hours=1, minutes=30), START + timedelta(hours=2, minutes=30))
#: How late after grace + one check a close is still on time: one second, the chain's unit of
#: accrual (the model cuts no blocks: a tx is applied at the very instant it is sent).
SLACK = timedelta(seconds=1)

_SECOND = timedelta(seconds=1)
#: Seconds of runway beyond which a lease is not watched (about three years).
_FAR = 10**8
_BIG = 10**15


def audit_config(version: str, directory: Path) -> Config:
    """The configuration of the audit's sidecar: model mode on ``version``, the ledger in ``directory``.

    Everything else is the shipped defaults (hourly withdraw, five-minute
    grace window re-checked every 30 s), no capture.
    """
    return load_config(
        overrides={
            "chain": {"mode": "model"},
            "devnet": {
                "chain_version": version,
                "min_lease_duration": f"{int(MIN_LEASE_DURATION.total_seconds())}s",
                "pending_timeout": f"{int(PENDING_TIMEOUT.total_seconds())}s",
            },
            "ledger": {"path": str(Path(directory) / "ledger.sqlite"), "synchronous": "normal"},
            "capture": {"enabled": False},
        }
    )


def _item(price: int, quantity: int = 1, denom: str = "umfx") -> LeaseItem:
    return LeaseItem(f"sku-{denom}", quantity, Coin(denom, price))


# -- the cast --------------------------------------------------------------------------
#: Kinds of our leases, as the audit reports them.
HEALTHY = "healthy"
FAILING = "failing"
DRAINING = "draining"
DRAINED_ELSEWHERE = "drained elsewhere"
RESERVED = "reserved elsewhere"
SPLIT_PAID = "split: paid denom"
SPLIT_DRY = "split: dry denom"
TENANT_CLOSES = "closed by its tenant"
LATE = "opened during the run"
PENDING = "never acknowledged"
#: Kinds whose leases have credit for the whole run: none of them may be closed by us or the chain.
FUNDED = (HEALTHY, FAILING, SPLIT_PAID, LATE)


@dataclass
class Cast:
    """Who is who: each lease of ours by kind, the failing ones, the one never acknowledged."""

    kind: dict[str, str] = field(default_factory=dict)
    failing: tuple[str, ...] = ()
    pending: str = ""
    #: Tenants with a PENDING lease elsewhere: (umfx funded, umfx that lease keeps reserved).
    reserved_elsewhere: dict[str, tuple[int, int]] = field(default_factory=dict)

    def of(self, kind: str) -> list[str]:
        return [u for u, k in self.kind.items() if k == kind]


class Scenario:
    """Seeds the chain with ``leases`` leases of ours and schedules what happens during the run.

    Every number comes from ``random.Random(seed)``: two runs see the same world.
    """

    def __init__(self, model: BillingModel, clock: ManualClock, provider_uuid: str, leases: int, seed: int = 7) -> None:
        self.model = model
        self.clock = clock
        self.provider_uuid = provider_uuid
        self.rng = random.Random(seed)
        self.cast = Cast()
        self._tenants = 0
        reserved = max(1, leases // 100)
        split = max(1, leases // 125)
        draining = leases * 12 // 100
        elsewhere = leases * 12 // 100
        closes = max(1, leases // 100)
        late = max(2, leases // 50)
        #: Our leases of each kind (the two failing ones included in the count).
        self.counts = {
            RESERVED: reserved,
            SPLIT_PAID: split,
            SPLIT_DRY: split,
            DRAINING: draining,
            DRAINED_ELSEWHERE: elsewhere,
            TENANT_CLOSES: closes,
            LATE: late,
            FAILING: 2,
        }
        self.counts[HEALTHY] = leases - sum(self.counts.values())
        if self.counts[HEALTHY] < 3:
            raise ValueError(f"{leases} leases are too few for every kind of tenant (at least 30)")

    # -- helpers ---------------------------------------------------------------------
    def _tenant(self, kind: str, funds: Iterable[Coin]) -> str:
        self._tenants += 1
        tenant = demo_address(f"audit/{kind}/{self._tenants}")
        self.model.fund_credit(tenant, list(funds))
        return tenant

    def _ours(self, tenant: str, kind: str, items: list[LeaseItem], acknowledge: bool = True) -> str:
        uuid = self.model.create_lease(tenant, self.provider_uuid, items, acknowledge=acknowledge).uuid
        self.cast.kind[uuid] = kind
        return uuid

    def _price(self, low: int, high: int) -> tuple[int, int]:
        """(price per second, quantity)."""
        return self.rng.randrange(low, high), self.rng.randrange(1, 4)

    def _runway(self, first: int, last: int) -> int:
        """Seconds of credit beyond the reservations: a whole number of ``RUNWAY_STEP`` in ``[first, last]``.

        On a grid, as tenants are funded for whole periods: several run dry in
        the same second, so their grace windows and closures share cycles
        (closures are batched). And the depletions stay as many as a
        provider's day sees: each wakes the sidecar for a withdraw of every
        lease, so one every few seconds would turn the run into a withdraw loop.
        """
        return int(RUNWAY_STEP.total_seconds()) * self.rng.randrange(first, last + 1)

    # -- at the start ----------------------------------------------------------------
    def seed(self) -> Cast:
        m, c = self.model, self.counts
        hold = int(MIN_LEASE_DURATION.total_seconds())
        m.register_provider(OTHER_PROVIDER_UUID, OTHER_PROVIDER_ADDRESS)
        # Healthy: three leases a tenant, every third tenant's first lease also in upwr,
        # every fourth tenant with a cheap lease of the other provider.
        left, i = c[HEALTHY], 0
        while left:
            tenant = self._tenant(HEALTHY, [Coin("umfx", _BIG), Coin("upwr", _BIG)])
            for j in range(min(3, left)):
                items = [_item(*self._price(1, 50))]
                if j == 0 and i % 3 == 0:
                    items.append(_item(*self._price(1, 5), denom="upwr"))
                self._ours(tenant, HEALTHY, items)
                left -= 1
            if i % 4 == 0:
                m.create_lease(tenant, OTHER_PROVIDER_UUID, [_item(3)])
            i += 1
        tenant = self._tenant(FAILING, [Coin("umfx", _BIG)])
        self.cast.failing = tuple(self._ours(tenant, FAILING, [_item(*self._price(5, 40))]) for _ in range(2))
        # Draining: two leases a tenant, their credit (beyond the reservations) used up
        # 15 minutes to 5 h 30 min into the run.
        left = c[DRAINING]
        while left:
            prices = [self._price(5, 40) for _ in range(min(2, left))]
            rate = sum(p * q for p, q in prices)
            tenant = self._tenant(DRAINING, [Coin("umfx", rate * (hold + self._runway(1, 22)))])
            for p, q in prices:
                self._ours(tenant, DRAINING, [_item(p, q)])
            left -= len(prices)
        # Drained elsewhere: a cheap lease of ours beside a costly one of the other provider,
        # which takes its share each time that provider settles.
        for _ in range(c[DRAINED_ELSEWHERE]):
            ours, theirs = self._price(1, 10), self.rng.randrange(60, 240)
            rate = ours[0] * ours[1] + theirs
            tenant = self._tenant(DRAINED_ELSEWHERE, [Coin("umfx", rate * (hold + self._runway(1, 21)))])
            self._ours(tenant, DRAINED_ELSEWHERE, [_item(*ours)])
            m.create_lease(tenant, OTHER_PROVIDER_UUID, [_item(theirs)])
        # Reserved elsewhere: a lease of ours and a PENDING one asked of the other provider,
        # never acknowledged: its tranche stays reserved until the chain expires it, an hour
        # in. Ours has 15 or 30 minutes of credit beyond its own tranche.
        for _ in range(c[RESERVED]):
            (p, q), elsewhere = self._price(5, 20), _item(50, self.rng.randrange(1, 4))
            tranche = elsewhere.locked_price.amount * elsewhere.quantity * hold
            funded = p * q * (hold + self._runway(1, 2)) + tranche
            tenant = self._tenant(RESERVED, [Coin("umfx", funded)])
            self._ours(tenant, RESERVED, [_item(p, q)])
            m.create_lease(tenant, OTHER_PROVIDER_UUID, [elsewhere], acknowledge=False)
            self.cast.reserved_elsewhere[tenant] = (funded, tranche)
        # Split: a umfx lease paid for all along beside a upwr lease whose credit runs out.
        for _ in range(c[SPLIT_DRY]):
            dry = self.rng.randrange(1, 6)
            tenant = self._tenant(SPLIT_DRY, [Coin("umfx", _BIG), Coin("upwr", dry * (hold + self._runway(1, 20)))])
            self._ours(tenant, SPLIT_PAID, [_item(*self._price(5, 40))])
            self._ours(tenant, SPLIT_DRY, [_item(dry, denom="upwr")])
        # Closed by their tenants during the run (one lease each).
        self._closing = [
            self._ours(self._tenant(TENANT_CLOSES, [Coin("umfx", _BIG)]), TENANT_CLOSES, [_item(*self._price(1, 50))])
            for _ in range(c[TENANT_CLOSES])
        ]
        return self.cast

    # -- during the run --------------------------------------------------------------
    def schedule(self, end: datetime) -> None:
        """Everything that happens after the start, as timers on the clock (each a step of the run)."""
        at = self.clock.call_at
        start = self.clock.now()
        at(start + timedelta(minutes=2), self._pending_lease)
        t = start + timedelta(minutes=7)
        while t < end:
            at(t, self._other_settles)
            t += OTHER_SETTLES_EVERY
        at(BLOCKED[0], lambda: self.model.block_payouts(self.cast.failing))
        at(BLOCKED[1], lambda: self.model.unblock_payouts(self.cast.failing))
        span = end - start - timedelta(hours=1)
        for i, uuid in enumerate(self._closing):
            at(start + timedelta(minutes=40) + span * i / len(self._closing), self._tenant_closes(uuid))
        late = self.counts[LATE]
        for i in range(late):
            at(start + timedelta(minutes=75) + (span - timedelta(minutes=30)) * i / late, self._late_lease)

    def _pending_lease(self) -> None:
        tenant = self._tenant(PENDING, [Coin("umfx", _BIG)])
        self.cast.pending = self._ours(tenant, PENDING, [_item(*self._price(1, 50))], acknowledge=False)

    def _late_lease(self) -> None:
        tenant = self._tenant(LATE, [Coin("umfx", _BIG)])
        self._ours(tenant, LATE, [_item(*self._price(1, 50))])

    def _tenant_closes(self, uuid: str) -> Callable[[], None]:
        def close() -> None:
            self.model.close_leases(self.model.lease(uuid).tenant, [uuid], "tenant left")

        return close

    def _other_settles(self) -> None:
        """The other provider settles every ACTIVE lease of its own, by name, 100 a tx: the same
        on both versions (a provider-wide call on v2.1.0 reaches only its first leases)."""
        uuids = [lease.uuid for lease in self.model.active_leases_by_provider(OTHER_PROVIDER_UUID)]
        for i in range(0, len(uuids), 100):
            try:
                self.model.withdraw(OTHER_PROVIDER_ADDRESS, lease_uuids=uuids[i : i + 100])
            except ChainError:
                pass  # code 15: nothing was due in this batch


# -- watching the chain's own view ------------------------------------------------------------
@dataclass
class Episode:
    """A stretch of time during which one of our leases was exhausted by the chain's own test."""

    lease_uuid: str
    start: datetime
    end: datetime | None = None
    #: "closed" (then ``closed_at``), or "credit back"; None while it lasts.
    how: str | None = None
    closed_at: datetime | None = None


def first_exhausted(model: BillingModel, lease: Any, since: datetime) -> datetime | None:
    """The first instant at or after ``since`` at which ``lease`` meets the chain's auto-close test,
    the chain staying as it is (None: never, a lease that costs nothing).

    The test (CHAIN-VERSIONS.md 2.5) is, for some denom d of the lease,
    ``rate_d x whole seconds since last_settled_at >= spendable_d``, or no
    time elapsed and nothing spendable. With the chain unchanged the
    spendable amounts are fixed, so the instant is a whole second after
    ``last_settled_at``, found by division: no search.
    """
    acct = model._accounts[lease.tenant]
    best: datetime | None = None
    for denom, rate in lease.rate.items():
        if rate <= 0:
            continue
        spendable = model._spendable(acct, lease, denom)
        if spendable <= 0:
            seconds = 0 if since == lease.last_settled_at else 1
        else:
            seconds = -(-spendable // rate)
            if seconds > _FAR:
                continue  # years away: beyond any run
        at = max(lease.last_settled_at + seconds * _SECOND, since)
        if best is None or at < best:
            best = at
    return best


class ExhaustionWatch:
    """When each of our ACTIVE leases is exhausted by the chain's test, to the microsecond.

    The chain changes only in txs (and ends of block), and between two of
    them each lease's first exhausted instant is known exactly
    (``first_exhausted``). So the watch looks twice:

    - after every tx, at its instant, at the leases of the tenants it
      touched (its events name the tenant or the lease): one exhausted now
      opens an ``Episode`` at once, before whatever the sidecar does next in
      the same step; an open episode ends when its lease closed or its
      credit came back;
    - between the run's steps (``look``): a lease whose first exhausted
      instant falls before the next step opens its episode at that instant.

    A lease can also become exhausted inside a tx: a withdraw that settles
    a sibling lease of the same tenant first leaves it less to spend, and
    the chain auto-closes it in that very tx. Its episode begins and ends at
    that instant (``within_tx``). A close of an exhausted lease that neither
    explains is ``unforeseen``: a flaw of the watch's own view, which the
    audit fails on. Only touched tenants are re-examined, which keeps the
    watch cheap at 10,000 leases.
    """

    def __init__(self, model: BillingModel, provider_uuid: str, judge: "CloseJudge") -> None:
        self.model = model
        self.provider_uuid = provider_uuid
        self.judge = judge
        self.episodes: list[Episode] = []
        self.open: dict[str, Episode] = {}
        #: Leases closed exhausted with no episode open (see the class doc).
        self.within_tx: list[str] = []
        self.unforeseen: list[str] = []
        self._tx: Any = None
        self._due: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []
        #: Our leases ACTIVE when last examined, per tenant.
        self._active: dict[str, set[str]] = {}
        self.seconds = 0.0  # time spent watching (the bench reports it apart)
        with model._lock:
            self._examine(set(model._accounts), model.clock.now())
        model.subscribe(self._on_events)

    def _on_events(self, tx: Any) -> None:
        """After a tx (or an end of block): the tenants it touched, as it left them."""
        t0 = time.perf_counter()
        model = self.model
        leases = model._leases
        tenants: set[str] = set()
        named = settled = 0
        for event in tx.events:
            for key, value in event.attributes:
                if key == "tenant":
                    tenants.add(value)
                elif key == "lease_uuid" and value in leases:
                    tenants.add(leases[value].tenant)
            if event.type == "provider_withdraw":
                named += 1
            elif event.type == "batch_withdraw":
                settled += int(event.get("lease_count", "0") or 0)
        if settled > named:
            tenants = set(model._accounts)  # a v2.1.0 provider-wide page names none of the leases it settled
        self._tx = tx
        self._examine(tenants, tx.time)
        self._tx = None
        self.seconds += time.perf_counter() - t0

    def _examine(self, tenants: set[str], now: datetime) -> None:
        """The leases of ``tenants`` as a tx left them at ``now``."""
        model = self.model
        for tenant in tenants:
            acct = model._accounts.get(tenant)
            if acct is None:
                continue
            before = self._active.get(tenant, set())
            active = {u for u in acct.active if model._leases[u].provider_uuid == self.provider_uuid}
            for uuid in before - active:
                self._closed(uuid, now)
            if active:
                self._active[tenant] = active
            else:
                self._active.pop(tenant, None)
            for uuid in active:
                lease = model._leases[uuid]
                at = first_exhausted(model, lease, now)
                episode = self.open.get(uuid)
                if episode is not None:
                    if at != now:
                        self._end(episode, now, "credit back")
                    continue
                if at is None:
                    self._due.pop(uuid, None)
                elif at == now:
                    self._begin(uuid, now)
                else:
                    self._due[uuid] = at
                    heapq.heappush(self._heap, (at, uuid))

    def _closed(self, uuid: str, now: datetime) -> None:
        lease = self.model._leases[uuid]
        self._due.pop(uuid, None)
        episode = self.open.get(uuid)
        if episode is not None:
            self._end(episode, lease.closed_at or now, "closed", lease.closed_at)
            return
        judged = self.judge.judged.get(uuid)
        exhausted = judged.exhausted if judged is not None else lease.closure_reason == CREDIT_EXHAUSTED_REASON
        if exhausted and lease.state == "CLOSED":
            (self.within_tx if self._sibling_paid_first(lease) else self.unforeseen).append(uuid)
            episode = self._begin(uuid, lease.closed_at or now)
            self._end(episode, episode.start, "closed", lease.closed_at)

    def _sibling_paid_first(self, lease: Any) -> bool:
        """In the tx being examined, was another lease of the tenant settled before this one?"""
        if self._tx is None:
            return False
        leases = self.model._leases
        for event in self._tx.events:
            uuid = event.get("lease_uuid")
            if uuid == lease.uuid:
                return False
            if uuid in leases and uuid != lease.uuid and leases[uuid].tenant == lease.tenant and event.type in (
                "provider_withdraw", "lease_closed"
            ):
                return True
        return False

    def look(self, now: datetime, until: datetime) -> None:
        """Between steps: open the episodes that begin by ``until`` (the next step), the chain unchanged."""
        t0 = time.perf_counter()
        model = self.model
        with model._lock:
            while self._heap and self._heap[0][0] <= until:
                at, uuid = heapq.heappop(self._heap)
                lease = model._leases[uuid]
                if self._due.get(uuid) != at or uuid in self.open or lease.state != "ACTIVE":
                    continue  # superseded by a later examination, or already watched
                # The watch's own arithmetic, checked against the chain's test once per episode.
                assert model._plan(lease, at).exhausted, f"lease {uuid}: not exhausted at {at} by the chain's test"
                self._begin(uuid, at)
        self.seconds += time.perf_counter() - t0

    def _begin(self, uuid: str, at: datetime) -> Episode:
        self._due.pop(uuid, None)
        episode = Episode(uuid, at)
        self.open[uuid] = episode
        self.episodes.append(episode)
        return episode

    def _end(self, episode: Episode, at: datetime, how: str, closed_at: datetime | None = None) -> None:
        episode.end, episode.how, episode.closed_at = at, how, closed_at
        del self.open[episode.lease_uuid]


@dataclass(frozen=True)
class JudgedClose:
    """One lease our provider closed, and what the chain's test said of it just before."""

    lease_uuid: str
    at: datetime
    #: Exhausted by the chain's own auto-close test at that instant.
    exhausted: bool
    #: Gone counting what the tenant's other ACTIVE leases accrued beyond their tranches
    #: and would be paid first if touched first (CHAIN-VERSIONS.md 2.7's "usable").
    gone_counting_others: bool
    detail: str


class CloseJudge:
    """Sits in front of the model's ``close_leases``: before a close our provider sends is applied,
    the chain's test of each lease at that instant is recorded (after the close it can no longer be).

    It is an attribute of the model object over the method: the chain client
    calls ``model.close_leases``, so every close, the sidecar's included,
    passes here; closes by anyone else go straight through.
    """

    def __init__(self, model: BillingModel, sender: str) -> None:
        self.model = model
        self.sender = sender
        self.closes: list[JudgedClose] = []
        #: The latest judgement of each lease (a close the chain refused is not kept).
        self.judged: dict[str, JudgedClose] = {}
        self._close = model.close_leases
        model.close_leases = self._judged  # type: ignore[method-assign]

    def _judged(self, sender: str, lease_uuids: Any, reason: str = "") -> Any:
        if sender != self.sender:
            return self._close(sender, lease_uuids, reason)
        with self.model._lock:
            now = self.model.clock.now()
            judged = [self._judge(u, now) for u in lease_uuids if u in self.model._leases]
            for j in judged:
                self.judged[j.lease_uuid] = j
            try:
                result = self._close(sender, lease_uuids, reason)
            except ChainError:
                for j in judged:  # the chain refused the whole message: nothing was closed
                    del self.judged[j.lease_uuid]
                raise
        self.closes.extend(judged)
        return result

    def _judge(self, uuid: str, now: datetime) -> JudgedClose:
        model = self.model
        lease = model._leases[uuid]
        if lease.state != "ACTIVE":
            return JudgedClose(uuid, now, False, False, f"not active ({lease.state})")
        exhausted = model._plan(lease, now).exhausted
        acct = model._accounts[lease.tenant]
        isolated = model.version.reservation_isolation
        seconds = max(0, (now - lease.last_settled_at) // _SECOND)
        gone, numbers = False, []
        for denom, rate in sorted(lease.rate.items()):
            if rate <= 0:
                continue
            owed = 0
            for other in acct.active:
                j = model._leases[other]
                if other == uuid or not j.rate.get(denom):
                    continue
                own = (acct.unattributed if j.legacy else (j.reservation or {})).get(denom, 0) if isolated else 0
                owed += max(0, j.rate[denom] * max(0, (now - j.last_settled_at) // _SECOND) - own)
            spendable = model._spendable(acct, lease, denom)
            accrued = rate * seconds
            gone = gone or accrued >= spendable - owed
            numbers.append(f"{denom}: accrued {accrued}, spendable {spendable}, owed to other leases {owed}")
        return JudgedClose(uuid, now, exhausted, gone, "; ".join(numbers))


# -- the world ------------------------------------------------------------------------------
class AuditWorld:
    """The sidecar, its chain and its books for one audit run. ``close()`` releases them."""

    def __init__(self, version: str, leases: int, directory: Path, *, seed: int = 7) -> None:
        self.config = audit_config(version, directory)
        self.clock = ManualClock(START)
        self.finished: list[tuple[datetime, WithdrawFinished]] = []
        self.running: Running = build(self.config, self.clock, manual=True, taps=(self._tap,), demo=False)
        model = self.running.model
        assert model is not None
        self.model: BillingModel = model
        self.provider_uuid = self.config.provider.uuid
        self.settings = self.config.scheduler
        self.judge = CloseJudge(model, PROVIDER_ADDRESS)
        self.scenario = Scenario(model, self.clock, self.provider_uuid, leases, seed)
        self.cast = self.scenario.seed()
        self.scenario.schedule(END)
        self.watch = ExhaustionWatch(model, self.provider_uuid, self.judge)
        #: Per lease of ours, just before the period's last withdraw: (paid, last_settled_at).
        self.before_end: dict[str, tuple[dict[str, int], datetime]] = {}
        #: Per lease of ours after it: (accrued, paid) over its life.
        self.totals: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        #: Withdraws the month's end took, and the ACTIVE leases still not settled to it after them.
        self.month_end_withdraws = 0
        self.unsettled: list[str] = []
        self.metered: MeterResult | None = None
        #: When the chain settled each of the two failing leases (a tx moved something from it).
        self.failing_settled: dict[str, list[datetime]] = {u: [] for u in self.cast.failing}
        model.subscribe(self._on_settled)

    def _on_settled(self, tx: Any) -> None:
        for event in tx.events:
            if event.type in ("provider_withdraw", "lease_closed") and event.get("lease_uuid") in self.failing_settled:
                if event.get("amount", event.get("settled_amounts")) not in ("", "0"):
                    self.failing_settled[event.get("lease_uuid")].append(tx.time)

    def _tap(self, delivery: Delivery) -> None:
        if delivery.recipient == SCHEDULER and type(delivery.message) is WithdrawFinished:
            self.finished.append((delivery.at, delivery.message))

    @property
    def ledger(self) -> Any:
        return self.running.ledger

    def settle(self) -> None:
        self.running.sidecar.settle()

    def run(self, until: datetime = END) -> None:
        """Start the sidecar as ``run.py`` does (one cycle, then the schedule) and step the clock to
        ``until``, timer by timer, all mail delivered after each; the watch looks before each step."""
        sidecar, clock = self.running.sidecar, self.clock
        if sidecar.scheduler_core.started_at is None:
            sidecar.withdraw_once()
            sidecar.start()
            self.settle()
        while True:
            nxt = clock.next_timer()
            horizon = until if nxt is None or nxt > until else nxt
            self.watch.look(clock.now(), horizon)
            if nxt is None or nxt > until:
                break
            clock.advance_to(nxt)
            self.settle()
        clock.advance_to(until)
        self.settle()

    def end_month(self, most: int = 10) -> None:
        """At ``END``: the sidecar withdraws, the month's last settlement (April's, by its instant),
        so that the chain's accrual of every lease is settled to the instant the books meter it to.

        As an operator would, the withdraw is triggered again while some ACTIVE
        lease of ours is not settled to ``END`` (a provider with more leases
        than one cycle's ``max_withdraw_iterations`` txs reach), at most ``most``
        times; ``month_end_withdraws`` says how many it took, ``unsettled`` what
        was still not settled after them.
        """
        assert self.clock.now() == END, "run() to END first"
        model = self.model
        self.before_end = {u: (model.lease_totals(u)[1], model.lease(u).last_settled_at) for u in self.cast.kind}
        self.month_end_withdraws = 0
        while self.month_end_withdraws < most:
            self.month_end_withdraws += 1
            self.running.sidecar.trigger_withdraw("audit: the month's end")
            self.settle()
            self.unsettled = [
                lease.uuid
                for lease in model.active_leases_by_provider(self.provider_uuid)
                if END - lease.last_settled_at >= _SECOND
            ]
            if not self.unsettled:
                break
        self.totals = {u: model.lease_totals(u) for u in self.cast.kind}

    def meter(self) -> MeterResult:
        """March metered into a run of its own (``ledger.metering.meter_month``)."""
        self.metered = meter_month(self.ledger, MONTH, END)
        return self.metered

    def close(self) -> None:
        self.running.close()
