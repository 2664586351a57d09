"""The audit of one run: the books beside the chain, to the unit, and every closure on time.

``audit(world)`` takes an ``audit.world.AuditWorld`` that has run to the
month's end, settled it (``end_month``) and metered it (``meter``), and checks:

- **the withdraws**: the first that moved anything took more than two txs
  (pages with the cursor, named batches without), and those at the month's
  end settled every ACTIVE lease to it;
- **books = chain, per lease and per denom**: the March statement's accrued
  against what the chain accrued (``BillingModel.lease_totals``, after the
  month's-end withdraw settled every lease to it); its withdrawn against
  what the chain paid before that withdraw (which is April's, by its
  instant); and everything the books hold as settled against everything
  the chain paid;
- **closures on time**: every stretch during which a lease was exhausted by
  the chain's own test ended within ``credit_check_zero_grace_period`` +
  ``credit_check_retry_interval`` + ``SLACK`` (closed by us or by the
  chain's auto-close, or its credit came back);
- **no lease with credit closed**: every lease we closed was gone when we
  closed it, by the chain's test or counting what the tenant's other leases
  are owed (the rule the sidecar applies, CHAIN-VERSIONS.md 2.7); no lease
  of a funded tenant was closed or exhausted; every lease never exhausted
  was paid all it accrued;
- **the two failing leases**: reported as failing while their payouts were
  blocked, no longer once a withdraw settled them, withdrawn after the
  unblock, paid in full;
- the PENDING lease the chain expired is ended in the books at its expiry (from its read), never billed;
- the tenants with a PENDING lease elsewhere: on the current chain our
  lease was paid their credit but that lease's tranche, which they keep;
  on v2.1.0 all of it.

The result (``AuditResult``) renders as tables (``str()``): one row per
check (check, expected, found, ok), the totals per denom, then the failing
leases' story and the first mismatches; the tests assert its rows with that
text as the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterable

from audit.world import (
    BLOCKED,
    END,
    FUNDED,
    MONTH,
    RESERVED,
    SLACK,
    TENANT_CLOSES,
    AuditWorld,
)
from chain.model import CREDIT_EXHAUSTED_REASON, MAX_BATCH_LEASE_SIZE
from ledger.periods import from_us, to_us
from ledger.statements import lease_lines, statement_run

__all__ = ["Row", "DenomTotals", "AuditResult", "audit"]

#: Mismatches shown in full below the tables, at most.
SHOWN = 8


@dataclass(frozen=True)
class Row:
    """One check: what it is, what it expects, what it found, and whether that is what it expects."""

    check: str
    expected: str
    found: str
    ok: bool


@dataclass(frozen=True)
class DenomTotals:
    """One denom's sums over our leases: the books' and the chain's, side by side."""

    denom: str
    books_accrued: int
    chain_accrued: int
    books_withdrawn: int
    chain_paid_in_month: int
    books_settled: int
    chain_paid: int

    @property
    def unpaid(self) -> int:
        """What the chain's leases accrued and were never paid: credit that ran out."""
        return self.chain_accrued - self.chain_paid


@dataclass
class AuditResult:
    """What an audit found; ``str()`` is the table a failing test shows."""

    version: str
    leases: int
    rows: list[Row] = field(default_factory=list)
    denoms: list[DenomTotals] = field(default_factory=list)
    story: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def failed(self) -> list[str]:
        return [r.check for r in self.rows if not r.ok]

    def __str__(self) -> str:
        title = f"system audit, {self.version} chain, {self.leases:,} leases of ours: {'ok' if self.ok else 'FAILED'}"
        checks = [(r.check, r.expected, r.found, "ok" if r.ok else "NO") for r in self.rows]
        parts = [title, _table(("check", "expected", "found", "ok"), checks)]
        parts.append(
            _table(
                ("denom", "books accrued", "chain accrued", "books withdrawn (Mar)", "chain paid (Mar)",
                 "books settled (all)", "chain paid (all)", "unpaid"),
                [
                    (d.denom, *(f"{v:,}" for v in (d.books_accrued, d.chain_accrued, d.books_withdrawn,
                                                    d.chain_paid_in_month, d.books_settled, d.chain_paid, d.unpaid)))
                    for d in self.denoms
                ],
                right=True,
            )
        )
        if self.story:
            parts.append("\n".join(self.story))
        if self.mismatches:
            shown = f", the first {SHOWN}" if len(self.mismatches) > SHOWN else ""
            parts.append(f"mismatches ({len(self.mismatches)}{shown}):\n" + "\n".join(f"  {m}" for m in self.mismatches[:SHOWN]))
        return "\n\n".join(parts)


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]], right: bool = False) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]

    def line(cells: Iterable[str]) -> str:
        out = []
        for i, (cell, w) in enumerate(zip(cells, widths)):
            out.append(str(cell).rjust(w) if right and i else str(cell).ljust(w))
        return " | ".join(out).rstrip()

    return "\n".join([line(head), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)])


