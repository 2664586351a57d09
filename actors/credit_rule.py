"""Is a lease's credit gone, and when will it be? The chain's own arithmetic, per lease and per denom.

A lease is only ever settled when a tx touches it, and the chain then
closes it if what it accrued since ``last_settled_at`` reached what it may
spend (CHAIN-VERSIONS.md 2.5). What it may spend depends on the version:

- **current** (reservation isolation, 2.6): ``S = B - (R - A)``, the
  credit balance B less every reservation R but the lease's own tranche A
  (for a lease from before per-lease reservations, the account's
  unattributed reservation U). A lease can therefore be exhausted while B
  is well above zero.
- **v2.1.0** (no isolation): ``S = B``.

The other ACTIVE leases of the tenant, ours and other providers', have
accrued too and will be paid from the same credit first if they are
touched first: what they accrued beyond their own tranche (current) or
in all (v2.1.0) is taken off, which gives the conservative "usable" value
of 2.7. So, for a lease L and a denom d it is charged in:

    gone  <=>  accrued_L,d  >=  S_d - sum over the other leases j of unreserved_j,d

The legacy cohort (leases from before per-lease reservations) shares one
tranche, U, and a settlement of any of them draws it down (2.6: settlement
consumes the tranche first): so U is the cohort's, not each member's. For a
legacy L, another legacy lease's accrual is taken off in full (what it pays
from U leaves L's S as surely as what it pays from B); for a modern L, the
cohort takes what it accrued beyond U, together. (Each member given U as
its own tranche made the runway of a tenant with two legacy leases late by
up to U over their rate, and the leases ran unpaid until a withdraw
auto-closed them.)

with accruals in whole seconds since each lease's ``last_settled_at``.
Which rule applies is read off the leases themselves: the current chain
returns ``reservation`` (field 16) on every lease, v2.1.0 on none.

The runway is the first second at which that inequality holds, assuming
every lease keeps accruing at its rate: piecewise linear in time (another
lease's term starts growing once its accrual passes its own tranche), so it
is solved exactly over those breakpoints, in integers, with no search. The
gone test and the runway are the same inequality, so an estimate that has
passed always finds the credit gone: no wake is planned on an estimate the
next read would contradict.

Everything here is a function of the read and ``now``; nothing reads a clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, Collection, Sequence

from messages.chain import CreditAccount, Lease
from messages.coins import coins_to_dict

__all__ = ["LeaseCredit", "judge", "CreditJudge", "RESERVATION_RULE", "BALANCE_RULE", "DEPLETION_HORIZON"]

#: The two rules, by the chain version that spends credit that way (for notes).
RESERVATION_RULE = "reservation-aware rule (current chain)"
BALANCE_RULE = "raw-balance rule (v2.1.0)"

#: Runways further out than this are clamped to it: ten years is beyond any
#: wake, and keeps ``now + horizon`` representable.
DEPLETION_HORIZON = timedelta(days=3650)
_US = 1_000_000
_HORIZON_US = int(DEPLETION_HORIZON.total_seconds()) * _US


class LeaseCredit:
    """One lease of ours, judged on one read.

    A slots class built once per lease per read (every read of every
    tenant); ``detail``, the text of the numbers that decided, is only made
    when asked for (a note shows it for a gone lease, or for the soonest
    runway when the estimate moved).
    """

    __slots__ = ("lease_uuid", "gone", "runway_at", "clamped", "rule", "_detail")

    def __init__(
        self, lease_uuid: str, gone: tuple[str, ...], runway_at: datetime | None, clamped: bool, detail: Any, rule: str
    ) -> None:
        self.lease_uuid = lease_uuid
        #: Denoms it is charged in whose credit is gone now (empty: it is paid for).
        self.gone = gone
        #: When the first of its denoms will be gone; None for a lease that costs nothing.
        self.runway_at = runway_at
        #: Whether ``runway_at`` was clamped to the horizon.
        self.clamped = clamped
        self.rule = rule
        #: a str; the numbers _numbers() writes out; or, for a verdict a ``CreditJudge``
        #: kept, a call that judges the read again at its own time for them
        self._detail = detail

    @property
    def detail(self) -> str:
        """The numbers that decided, per gone denom (or the soonest one), for the notes."""
        d = self._detail
        if type(d) is not str:
            d = self._detail = d() if callable(d) else "; ".join(_numbers(*n) for n in d)
        return d  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeaseCredit):
            return NotImplemented
        return (self.lease_uuid, self.gone, self.runway_at, self.clamped, self.detail, self.rule) == (
            other.lease_uuid, other.gone, other.runway_at, other.clamped, other.detail, other.rule)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"LeaseCredit({self.lease_uuid!r}, gone={self.gone!r}, runway_at={self.runway_at!r}, "
                f"clamped={self.clamped!r}, detail={self.detail!r}, rule={self.rule!r})")


def _numbers(isolated: bool, denom: str, accrued: int, usable: int, balance: int, reserved: int, tranche: int,
             taken: int, op: str) -> str:
    if isolated:
        return (
            f"{denom}: accrued {accrued} {op} spendable {usable} (balance {balance} - (reserved "
            f"{reserved} - own tranche {tranche}) - other leases' unreserved accrual {taken})"
        )
    return f"{denom}: accrued {accrued} {op} balance {balance} - other leases' unsettled accrual {taken}"


def _seconds(now: datetime, since: datetime | None) -> int:
    if since is None or now <= since:
        return 0
    return (now - since) // timedelta(seconds=1)


def _own(lease: Lease, account_unattributed: dict[str, int]) -> dict[str, int]:
    """A lease's own tranche A: its reservation, or the shared U for a legacy lease."""
    if lease.min_lease_duration_at_creation == 0:
        return account_unattributed
    return coins_to_dict(lease.reservation or ())


