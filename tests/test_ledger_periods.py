"""Billing months and instants: half-open UTC months, and the forms an operator types."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ledger.periods import Month, PeriodError, from_us, iso, parse_instant, parse_month, to_us
from runtime.clock import utc


def test_a_month_is_the_half_open_utc_calendar_month():
    m = Month(2026, 12)
    assert (m.start, m.end) == (utc(2026, 12, 1), utc(2027, 1, 1))
    assert Month.of(utc(2027, 1, 1)) == Month(2027, 1)  # midnight opens the new month
    assert Month.of(utc(2027, 1, 1) - timedelta(microseconds=1)) == m
    # A local time just after midnight in Berlin is still December in UTC.
    berlin = timezone(timedelta(hours=1))
    assert Month.of(datetime(2027, 1, 1, 0, 30, tzinfo=berlin)) == m
    assert Month(2026, 1).previous() == Month(2025, 12) and m.next() == Month(2027, 1)
    assert [str(x) for x in Month(2025, 11).until(Month(2026, 2))] == ["2025-11", "2025-12", "2026-01", "2026-02"]
    assert Month.from_index(m.index()) == m


@pytest.mark.parametrize("text", ["2026-3", "2026/03", "03-2026", "2026-13", "2026-00", "", "march"])
def test_a_malformed_month_shows_the_expected_form(text):
    with pytest.raises(PeriodError, match=r"YYYY-MM, e\.g\. 2026-03"):
        parse_month(text)


def test_months_parse_and_print_as_yyyy_mm():
    assert parse_month(" 2026-03 ") == Month(2026, 3)
    assert str(Month(987, 4)) == "0987-04"


@pytest.mark.parametrize("text", ["2026-04-02", "2026-04-02T01:00:00", "yesterday", "2026-04-02T25:00:00Z"])
def test_a_malformed_or_zoneless_instant_shows_the_expected_form(text):
    with pytest.raises(PeriodError, match=r"ISO-8601 with a zone, e\.g\. 2026-04-02T01:00:00Z"):
        parse_instant(text)


def test_instants_parse_to_utc_and_store_exactly():
    assert parse_instant("2026-04-02T03:00:00+02:00") == utc(2026, 4, 2, 1)
    assert parse_instant("2026-04-02T01:00:00Z") == utc(2026, 4, 2, 1)
    t = utc(2026, 4, 2, 1) + timedelta(microseconds=7)
    assert from_us(to_us(t)) == t
    assert iso(t) == "2026-04-02T01:00:00.000007Z" and iso(None) == ""
    with pytest.raises(ValueError, match="naive"):
        to_us(datetime(2026, 4, 2))


def test_a_version_2_ledger_migrates_its_metered_months(tmp_path):
    """A ledger written before ``metered`` existed: a month with a completed run becomes metered."""
    import sqlite3

    from ledger.schema import MIGRATIONS, migrate

    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    migrate(conn, str(path), lambda: "then", MIGRATIONS[:2])
    for period, status in (("2026-02", "grace"), ("2026-03", "grace"), ("2026-01", "finalized")):
        conn.execute(
            "INSERT INTO billing_periods (period, period_from_us, period_to_us, status, created_us, updated_us) "
            "VALUES (?, 0, 0, ?, 0, 0)", (period, status),
        )
    conn.execute("INSERT INTO runs (id, period, status, started_us) VALUES ('r2', '2026-02', 'completed', 0)")
    conn.execute("INSERT INTO runs (id, period, status, started_us) VALUES ('r3', '2026-03', 'failed', 0)")
    conn.close()
    from ledger.store import Ledger

    lg = Ledger.open(path, "0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10")
    try:
        rows = dict(lg.conn.execute("SELECT period, status FROM billing_periods").fetchall())
        assert rows == {"2026-01": "finalized", "2026-02": "metered", "2026-03": "grace"}
        assert lg.conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
        with pytest.raises(sqlite3.IntegrityError):  # the runs still point at the rebuilt table
            lg.conn.execute("INSERT INTO runs (id, period, status, started_us) VALUES ('x', '2030-01', 'failed', 0)")
    finally:
        lg.close()
