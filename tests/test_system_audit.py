"""The system audit on each chain version: the books match the chain to the unit, closures are on time.

``audit.world.AuditWorld`` runs the sidecar as ``run.py`` builds it in model
mode, with its ledger, for the last six hours of March on 250 leases of
ours (more than two withdraw pages): healthy tenants, tenants running dry
(on their own, or through another provider's lease that provider settles
every 20 minutes, or in one of two denoms), tenants exhausted while a
PENDING lease elsewhere keeps part of their balance reserved, two leases
whose settlement fails for an hour, leases their tenants close, leases
opened during the run and one never acknowledged, which the chain expires.
At the month's end the sidecar withdraws, March is metered, and
``audit.report.audit`` compares the books with the chain. Every test here
asserts some of its checks, with the whole audit table as the message.

``bench/audit_run.py`` runs the same audit at 10,000 leases.
"""

from __future__ import annotations

import pytest

from audit.report import AuditResult, audit
from audit.world import AuditWorld

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

LEASES = 250


@pytest.fixture(scope="module")
def audited(chain_version, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The world run to the end of March and metered, once per chain version, with its audit."""
    world = AuditWorld(chain_version, LEASES, tmp_path_factory.mktemp(f"audit-{chain_version}"))
    try:
        world.run()
        world.end_month()
        world.meter()
        yield world, audit(world)
    finally:
        world.close()


def rows(result: AuditResult, *starts: str) -> list[str]:
    """The failed checks among those whose names begin with one of ``starts`` (each names at least one)."""
    missing = [s for s in starts if not any(r.check.startswith(s) for r in result.rows)]
    assert not missing, f"no such check: {missing}\n{result}"
    return [r.check for r in result.rows if r.check.startswith(starts) and not r.ok]


def test_every_withdraw_reached_every_lease_in_more_than_two_txs(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "first paying withdraw") == [], str(result)


def test_the_books_match_the_chain_per_lease_and_per_denom(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "accrued in March", "withdrawn in March", "settled, all time", "March metered") == [], str(result)
    assert {d.denom for d in result.denoms} == {"umfx", "upwr"}
    for d in result.denoms:
        assert (d.books_accrued, d.books_withdrawn, d.books_settled) == (
            d.chain_accrued, d.chain_paid_in_month, d.chain_paid
        ), str(result)
    assert any(d.unpaid for d in result.denoms), "some tenants' credit ran out before their leases were paid\n" + str(result)


def test_every_exhausted_lease_was_closed_within_grace_and_one_check(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "exhausted (chain's test)") == [], str(result)


def test_no_lease_with_credit_was_closed(audited) -> None:  # type: ignore[no-untyped-def]
    world, result = audited
    assert rows(result, "every lease we closed", "funded leases", "leases never exhausted") == [], str(result)
    assert world.judge.closes, "the sidecar closed nothing: the grace-window path went untested\n" + str(result)


def test_the_failing_leases_were_reported_then_withdrawn_once_recovered(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "failing leases reported", "failing leases withdrawn", "failing leases no longer") == [], str(result)


def test_the_lease_left_pending_expired_and_ended_in_the_books(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "the lease never acknowledged") == [], str(result)


def test_a_pending_lease_elsewhere_keeps_its_tranche_on_the_current_chain_only(audited) -> None:  # type: ignore[no-untyped-def]
    _, result = audited
    assert rows(result, "tenants with a PENDING lease elsewhere") == [], str(result)


def test_the_audit_sees_a_statement_line_one_unit_off(audited) -> None:  # type: ignore[no-untyped-def]
    """The audit is not blind: one unit added to one line of the statement is a mismatch it names."""
    world, result = audited
    assert result.ok, str(result)
    ledger = world.ledger
    with ledger.read() as c:
        run_id, lease, denom, accrued = c.execute(
            "SELECT run_id, lease_uuid, denom, accrued FROM statement_lines ORDER BY lease_uuid LIMIT 1"
        ).fetchone()
    key = (run_id, lease, denom)
    with ledger.transaction() as c:
        c.execute("UPDATE statement_lines SET accrued = ? WHERE run_id = ? AND lease_uuid = ? AND denom = ?",
                  (str(int(accrued) + 1), *key))
    try:
        off = audit(world)
    finally:
        with ledger.transaction() as c:
            c.execute("UPDATE statement_lines SET accrued = ? WHERE run_id = ? AND lease_uuid = ? AND denom = ?",
                      (accrued, *key))
    assert off.failed() == ["accrued in March: statement lines = chain's accrual"], str(off)
    assert f"lease {lease} {denom}: books {int(accrued) + 1}, chain {accrued}" in str(off)
