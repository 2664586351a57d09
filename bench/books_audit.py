"""The books against the chain: closes missing from the books, units lost or doubled per denom.

For a fault run on the embedded chain (issue 13's: errors on every query,
kill -9 restarts, websocket cuts), which ends by comparing what the ledger
holds with what the chain model did. The chain is the record:

- **units**: for every lease of the provider, what the chain moved from it
  to the provider over its life (``BillingModel.lease_totals``: its paid
  total, per denom) against what the ledger booked as its settlements (every
  kind, every tx). More in the books is *doubled*, less is *lost*; a lease
  the books report they lack (``lease_issues``: a close whose tx the node
  cannot find or search, a refused settlement, a lease never read) is
  counted apart as *reported*, since the books say so instead of silently
  under-booking;
- **closes**: every lease the chain closed after it was active must be in
  the books closed at the chain's own ``closed_at`` (the lease read), else
  it is *missing* (again, unless the books report it).

Use it at the end of a run, with the sidecar stopped (or its ledger writer
idle) so that every fact it took is written::

    from bench.books_audit import audit
    result = audit(ledger, model, provider_uuid)
    print(result.table())

Nothing here writes to the ledger or the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chain.model import BillingModel
from ledger.periods import to_us
from ledger.store import Ledger

__all__ = ["BooksAudit", "audit"]


@dataclass
class BooksAudit:
    """What the books lack or hold twice, against the chain."""

    #: denom -> units the chain moved that the books do not hold (unreported)
    lost: dict[str, int] = field(default_factory=dict)
    #: denom -> units the books hold beyond what the chain moved
    doubled: dict[str, int] = field(default_factory=dict)
    #: denom -> units missing from leases the books report they lack
    reported: dict[str, int] = field(default_factory=dict)
    #: leases the chain closed that the books do not hold closed at the chain's time (unreported)
    closes_missing: list[str] = field(default_factory=list)
    #: the same, for leases the books report
    closes_reported: list[str] = field(default_factory=list)
    #: leases the chain closed after they were active
    closes: int = 0
    #: per lease, denom -> (chain, books), where they differ
    differences: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.lost and not self.doubled and not self.closes_missing

    def table(self) -> str:
        denoms = sorted(set(self.lost) | set(self.doubled) | set(self.reported)) or ["-"]
        lines = [f"{'denom':<8} {'lost':>12} {'doubled':>12} {'reported':>12}"]
        for d in denoms:
            lines.append(f"{d:<8} {self.lost.get(d, 0):>12} {self.doubled.get(d, 0):>12} {self.reported.get(d, 0):>12}")
        lines.append(f"closes: {self.closes}, missing from the books: {len(self.closes_missing)}, "
                     f"reported by the books: {len(self.closes_reported)}")
        return "\n".join(lines)


def _add(into: dict[str, int], denom: str, amount: int) -> None:
    into[denom] = into.get(denom, 0) + amount


def audit(ledger: Ledger, model: BillingModel, provider_uuid: str) -> BooksAudit:
    """Compare ``ledger``'s books of ``provider_uuid`` with what ``model`` (the chain) did."""
    result = BooksAudit()
    with ledger.read() as c:
        booked: dict[str, dict[str, int]] = {}
        for lease, denom, amount in c.execute("SELECT lease_uuid, denom, amount FROM settlements"):
            _add(booked.setdefault(lease, {}), denom, int(amount))
        closed_at = dict(c.execute("SELECT uuid, closed_at_us FROM leases WHERE closed_at_us IS NOT NULL"))
        reported = {u for (u,) in c.execute("SELECT DISTINCT lease_uuid FROM lease_issues")}
        reported |= {u for (u,) in c.execute("SELECT DISTINCT lease_uuid FROM run_held_leases")}
    for lease in model.all_leases():
        if lease.provider_uuid != provider_uuid:
            continue
        paid = model.lease_totals(lease.uuid)[1]
        books = booked.get(lease.uuid, {})
        for denom in sorted(set(paid) | set(books)):
            chain, held = paid.get(denom, 0), books.get(denom, 0)
            if chain == held:
                continue
            result.differences.setdefault(lease.uuid, {})[denom] = (chain, held)
            if held > chain:
                _add(result.doubled, denom, held - chain)
            elif lease.uuid in reported:
                _add(result.reported, denom, chain - held)
            else:
                _add(result.lost, denom, chain - held)
        if lease.state == "CLOSED" and lease.acknowledged_at is not None and lease.closed_at is not None:
            result.closes += 1
            if closed_at.get(lease.uuid) != to_us(lease.closed_at):
                (result.closes_reported if lease.uuid in reported else result.closes_missing).append(lease.uuid)
    return result
