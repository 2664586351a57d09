"""The log: text and JSON lines in UTC, and repeats folded (start, summaries, end) on the clock's time."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta, timezone, datetime

import pytest

from actors.effects import Note
from actors.shell import log_decision
from logs.folding import RepeatFolder
from logs.output import start_log
from logs.settings import LogSettings
from messages.coins import Coin
from runtime.clock import ManualClock, utc

T0 = utc(2026, 3, 1, 9, 0)
WARN = logging.WARNING
S30 = timedelta(seconds=30)


def failing_reads(folder: RepeatFolder, start, count: int, tenant: str = "manifest1t"):
    return [folder.observe("credit_read_failed", tenant, WARN, f"{i + 1} failed reads", start + i * S30) for i in range(count)]


def test_a_repeating_warning_shows_its_start_then_a_summary_every_interval() -> None:
    folder = RepeatFolder(timedelta(minutes=10))
    verdicts = failing_reads(folder, T0, 41)  # 20 minutes of failed reads, one every 30 s
    shown = [i for i, v in enumerate(verdicts) if v.show]
    summaries = [(i, v.summary.folded, v.summary.count) for i, v in enumerate(verdicts) if v.summary]
    assert shown == [0]
    assert summaries == [(20, 20, 21), (40, 20, 41)]  # every 10 minutes: how many since the last, how many in all


def test_another_line_of_the_tenant_ends_its_streak_and_an_info_line_is_never_folded() -> None:
    folder = RepeatFolder(timedelta(minutes=10))
    failing_reads(folder, T0, 5)
    back = folder.observe("credit_checked", "manifest1t", logging.INFO, "balance 5umfx", T0 + 5 * S30)
    assert back.show and [(s.event, s.count, s.last_at) for s in back.ended] == [("credit_read_failed", 5, T0 + 4 * S30)]
    again = folder.observe("credit_checked", "manifest1t", logging.INFO, "balance 4umfx", T0 + 6 * S30)
    assert again.show and not again.ended  # info lines: every one shown
    # a new failure afterwards is a new streak: shown again
    assert folder.observe("credit_read_failed", "manifest1t", WARN, "1 failed read", T0 + 7 * S30).show
    # another trouble of the tenant has a streak of its own, and ends none
    other = folder.observe("close_failed", "manifest1t", WARN, "close failed", T0 + 8 * S30)
    assert other.show and not other.ended
    assert not folder.observe("credit_read_failed", "manifest1t", WARN, "2 failed reads", T0 + 9 * S30).show


def test_other_tenants_and_quiet_streaks() -> None:
    folder = RepeatFolder(timedelta(minutes=10))
    failing_reads(folder, T0, 3, "manifest1a")
    assert folder.observe("credit_read_failed", "manifest1b", WARN, "b fails", T0).show  # its own streak
    # nothing more of a for ten minutes: its repeats have stopped, said at the next line of anything
    later = folder.observe("wake_planned", "", logging.INFO, "next wake", T0 + timedelta(minutes=11))
    assert [s.tenant for s in later.ended] == ["manifest1a"]  # b repeated nothing: no end line for it
    # a streak of one line has nothing to end
    assert folder.close() == []


def run_log(settings: LogSettings, clock: ManualClock, level: str | None = None) -> tuple[io.StringIO, object]:
    out = io.StringIO()
    return out, start_log(settings, clock.now, level, stream=out)


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.getLogger("leasewarden").level)
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    logging.getLogger("leasewarden").setLevel(saved[2])


def note_failure(clock: ManualClock, n: int) -> None:
    log_decision(
        Note(f"tenant manifest1t: {n} failed credit reads in a row", "manifest1t", event="credit_read_failed",
             fields=(("consecutive_errs", n), ("recheck_at", clock.now() + S30)), level="warning"),
        clock.now(),
    )


def test_at_warning_level_the_start_the_summaries_and_the_end_still_show(restore_logging) -> None:
    clock = ManualClock(T0)
    out, output = run_log(LogSettings(repeat_summary=timedelta(minutes=10)), clock, level="warning")
    for n in range(1, 42):
        note_failure(clock, n)
        log_decision(Note("cycle 9 (recheck): credit check of 1 tenant(s)", event="cycle_started", level="debug"), clock.now())
        clock.advance(S30)
    log_decision(Note("tenant manifest1t: balance 5umfx", "manifest1t", event="credit_checked"), clock.now())
    output.close()  # type: ignore[attr-defined]
    lines = out.getvalue().splitlines()
    assert lines[0] == "[2026-03-01 09:00:00 UTC] WARNING: tenant manifest1t: 1 failed credit reads in a row"
    assert "21 failed credit reads in a row [repeated 20 more time(s) for tenant manifest1t in the last 10m" in lines[1]
    assert "41 failed credit reads" in lines[2]
    assert lines[3].startswith("[2026-03-01 09:20:30 UTC] WARNING: repeats ended: credit_read_failed of tenant manifest1t "
                               "was logged 41 times from 2026-03-01 09:00:00 to 2026-03-01 09:20:00")
    assert len(lines) == 4  # 41 failures, 41 debug cycles and an info line: four lines at warning


def test_json_lines_carry_utc_time_level_event_and_the_decisions_fields(restore_logging) -> None:
    clock = ManualClock(T0)
    out, output = run_log(LogSettings(format="json"), clock)
    when = datetime(2026, 3, 1, 10, 0, tzinfo=timezone(timedelta(hours=2)))  # 08:00 UTC
    log_decision(
        Note("withdrew 12umfx,3upwr", event="withdrawn",
             fields=(("withdrawn", (Coin("umfx", 12), Coin("upwr", 3 * 10**30))), ("at", when), ("message", "x"))),
        T0,
    )
    logging.getLogger("actors.listener").warning("listener: websocket %s lost", "ws://x")
    output.close()  # type: ignore[attr-defined]
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first == {
        "time": "2026-03-01T09:00:00.000000Z", "level": "info", "event": "withdrawn", "logger": "leasewarden.decisions",
        "message": "withdrew 12umfx,3upwr", "withdrawn": {"umfx": 12, "upwr": 3 * 10**30},
        "at": "2026-03-01T08:00:00.000000Z", "field_message": "x",
    }
    assert (second["level"], second["event"], second["message"]) == ("warning", "actors.listener", "listener: websocket ws://x lost")


def test_an_unnamed_note_is_named_by_the_message_it_decided_on(restore_logging) -> None:
    from messages.scheduler import Wake

    clock = ManualClock(T0)
    out, output = run_log(LogSettings(format="json"), clock)
    log_decision(Note("something"), T0, Wake("interval"))
    output.close()  # type: ignore[attr-defined]
    assert json.loads(out.getvalue())["event"] == "wake"


def test_an_ordinary_line_that_is_part_of_the_round_does_not_end_the_streak() -> None:
    """A dry run: each check says it closes, then that it would, then that the close failed."""
    folder = RepeatFolder(timedelta(minutes=10))
    shown = []
    for i in range(30):
        at = T0 + i * S30
        for event, level in (("closing_requested", logging.INFO), ("dry_run_close", WARN), ("close_failed", WARN)):
            v = folder.observe(event, "manifest1t", level, event, at)
            assert not v.ended, (i, event)
            if v.show:
                shown.append((i, event))
    # the ordinary line each round, the two warnings at their start only
    assert shown == [(0, "closing_requested"), (0, "dry_run_close"), (0, "close_failed")] + [
        (i, "closing_requested") for i in range(1, 30)]


def test_closing_the_log_puts_back_the_handlers_and_levels_it_found() -> None:
    root, own, ws = logging.getLogger(), logging.getLogger("leasewarden"), logging.getLogger("websockets")
    before = (root.handlers[:], root.level, own.level, ws.level)
    out, output = run_log(LogSettings(), ManualClock(T0), level="debug")
    assert own.level == logging.DEBUG and root.handlers != before[0]  # the run's own set-up, while it runs
    logging.getLogger("leasewarden.ledger").info("a line of the run")
    output.close()  # type: ignore[attr-defined]
    output.close()  # type: ignore[attr-defined]  # a second close changes nothing
    assert (root.handlers[:], root.level, own.level, ws.level) == before
    assert "a line of the run" in out.getvalue()
