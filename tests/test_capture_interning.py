"""Capture format 5 (``capture.interning``): a lease is written once per version per file, and read back exactly.

Written by the capture writer and read back by the reader, except where a
file must hold what no writer makes (a reference to a lease no frame
defined, a frame overlapping the last one's numbers).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from capture import CaptureReader, CaptureWriter, CorruptRecord, DeliveryRecord, OpaqueDelivery
from capture.format import FILE_HEADER, FILE_MAGIC, frame
from capture.interning import LeaseInterner, SettledVersion, lease_fields, ONE, OPTIONAL, MANY
from capture.reader import read_records
from capture.settings import CaptureSettings
from capture.typed import TypedEncoder, type_table
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.coins import Coin
from messages.credit import CreditRead, LeaseOpened, LeasesSynced
from messages.scheduler import ActiveLeasesRead, LeaseRead, Wake
from messages.tx_cost import TxCost
from runtime.clock import ManualClock, utc
from runtime.dispatch import Delivery
from tests.support import addr

AT = utc(2026, 3, 1, 12)
TENANT = addr("tenant")


def lease(n: int, **kw) -> Lease:
    values = dict(state="ACTIVE", created_at=AT, last_settled_at=AT, min_lease_duration_at_creation=3600,
                  reservation=(Coin("umfx", 3600),))
    values.update(kw)
    return Lease(f"0000000{n}-lease", TENANT, "prov", (LeaseItem("sku", 1, Coin("umfx", n + 1)),), **values)


def written(tmp_path: Path, messages: list, **settings) -> tuple[CaptureWriter, list]:
    clock = ManualClock(AT)
    s = CaptureSettings(directory=str(tmp_path / "cap"), **{"background": False, **settings})
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq, m in enumerate(messages, 1):
        writer(Delivery(seq, clock.now(), "chain-io", "scheduler", 0, m))
        clock.advance(1)
    writer.close()
    return writer, [e.record for e in CaptureReader(writer.paths) if isinstance(e.record, DeliveryRecord)]


def test_the_lease_fields_of_the_message_types_are_found_from_their_annotations() -> None:
    assert lease_fields(CreditRead) == ((3, MANY),)
    assert lease_fields(LeaseOpened) == ((0, ONE),)
    assert lease_fields(LeaseRead) == ((1, OPTIONAL),)
    assert lease_fields(Wake) == () and lease_fields(Lease) == ()


class LeasesByTenant(msgspec.Struct, frozen=True, array_like=True):
    """Not a registered message (that would reach every capture this test session writes)."""

    leases: dict[str, Lease]


def test_a_message_holding_leases_another_way_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"LeasesByTenant.leases holds leases as .*capture.interning"):
        lease_fields(LeasesByTenant)


def test_a_lease_seen_again_unchanged_is_written_once_and_read_back_as_one_object(tmp_path: Path) -> None:
    leases = tuple(lease(n) for n in range(20))
    account = CreditAccount(TENANT, (Coin("umfx", 10**9),), 20)
    sent = [
        ActiveLeasesRead(1, leases),
        LeasesSynced(leases),
        CreditRead(1, account, leases=tuple(Lease(**msgspec.structs.asdict(x)) for x in leases)),  # equal, not the same
        ActiveLeasesRead(2, leases),
    ]
    writer, got = written(tmp_path, sent)
    assert [r.message for r in got] == sent
    first = got[0].message.leases
    for r in got[1:]:
        assert all(a is b for a, b in zip(r.message.leases, first))  # the one definition of each
    whole = len(TypedEncoder().encode(leases[0]))
    assert os.path.getsize(writer.paths[0]) < 20 * whole + 2_000  # each lease once, not four times


def test_a_settled_lease_is_written_as_its_new_settlement_and_read_back_whole(tmp_path: Path) -> None:
    before = tuple(lease(n) for n in range(10))
    after = tuple(msgspec.structs.replace(x, last_settled_at=AT + timedelta(hours=1), reservation=(Coin("umfx", 1),))
                  for x in before)
    closed = msgspec.structs.replace(after[0], state="CLOSED", closed_at=AT + timedelta(hours=2), reservation=())
    interner = LeaseInterner()
    rows = [(1, AT, "a", "b", 0, ActiveLeasesRead(1, before)), (2, AT, "a", "b", 0, ActiveLeasesRead(2, after)),
            (3, AT, "a", "b", 0, LeaseRead(closed.uuid, closed))]
    _, (index, columns, values, settled), _ = interner.frame(rows)
    assert index == list(range(10)) + [20] and len(columns) == len(Lease.__struct_fields__)
    assert list(columns[0]) == [x.uuid for x in before] + [closed.uuid]
    # items and reservation as indices into their distinct values: one items value per price, two reservations
    assert len(values) == 2 and len(values[0]) == 10 and values[1] == [(Coin("umfx", 3600),), ()]
    assert settled[0] == SettledVersion(10, 0, AT + timedelta(hours=1), (Coin("umfx", 1),)) and len(settled) == 10
    _, got = written(tmp_path, [m for *_, m in rows])
    assert [r.message for r in got] == [m for *_, m in rows]
    assert got[2].message.lease == closed and got[1].message.leases == after


def test_an_optional_lease_of_none_and_an_empty_list_stay_so(tmp_path: Path) -> None:
    sent = [LeaseRead("u", None), ActiveLeasesRead(1, ()), LeaseOpened(lease(1)), LeaseRead("u", lease(1))]
    _, got = written(tmp_path, sent)
    assert [r.message for r in got] == sent


def test_each_rotated_file_defines_its_own_leases_and_reads_on_its_own(tmp_path: Path) -> None:
    leases = tuple(lease(n) for n in range(10))
    writer, _ = written(tmp_path, [ActiveLeasesRead(seq, leases) for seq in range(1, 400)], max_file_bytes=4096)
    assert len(writer.paths) >= 3
    seen = []
    for path in writer.paths:
        got = [r for r in read_records([path]) if isinstance(r, DeliveryRecord)]  # each file alone
        assert all(r.message == ActiveLeasesRead(r.seq, leases) for r in got)
        seen += [r.seq for r in got]
    assert seen == list(range(1, 400))


def test_a_record_that_cannot_be_encoded_leaves_the_numbering_whole(tmp_path: Path) -> None:
    """The batch is encoded again without it: the leases its first encoding numbered are numbered anew."""
    leases = tuple(lease(n) for n in range(5))
    clock = ManualClock(AT)
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path / "cap")), clock_now=clock.now).open()
    sent = [ActiveLeasesRead(1, leases), TxCost(gas_used=2**70), LeasesSynced(leases[:2]), ActiveLeasesRead(3, leases)]
    for seq, m in enumerate(sent, 1):
        writer(Delivery(seq, clock.now(), "chain-io", "scheduler", 0, m))
    writer.flush()
    writer(Delivery(5, clock.now(), "chain-io", "scheduler", 0, ActiveLeasesRead(5, leases)))  # the next frame refers back
    writer.close()
    got = [e.record for e in CaptureReader(writer.paths) if isinstance(e.record, DeliveryRecord)]
    assert [type(r) for r in got] == [DeliveryRecord, OpaqueDelivery, DeliveryRecord, DeliveryRecord, DeliveryRecord]
    assert [r.message for i, r in enumerate(got) if i != 1] == [sent[0], sent[2], sent[3], ActiveLeasesRead(5, leases)]


def _write5(path: Path, bodies: list) -> list[int]:
    """A format 5 file from raw deliveries bodies, after its header and type table; each body's offset."""
    enc = TypedEncoder()
    out = bytearray(FILE_HEADER.pack(FILE_MAGIC, 5))
    part = [2, {"run": "r1", "run_started_at": AT, "part": 0, "opened_at": AT}]
    offsets = []
    for body in [part, [5, type_table()], *bodies]:
        offsets.append(len(out))
        out += frame(body if isinstance(body, bytes) else enc.encode(body))
    path.write_bytes(bytes(out))
    return offsets[2:]


