"""Metering one billing month from the ledger: what each lease used, beside what was withdrawn.

For every lease of this provider active at any time in the month ``[from, to)``:
its accrued seconds inside the month times the sum of its items' locked price
x quantity, per denom, in integers; beside them what settlements actually
moved from that lease to us during the month (withdrawals, and the settlement
a close makes), and the difference (credit that ran out before settlement, or
accrual not yet settled at the month's end). Per-tenant totals follow.

The seconds are counted the way the chain counts them, so a statement equals
the chain's accrual to the last unit. The chain accrues per *whole* second
since ``last_settled_at``, which starts at ``acknowledged_at``
(CHAIN-VERSIONS.md 2.4):

- the current chain keeps the sub-second remainder when it settles, so
  settlements never change the total: settled at ``t``, a lease has accrued
  ``A(t) = floor((min(t, closed_at) - acknowledged_at) / 1 s)`` seconds in
  all;
- v2.1.0 drops the remainder at every settlement, so ``A(t)`` is the sum of
  the whole seconds of each interval between the lease's settlements (the
  instants in ``settlements``), plus those of the interval still open at
  ``t``;
- a lease from v2.1.0 that the chain's upgrade finds active dropped it
  until then and carries it after: the instants are its settlements before
  the first read that showed the current chain (``whole_seconds_until_us``);
  one settled between the upgrade and that read is counted as dropping its
  fraction, so such a lease can come out short by under a second of its
  rate for each (one check interval's worth at the most).

What a lease accrues within a month is ``A(to) - A(from)``; months then add
up to the lease's whole accrual with nothing counted twice or lost,
whatever the sub-second offsets.

A lease the books cannot price (never read from the chain: it has no
known price, or its read keeps failing) holds back only itself: it is left
out of the month, settlements included, and named as held back in the run
(``run_held_leases``) and the statement; every other lease is billed. Its
read comes later: the tick then meters the month again, with it, and does
not finalize a month whose run still holds a lease back (``ledger.tick.decide``).

Streamed, not loaded whole: the month's leases (in uuid order) and its
settlements (summed per lease and denom by SQLite over one clustered range of
the table, exactly: see ``_SETTLEMENTS``) are read as two sorted cursors from
one read snapshot and merged;
lines are written in batches, each its own transaction with the run's
heartbeat. Memory is bounded by the batch size, not by the month.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator, Sequence

from ledger.periods import Month, to_us
from ledger.runs import Periods
from ledger.store import Ledger, rate_of_items
from ledger.tick import Metered, RunFailed

__all__ = ["meter_month", "accrued_seconds", "lines_of_month", "held_back", "MeterResult", "BATCH_LEASES", "Line"]

logger = logging.getLogger(__name__)

#: Leases per committed batch of statement lines: large enough that commits
#: (each an fsync) are a small part of the time, small enough that a batch is
#: well under a second, which is what keeps the run's heartbeat fresh.
BATCH_LEASES = 5_000

_SECOND_US = 1_000_000

#: Held-back leases named in the run's warning (the count is always given).
_NAMED_UNPRICED = 5


@dataclass(frozen=True)
class Line:
    tenant: str
    lease_uuid: str
    denom: str
    seconds: int
    accrued: int
    withdrawn: int


@dataclass(frozen=True)
class MeterResult(Metered):
    leases: int = 0
    lines: int = 0
    tenants: int = 0


def accrued_seconds(
    active_from_us: int,
    closed_at_us: int | None,
    start_us: int,
    end_us: int,
    settled_at_us: Sequence[int] | None = None,
) -> int:
    """Whole seconds a lease accrues in ``[start, end)``: ``A(end) - A(start)`` (see module doc).

    ``settled_at_us``: the instants the lease was settled at, ascending, on a
    chain that drops each settlement's fraction (v2.1.0); None where the
    chain carries it.
    """

    def accrued_by(t: int) -> int:
        stop = t if closed_at_us is None or closed_at_us > t else closed_at_us
        if stop <= active_from_us:
            return 0
        if settled_at_us is None:
            return (stop - active_from_us) // _SECOND_US
        seconds, cursor = 0, active_from_us
        for at in settled_at_us:
            if at > stop:
                break
            if at > cursor:
                seconds += (at - cursor) // _SECOND_US
                cursor = at
        return seconds + (stop - cursor) // _SECOND_US

    return accrued_by(end_us) - accrued_by(start_us)


_LEASES = """
SELECT uuid, tenant, items, priced, active_from_us, closed_at_us, settles_whole_seconds, whole_seconds_until_us
FROM leases
WHERE provider_uuid = :provider AND active_from_us IS NOT NULL AND active_from_us < :to
  AND (closed_at_us IS NULL OR closed_at_us > :from)