def _when(t: datetime | None) -> str:
    return t.strftime("%H:%M:%S.%f")[:12] if t else "-"


def _nonzero(amounts: dict[str, int]) -> dict[str, int]:
    return {d: a for d, a in amounts.items() if a}


def _compare(what: str, books: dict[str, dict[str, int]], chain: dict[str, dict[str, int]], out: list[str]) -> int:
    """Lease-denom pairs where the books and the chain differ (each described in ``out``)."""
    bad = 0
    for uuid in sorted(set(books) | set(chain)):
        b, c = _nonzero(books.get(uuid, {})), _nonzero(chain.get(uuid, {}))
        for denom in sorted(set(b) | set(c)):
            if b.get(denom, 0) != c.get(denom, 0):
                bad += 1
                out.append(f"{what}: lease {uuid} {denom}: books {b.get(denom, 0)}, chain {c.get(denom, 0)}")
    return bad


def _pairs(amounts: Iterable[dict[str, int]]) -> int:
    return sum(len(_nonzero(a)) for a in amounts)


def audit(world: AuditWorld) -> AuditResult:
    ours = sorted(world.cast.kind)
    result = AuditResult(world.model.version.label, len(ours) - (1 if world.cast.pending else 0))
    _withdraws(world, result.rows)
    _books(world, ours, result)
    exhausted = _closures(world, result.rows, result.mismatches)
    _paid(world, ours, exhausted, result.rows, result.mismatches)
    _failing(world, result.rows, result.story)
    _pending(world, result.rows)
    _reserved(world, exhausted, result.rows)
    return result


