"""Per-tenant statements of a month, as CSV or JSON.

A month's statement is the one of its finalized run, or, before the month is
finalized, of its latest completed run (marked ``final: false``: a later run
may still replace it). Each tenant gets one line per lease and denom (seconds
accrued in the month, accrued amount, withdrawn amount, difference) and its
totals per denom.

The month under way has no run (it is metered once it has ended), so its
statement is its figures so far, metered in memory up to ``now`` (or the
books' latest fact, where an embedded chain's clock has run ahead) and marked
provisional (``run_id`` "provisional" in CSV, ``"provisional": true`` in
JSON): an operator, or a newcomer after the demo, sees what the month has
come to without anything being stored. Everything that can refuse a
statement (no run, an unknown tenant) is checked before its first byte.

What a statement cannot show is said beside it (``notes``): the leases its
run held back (``ledger.metering``: never read from the chain, so no price),
and what the books lack of a lease of the month (``messages.ledger.LeaseIssue``:
a close found after the fact whose tx the node cannot find or search, a
settlement refused). CSV gives each a row (line = ``held`` or the issue's
kind), JSON a ``notes`` list with the reason.

Amounts are written as decimal strings, the way Cosmos writes ``Int`` in
JSON: they can exceed what a JSON reader holds exactly in a double.

Both writers stream a run's lines from their ``(run, tenant, lease, denom)``
key order, so a month of 100,000 leases is written without being held in
memory (a provisional statement is held: it is sorted by tenant first).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator, TextIO

from ledger.metering import held_back, lines_of_month
from ledger.periods import Month, iso
from ledger.runs import Periods, RunInfo
from ledger.store import Ledger, LedgerError

__all__ = [
    "StatementRun",
    "Statement",
    "statement_run",
    "statement",
    "tenant_totals",
    "lease_lines",
    "write_csv",
    "write_json",
    "CSV_COLUMNS",
    "PROVISIONAL",
    "HELD",
]

#: The ``line`` of a lease a run held back (CSV), and a note's kind (JSON).
HELD = "held"

#: The run_id column of a provisional statement's rows.
PROVISIONAL = "provisional"

CSV_COLUMNS = (
    "period",
    "run_id",
    "final",
    "tenant",
    "line",
    "lease_uuid",
    "denom",
    "seconds",
    "leases",
    "accrued",
    "withdrawn",
    "difference",
)


@dataclass(frozen=True)
class StatementRun:
    month: Month
    run: RunInfo
    #: The month is finalized over this run: the statement never changes.
    final: bool


def statement_run(ledger: Ledger, month: Month) -> StatementRun:
    """The run whose lines are ``month``'s statement. Raises ``LedgerError`` if none."""
    periods = Periods(ledger)
    with ledger.read() as c:
        row = c.execute("SELECT status, finalized_run FROM billing_periods WHERE period = ?", (str(month),)).fetchone()
        if row is None:
            raise LedgerError(f"no billing period {month}: it has not been metered (meter --period {month})")
        status, finalized_run = row
        if finalized_run:
            run = periods.run(finalized_run)
        else:
            latest = c.execute(
                "SELECT id FROM runs WHERE period = ? AND status = 'completed' ORDER BY seq DESC LIMIT 1", (str(month),)
            ).fetchone()
            run = periods.run(latest[0]) if latest else None
    if run is None:
        raise LedgerError(
            f"{month} ({status}) has no completed run yet: the tick meters it after its grace window, "
            f"or meter it now (meter --period {month})"
        )
    return StatementRun(month, run, final=bool(finalized_run))


def _tenant_clause(tenant: str | None) -> tuple[str, tuple[Any, ...]]:
    return (" AND tenant = ?", (tenant,)) if tenant else ("", ())


def tenant_totals(ledger: Ledger, month: Month) -> dict[str, dict[str, tuple[int, int]]]:
    """tenant -> denom -> (accrued, withdrawn) of ``month``'s statement (small months, tests)."""
    run = statement_run(ledger, month).run
    out: dict[str, dict[str, tuple[int, int]]] = {}
    with ledger.read() as c:
        for tenant, denom, accrued, withdrawn in c.execute(
            "SELECT tenant, denom, accrued, withdrawn FROM statement_totals WHERE run_id = ? ORDER BY tenant, denom",
            (run.id,),
        ):
            out.setdefault(tenant, {})[denom] = (int(accrued), int(withdrawn))
    return out