ORDER BY uuid
"""

# Per lease and denom, summed by SQLite where that is exact: an amount of at
# most 18 digits fits a 64-bit integer, and SQLite's SUM of integers raises
# "integer overflow" rather than wrap or round. Longer amounts (a Cosmos Int
# is 256-bit) are counted in ``big`` and added in Python from their rows.
_SETTLEMENTS = """
SELECT lease_uuid, MAX(tenant), denom,
       SUM(CASE WHEN LENGTH(amount) <= 18 THEN CAST(amount AS INTEGER) ELSE 0 END),
       SUM(LENGTH(amount) > 18)
FROM settlements WHERE period = :period
GROUP BY lease_uuid, denom ORDER BY lease_uuid, denom
"""

_BIG_SETTLEMENTS = """
SELECT amount FROM settlements
WHERE period = :period AND lease_uuid = :lease AND denom = :denom AND LENGTH(amount) > 18
"""

_SETTLED_AT = """
SELECT DISTINCT at_us FROM settlements WHERE lease_uuid = :lease AND at_us < :to ORDER BY at_us
"""

_SETTLEMENT_ROWS = """
SELECT lease_uuid, tenant, denom, amount, 0 FROM settlements WHERE period = :period ORDER BY lease_uuid, denom
"""


#: Why a lease is held back from a month.
UNPRICED = "no known price: the lease was never read from the chain"
UNREAD = "its read from the chain keeps failing"


def held_back(reader, month: Month, provider: str, until: datetime | None = None) -> dict[str, tuple[str, str]]:  # type: ignore[no-untyped-def]
    """The leases ``month`` holds back, lease -> (tenant, why): unpriced ones active in it, and unread ones.

    An unread lease may have no row at all (its first read failed) and its
    settlements still came with withdraw pages: they are held back with it.
    """
    end = to_us(month.end if until is None else min(until, month.end))
    params = {"provider": provider, "to": end, "from": to_us(month.start), "period": str(month)}
    held = {
        uuid: (tenant, UNPRICED)
        for uuid, tenant in reader.execute(
            "SELECT uuid, tenant FROM leases WHERE provider_uuid = :provider AND priced = 0 "
            "AND active_from_us IS NOT NULL AND active_from_us < :to "
            "AND (closed_at_us IS NULL OR closed_at_us > :from)",
            params,
        )
    }
    for uuid, tenant in reader.execute(
        "SELECT i.lease_uuid, i.tenant FROM lease_issues i LEFT JOIN leases l ON l.uuid = i.lease_uuid "
        "WHERE i.kind = 'unread' AND (l.uuid IS NULL OR l.priced = 0) "
        "AND (i.period = :period OR EXISTS (SELECT 1 FROM settlements s WHERE s.period = :period AND s.lease_uuid = i.lease_uuid))",
        params,
    ):
        held.setdefault(uuid, (tenant, UNREAD))
    return held


def _settled_sums(reader, month: Month) -> Iterator[tuple[str, str, str, int]]:  # type: ignore[no-untyped-def]
    """(lease, tenant, denom, amount) of the month, in lease order, summed per lease and denom.

    Raises ``_SumOverflow`` where a 64-bit sum overflowed (the caller sums in Python then).
    """
    params = {"period": str(month)}
    rows = None
    while True:
        try:
            # execute() already steps to the first row, so it can overflow too.
            if rows is None:
                rows = reader.execute(_SETTLEMENTS, params)
            row = next(rows, None)
        except sqlite3.OperationalError as exc:
            if "overflow" in str(exc):
                raise _SumOverflow() from exc
            raise
        if row is None:
            return
        lease, tenant, denom, amount, big = row
        if big:
            for (text,) in reader.execute(_BIG_SETTLEMENTS, {**params, "lease": lease, "denom": denom}):
                amount += int(text)
        yield lease, tenant, denom, amount


class _SumOverflow(Exception):
    """A 64-bit sum overflowed after rows were already used: the month restarts summing in Python."""


def _summed_in_python(rows) -> Iterator[tuple[str, str, str, int]]:  # type: ignore[no-untyped-def]
    key = None
    total = 0
    tenant = ""
    for lease, t, denom, amount, _ in rows:
        if (lease, denom) != key:
            if key is not None:
                yield key[0], tenant, key[1], total
            key, total, tenant = (lease, denom), 0, t
        total += int(amount)
    if key is not None:
        yield key[0], tenant, key[1], total


def lines_of_month(  # type: ignore[no-untyped-def]
    reader, month: Month, provider: str, exact_sums: bool = False, until: datetime | None = None,
    held: frozenset[str] | set[str] = frozenset(),
) -> Iterator[tuple[str, list[Line]]]:
    """Per lease (uuid order): its statement lines for ``month``. A merge of two sorted cursors.

    ``exact_sums`` sums settlements in Python row by row (after a 64-bit sum overflowed).
    ``until``: the month so far, accrued up to this instant (a provisional statement).
    ``held``: leases left out, their settlements too (``held_back``).
    """
    start, end = to_us(month.start), to_us(month.end if until is None else min(until, month.end))
    leases = reader.execute(_LEASES, {"provider": provider, "to": end, "from": start})
    if exact_sums:
        settlements = _summed_in_python(reader.execute(_SETTLEMENT_ROWS, {"period": str(month)}))
    else:
        settlements = _settled_sums(reader, month)
    pending = next(settlements, None)

    def withdrawn_for(uuid: str) -> tuple[dict[str, int], str]:
        """Consume the settlements of ``uuid`` (the cursor is at or before it)."""
        nonlocal pending
        paid: dict[str, int] = {}
        tenant = ""
        while pending is not None and pending[0] == uuid:
            _, tenant, denom, amount = pending
            paid[denom] = paid.get(denom, 0) + amount
            pending = next(settlements, None)
        return paid, tenant

    def settled_only_before(uuid: str | None) -> Iterator[tuple[str, list[Line]]]:
        """Leases settled this month that were not active in it (a lease we never learned about)."""
        while pending is not None and (uuid is None or pending[0] < uuid):
            other = pending[0]
            paid, tenant = withdrawn_for(other)
            if other not in held:
                yield other, [Line(tenant, other, d, 0, 0, a) for d, a in sorted(paid.items())]

    for uuid, tenant, items, _priced, active_from, closed_at, whole_seconds, whole_until in leases:
        yield from settled_only_before(uuid)
        paid, _ = withdrawn_for(uuid)
        if uuid in held:
            continue
        instants = None
        if whole_seconds:
            # The settlements that dropped their fraction: all of them on v2.1.0, those before the
            # read that found the chain upgraded on a lease from before it (the current chain carries
            # the fraction from the last of them on, which is what counting on from it does).
            to = end if whole_until is None else min(end, whole_until)
            instants = [at for (at,) in reader.execute(_SETTLED_AT, {"lease": uuid, "to": to})]
        seconds = accrued_seconds(active_from, closed_at, start, end, instants)
        rate = rate_of_items(items)
        out = []
        for denom in sorted(set(rate) | set(paid)):
            accrued = rate.get(denom, 0) * seconds
            withdrawn = paid.get(denom, 0)
            if accrued or withdrawn:
                out.append(Line(tenant, uuid, denom, seconds, accrued, withdrawn))
        yield uuid, out
    yield from settled_only_before(None)


def meter_month(
    ledger: Ledger,
    month: Month,
    now: datetime,
    *,
    periods: Periods | None = None,
    only_if_unmetered: bool = False,
    batch_leases: int = BATCH_LEASES,
) -> MeterResult:
    """Meter ``month`` at ``now`` into a new run; the tick's ``Options.execute``.

    Raises ``MonthFinalized``/``MonthNotEnded`` (no run recorded),
    ``MonthBusy`` (another process meters it), ``AlreadyMetered`` (with
    ``only_if_unmetered``), or ``RunFailed`` naming the failed run.
    """
    periods = periods or Periods(ledger)
    run_id = periods.start_run(month, now, only_if_unmetered=only_if_unmetered)
    try:
        leases, lines, tenants, held = _meter(ledger, periods, month, now, run_id, batch_leases)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        try:
            periods.fail(month, run_id, now, error)
        except Exception as fail_exc:  # the run stays 'running'; the next tick reclaims it
            logger.error("run %s of %s failed (%s) and could not be marked failed: %s", run_id, month, error, fail_exc)
        raise RunFailed(run_id, f"run {run_id} failed: {error}") from exc
    warning = ""
    try:
        periods.release(month, run_id)
    except Exception as exc:
        warning = (
            f"run {run_id} completed but could not give the lock of {month} back ({exc}); "
            f"the next tick clears it"
        )
    logger.info("metered %s: run %s, %d leases, %d tenants, %d lines", month, run_id, leases, tenants, lines)
    return MeterResult(
        run_id=run_id, warning=warning, lock_released=not warning, leases=leases, lines=lines, tenants=tenants,
        held=held,
    )


_INSERT_LINE = (
    "INSERT INTO statement_lines (run_id, tenant, lease_uuid, denom, seconds, accrued, withdrawn) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_TOTAL = (
    "INSERT INTO statement_totals (run_id, tenant, denom, leases, accrued, withdrawn, difference) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def _meter(
    ledger: Ledger, periods: Periods, month: Month, now: datetime, run_id: str, batch_leases: int
) -> tuple[int, int, int, int]:
    try:
        return _meter_once(ledger, periods, month, now, run_id, batch_leases, exact_sums=False)
    except _SumOverflow:
        logger.info("metering %s: a 64-bit settlement sum overflowed; summing row by row", month)
        with ledger.transaction() as c:
            c.execute("DELETE FROM statement_lines WHERE run_id = ?", (run_id,))
        return _meter_once(ledger, periods, month, now, run_id, batch_leases, exact_sums=True)


def _meter_once(
    ledger: Ledger, periods: Periods, month: Month, now: datetime, run_id: str, batch_leases: int, exact_sums: bool
) -> tuple[int, int, int, int]:
    provider = ledger.provider_uuid
    with ledger.reader() as reader:
        held = held_back(reader, month, provider)
        if held:
            shown = ", ".join(sorted(held)[:_NAMED_UNPRICED])
            logger.warning("metering %s: %d lease(s) held back (%s%s); every other lease is metered",
                           month, len(held), shown, " ..." if len(held) > _NAMED_UNPRICED else "")
        leases = lines = 0
        batch: list[tuple[object, ...]] = []
        in_batch = 0
        for _uuid, lease_lines in lines_of_month(reader, month, provider, exact_sums, held=set(held)):
            leases += 1
            in_batch += 1
            for ln in lease_lines:
                batch.append((run_id, ln.tenant, ln.lease_uuid, ln.denom, ln.seconds, str(ln.accrued), str(ln.withdrawn)))
            if in_batch >= batch_leases:
                with ledger.transaction() as c:
                    c.executemany(_INSERT_LINE, batch)
                    periods.heartbeat(month, run_id)
                lines += len(batch)
                batch.clear()
                in_batch = 0
    with ledger.transaction() as c:
        c.executemany(_INSERT_LINE, batch)
        lines += len(batch)
        c.executemany(
            "INSERT INTO run_held_leases (run_id, lease_uuid, tenant, reason) VALUES (?, ?, ?, ?)",
            ((run_id, uuid, tenant, why) for uuid, (tenant, why) in sorted(held.items())),
        )
        tenants = _write_totals(c, run_id)
        periods.complete(month, run_id, now, leases)
    return leases, lines, tenants, len(held)


def _write_totals(c, run_id: str) -> int:  # type: ignore[no-untyped-def]
    """Per tenant per denom, streamed from the lines' (tenant, lease, denom) key order."""
    tenants = 0
    current: str | None = None
    sums: dict[str, list[int]] = {}
    leases_by_denom: dict[str, set[str]] = {}
    rows: list[tuple[object, ...]] = []

    def flush() -> None:
        for denom in sorted(sums):
            accrued, withdrawn = sums[denom]
            rows.append(
                (run_id, current, denom, len(leases_by_denom[denom]), str(accrued), str(withdrawn), str(accrued - withdrawn))
            )

    cursor = c.execute(
        "SELECT tenant, lease_uuid, denom, accrued, withdrawn FROM statement_lines WHERE run_id = ? "
        "ORDER BY tenant, lease_uuid, denom",
        (run_id,),
    )
    for tenant, lease_uuid, denom, accrued, withdrawn in cursor:
        if tenant != current:
            if current is not None:
                flush()
            current, sums, leases_by_denom = tenant, {}, {}
            tenants += 1
            if len(rows) >= 10_000:
                c.executemany(_INSERT_TOTAL, rows)
                rows.clear()
        s = sums.setdefault(denom, [0, 0])
        s[0] += int(accrued)
        s[1] += int(withdrawn)
        leases_by_denom.setdefault(denom, set()).add(lease_uuid)
    if current is not None:
        flush()
    c.executemany(_INSERT_TOTAL, rows)
    return tenants