def _withdraws(world: AuditWorld, rows: list[Row]) -> None:
    """The first withdraw that moved anything took more than two txs; the month's end settled every lease."""
    model, s = world.model, world.settings
    size = world.running.sidecar.client.withdraw_limit if model.version.withdraw_cursor else MAX_BATCH_LEASE_SIZE
    what = f"provider-wide pages of {size}" if model.version.withdraw_cursor else f"named withdraws of {size}"
    paying = [f for _, f in world.finished if f.withdrawal_count]
    if paying:
        first = paying[0]
        need = max(3, -(-first.withdrawal_count // size))
        rows.append(Row(f"first paying withdraw: {first.withdrawal_count} leases in {what}", f">= {need} txs",
                        f"{first.pages} txs", first.pages >= need and first.error is None))
    else:
        rows.append(Row("first paying withdraw", "one", "none", False))
    # A cycle reaches ``cap`` leases at most; past that, cycles go round (one more to start from the first).
    cap = size * s.max_withdraw_iterations
    active = len(world.model.active_leases_by_provider(world.provider_uuid))
    sweeps = 1 if active <= cap else -(-active // cap) + 1
    rows.append(
        Row(
            "month's end: every ACTIVE lease settled to it by our withdraws",
            f"0 unsettled, within {sweeps} withdraw(s) ({cap:,} leases a cycle at most)",
            f"{len(world.unsettled)} unsettled after {world.month_end_withdraws} withdraw(s)",
            not world.unsettled and world.month_end_withdraws <= sweeps,
        )
    )


def _books(world: AuditWorld, ours: list[str], result: AuditResult) -> None:
    """The statement and the settlements the books hold, lease by lease and denom by denom, against the chain."""
    ledger, rows = world.ledger, result.rows
    run = statement_run(ledger, MONTH).run
    accrued: dict[str, dict[str, int]] = {}
    withdrawn: dict[str, dict[str, int]] = {}
    for _tenant, uuid, denom, _seconds, a, w in lease_lines(ledger, run.id):
        accrued.setdefault(uuid, {})[denom] = a
        withdrawn.setdefault(uuid, {})[denom] = w
    settled: dict[str, dict[str, int]] = {}
    with ledger.reader() as reader:
        for uuid, denom, amount in reader.execute("SELECT lease_uuid, denom, amount FROM settlements"):
            by_denom = settled.setdefault(uuid, {})
            by_denom[denom] = by_denom.get(denom, 0) + int(amount)
    chain_accrued = {u: world.totals[u][0] for u in ours}
    chain_paid = {u: world.totals[u][1] for u in ours}
    paid_in_month = {u: world.before_end[u][0] for u in ours}
    for what, books, chain in (
        ("accrued in March: statement lines = chain's accrual", accrued, chain_accrued),
        ("withdrawn in March: statement lines = chain's payments", withdrawn, paid_in_month),
        ("settled, all time: the books' settlements = chain's payments", settled, chain_paid),
    ):
        bad = _compare(what.split(":")[0], books, chain, result.mismatches)
        rows.append(Row(what, f"0 of {_pairs(chain.values())} lease-denoms differ", f"{bad} differ", bad == 0))
    ok = run.status == "completed" and world.metered is not None
    rows.append(Row("March metered", "one completed run", f"run {run.status}, {run.leases} leases", ok))

    def total(table: dict[str, dict[str, int]], denom: str) -> int:
        return sum(a.get(denom, 0) for a in table.values())

    denoms = sorted({d for table in (accrued, chain_accrued, settled, chain_paid) for a in table.values() for d in a})
    result.denoms = [
        DenomTotals(d, total(accrued, d), total(chain_accrued, d), total(withdrawn, d), total(paid_in_month, d),
                    total(settled, d), total(chain_paid, d))
        for d in denoms
    ]


def _closures(world: AuditWorld, rows: list[Row], out: list[str]) -> set[str]:
    """Every exhausted stretch ended in time; every close of ours was of a lease with nothing left.
    Returns the leases that were ever exhausted."""
    s, kind = world.settings, world.cast.kind
    allowed = s.credit_check_zero_grace_period + s.credit_check_retry_interval + SLACK
    watch, judged = world.watch, world.judge.judged
    on_time = late = back = waiting = by_us = 0
    worst = timedelta(0)
    for e in watch.episodes:
        if e.how == "credit back":
            back += 1
            continue
        took = (e.closed_at if e.how == "closed" else END) - e.start
        worst = max(worst, took)
        if took > allowed:
            late += 1
            end = f"closed at {_when(e.closed_at)}" if e.how == "closed" else "still open at the end"
            out.append(f"late: lease {e.lease_uuid} ({kind[e.lease_uuid]}) exhausted at {_when(e.start)}, {end} "
                       f"(+{took.total_seconds():.1f}s)")
        elif e.how != "closed":
            waiting += 1
        else:
            on_time += 1
            by_us += e.lease_uuid in judged
    rows.append(
        Row(
            "exhausted (chain's test) -> closed within grace + one check",
            f"all within {allowed.total_seconds():g}s",
            f"{len(watch.episodes)} exhausted: {on_time} closed on time (us {by_us}, chain {on_time - by_us}), "
            f"{back} credit back, {waiting} not yet due, {late} late; slowest {worst.total_seconds():.1f}s; "
            f"{len(watch.within_tx)} exhausted inside the tx that closed them (a sibling paid first), "
            f"{len(watch.unforeseen)} unforeseen",
            late == 0 and len(watch.episodes) > 0 and not watch.unforeseen,
        )
    )
    closes = world.judge.closes
    strict = sum(1 for c in closes if c.exhausted)
    counting = sum(1 for c in closes if not c.exhausted and c.gone_counting_others)
    with_credit = [c for c in closes if not c.exhausted and not c.gone_counting_others]
    for c in with_credit:
        out.append(f"closed with credit: lease {c.lease_uuid} ({kind[c.lease_uuid]}) at {_when(c.at)}: {c.detail}")
    rows.append(
        Row(
            "every lease we closed had no credit left",
            "0 with credit",
            f"{len(closes)} closed: {strict} exhausted, {counting} gone counting other leases' dues, "
            f"{len(with_credit)} with credit",
            not with_credit,
        )
    )
    exhausted = {e.lease_uuid for e in watch.episodes}
    model = world.model
    funded = [u for u, k in kind.items() if k in FUNDED + (TENANT_CLOSES,)]
    wrongly = [
        u for u in funded
        if u in judged or u in exhausted or model.lease(u).closure_reason == CREDIT_EXHAUSTED_REASON
    ]
    for u in wrongly:
        out.append(f"funded lease {u} ({kind[u]}) closed or exhausted: {model.lease(u).closure_reason!r}")
    rows.append(Row("funded leases never exhausted nor closed by us", f"0 of {len(funded)}", f"{len(wrongly)}", not wrongly))
    return exhausted


def _paid(world: AuditWorld, ours: list[str], exhausted: set[str], rows: list[Row], out: list[str]) -> None:
    """A lease whose credit never ran out was paid everything it accrued, to the month's end."""
    unpaid = [u for u in ours if u not in exhausted and _nonzero(world.totals[u][0]) != _nonzero(world.totals[u][1])]
    for u in unpaid:
        out.append(f"unpaid: lease {u} ({world.cast.kind[u]}) accrued {world.totals[u][0]}, paid {world.totals[u][1]}")
    never = len(ours) - len(exhausted)
    rows.append(Row("leases never exhausted: paid in full at the month's end", f"0 of {never} short",
                    f"{len(unpaid)} short", not unpaid))


def _failing(world: AuditWorld, rows: list[Row], story: list[str]) -> None:
    """The two leases whose payouts were blocked for an hour, told by the ``WithdrawFinished`` the
    scheduler received and by the chain's settlements of them."""
    failing = world.cast.failing
    blocked, unblocked = BLOCKED
    during = [(at, f) for at, f in world.finished if blocked <= at < unblocked]
    reported = [(at, f) for at, f in during if set(failing) <= {u for u, _ in f.failing}]
    before = [at for at, f in world.finished if at < blocked and set(failing) & {u for u, _ in f.failing}]
    rows.append(
        Row(
            "failing leases reported while their payouts were blocked",
            f"both, in a withdraw between {_when(blocked)} and {_when(unblocked)}; none before",
            f"both in {len(reported)} of {len(during)} withdraws; {len(before)} before",
            bool(reported) and not before,
        )
    )
    _, last = world.finished[-1]
    still = sorted(set(failing) & {u for u, _ in last.failing})
    # Settled by our withdraws between the unblock and the month's end, and paid in full at it.
    again = {u: [t for t in world.failing_settled[u] if unblocked <= t < END] for u in failing}
    in_full = all(_nonzero(world.totals[u][0]) == _nonzero(world.totals[u][1]) for u in failing)
    rows.append(
        Row(
            "failing leases withdrawn once recovered, nothing left behind",
            "not failing at the end; withdrawn after the unblock; paid in full",
            f"failing at the end: {still or 'none'}; withdrawn after the unblock "
            + ", ".join(f"{len(t)} times (first {_when(min(t, default=None))})" for t in again.values())
            + f"; {'paid in full' if in_full else 'NOT paid in full'}",
            not still and all(again.values()) and in_full,
        )
    )
    # Once a withdraw settled them again, the report says so: no failure reported after that.
    stale = {}
    for u in failing:
        settled_again = min(again[u], default=None)
        if settled_again is None:
            stale[u] = "never settled again"
            continue
        listed = [at for at, f in world.finished if at >= settled_again and u in {v for v, _ in f.failing}]
        if listed:
            stale[u] = (
                f"settled {_when(settled_again)}, still reported failing by {len(listed)} withdraw(s) "
                f"up to {_when(listed[-1])}"
            )
    rows.append(
        Row(
            "failing leases no longer reported once a withdraw settled them",
            "not reported by that withdraw nor after",
            "; ".join(f"{u[-12:]}: {why}" for u, why in stale.items()) or "as expected",
            not stale,
        )
    )
    for u in failing:
        counts = [(at, n) for at, f in world.finished for v, n in f.failing if v == u]
        first = counts[0][0] if counts else None
        last_seen = counts[-1][0] if counts else None
        accrued, paid = world.totals[u]
        story.append(
            f"failing lease {u}: payouts blocked {_when(blocked)}-{_when(unblocked)}; reported failing in "
            f"{len(counts)} withdraw(s), {_when(first)} to {_when(last_seen)}, up to {max((n for _, n in counts), default=0)} "
            f"failures in a row; settled {len(again[u])} times from the unblock to the month's end, the last at "
            f"{_when(world.before_end[u][1])}; accrued {accrued}, paid {paid} over its life"
        )


def _pending(world: AuditWorld, rows: list[Row]) -> None:
    """The lease of ours never acknowledged: the chain expired it; the books end it and bill nothing.

    Its expiry has no tx and its event is only a hint: the books end it
    from its read, at the chain's own ``expired_at``.
    """
    uuid = world.cast.pending
    lease = world.model.lease_record(uuid)
    row = world.ledger.lease(uuid)
    with world.ledger.reader() as reader:
        lines = reader.execute("SELECT COUNT(*) FROM statement_lines WHERE lease_uuid = ?", (uuid,)).fetchone()[0]
    expired = lease.lease.state == "EXPIRED" and lease.expired_at is not None
    ended = (
        expired
        and row is not None
        and row["closed_at_us"] == to_us(lease.expired_at)
        and row["active_from_us"] is None
        and lines == 0
    )
    found = (
        f"chain {lease.lease.state} at {_when(lease.expired_at)}; books: "
        f"ended at {_when_us(row['closed_at_us']) if row else '-'}, active from "
        f"{_when_us(row['active_from_us']) if row else '-'}, {lines} statement lines"
    )
    rows.append(
        Row("the lease never acknowledged: expired, ended in the books", "EXPIRED; ended at its expiry, never billed",
            found, ended)
    )


def _when_us(us: int | None) -> str:
    return "-" if us is None else _when(from_us(us))


def _reserved(world: AuditWorld, exhausted: set[str], rows: list[Row]) -> None:
    """What our lease of a tenant with a PENDING lease elsewhere was paid, beside what the tenant had.

    Its tenant was funded with F: its own lease's reservation and runway,
    plus T, the tranche of the lease it asked of the other provider, never
    acknowledged. The current chain lets our lease spend F - T and no more,
    and the tenant keeps T (2.6); v2.1.0 isolates nothing, and our lease
    is paid all of F.
    """
    isolated = world.model.version.reservation_isolation
    good, seen = 0, []
    for u in world.cast.of(RESERVED):
        tenant = world.model.lease(u).tenant
        funded, tranche = world.cast.reserved_elsewhere[tenant]
        paid = world.totals[u][1].get("umfx", 0)
        left = world.model.balance(tenant).get("umfx", 0)
        want = (funded - tranche, tranche) if isolated else (funded, 0)
        good += u in exhausted and (paid, left) == want
        seen.append((paid - want[0], left - want[1]))
    leases = len(seen)
    expected = (
        "each exhausted, paid its credit but the pending lease's tranche, which the tenant keeps"
        if isolated
        else "each exhausted, paid all its tenant's credit, the pending lease's tranche included (no isolation)"
    )
    off = [d for d in seen if d != (0, 0)]
    rows.append(
        Row(
            "tenants with a PENDING lease elsewhere",
            expected,
            f"{good} of {leases} as expected" + (f"; (paid, balance left) off by {off[:3]}" if off else ""),
            good == leases > 0,
        )
    )