def lease_lines(ledger: Ledger, run_id: str, tenant: str | None = None) -> Iterator[tuple[str, str, str, int, int, int]]:
    """(tenant, lease, denom, seconds, accrued, withdrawn), in tenant, lease, denom order."""
    clause, args = _tenant_clause(tenant)
    with ledger.reader() as reader:
        for t, lease, denom, seconds, accrued, withdrawn in reader.execute(
            "SELECT tenant, lease_uuid, denom, seconds, accrued, withdrawn FROM statement_lines "
            f"WHERE run_id = ?{clause} ORDER BY tenant, lease_uuid, denom",
            (run_id, *args),
        ):
            yield t, lease, denom, seconds, int(accrued), int(withdrawn)


#: Per tenant: (tenant, totals rows, lease line rows), the rows as the statement tables hold them:
#: totals (tenant, denom, leases, accrued, withdrawn, difference), lines (tenant, lease, denom, seconds,
#: accrued, withdrawn), amounts as decimal text.
Groups = Iterator[tuple[str, list[tuple], list[tuple]]]


@dataclass(frozen=True)
class Statement:
    """What a writer prints: whose month, from which run (or provisional), and its tenants."""

    month: Month
    #: The run the lines are of; "" for a provisional statement.
    run_id: str
    final: bool
    #: Set for the month under way: its figures up to this instant, metered by no run.
    provisional_until: datetime | None
    metered_at: datetime | None
    groups: Groups
    #: (tenant, lease, kind, why): leases held back (kind ``held``) and the books' issues of the month
    notes: tuple[tuple[str, str, str, str], ...] = ()


def statement(ledger: Ledger, month: Month, now: datetime, tenant: str | None = None) -> Statement:
    """``month``'s statement at ``now``: its run's, or for the month under way its figures so far.

    Raises ``LedgerError`` (no statement, or nothing for ``tenant``) before anything is written.
    """
    if now < month.end:
        # The books' own time may be ahead of the wall clock (an embedded
        # chain's accelerated clock): so far is up to the latest fact, or a
        # settlement recorded later than now would outweigh the accrual.
        last = ledger.last_fact_at()
        until = min(max(now, last), month.end) if last is not None else now
        with ledger.reader() as reader:
            held = held_back(reader, month, ledger.provider_uuid, until)
        groups = _provisional(ledger, month, until, tenant, set(held))
        notes = [(t, u, HELD, why) for u, (t, why) in held.items()]
        return Statement(month, "", False, until, None, groups, _notes(ledger, month, notes, tenant))
    sr = statement_run(ledger, month)
    if tenant:
        with ledger.read() as c:
            found = c.execute(
                "SELECT 1 FROM statement_totals WHERE run_id = ? AND tenant = ? LIMIT 1", (sr.run.id, tenant)
            ).fetchone()
        if found is None:
            raise _nothing_for(tenant, f"the statement of {month} (run {sr.run.id})")
    with ledger.read() as c:
        held = c.execute(
            "SELECT tenant, lease_uuid, reason FROM run_held_leases WHERE run_id = ? ORDER BY lease_uuid", (sr.run.id,)
        ).fetchall()
    notes = _notes(ledger, month, [(t, u, HELD, why) for t, u, why in held], tenant)
    return Statement(month, sr.run.id, sr.final, None, sr.run.completed, _by_tenant(ledger, sr.run.id, tenant), notes)


def _notes(ledger: Ledger, month: Month, held: list[tuple[str, str, str, str]], tenant: str | None) -> tuple[tuple[str, str, str, str], ...]:
    """The held-back leases and the books' issues of ``month``, of ``tenant`` if given, by lease."""
    seen = {u for _, u, _, _ in held}
    issues = [(i.tenant, i.lease_uuid, i.kind, i.detail) for i in ledger.lease_issues(str(month))
              if not (i.kind == "unread" and i.lease_uuid in seen)]
    return tuple(sorted(n for n in held + issues if tenant is None or n[0] == tenant))


def _nothing_for(tenant: str, where: str) -> LedgerError:
    return LedgerError(f"tenant {tenant} has nothing in {where}: is that the tenant's address?")


