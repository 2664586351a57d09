"""Captures written by earlier capture formats still replay, with no divergence.

The files under ``tests/captures/`` were written by older builds (their
README says which and how). A build that changes the format keeps a decoder
for each older version (``capture.reader``); these tests hold it to that.

``format3/`` was written by the last build to write format 3, whose
decisions are today's: it replays with no divergence. ``format3-a183828/``
is from before lease events were hints: its records must all still decode
and replay to the end. ``format3-d1c62e2/`` is from before the reads had
heights: its records must all still decode, with the fields added since at
their defaults, and replay to the end (where today's decisions differ from
those builds', replay says so: that is its job).

``format4/`` was written by the last build to write format 4 (msgspec,
typed, every lease written whole), whose decisions are today's too: it
replays with no divergence, read by the format 4 decoder this build keeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.cores import build_core
from capture import CaptureReader
from capture.format import DeliveryRecord, RunStart
from messages.chain_actor import NodeStatusAnswered
from messages.codec import registry
from messages.credit import CloseRequested, CreditRead
from replay.engine import Divergence, Replayer, RunEnds

CAPTURES = Path(__file__).parent / "captures"
FORMAT3 = sorted((CAPTURES / "format3").glob("*.lwcap"))
BEFORE_HINTS = sorted((CAPTURES / "format3-a183828").glob("*.lwcap"))
BEFORE_HEIGHTS = sorted((CAPTURES / "format3-d1c62e2").glob("*.lwcap"))
FORMAT4 = sorted((CAPTURES / "format4").glob("*.lwcap"))


@pytest.mark.parametrize(
    "files", [FORMAT3, BEFORE_HINTS, BEFORE_HEIGHTS], ids=["format3", "format3-a183828", "format3-d1c62e2"]
)
def test_the_format_3_captures_are_there_and_are_format_3(files: list[Path]) -> None:
    assert [p.name for p in files] == ["demo-model-12m.lwcap", "e2e-closures.lwcap"]
    for path in files:
        assert path.read_bytes()[8:10] == (3).to_bytes(2, "big")
    assert sum(p.stat().st_size for p in files) < 200_000


@pytest.mark.parametrize("path", FORMAT3, ids=lambda p: p.stem)
def test_a_format_3_capture_replays_with_no_divergence(path: Path) -> None:
    events = list(Replayer(build_core).replay(CaptureReader([path], file_parts=True)))
    assert [e for e in events if isinstance(e, Divergence)] == []
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.inputs > 100 and end.matched > 100


@pytest.mark.parametrize("files", [FORMAT3, BEFORE_HINTS], ids=["format3", "format3-a183828"])
def test_the_reads_of_a_format_3_capture_carry_their_heights(files: list[Path]) -> None:
    messages = [e.record.message for path in files for e in CaptureReader([path]) if type(e.record) is DeliveryRecord]
    reads = [m for m in messages if isinstance(m, CreditRead)]
    assert reads and all(r.height > 0 and r.account.height >= r.height for r in reads)
    assert any(m.block_times for m in messages if isinstance(m, NodeStatusAnswered))


@pytest.mark.parametrize("path", BEFORE_HEIGHTS, ids=lambda p: p.stem)
def test_a_capture_from_before_the_heights_decodes_whole_with_the_new_fields_at_their_defaults(path: Path) -> None:
    entries = list(CaptureReader([path]))
    deliveries = [e.record for e in entries if type(e.record) is DeliveryRecord]
    assert len(deliveries) > 200
    registered = set(registry().values())
    assert all(type(d.message) in registered for d in deliveries)
    messages = [d.message for d in deliveries]
    reads = [m for m in messages if isinstance(m, CreditRead)]
    assert reads and all(r.height == 0 and r.account.height == 0 for r in reads)
    assert all(m.read_height == 0 for m in messages if isinstance(m, CloseRequested))
    assert all(m.block_times == () for m in messages if isinstance(m, NodeStatusAnswered))


@pytest.mark.parametrize("path", BEFORE_HINTS, ids=lambda p: p.stem)
def test_a_capture_from_before_the_hints_decodes_whole_and_replays_to_its_end(path: Path) -> None:
    entries = list(CaptureReader([path]))
    deliveries = [e.record for e in entries if type(e.record) is DeliveryRecord]
    assert len(deliveries) > 200
    registered = set(registry().values())
    assert all(type(d.message) in registered for d in deliveries)
    events = list(Replayer(build_core).replay(CaptureReader([path], file_parts=True)))
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.inputs > 100 and end.matched > 50


@pytest.mark.parametrize("path", BEFORE_HEIGHTS, ids=lambda p: p.stem)
def test_a_capture_from_before_the_heights_replays_to_its_end(path: Path) -> None:
    events = list(Replayer(build_core).replay(CaptureReader([path], file_parts=True)))
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.inputs > 100 and end.matched > 50


@pytest.mark.parametrize(
    "files", [FORMAT3, BEFORE_HINTS, BEFORE_HEIGHTS], ids=["format3", "format3-a183828", "format3-d1c62e2"]
)
def test_a_format_3_capture_reads_back_its_big_amount_exactly(files: list[Path]) -> None:
    """The e2e capture funds a tenant with 2**70 umfx: beyond 64 bits, so written as the big-int ext."""
    reader = CaptureReader([p for p in files if p.name == "e2e-closures.lwcap"])
    amounts = {
        c.amount
        for e in reader
        if type(e.record) is DeliveryRecord and type(e.record.message).__name__ == "CreditRead"
        for c in e.record.message.account.balances
    }
    assert 2**70 in amounts


def test_every_format_3_capture_starts_a_run() -> None:
    for path in FORMAT3 + BEFORE_HINTS + BEFORE_HEIGHTS:
        first = next(iter(CaptureReader([path])))
        assert isinstance(first.record, RunStart) and first.record.format == 3


def test_the_format_4_captures_are_there_and_are_format_4() -> None:
    assert [p.name for p in FORMAT4] == ["demo-model-12m.lwcap", "e2e-closures.lwcap"]
    for path in FORMAT4:
        assert path.read_bytes()[8:10] == (4).to_bytes(2, "big")
        first = next(iter(CaptureReader([path])))
        assert isinstance(first.record, RunStart) and first.record.format == 4
    assert sum(p.stat().st_size for p in FORMAT4) < 200_000


@pytest.mark.parametrize("path", FORMAT4, ids=lambda p: p.stem)
def test_a_format_4_capture_replays_with_no_divergence(path: Path) -> None:
    events = list(Replayer(build_core).replay(CaptureReader([path], file_parts=True)))
    assert [e for e in events if isinstance(e, Divergence)] == []
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.inputs > 200 and end.matched > 200


def test_a_format_4_capture_reads_back_its_reads_and_its_big_amount() -> None:
    messages = [e.record.message for path in FORMAT4 for e in CaptureReader([path]) if type(e.record) is DeliveryRecord]
    reads = [m for m in messages if isinstance(m, CreditRead)]
    assert reads and all(r.height > 0 and r.account.height >= r.height for r in reads)
    assert any(r.leases for r in reads)
    assert 2**70 in {c.amount for r in reads for c in r.account.balances}
    assert any(m.block_times for m in messages if isinstance(m, NodeStatusAnswered))