def _frames(messages: list) -> list[tuple]:
    interner = LeaseInterner()
    out = []
    for seq, m in enumerate(messages, 1):
        rows, defs, _ = interner.frame([(seq, AT, "chain-io", "scheduler", 0, m)])
        out.append((0, rows, defs))
    return out


def test_a_lease_defined_in_a_damaged_frame_costs_the_records_that_refer_to_it_not_a_wrong_lease(tmp_path: Path) -> None:
    one, two = lease(1), lease(2)
    path = tmp_path / "a.lwcap"
    offsets = _write5(path, _frames([ActiveLeasesRead(1, (one,)), ActiveLeasesRead(2, (two,)),
                                     ActiveLeasesRead(3, (one, two)), Wake("check"), ActiveLeasesRead(5, (one,))]))
    raw = bytearray(path.read_bytes())
    raw[offsets[1] + 12] ^= 0xFF  # a byte of the frame that defines lease 2 (index 1): its CRC fails
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecord, match="CRC mismatch"):
        read_records([path])
    reader = CaptureReader([path], skip_bad=True)
    got = [e.record for e in reader]
    assert [r.seq for r in got] == [1, 4, 5]
    assert got[0].message == ActiveLeasesRead(1, (one,)) and got[2].message == ActiveLeasesRead(5, (one,))
    assert reader.skipped.by_kind == {"corrupt": 2}  # the damaged frame, and the record naming its lease
    assert any("refers to lease 1, which no intact frame of this file defines" in str(p) for p in reader.skipped.problems)