def _provisional(ledger: Ledger, month: Month, now: datetime, tenant: str | None, held: set[str]) -> Groups:
    """The month under way metered up to ``now`` in memory: nothing is stored, no run is made."""
    if now < month.start:
        raise LedgerError(f"{month} has not begun: it begins {iso(month.start)}")
    per_tenant: dict[str, list[tuple]] = {}
    with ledger.reader() as reader:
        for _uuid, lines in lines_of_month(reader, month, ledger.provider_uuid, exact_sums=True, until=now, held=held):
            for ln in lines:
                if tenant is None or ln.tenant == tenant:
                    per_tenant.setdefault(ln.tenant, []).append(
                        (ln.tenant, ln.lease_uuid, ln.denom, ln.seconds, str(ln.accrued), str(ln.withdrawn))
                    )
    if tenant and tenant not in per_tenant:
        raise _nothing_for(tenant, f"{month} so far")
    groups = []
    for name in sorted(per_tenant):
        lines = sorted(per_tenant[name], key=lambda r: (r[1], r[2]))
        sums: dict[str, list[Any]] = {}
        for _t, lease, denom, _seconds, accrued, withdrawn in lines:
            entry = sums.setdefault(denom, [set(), 0, 0])
            entry[0].add(lease)
            entry[1] += int(accrued)
            entry[2] += int(withdrawn)
        totals = [
            (name, denom, len(leases), str(a), str(w), str(a - w)) for denom, (leases, a, w) in sorted(sums.items())
        ]
        groups.append((name, totals, lines))
    return iter(groups)


def _by_tenant(ledger: Ledger, run_id: str, tenant: str | None) -> Groups:
    """Per tenant of a run, merging two tenant-ordered cursors."""
    clause, args = _tenant_clause(tenant)
    with ledger.reader() as reader:
        totals = reader.execute(
            "SELECT tenant, denom, leases, accrued, withdrawn, difference FROM statement_totals "
            f"WHERE run_id = ?{clause} ORDER BY tenant, denom",
            (run_id, *args),
        )
        lines = reader.execute(
            "SELECT tenant, lease_uuid, denom, seconds, accrued, withdrawn FROM statement_lines "
            f"WHERE run_id = ?{clause} ORDER BY tenant, lease_uuid, denom",
            (run_id, *args),
        )
        line = next(lines, None)
        for total in _grouped(totals):
            name = total[0][0]
            mine = []
            while line is not None and line[0] <= name:
                if line[0] == name:
                    mine.append(line)
                line = next(lines, None)
            yield name, total, mine


def _grouped(cursor: Any) -> Iterator[list[tuple]]:
    group: list[tuple] = []
    for row in cursor:
        if group and row[0] != group[0][0]:
            yield group
            group = []
        group.append(row)
    if group:
        yield group


def write_csv(st: Statement, out: TextIO) -> int:
    """The statement as CSV: per tenant its lease lines, then its totals. Returns tenants written.

    A provisional statement has ``provisional`` in its run_id column.
    """
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    head = (str(st.month), st.run_id or PROVISIONAL, "true" if st.final else "false")
    n = 0
    for name, totals, lines in st.groups:
        n += 1
        for _t, lease, denom, seconds, accrued, withdrawn in lines:
            diff = int(accrued) - int(withdrawn)
            w.writerow((*head, name, "lease", lease, denom, seconds, 1, accrued, withdrawn, diff))
        for _t, denom, leases, accrued, withdrawn, difference in totals:
            w.writerow((*head, name, "total", "", denom, "", leases, accrued, withdrawn, difference))
    for name, lease, kind, _why in st.notes:
        w.writerow((*head, name, kind, lease, "", "", "", "", "", ""))
    return n


def write_json(st: Statement, out: TextIO) -> int:
    """The statement as one JSON document, written tenant by tenant. Returns tenants written."""
    head = {
        "period": str(st.month),
        "run_id": st.run_id or None,
        "final": st.final,
        "provisional": st.provisional_until is not None,
        "as_of": iso(st.provisional_until) or None,
        "metered_at": iso(st.metered_at) or None,
    }
    out.write(json.dumps(head)[:-1] + ', "tenants": [')
    n = 0
    for name, totals, lines in st.groups:
        leases: dict[str, dict[str, Any]] = {}
        for _t, lease, denom, seconds, accrued, withdrawn in lines:
            entry = leases.setdefault(lease, {"lease_uuid": lease, "seconds": seconds, "amounts": []})
            entry["amounts"].append(
                {
                    "denom": denom,
                    "accrued": accrued,
                    "withdrawn": withdrawn,
                    "difference": str(int(accrued) - int(withdrawn)),
                }
            )
        doc = {
            "tenant": name,
            "totals": [
                {"denom": d, "leases": k, "accrued": a, "withdrawn": w, "difference": diff}
                for _t, d, k, a, w, diff in totals
            ],
            "leases": list(leases.values()),
        }
        out.write(("" if n == 0 else ", ") + json.dumps(doc))
        n += 1
    notes = [{"tenant": t, "lease_uuid": u, "kind": k, "reason": why} for t, u, k, why in st.notes]
    out.write('], "notes": ' + json.dumps(notes) + "}\n")
    return n
