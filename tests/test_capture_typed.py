"""Capture formats 4 and 5 (``capture.typed``): every message type round-trips typed; bad records cost only themselves.

The writer's own files are read back in ``test_capture_writer``; here files
are also made by hand, to hold what no writer of this build makes: a type
this build does not know, a type table that differs from this build's, a
sequence number out of range.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from capture import CaptureReader, CaptureWriter, CorruptRecord, DeliveryRecord, NewerSchemaInCapture, UnknownTypeInCapture
from capture.format import FILE_HEADER, FILE_MAGIC, FORMAT_VERSION, OpaqueDelivery, frame
from capture.reader import read_records
from capture.settings import CaptureSettings
from capture.interning import LeaseInterner
from capture.typed import TypedDecoder, TypedEncoder, type_table
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.codec import registry
from messages.coins import Coin
from messages.credit import CreditRead
from messages.scheduler import ActiveLeasesRead, Wake
from messages.tx_cost import TxCost
from runtime.clock import ManualClock, utc
from runtime.dispatch import Delivery
from tests.support import addr
from tests.test_codec import build

AT = utc(2026, 3, 1, 12)


def _row(seq: int, message, cause: int = 0) -> list:
    return [seq, AT, "chain-io", "tenant/x", cause, message]


def _write4(path: Path, bodies: list, table: list | None = None) -> list[int]:
    """A format 4 file from raw bodies (encoded as msgspec writes them), after its header and type table."""
    enc = TypedEncoder()
    out = bytearray(FILE_HEADER.pack(FILE_MAGIC, 4))
    part = [2, {"run": "r1", "run_started_at": AT, "part": 0, "opened_at": AT}]
    offsets = []
    for body in [part, [5, type_table() if table is None else table], *bodies]:
        offsets.append(len(out))
        out += frame(body if isinstance(body, bytes) else enc.encode(body))
    path.write_bytes(bytes(out))
    return offsets[2:]


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_registered_type_round_trips_typed_in_format_4(name: str) -> None:
    value = build(registry()[name])
    body = TypedEncoder().encode((0, [_row(1, value)]))
    [record] = TypedDecoder(4).deliveries(body)
    assert type(record) is DeliveryRecord and record.message == value and type(record.message) is type(value)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_registered_type_round_trips_typed_in_format_5_its_leases_by_number(name: str) -> None:
    value = build(registry()[name])
    rows, defs, _ = LeaseInterner().frame([_row(1, value), _row(2, value)])
    body = TypedEncoder().encode((0, rows, defs))
    first, second = TypedDecoder(5).deliveries(body)
    for record in (first, second):
        assert type(record) is DeliveryRecord and record.message == value and type(record.message) is type(value)


def test_this_build_writes_format_5() -> None:
    assert FORMAT_VERSION == 5


def test_the_writer_reads_back_typed_with_a_big_amount_and_a_lease_list(tmp_path: Path) -> None:
    clock = ManualClock(AT)
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path), background=False), clock_now=clock.now).open()
    lease = Lease("u1", addr("t"), "p", (LeaseItem("sku", 2, Coin("umfx", 3)),), last_settled_at=AT,
                  reservation=(Coin("umfx", 2**200),))
    sent = [
        CreditRead(1, CreditAccount(addr("t"), (Coin("umfx", 2**255 - 19),), 1), leases=(lease,)),
        ActiveLeasesRead(2, (lease,) * 3),
        Wake("interval", 7),
    ]
    for i, m in enumerate(sent, 1):
        writer(Delivery(i, clock.now(), "chain-io", "tenant/x", 0, m))
    writer.close()
    got = [e.record.message for e in CaptureReader(writer.paths) if type(e.record) is DeliveryRecord]
    assert got == sent
    assert got[0].account.balances[0].amount == 2**255 - 19 and type(got[0].account.balances[0].amount) is int


def test_an_int_beyond_64_bits_outside_a_coin_is_captured_as_opaque_not_unreadable(tmp_path: Path) -> None:
    clock = ManualClock(AT)
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path), background=False), clock_now=clock.now).open()
    writer(Delivery(1, AT, "chain-io", "chain", 0, TxCost(gas_used=2**70)))
    writer(Delivery(2, AT, "chain-io", "chain", 0, TxCost(gas_used=70)))
    writer.close()
    records = [e.record for e in CaptureReader(writer.paths) if isinstance(e.record, DeliveryRecord)]
    assert [type(r) for r in records] == [OpaqueDelivery, DeliveryRecord]
    assert records[0].message == "messages.tx_cost.TxCost" and records[1].message == TxCost(gas_used=70)
    assert writer.unencodable == 1


def test_a_message_of_no_registered_type_is_an_opaque_delivery(tmp_path: Path) -> None:
    class NotAMessage:
        pass

    clock = ManualClock(AT)
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path), background=False), clock_now=clock.now).open()
    writer(Delivery(1, AT, "external", "scheduler", 0, NotAMessage()))
    writer(Delivery(2, AT, "external", "scheduler", 0, "a plain string"))
    writer.close()
    records = [e.record for e in CaptureReader(writer.paths) if isinstance(e.record, DeliveryRecord)]
    assert [type(r) for r in records] == [OpaqueDelivery, OpaqueDelivery]
    assert records[0].message.endswith("NotAMessage") and records[1].message == "builtins.str"


def test_an_unknown_type_costs_only_its_record_and_is_named(tmp_path: Path) -> None:
    path = tmp_path / "a.lwcap"
    [offset] = _write4(path, [[0, [_row(1, Wake("interval")), _row(2, ["lease_teleported", "u"]), _row(3, Wake("check"))]]])
    with pytest.raises(UnknownTypeInCapture, match="record 1 of the frame: unknown message type 'lease_teleported'") as err:
        read_records([path])
    assert err.value.offset == offset
    reader = CaptureReader([path], skip_bad=True)
    assert [e.record.seq for e in reader] == [1, 3] and reader.skipped.by_kind == {"unknown-type": 1}


def test_a_sequence_number_out_of_range_is_a_corrupt_record(tmp_path: Path) -> None:
    path = tmp_path / "a.lwcap"
    _write4(path, [[0, [_row(0, Wake("interval"))]], [0, [_row(2**53, Wake("interval"))]], [0, [_row(5, Wake("check"))]]])
    with pytest.raises(CorruptRecord, match="record 0 of the frame"):
        read_records([path])
    reader = CaptureReader([path], skip_bad=True)
    assert [e.record.seq for e in reader] == [5] and reader.skipped.by_kind == {"corrupt": 2}


def test_a_field_added_since_at_the_end_takes_its_default(tmp_path: Path) -> None:
    """A file whose writer had fewer fields (a prefix of ours) reads on the typed path."""
    table = [e if e[1] != "wake" else [e[0], "wake", 1, ["reason"]] for e in type_table()]
    path = tmp_path / "a.lwcap"
    _write4(path, [[0, [_row(1, ["wake", "interval"])]]], table)
    assert [e.record.message for e in CaptureReader([path])] == [Wake("interval", 0)]


def test_a_file_with_other_field_orders_is_read_by_name(tmp_path: Path) -> None:
    """Fields moved (or renamed away): the reader maps the writer's fields by name, nested messages too."""
    table = []
    for e in type_table():
        if e[1] == "wake":
            e = [e[0], "wake", 1, ["token", "reason"]]
        elif e[1] == "coin":
            e = [e[0], "coin", 1, ["amount", "denom"]]
        table.append(e)
    path = tmp_path / "a.lwcap"
    account = ["credit_account", addr("t"), [["coin", msgspec.msgpack.Ext(2, str(2**100).encode()), "umfx"]]]
    _write4(path, [[0, [_row(1, ["wake", 9, "interval"]), _row(2, ["credit_read", 4, account])]]], table)
    got = [e.record.message for e in CaptureReader([path])]
    assert got == [Wake("interval", 9), CreditRead(4, CreditAccount(addr("t"), (Coin("umfx", 2**100),)))]


def test_a_newer_schema_version_is_named(tmp_path: Path) -> None:
    table = [e if e[1] != "wake" else [e[0], "wake", 2, e[3]] for e in type_table()]
    path = tmp_path / "a.lwcap"
    _write4(path, [[0, [_row(1, ["wake", "interval", 0]), _row(2, ["coin", "umfx", 1])]]], table)
    with pytest.raises(NewerSchemaInCapture, match="'wake' has schema version 2"):
        read_records([path])
    reader = CaptureReader([path], skip_bad=True)
    assert [e.record.message for e in reader] == [Coin("umfx", 1)]
