"""The ledger's commands: tick, meter, periods, finalize, statement (as run.py adds them)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.cli import add_commands, main
from ledger.periods import Month, to_us
from ledger.runs import Periods
from ledger.store import Ledger
from messages.chain import Lease, LeaseItem
from messages.coins import Coin
from messages.ledger import LeasesReconciled, LeaseSettled
from runtime.clock import utc
from runtime.config import load_config

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
ALICE, BOB = "manifest1alice", "manifest1bob"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text('[chain]\nmode = "node"\n\n[ledger]\npath = "books/ledger.sqlite"\ngrace_hours = 24\n')
    return path


@pytest.fixture
def books(config) -> Path:
    """A ledger with two tenants' leases active through March 2026."""
    path = config.parent / "books" / "ledger.sqlite"
    lg = Ledger.open(path, PROVIDER)
    lg.record_all(
        [
            LeasesReconciled(
                utc(2026, 3, 1),
                (
                    Lease("la", ALICE, PROVIDER, (LeaseItem("s", 1, Coin("umfx", 2)),), acknowledged_at=utc(2026, 2, 1)),
                    Lease("lb", BOB, PROVIDER, (LeaseItem("s", 3, Coin("upwr", 1)),), acknowledged_at=utc(2026, 3, 31, 23)),
                ),
            ),
            LeaseSettled(utc(2026, 3, 2), "TX1", "la", (Coin("umfx", 100),)),
        ]
    )
    lg.close()
    return path


def run(capsys, config: Path, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["--config", str(config), *argv], load_config)
    except SystemExit as exc:  # argparse rejecting an argument
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_tick_moves_then_meters_and_prints_a_table(capsys, config, books):
    code, out, _ = run(capsys, config, "tick", "--now", "2026-04-01T00:30:00Z")
    assert code == 0
    assert "2026-03" in out and "open -> grace" in out
    code, out, _ = run(capsys, config, "tick", "--now", "2026-04-02T01:00:00Z", "--json")
    assert code == 0
    report = json.loads(out)
    # None stored: the walk starts at the month of the first fact (la's start, 2026-02-01).
    february, march = report["months"]
    assert february["month"] == "2026-02" and february["run_id"]
    assert march["month"] == "2026-03" and march["run_id"] and not march["finalized"] and march["error"] == ""


def _unreadable(books) -> None:  # type: ignore[no-untyped-def]
    """A lease row whose items the ledger cannot read (a damaged file): its month's run fails."""
    lg = Ledger.open(books, PROVIDER)
    with lg.transaction() as c:
        c.execute(
            "INSERT INTO leases (uuid, tenant, provider_uuid, items, priced, active_from_us, active_from_rank, "
            "first_seen_us, updated_us) VALUES ('damaged', ?, ?, 'not json', 1, ?, 4, 0, 0)",
            (ALICE, PROVIDER, to_us(utc(2026, 3, 9))),
        )
    lg.close()


def test_tick_exits_non_zero_when_a_month_failed(capsys, config, books):
    _unreadable(books)
    run(capsys, config, "tick", "--now", "2026-04-01T00:30:00Z")
    code, out, err = run(capsys, config, "tick", "--now", "2026-04-02T01:00:00Z")
    assert code == 1
    assert "JSONDecodeError" in out
    assert err.startswith("error: 2026-03: run ")


