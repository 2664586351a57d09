"""Captures written by earlier capture formats still replay, with no divergence.

The files under ``tests/captures/`` were written by older builds (their
README says which and how). A build that changes the format keeps a decoder
for each older version (``capture.reader``); these tests hold it to that.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.cores import build_core
from capture import CaptureReader
from capture.format import DeliveryRecord, RunStart
from replay.engine import Divergence, Replayer, RunEnds

CAPTURES = Path(__file__).parent / "captures"
FORMAT3 = sorted((CAPTURES / "format3").glob("*.lwcap"))


def test_the_format_3_captures_are_there_and_are_format_3() -> None:
    assert [p.name for p in FORMAT3] == ["demo-model-12m.lwcap", "e2e-closures.lwcap"]
    for path in FORMAT3:
        assert path.read_bytes()[8:10] == (3).to_bytes(2, "big")
    assert sum(p.stat().st_size for p in FORMAT3) < 200_000


@pytest.mark.parametrize("path", FORMAT3, ids=lambda p: p.stem)
def test_a_format_3_capture_replays_with_no_divergence(path: Path) -> None:
    events = list(Replayer(build_core).replay(CaptureReader([path], file_parts=True)))
    assert [e for e in events if isinstance(e, Divergence)] == []
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.inputs > 100 and end.matched > 100


def test_a_format_3_capture_reads_back_its_big_amount_exactly() -> None:
    """The e2e capture funds a tenant with 2**70 umfx: beyond 64 bits, so written as the big-int ext."""
    reader = CaptureReader([CAPTURES / "format3" / "e2e-closures.lwcap"])
    amounts = {
        c.amount
        for e in reader
        if type(e.record) is DeliveryRecord and type(e.record.message).__name__ == "CreditRead"
        for c in e.record.message.account.balances
    }
    assert 2**70 in amounts


def test_every_format_3_capture_starts_a_run() -> None:
    for path in FORMAT3:
        first = next(iter(CaptureReader([path])))
        assert isinstance(first.record, RunStart) and first.record.format == 3