def test_a_frame_numbering_leases_below_the_last_ones_is_corrupt(tmp_path: Path) -> None:
    a, b = _frames([ActiveLeasesRead(1, (lease(1),)), ActiveLeasesRead(2, (lease(2),))])
    path = tmp_path / "a.lwcap"
    _write5(path, [a, (0, b[1], ([0], *b[2][1:]))])  # the second frame numbers its lease 0 again
    with pytest.raises(CorruptRecord, match="lease definitions from index 0, where the file's next index is 1"):
        read_records([path])


def _file5(path: Path, table: list, bodies: list) -> None:
    enc = TypedEncoder()
    out = bytearray(FILE_HEADER.pack(FILE_MAGIC, 5))
    for body in [[2, {"run": "r1", "run_started_at": AT, "part": 0, "opened_at": AT}], [5, table], *bodies]:
        out += frame(enc.encode(body))
    path.write_bytes(bytes(out))


def test_a_format_5_file_with_other_field_orders_is_read_by_name_with_its_leases(tmp_path: Path) -> None:
    one, two = lease(1), lease(2, state="CLOSED", closed_at=AT)
    rows, (index, columns, values, settled), _ = LeaseInterner().frame(
        [(1, AT, "chain-io", "scheduler", 0, ActiveLeasesRead(1, (one, two, one)))])
    names = list(Lease.__struct_fields__)
    names[0], names[1] = names[1], names[0]  # a build whose Lease had tenant first
    columns = [columns[1], columns[0], *columns[2:]]
    table = []
    for e in type_table():
        if e[1] == "wake":
            e = [e[0], "wake", 1, ["token", "reason"]]
        elif e[1] == "lease":
            e = [e[0], "lease", 1, names]
        table.append(e)
    path = tmp_path / "a.lwcap"
    _file5(path, table, [(0, rows + [(2, AT, "clock", "scheduler", 1, ["wake", 7, "check"])], (index, columns, values, settled))])
    got = [r.message for r in read_records([path])]
    assert got == [ActiveLeasesRead(1, (one, two, one)), Wake("check", 7)]


def test_a_format_5_file_from_before_a_lease_field_was_added_reads_typed_with_its_default(tmp_path: Path) -> None:
    """Its lease columns are the first of this build's fields: the last one takes its default."""
    old = lease(1)
    rows, (index, columns, values, settled), _ = LeaseInterner().frame([(1, AT, "chain-io", "scheduler", 0, LeaseOpened(old))])
    names = list(Lease.__struct_fields__)
    assert names[-1] == "ended_at" and old.ended_at is None
    table = [e if e[1] != "lease" else [e[0], "lease", 1, names[:-1]] for e in type_table()]
    path = tmp_path / "a.lwcap"
    _file5(path, table, [(0, rows, (index, columns[:-1], values, settled))])
    [record] = read_records([path])
    assert record.message == LeaseOpened(old)


def test_a_lease_that_cannot_be_encoded_makes_only_its_messages_opaque(tmp_path: Path, caplog) -> None:
    """An int beyond 64 bits outside a coin, in a lease: its definition would be unreadable, so the
    messages holding it are captured as opaque, and the other leases are numbered as if it never came.
    The log says why, and does not call a registered message unregistered."""
    good, bad = lease(1), lease(2, min_lease_duration_at_creation=2**70)
    sent = [ActiveLeasesRead(1, (good,)), ActiveLeasesRead(2, (good, bad)), LeaseOpened(good), LeaseOpened(bad)]
    for background in (False, True):  # a frame each, or all four in one frame
        caplog.clear()
        with caplog.at_level("WARNING", logger="capture.writer"):
            _, got = written(tmp_path / str(background), sent, background=background)
        assert [type(r) for r in got] == [DeliveryRecord, OpaqueDelivery, DeliveryRecord, OpaqueDelivery]
        assert got[0].message == sent[0] and got[2].message == sent[2]
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 2 and all("cannot be encoded" in w and "not a registered" not in w for w in warned)
