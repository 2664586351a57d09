"""Reading lazily (``CaptureReader.batches(lazy=True)``): messages left as bytes until a replay asks for them.

A replay of one tenant decodes only the records it replays; every frame is
still checked (CRC, sequence numbers, addresses), and a file that declares a
type this build does not know is read whole, so that a record of that type
is refused where it is, as an eager read refuses it.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from capture import CaptureReader, CaptureWriter, CorruptRecord, DeliveryRecord, UnknownTypeInCapture
from capture.format import FILE_HEADER, FILE_MAGIC, OpaqueDelivery, frame
from capture.settings import CaptureSettings
from capture.typed import TypedEncoder, type_table
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.coins import Coin
from messages.credit import CreditRead
from messages.scheduler import ActiveLeasesRead, Wake
from runtime.clock import ManualClock, utc
from runtime.dispatch import Delivery
from tests.support import addr

AT = utc(2026, 3, 1, 12)
CAPTURES = Path(__file__).parent / "captures"


def _written(tmp_path: Path) -> list[str]:
    clock = ManualClock(AT)
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path / "cap")), clock_now=clock.now).open()
    leases = tuple(Lease(f"lease-{n}", addr("t"), "prov", (LeaseItem("sku", 1, Coin("umfx", n + 1)),)) for n in range(3))
    for seq in range(1, 40):
        m = (ActiveLeasesRead(seq, leases), CreditRead(seq, CreditAccount(addr("t"), (Coin("umfx", 10**30),)), leases=leases),
             Wake("check", seq), object())[seq % 4]
        writer(Delivery(seq, clock.now(), "chain-io", "scheduler", 0, m))
        clock.advance(1)
    writer.close()
    return writer.paths


def test_lazy_batches_hold_each_message_as_bytes_and_materialize_to_the_eager_record(tmp_path: Path) -> None:
    paths = _written(tmp_path)
    eager = [r for _, _, records, _ in CaptureReader(paths).batches() for r in records]
    reader = CaptureReader(paths)
    lazy = []
    for path, offset, records, start in reader.batches(lazy=True):
        for i, r in enumerate(records):
            if type(r) is DeliveryRecord:
                assert type(r.message) is msgspec.Raw
                r = reader.materialize(r, path, offset, start + i if start >= 0 else -1)
            lazy.append(r)  # materialized while its frame is the one being read
    assert lazy == eager
    assert [type(r) for r in lazy if isinstance(r, DeliveryRecord)].count(OpaqueDelivery) == 10  # seq 3, 7, ..., 39


@pytest.mark.parametrize("folder", ["format3", "format4"])
def test_a_lazy_read_of_an_older_format_gives_what_an_eager_one_does(folder: str) -> None:
    paths = sorted((CAPTURES / folder).glob("*.lwcap"))
    reader = CaptureReader(paths)
    lazy = [reader.materialize(r, path, offset) for path, offset, records, _ in reader.batches(lazy=True) for r in records]
    assert lazy == [r for _, _, records, _ in CaptureReader(paths).batches() for r in records]


def _write4(path: Path, rows: list, table: list) -> int:
    """A format 4 file: header, type table, one deliveries frame of ``rows``; the frame's offset."""
    enc = TypedEncoder()
    out = bytearray(FILE_HEADER.pack(FILE_MAGIC, 4))
    for body in [[2, {"run": "r1", "run_started_at": AT, "part": 0, "opened_at": AT}], [5, table]]:
        out += frame(enc.encode(body))
    offset = len(out)
    out += frame(enc.encode([0, rows]))
    path.write_bytes(bytes(out))
    return offset


def test_a_file_declaring_a_type_this_build_does_not_know_is_read_whole_so_its_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.lwcap"
    table = type_table() + [[len(type_table()), "lease_teleported", 1, ["lease_uuid"]]]
    rows = [[1, AT, "chain-io", "tenant/x", 0, ["wake", "check", 0]], [2, AT, "chain-io", "tenant/x", 0, ["lease_teleported", "u"]]]
    _write4(path, rows, table)
    with pytest.raises(UnknownTypeInCapture, match="record 1 of the frame: unknown message type 'lease_teleported'"):
        for _ in CaptureReader([path]).batches(lazy=True):
            pass
    reader = CaptureReader([path], skip_bad=True)
    got = [r for _, _, records, _ in reader.batches(lazy=True) for r in records]
    assert [type(r.message) for r in got] == [Wake] and reader.skipped.by_kind == {"unknown-type": 1}


def test_a_message_that_does_not_decode_is_reported_when_it_is_asked_for(tmp_path: Path) -> None:
    """Intact frame, a message of a known type whose fields are wrong: found when it is materialized."""
    path = tmp_path / "a.lwcap"
    rows = [[1, AT, "chain-io", "tenant/x", 0, ["wake", "check", 0]], [2, AT, "chain-io", "tenant/x", 0, ["wake", 7, "x"]]]
    offset = _write4(path, rows, type_table())
    with pytest.raises(CorruptRecord):
        list(CaptureReader([path]))
    reader = CaptureReader([path])
    [(p, o, records, start)] = [b for b in reader.batches(lazy=True) if type(b[2][0]) is DeliveryRecord]
    assert reader.materialize(records[0], p, o, start).message == Wake("check")
    with pytest.raises(CorruptRecord, match="record 1 of the frame") as err:
        reader.materialize(records[1], p, o, start + 1)
    assert err.value.path == str(path) and err.value.offset == offset
    skipping = CaptureReader([path], skip_bad=True)
    [(p, o, records, start)] = [b for b in skipping.batches(lazy=True) if type(b[2][0]) is DeliveryRecord]
    assert skipping.materialize(records[1], p, o, start + 1) is None and skipping.skipped.by_kind == {"corrupt": 1}