def test_tick_in_its_own_process_exits_non_zero_when_a_month_failed(config, books):
    _unreadable(books)
    cmd = [sys.executable, str(REPO / "run.py"), "--config", str(config), "tick"]
    first = subprocess.run([*cmd, "--now", "2026-04-01T00:30:00Z"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([*cmd, "--now", "2026-04-02T01:00:00Z"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert second.returncode == 1
    assert "JSONDecodeError" in second.stderr


@pytest.mark.parametrize(
    "argv, expected",
    [
        (("meter", "--period", "2026-3"), "YYYY-MM, e.g. 2026-03"),
        (("statement", "--period", "March"), "YYYY-MM, e.g. 2026-03"),
        (("finalize", "--period", "2026-13"), "YYYY-MM, e.g. 2026-03"),
        (("tick", "--now", "2026-04-02"), "ISO-8601 with a zone, e.g. 2026-04-02T01:00:00Z"),
        (("tick", "--now", "2026-04-02 01:00"), "ISO-8601 with a zone"),
    ],
)
def test_malformed_periods_and_timestamps_show_the_expected_form(capsys, config, argv, expected):
    code, _, err = run(capsys, config, *argv)
    assert code == 2
    assert expected in err


def test_meter_writes_the_period_row_and_refuses_a_finalized_month(capsys, config, books):
    code, out, _ = run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-01T00:00:00Z")
    assert code == 0 and out.startswith("metered 2026-03: run ")
    code, out, _ = run(capsys, config, "periods")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("2026-03"))
    assert line.split()[1] == "metered" and "completed" in line
    code, out, _ = run(capsys, config, "finalize", "--period", "2026-03")
    assert code == 0 and out.startswith("finalized 2026-03 over run ")
    code, _, err = run(capsys, config, "meter", "--period", "2026-03")
    assert code == 2
    assert "error: 2026-03 is finalized over run" in err and "never metered again" in err
    code, _, err = run(capsys, config, "finalize", "--period", "2026-03")
    assert code == 2 and "already finalized" in err


def test_meter_refuses_a_month_that_has_not_ended(capsys, config, books):
    code, _, err = run(capsys, config, "meter", "--period", "2026-04", "--now", "2026-04-15T00:00:00Z")
    assert code == 2 and "2026-04 has not ended: it ends 2026-05-01T00:00:00Z" in err


def test_finalize_needs_a_completed_run(capsys, config, books):
    run(capsys, config, "tick", "--now", "2026-04-01T00:30:00Z")
    code, _, err = run(capsys, config, "finalize", "--period", "2026-03")
    assert code == 2 and "no completed run to finalize" in err


def test_statement_as_csv_and_json_per_tenant(capsys, config, books):
    run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-01T00:00:00Z")
    code, out, _ = run(capsys, config, "statement", "--period", "2026-03")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    march_seconds = 31 * 86400
    alice_total = next(r for r in rows if r["tenant"] == ALICE and r["line"] == "total")
    assert alice_total["accrued"] == str(2 * march_seconds)
    assert alice_total["withdrawn"] == "100"
    assert alice_total["difference"] == str(2 * march_seconds - 100)
    assert alice_total["final"] == "false"
    bob_lease = next(r for r in rows if r["tenant"] == BOB and r["line"] == "lease")
    assert (bob_lease["seconds"], bob_lease["accrued"], bob_lease["denom"]) == ("3600", str(3 * 3600), "upwr")

    code, out, _ = run(capsys, config, "statement", "--period", "2026-03", "--tenant", BOB, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert [t["tenant"] for t in doc["tenants"]] == [BOB]
    assert doc["tenants"][0]["totals"] == [
        {"denom": "upwr", "leases": 1, "accrued": "10800", "withdrawn": "0", "difference": "10800"}
    ]

    code, _, err = run(capsys, config, "statement", "--period", "2026-03", "--tenant", "manifest1nobody")
    assert code == 2 and "manifest1nobody has nothing in the statement of 2026-03" in err
    code, _, err = run(capsys, config, "statement", "--period", "2026-01")
    assert code == 2 and "no billing period 2026-01" in err


def test_periods_and_statements_say_what_the_books_lack_per_lease(capsys, config, books):
    from messages.ledger import LeaseIssue

    lg = Ledger.open(books, PROVIDER)
    with lg.transaction() as c:  # a lease of Alice's whose price the books never learned
        c.execute(
            "INSERT INTO leases (uuid, tenant, provider_uuid, active_from_us, active_from_rank, first_seen_us, updated_us) "
            "VALUES ('unpriced', ?, ?, ?, 3, 0, 0)",
            (ALICE, PROVIDER, to_us(utc(2026, 3, 9))),
        )
    lg.record(LeaseIssue(utc(2026, 3, 20), "lb", "no_tx_index", "transaction indexing is disabled", BOB))
    from messages.ledger import CloseLookupOpened, WithdrawLookupOpened

    lg.record(WithdrawLookupOpened("AB12", 4, 2, utc(2026, 3, 21)))  # a withdraw whose outcome is unknown
    lg.record(CloseLookupOpened("CD34", "credit gone", ((BOB, ("lb", "lc")),), utc(2026, 3, 22)))
    lg.close()
    code, _, _ = run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-02T00:00:00Z")
    assert code == 0  # the month is metered: the unpriced lease holds back only itself
    code, out, _ = run(capsys, config, "periods")
    assert code == 0
    header, march = out.splitlines()[0], next(line for line in out.splitlines() if line.startswith("2026-03"))
    assert "held back" in header and "1 lease(s)" in march
    assert f"lease unpriced of {ALICE}: held back from the month's run (no known price" in out
    assert f"lease lb of {BOB}: ended while unheard, and the node keeps no tx index" in out
    assert "withdraw tx AB12 (cycle 4, page 2), signed 2026-03-21" in out
    assert "close tx CD34 (2 lease(s) of 1 tenant(s)), signed 2026-03-22" in out

    code, out, _ = run(capsys, config, "statement", "--period", "2026-03")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["tenant"], r["line"], r["lease_uuid"]) for r in rows if r["line"] not in ("lease", "total")} == {
        (ALICE, "held", "unpriced"), (BOB, "no_tx_index", "lb")}
    code, out, _ = run(capsys, config, "statement", "--period", "2026-03", "--format", "json")
    notes = json.loads(out)["notes"]
    assert [(n["lease_uuid"], n["kind"]) for n in notes] == [("unpriced", "held"), ("lb", "no_tx_index")]
    assert "indexing is disabled" in notes[1]["reason"]


def test_add_commands_plugs_into_another_programs_parser(config, books):
    parser = argparse.ArgumentParser(prog="run.py")
    parser.add_argument("--config")
    sub = parser.add_subparsers(dest="command")
    seen = []

    def load(path):  # type: ignore[no-untyped-def]
        seen.append(path)
        return load_config(path)

    add_commands(sub, load)
    args = parser.parse_args(["--config", str(config), "meter", "--period", "2026-03", "--now", "2026-04-01T00:00:00Z"])
    assert args.func(args) == 0
    assert seen == [str(config)]
    lg = Ledger.open(books, PROVIDER)
    assert lg.conn.execute("SELECT status FROM runs WHERE period = ?", (str(Month(2026, 3)),)).fetchone() == ("completed",)
    lg.close()


def test_on_an_embedded_chain_the_commands_read_its_own_books(capsys, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[chain]\nmode = "model"\n\n[ledger]\npath = "books/ledger.sqlite"\n')
    lg = Ledger.open(tmp_path / "books" / "ledger-embedded.sqlite", PROVIDER)
    Periods(lg).to_grace(Month(2026, 2), utc(2026, 3, 1))
    lg.close()
    code, out, _ = run(capsys, config, "periods")
    assert code == 0 and "2026-02" in out and "grace" in out


def test_meter_of_a_month_before_any_fact_is_refused(capsys, config, books):
    code, _, err = run(capsys, config, "meter", "--period", "2025-06", "--now", "2026-04-01T00:00:00Z")
    assert code == 2
    assert "2025-06 is before anything in the ledger" in err and "its first fact is of 2026-02-01T00:00:00Z" in err
    code, out, _ = run(capsys, config, "periods")
    assert "2025-06" not in out


def test_tick_years_back_writes_no_period(capsys, config, books):
    code, out, _ = run(capsys, config, "tick", "--now", "2020-01-01T00:00:00Z")
    assert code == 0 and "(no month to walk: none has ended since the first fact of the books)" in out
    code, out, _ = run(capsys, config, "periods")
    assert "no billing period stored yet" in out


def _dump(path: Path) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_a_now_after_the_wall_clock_needs_dry_run_and_then_writes_nothing(capsys, config, books):
    from datetime import datetime, timedelta, timezone

    from ledger.periods import iso

    later = iso((datetime.now(timezone.utc) + timedelta(days=40)).replace(microsecond=0))
    before = _dump(books)
    for argv in (("tick", "--now", later), ("meter", "--period", "2026-03", "--now", later),
                 ("finalize", "--period", "2026-03", "--now", later)):
        code, out, err = run(capsys, config, *argv)
        assert code == 2 and out == ""
        assert f"error: --now {later} is after this machine's clock" in err and "add --dry-run" in err
    code, out, err = run(capsys, config, "tick", "--now", later, "--dry-run", "--json")
    assert code == 0
    report = json.loads(out)  # the note goes to stderr: stdout stays JSON
    assert [m["month"] for m in report["months"]][:2] == ["2026-02", "2026-03"]
    assert f"dry run at {later}: nothing was written to {books}" in err
    assert _dump(books) == before


def test_a_dry_run_meters_and_finalizes_a_copy(capsys, config, books):
    before = _dump(books)
    code, out, err = run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-02T00:00:00Z", "--dry-run")
    assert code == 0 and out.startswith("metered 2026-03: run ") and "nothing was written" in err
    assert _dump(books) == before


def test_finalize_waits_for_the_month_to_end_and_its_grace_to_pass(capsys, config, books):
    code, _, err = run(capsys, config, "finalize", "--period", "2026-03", "--now", "2026-03-20T00:00:00Z", "--force", "why not")
    assert code == 2 and "2026-03 has not ended: it ends 2026-04-01T00:00:00Z" in err  # --force cannot end a month
    code, _, err = run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-01T06:00:00Z")
    assert code == 0 and "warning: 2026-03 is in its grace window until 2026-04-02T00:00:00Z" in err
    code, _, err = run(capsys, config, "finalize", "--period", "2026-03", "--now", "2026-04-01T07:00:00Z")
    assert code == 2
    assert "2026-03 is in its grace window until 2026-04-02T00:00:00Z" in err and "--force REASON" in err
    code, out, _ = run(capsys, config, "periods")
    assert next(line for line in out.splitlines() if line.startswith("2026-03")).split()[1] == "metered"


def test_finalize_with_force_keeps_the_reason_in_the_ledger(capsys, config, books):
    run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-01T06:00:00Z")
    code, out, _ = run(capsys, config, "finalize", "--period", "2026-03", "--now", "2026-04-01T07:00:00Z",
                       "--force", "tenant disputes nothing, invoice due today")
    assert code == 0 and out.endswith("before its grace had passed: tenant disputes nothing, invoice due today\n")
    lg = Ledger.open(books, PROVIDER)
    try:
        assert Periods(lg).forced_reason(Month(2026, 3)) == "tenant disputes nothing, invoice due today"
        assert lg.conn.execute("SELECT at_us FROM forced_finalizations").fetchone() is not None
    finally:
        lg.close()
    code, out, _ = run(capsys, config, "periods")
    assert "finalized before its grace had passed: tenant disputes nothing, invoice due today" in out


@pytest.mark.parametrize("reason", ["", "   ", "line\nbreak", "x" * 257])
def test_a_force_reason_must_be_one_printable_line(capsys, config, books, reason):
    code, _, err = run(capsys, config, "finalize", "--period", "2026-03", "--force", reason)
    assert code == 2 and "argument --force: expected" in err and err.count("\n") == 1


def test_an_unknown_tenant_prints_no_header_before_its_error(capsys, config, books):
    run(capsys, config, "meter", "--period", "2026-03", "--now", "2026-04-02T00:00:00Z")
    for fmt in ("csv", "json"):
        code, out, err = run(capsys, config, "statement", "--period", "2026-03", "--tenant", "manifest1nobody", "--format", fmt)
        assert code == 2 and out == ""
        assert "manifest1nobody has nothing in the statement of 2026-03" in err


def test_the_month_under_way_has_a_provisional_statement(capsys, config, books):
    from datetime import timedelta

    from ledger.statements import statement, write_json

    lg = Ledger.open(books, PROVIDER)
    try:
        now = utc(2026, 3, 11, 12)
        st = statement(lg, Month(2026, 3), now)
        assert st.provisional_until == now and st.run_id == "" and not st.final
        groups = {name: (totals, lines) for name, totals, lines in st.groups}
        seconds = (now - utc(2026, 3, 1)) // timedelta(seconds=1)
        assert groups[ALICE][0] == [(ALICE, "umfx", 1, str(2 * seconds), "100", str(2 * seconds - 100))]
        assert BOB not in groups  # his lease starts on the 31st
        out = io.StringIO()
        write_json(statement(lg, Month(2026, 3), now), out)
        doc = json.loads(out.getvalue())
        assert (doc["provisional"], doc["run_id"], doc["as_of"]) == (True, None, "2026-03-11T12:00:00Z")
        assert lg.conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)  # nothing stored
    finally:
        lg.close()
    # Through the command, on this machine's clock: the month under way by default.
    lg = Ledger.open(books, PROVIDER)
    from datetime import datetime, timezone

    month = Month.of(datetime.now(timezone.utc))
    lg.record(LeasesReconciled(month.start, (Lease("lc", BOB, PROVIDER, (LeaseItem("s", 1, Coin("upwr", 5)),), acknowledged_at=month.start),)))
    lg.close()
    code, out, err = run(capsys, config, "statement")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["run_id"] for r in rows} == {"provisional"} and {r["period"] for r in rows} == {str(month)}
    # A listing alone ends nothing: Bob's lease of March is still open in the books, beside "lc".
    lc = next(r for r in rows if r["tenant"] == BOB and r["line"] == "lease" and r["lease_uuid"] == "lc")
    assert int(lc["accrued"]) == 5 * int(lc["seconds"]) and int(lc["seconds"]) > 0
    assert err.startswith(f"provisional: {month} has not ended; its figures up to ")


def test_a_provisional_statement_runs_to_the_books_latest_fact_when_their_clock_is_ahead(config, books):
    """An embedded chain's clock runs faster than the wall: 'so far' is where the books have got to,
    or a settlement recorded after now would be set against less accrual than it settled."""
    from ledger.statements import statement

    lg = Ledger.open(books, PROVIDER)
    try:
        lg.record(LeaseSettled(utc(2026, 3, 20), "TX2", "la", (Coin("umfx", 50),)))
        st = statement(lg, Month(2026, 3), utc(2026, 3, 11))
        assert st.provisional_until == utc(2026, 3, 20)
        (alice,) = [totals for name, totals, _ in st.groups if name == ALICE]
        assert alice[0][3] == str(2 * 19 * 86400) and alice[0][4] == "150"
    finally:
        lg.close()
