"""Per-tenant statements of a metered month, as CSV or JSON.

A month's statement is the one of its finalized run, or, before the month is
finalized, of its latest completed run (marked ``final: false``: a later run
may still replace it). Each tenant gets one line per lease and denom (seconds
accrued in the month, accrued amount, withdrawn amount, difference) and its
totals per denom.

Amounts are written as decimal strings, the way Cosmos writes ``Int`` in
JSON: they can exceed what a JSON reader holds exactly in a double.

Both writers stream from the lines' ``(run, tenant, lease, denom)`` key
order, so a month of 100,000 leases is written without being held in memory.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from typing import Any, Iterator, TextIO

from ledger.periods import Month
from ledger.runs import Periods, RunInfo
from ledger.store import Ledger, LedgerError

__all__ = ["StatementRun", "statement_run", "tenant_totals", "lease_lines", "write_csv", "write_json", "CSV_COLUMNS"]

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


def _by_tenant(ledger: Ledger, sr: StatementRun, tenant: str | None) -> Iterator[tuple[str, list[tuple], list[tuple]]]:
    """Per tenant: (tenant, totals rows, lease line rows), merging two tenant-ordered cursors."""
    clause, args = _tenant_clause(tenant)
    with ledger.reader() as reader:
        totals = reader.execute(
            "SELECT tenant, denom, leases, accrued, withdrawn, difference FROM statement_totals "
            f"WHERE run_id = ?{clause} ORDER BY tenant, denom",
            (sr.run.id, *args),
        )
        lines = reader.execute(
            "SELECT tenant, lease_uuid, denom, seconds, accrued, withdrawn FROM statement_lines "
            f"WHERE run_id = ?{clause} ORDER BY tenant, lease_uuid, denom",
            (sr.run.id, *args),
        )
        line = next(lines, None)
        found = False
        for total in _grouped(totals):
            name = total[0][0]
            found = True
            mine = []
            while line is not None and line[0] <= name:
                if line[0] == name:
                    mine.append(line)
                line = next(lines, None)
            yield name, total, mine
    if tenant and not found:
        raise LedgerError(f"tenant {tenant} has nothing in the statement of {sr.month} (run {sr.run.id})")


def _grouped(cursor: Any) -> Iterator[list[tuple]]:
    group: list[tuple] = []
    for row in cursor:
        if group and row[0] != group[0][0]:
            yield group
            group = []
        group.append(row)
    if group:
        yield group


def write_csv(ledger: Ledger, month: Month, out: TextIO, tenant: str | None = None) -> int:
    """The statement as CSV: per tenant its lease lines, then its totals. Returns tenants written."""
    sr = statement_run(ledger, month)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    head = (str(month), sr.run.id, "true" if sr.final else "false")
    n = 0
    for name, totals, lines in _by_tenant(ledger, sr, tenant):
        n += 1
        for _t, lease, denom, seconds, accrued, withdrawn in lines:
            diff = int(accrued) - int(withdrawn)
            w.writerow((*head, name, "lease", lease, denom, seconds, 1, accrued, withdrawn, diff))
        for _t, denom, leases, accrued, withdrawn, difference in totals:
            w.writerow((*head, name, "total", "", denom, "", leases, accrued, withdrawn, difference))
    return n


def write_json(ledger: Ledger, month: Month, out: TextIO, tenant: str | None = None) -> int:
    """The statement as one JSON document, written tenant by tenant. Returns tenants written."""
    sr = statement_run(ledger, month)
    head = {
        "period": str(month),
        "run_id": sr.run.id,
        "final": sr.final,
        "metered_at": sr.run.completed.isoformat().replace("+00:00", "Z") if sr.run.completed else None,
    }
    out.write(json.dumps(head)[:-1] + ', "tenants": [')
    n = 0
    for name, totals, lines in _by_tenant(ledger, sr, tenant):
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
    out.write("]}\n")
    return n
