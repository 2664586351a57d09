"""Each embedded run's books set aside under their own name, the last N kept, every move logged."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ledger.embedded_books import earlier_books, set_aside


def a_run_wrote(path: Path, text: str, at: datetime) -> None:
    path.write_text(text)
    Path(f"{path}-wal").write_text(text + " wal")
    stamp = at.timestamp()
    os.utime(path, (stamp, stamp))


def test_three_runs_keep_both_earlier_books_and_say_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    books = tmp_path / "books-embedded.sqlite"
    with caplog.at_level(logging.INFO, logger="leasewarden.ledger"):
        assert set_aside(books, keep=5) == []  # the first run: nothing to move
        a_run_wrote(books, "first", datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc))
        set_aside(books, keep=5)
        a_run_wrote(books, "second", datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc))
        set_aside(books, keep=5)
    first = tmp_path / "books-embedded-20261201T090000Z.sqlite"
    second = tmp_path / "books-embedded-20261201T100000Z.sqlite"
    assert earlier_books(books) == [first, second]
    assert first.read_text() == "first" and Path(f"{first}-wal").read_text() == "first wal"
    assert second.read_text() == "second" and not books.exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"the previous embedded run's ledger was moved to {first}",
        f"the previous embedded run's ledger was moved to {second}",
    ]


def test_only_the_last_n_are_kept_and_each_removal_is_logged(tmp_path: Path, caplog) -> None:
    books = tmp_path / "books-embedded.sqlite"
    for hour in (1, 2, 3):
        a_run_wrote(books, f"run {hour}", datetime(2026, 12, 1, hour, tzinfo=timezone.utc))
        set_aside(books, keep=2)
    caplog.clear()  # the three runs before may have been logged too, if a logger above is at INFO
    with caplog.at_level(logging.INFO, logger="leasewarden.ledger"):
        a_run_wrote(books, "run 4", datetime(2026, 12, 1, 4, tzinfo=timezone.utc))
        lines = set_aside(books, keep=2)
    kept = earlier_books(books)
    assert [p.read_text() for p in kept] == ["run 3", "run 4"]
    removed = tmp_path / "books-embedded-20261201T020000Z.sqlite"
    assert lines[-1] == f"removed {removed}: the books of the last 2 embedded run(s) are kept ([ledger] embedded_keep)"
    assert not Path(f"{removed}-wal").exists()
    assert [r.getMessage() for r in caplog.records] == lines


def test_two_runs_in_one_second_get_two_names_in_order(tmp_path: Path) -> None:
    books = tmp_path / "books-embedded.sqlite"
    at = datetime(2026, 12, 1, 9, tzinfo=timezone.utc)
    for text in ("a", "b", "c"):
        a_run_wrote(books, text, at)
        set_aside(books, keep=5)
    assert [p.read_text() for p in earlier_books(books)] == ["a", "b", "c"]


def test_a_third_embedded_run_keeps_the_first_runs_books(tmp_path: Path) -> None:
    """Through the sidecar's own start: the wiring sets the books aside with the configured N."""
    from runtime.clock import ManualClock, utc
    from runtime.config import load_config
    from sidecar.runner import build

    conf = tmp_path / "config.toml"
    conf.write_text('[chain]\nmode = "model"\n[ledger]\npath = "books.sqlite"\nembedded_keep = 3\n[capture]\nenabled = false\n')
    config = load_config(conf)
    for hour in (1, 2, 3):
        running = build(config, ManualClock(utc(2026, 12, 1, hour)), manual=True)
        running.close()
        os.utime(tmp_path / "books-embedded.sqlite", (hour * 3600.0, hour * 3600.0))
    assert len(earlier_books(tmp_path / "books-embedded.sqlite")) == 2
    assert (tmp_path / "books-embedded.sqlite").exists()