_MICROSECOND = timedelta(microseconds=1)
#: A time before any read: a judge that has kept nothing holds nothing.
_NEVER = datetime.min.replace(tzinfo=timezone.utc)
_NO_COINS: dict[str, int] = {}


def judge(account: CreditAccount, tenant_leases: Sequence[Lease], ours: Collection[str], now: datetime) -> list[LeaseCredit]:
    """Every lease of ``ours`` among the tenant's ACTIVE leases (of every provider), judged at ``now``."""
    return _judge(account, tenant_leases, ours, now)[0]


def _read_key(account: CreditAccount, tenant_leases: Sequence[Lease]) -> tuple[Any, ...]:
    """What ``judge`` reads of a read: the account's height and counts decide nothing."""
    return (account.balances, account.reserved_amounts, account.unattributed_reserved_amounts, tenant_leases)


class CreditJudge:
    """``judge`` for one tenant, keeping its last read's verdicts for as long as they hold.

    A tenant's credit account and leases change only when a tx touches
    them, so most of its reads (every check between two withdrawals) are the
    same read again, later. Judged again, such a read gives the same
    verdicts until the earliest of: a runway (the lease is gone from it on;
    the runway itself does not move, being the first tick at which the same
    inequality holds), or, for a runway beyond the horizon, the time the
    leases could at the most reach it (its slack over the sum of their
    rates). Until then the kept verdicts are given again, the clamped
    runways moved with ``now`` as ``judge`` would move them and the numbers
    of each made, only if asked for, by judging the read again at that
    time: what it returns is what ``judge`` returns, at a lookup's cost.
    """

    __slots__ = ("_key", "_ours", "_at", "_until", "_verdicts")

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._ours: frozenset[str] = frozenset()
        self._at = self._until = _NEVER
        self._verdicts: list[LeaseCredit] = []

    def __call__(
        self, account: CreditAccount, tenant_leases: Sequence[Lease], ours: Collection[str], now: datetime
    ) -> list[LeaseCredit]:
        key = _read_key(account, tenant_leases)
        if self._at <= now < self._until and key == self._key:
            mine = frozenset(ours)
            if mine == self._ours:
                return [self._again(v, account, tenant_leases, mine, now) for v in self._verdicts]
        else:
            mine = frozenset(ours)
        verdicts, hold_us = _judge(account, tenant_leases, mine, now)
        self._key, self._ours, self._at, self._verdicts = key, mine, now, verdicts
        self._until = now + timedelta(microseconds=hold_us) if hold_us < _HORIZON_US else now + DEPLETION_HORIZON
        return verdicts

    def holds(self, account: CreditAccount, tenant_leases: Sequence[Lease], now: datetime) -> bool:
        """Whether a read at ``now`` would be given the kept verdicts again, for the same leases of ours.

        The check ``__call__`` makes first, without making the verdicts. It
        does not compare the leases of ours (``__call__`` does): the caller
        knows they did not change since the verdicts were made.
        """
        return self._at <= now < self._until and self._key == _read_key(account, tenant_leases)

    @staticmethod
    def _again(v: LeaseCredit, account: CreditAccount, leases: Sequence[Lease], ours: frozenset[str],
               now: datetime) -> LeaseCredit:
        if v.runway_at is None:  # costs nothing: nothing in it depends on the time
            return v
        detail = partial(_detail_at, account, leases, ours, now, v.lease_uuid)
        return LeaseCredit(v.lease_uuid, (), now + DEPLETION_HORIZON if v.clamped else v.runway_at, v.clamped,
                           detail, v.rule)


def _detail_at(account: CreditAccount, leases: Sequence[Lease], ours: frozenset[str], now: datetime,
               lease_uuid: str) -> str:
    """The numbers ``judge`` gives one lease at ``now``: a kept verdict's, made when asked for."""
    return next(v.detail for v in judge(account, leases, ours, now) if v.lease_uuid == lease_uuid)


def _judge(account: CreditAccount, tenant_leases: Sequence[Lease], ours: Collection[str],
           now: datetime) -> tuple[list[LeaseCredit], int]:
    """``judge``, and for how many microseconds from ``now`` the same read would be judged the same.

    (Run for every read of every tenant. What the other leases take from a
    lease's credit is the sum over every lease less the lease's own part, so
    a read costs time in its leases, not in their square; a runway beyond the
    horizon is known from those sums without solving for it. Leases of one
    *shape*, alike in all the rule reads of them (items, last settlement, own
    tranche: a tenant's leases of one SKU, settled by one tx), are worked out
    and judged once. The common case, one denom, goes without sorting, and the
    notes' text is made only if asked.)

    The time it holds is 0 when a lease is gone (its numbers grow with the
    time), or when a runway was solved out to the horizon (how far beyond is
    not known); otherwise the earliest runway, or, for a denom beyond the
    horizon on the continuous line, that line's slack over the sum of every
    lease's rate in the denom, which no line can gain on faster.
    """
    balances = coins_to_dict(account.balances)
    reserved = coins_to_dict(account.reserved_amounts) if account.reserved_amounts else _NO_COINS
    isolated = False
    for lease in tenant_leases:
        if lease.reservation is not None:
            isolated = True
            break
    rule = RESERVATION_RULE if isolated else BALANCE_RULE
    unattributed = coins_to_dict(account.unattributed_reserved_amounts) if isolated else _NO_COINS
    # Per shape: [its rate per denom, microseconds since its last settlement, its own tranche
    # per denom, what one such lease accrued beyond its tranche per denom as (rate, in whole
    # seconds now, on the continuous line at the horizon), how many are listed].
    shapes: dict[tuple[Any, ...], list[Any]] = {}
    table: list[tuple[Lease, list[Any]]] = []  # every listed lease, with its shape
    listed: dict[str, int] = {}  # how often each lease is listed (it is not one of its own others)
    since: dict[datetime, int] = {}  # a tenant's leases mostly share their last settlement (one tx)
    for lease in tenant_leases:
        settled = lease.last_settled_at
        items = lease.items
        key: tuple[Any, ...] = (
            (items, settled, lease.min_lease_duration_at_creation == 0, lease.reservation) if isolated
            else (items, settled)
        )
        shape = shapes.get(key)
        if shape is None:
            if len(items) == 1:  # the common lease: one item, so one denom (rate_per_second's answer)
                price = items[0].locked_price
                rates = {price.denom: price.amount * items[0].quantity}
            else:
                rates = lease.rate_per_second()
            if settled is None:
                elapsed = 0
            else:
                elapsed = since.get(settled, -1)
                if elapsed < 0:
                    elapsed = since[settled] = max(0, (now - settled) // _MICROSECOND)
            legacy = isolated and lease.min_lease_duration_at_creation == 0
            own = _own(lease, unattributed) if isolated else _NO_COINS
            whole = elapsed // _US
            # What it takes from the others' credit, now and at the horizon: beyond its own tranche,
            # or, for a legacy lease, all it accrued (the cohort's U is taken off once, in ``cohort``).
            over: dict[str, tuple[int, int, int]] = {}
            for denom, r in rates.items():
                if r <= 0:
                    continue
                a = 0 if legacy else own.get(denom, 0)
                over[denom] = (r, max(0, r * whole - a), max(0, r * (elapsed + _HORIZON_US) - a * _US))
            shape = shapes[key] = [rates, elapsed, own, over, 0, legacy]
        shape[4] += 1
        table.append((lease, shape))
        listed[lease.uuid] = listed.get(lease.uuid, 0) + 1
    # Per denom, over every lease charged in it: what it accrued beyond its own tranche, in
    # whole seconds now (``taken`` from the others) and on the continuous line at the horizon
    # (``_runway_us``'s test for a runway beyond it); and every lease's rate (how fast the
    # line can climb at most).
    # The legacy cohort's accrual goes to ``cohort_now``/``cohort_far`` instead (its U is taken off
    # once, for the lot).
    over_now: dict[str, int] = {}
    over_far: dict[str, int] = {}
    cohort_now: dict[str, int] = {}
    cohort_far: dict[str, int] = {}
    rate_sum: dict[str, int] = {}
    for _, _, _, over, n, legacy in shapes.values():
        now_sums, far_sums = (cohort_now, cohort_far) if legacy else (over_now, over_far)
        for denom, (r, at_now, at_far) in over.items():
            now_sums[denom] = now_sums.get(denom, 0) + n * at_now
            far_sums[denom] = far_sums.get(denom, 0) + n * at_far
            rate_sum[denom] = rate_sum.get(denom, 0) + n * r
    cohort = (cohort_now, cohort_far, unattributed)
    twice = len(listed) != len(table)
    out = []
    horizon_at: datetime | None = None
    hold = _HORIZON_US
    # A lease listed once: its verdict is its shape's, judged once per read.
    judged: dict[int, tuple[tuple[str, ...], list[tuple[Any, ...]], tuple[int, str, tuple[Any, ...]] | None, int]] = {}
    for lease, shape in table:
        uuid = lease.uuid
        if uuid not in ours:
            continue
        alone = not twice or listed[uuid] == 1
        verdict = judged.get(id(shape)) if alone else None
        if verdict is None:
            verdict = _verdict(lease, shape, table, balances, reserved, isolated, over_now, over_far, rate_sum, twice,
                               cohort)
            if alone:
                judged[id(shape)] = verdict
        gone, details, soonest, held = verdict
        if held < hold:
            hold = held
        if gone:
            out.append(LeaseCredit(uuid, gone, now, False, details, rule))
        elif soonest is None:
            out.append(LeaseCredit(uuid, (), None, False, "costs nothing", rule))
        else:
            wait = soonest[0]
            clamped = wait >= _HORIZON_US
            if clamped:
                if horizon_at is None:
                    horizon_at = now + DEPLETION_HORIZON
                at = horizon_at
            else:
                at = now + timedelta(microseconds=wait)
            out.append(LeaseCredit(uuid, (), at, clamped, (soonest[2],), rule))
    return out, hold


def _verdict(
    lease: Lease, shape: list[Any], table: list[tuple[Lease, list[Any]]], balances: dict[str, int],
    reserved: dict[str, int], isolated: bool, over_now: dict[str, int], over_far: dict[str, int],
    rate_sum: dict[str, int], twice: bool, cohort: tuple[dict[str, int], dict[str, int], dict[str, int]],
) -> tuple[tuple[str, ...], list[tuple[Any, ...]], tuple[int, str, tuple[Any, ...]] | None, int]:
    """One lease of ours: (its gone denoms, their numbers, its soonest runway as (microseconds from
    now, denom, numbers) or None, for how long this holds)."""
    rates, elapsed, own, over, _, legacy = shape
    cohort_now, cohort_far, unattributed = cohort
    if twice:  # its own part is every listing of it, whatever shape each has
        mine_parts: dict[str, tuple[int, int]] = {}
        for j, j_shape in table:
            if j.uuid == lease.uuid:
                for denom, (_, at_now, at_far) in j_shape[3].items():
                    m = mine_parts.get(denom, (0, 0))
                    mine_parts[denom] = (m[0] + at_now, m[1] + at_far)
    gone: list[str] = []
    details: list[tuple[Any, ...]] = []
    soonest: tuple[int, str, tuple[Any, ...]] | None = None
    hold = _HORIZON_US
    for denom, rate in (sorted(rates.items()) if len(rates) > 1 else rates.items()):
        if rate <= 0:
            continue
        balance = balances.get(denom, 0)
        if isolated:
            tranche = own.get(denom, 0)
            spendable = balance - (reserved.get(denom, 0) - tranche)
        else:
            tranche = 0
            spendable = balance
        if twice:
            mine_now, mine_far = mine_parts[denom]
        else:
            _, mine_now, mine_far = over[denom]
        # What the others take: the modern leases' accrual beyond their tranches, and the legacy
        # cohort's: all of it but this lease's own for a legacy lease, what passes U for a modern one.
        modern_now, modern_far = over_now.get(denom, 0), over_far.get(denom, 0)
        legacy_now, legacy_far = cohort_now.get(denom, 0), cohort_far.get(denom, 0)
        if legacy:
            taken = modern_now + legacy_now - mine_now
            others_far = modern_far + legacy_far - mine_far
        else:
            u = unattributed.get(denom, 0)
            taken = modern_now - mine_now + max(0, legacy_now - u)
            others_far = modern_far - mine_far + max(0, legacy_far - u * _US)
        accrued = rate * (elapsed // _US)
        usable = spendable - taken
        numbers = (isolated, denom, accrued, usable, balance, reserved.get(denom, 0), tranche, taken)
        if accrued >= usable:
            gone.append(denom)
            details.append(numbers + (">=",))
            hold = 0
            continue
        far = rate * (elapsed + _HORIZON_US) - spendable * _US + others_far
        if far < 0:
            wait = _HORIZON_US  # beyond the horizon even on the continuous line: nothing to solve
            # Every line climbs at its rate at the most: this one stays below zero at the
            # horizon for as many microseconds as its slack over their sum.
            held = (-far - 1) // rate_sum[denom]
        else:
            wait = held = _runway_us(rate, elapsed, _others(table, lease.uuid, denom, legacy, unattributed), spendable)
            if held >= _HORIZON_US:
                held = 0  # clamped after solving: how far beyond is not known
        if held < hold:
            hold = held
        if soonest is None or wait < soonest[0]:
            soonest = (wait, denom, numbers + ("<",))
    return tuple(gone), details, soonest, hold


#: A term of what the other leases take (``_others``): the leases that pay from one tranche, as
#: (rate, elapsed us) each, and that tranche. Its value at ``s``: max(0, sum of their accruals - tranche).
Term = tuple[list[tuple[int, int]], int]


def _others(table: list[tuple[Lease, list[Any]]], uuid: str, denom: str, legacy: bool,
            unattributed: dict[str, int]) -> list[Term]:
    """What every other lease charged in ``denom`` takes, as terms: a modern lease with its own
    tranche; the legacy cohort with U, one term for a modern lease, each member in full for a legacy one."""
    out: list[Term] = []
    cohort: list[tuple[int, int]] = []
    for j, (j_rates, j_elapsed, j_own, _, _, j_legacy) in table:
        if j.uuid == uuid:  # (a lease listed twice is still itself)
            continue
        r = j_rates.get(denom, 0)
        if r <= 0:
            continue
        if not j_legacy:
            out.append(([(r, j_elapsed)], j_own.get(denom, 0)))
        elif legacy:
            out.append(([(r, j_elapsed)], 0))
        else:
            cohort.append((r, j_elapsed))
    if cohort:
        out.append((cohort, unattributed.get(denom, 0)))
    return out


def _runway_us(rate: int, elapsed: int, others: list[Term], spendable: int) -> int:
    """Microseconds from now until ``rate * s + sum over terms of max(0, sum r_j s_j - a) >= spendable``
    (s in whole seconds, each lease's from its own last settlement).

    Solved on the continuous line first (floors dropped: the continuous sum
    is never below the whole-second one, so the answer is never late), over
    the breakpoints where a term's accrual passes its tranche; then moved
    on to the first tick (a lease completing a second of its own count) at
    which the whole-second sum gets there.
    """
    # Each term on the continuous line: its rate, its accrual now (units*us) and its tranche.
    lines = [(sum(r for r, _ in members), sum(r * e for r, e in members), a) for members, a in others]

    # Beyond the horizon even on the continuous line (which is never below the
    # whole-second sum): the answer is the horizon, found without solving.
    beyond = rate * (elapsed + _HORIZON_US) - spendable * _US
    for r, c, a in lines:
        over = r * _HORIZON_US + c - a * _US
        if over > 0:
            beyond += over
    if beyond < 0:
        return _HORIZON_US

    def total(after: int) -> int:
        s = rate * ((elapsed + after) // _US)
        for members, a in others:
            s += max(0, sum(r * ((e + after) // _US) for r, e in members) - a)
        return s

    # Continuous: value(t) = rate*(elapsed+t) + sum over active terms of (r*t + c - a*1e6), in units*us.
    points = sorted((max(0, -(-(a * _US - c) // r)), r, c, a) for r, c, a in lines)
    t = 0
    slope = rate
    value = rate * elapsed - spendable * _US
    pending = []
    for start, r, c, a in points:
        if start <= 0:
            slope += r
            value += c - a * _US
        else:
            pending.append((start, r, c, a))
    for start, r, c, a in pending:
        at_start = value + slope * (start - t)
        if at_start >= 0:
            break
        t, value = start, at_start
        slope += r
        value += r * t + c - a * _US
    if value < 0:
        t += -(-(-value) // slope)  # ceil(-value / slope)
    if t >= _HORIZON_US:
        return _HORIZON_US
    if total(t) >= spendable:
        return t
    # The whole-second sum only moves when one of the leases completes a second of its
    # own count (each from its own ``last_settled_at``), and it has passed the continuous
    # value at ``t`` once every lease has completed one more: so it gets there at one of
    # the leases' next ticks, the earliest that does. (Stepping by this lease's seconds
    # alone skipped the others' ticks, and the runway came out up to a second late: a
    # read at a time before it already found the credit gone.)
    for tick in sorted({((e + t) // _US + 1) * _US - e
                        for e in (elapsed, *(e for members, _ in others for _, e in members))}):
        if total(tick) >= spendable:
            return min(tick, _HORIZON_US)
    return _HORIZON_US  # unreachable: the last tick is past the continuous crossing
