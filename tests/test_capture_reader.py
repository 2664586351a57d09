"""The capture reader on bad logs: errors that name file and offset, --skip-bad counts, fuzz."""

from __future__ import annotations

import random
import time
from pathlib import Path

import msgpack
import pytest

from capture import (
    CaptureError,
    CaptureReader,
    CaptureWriter,
    CorruptRecord,
    DeliveryRecord,
    MissingPart,
    NewerCaptureFormat,
    NewerSchemaInCapture,
    NotACapture,
    OlderCaptureFormat,
    TruncatedRecord,
    UnknownTypeInCapture,
)
from capture.format import FILE_HEADER, FILE_MAGIC, FORMAT_VERSION, FRAME_HEADER, OLDEST_FORMAT_VERSION, frame
from capture.reader import read_records
from capture.settings import CaptureSettings
from capture.wire import BIN_MARKS_SINCE, EXT_DEFINE, EXT_TYPE_REF, CaptureEncoder
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.coins import Coin
from messages.credit import CreditRead
from messages.scheduler import ActiveLeasesRead
from runtime.clock import ManualClock, utc
from runtime.dispatch import Delivery
from tests.support import addr


def write_capture(tmp_path: Path, n: int = 20, **kw) -> list[str]:
    clock = ManualClock(utc(2026, 3, 1))
    s = CaptureSettings(directory=str(tmp_path / "cap"), background=False, **kw)
    writer = CaptureWriter(s, clock_now=clock.now, config={"scheduler": {"x": 1}}).open()
    for seq in range(1, n + 1):
        msg = CreditRead(seq, CreditAccount(addr("t"), (Coin("umfx", 1000 - seq),), 1))
        writer(Delivery(seq, clock.now(), "chain-io", "tenant/manifest1t", 0, msg))
        clock.advance(1)
    writer.close()
    return writer.paths


def frame_offsets(path: str) -> list[int]:
    """Start of every frame in a well-formed file."""
    data = Path(path).read_bytes()
    pos, out = FILE_HEADER.size, []
    while pos < len(data):
        out.append(pos)
        _, length, _ = FRAME_HEADER.unpack_from(data, pos)
        pos += FRAME_HEADER.size + length
    return out


def offset_of(path: str, seq: int) -> int:
    """The frame holding delivery ``seq`` (the sync writer puts one delivery in each)."""
    return next(e.offset for e in CaptureReader([path]) if getattr(e.record, "seq", None) == seq)


def seqs(records) -> list[int]:
    return [r.seq for r in records if isinstance(r, DeliveryRecord)]


def test_truncated_tail_is_reported_with_file_and_offset(tmp_path):
    [path] = write_capture(tmp_path)
    offsets = frame_offsets(path)
    last = offsets[-1]  # the RunEnd record
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: last + 7])  # a crash in the middle of the last frame
    with pytest.raises(TruncatedRecord) as err:
        read_records([path])
    assert err.value.path == path and err.value.offset == last
    assert f"{path}: byte {last}: " in str(err.value)
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == list(range(1, 21))
    assert (reader.skipped.frames, reader.skipped.records) == (1, 0) and reader.skipped.by_kind == {"truncated": 1}
    assert reader.skipped.bytes == 7


def test_every_cut_point_gives_the_records_before_it_and_one_error(tmp_path):
    [path] = write_capture(tmp_path, n=5)
    data = Path(path).read_bytes()
    offsets = frame_offsets(path) + [len(data)]
    # Records each frame yields (the file header and type tables yield none).
    per_frame = {o: 0 for o in offsets}
    for e in CaptureReader([path]):
        per_frame[e.offset] += 1
    for cut in range(len(data)):
        Path(path).write_bytes(data[:cut])
        reader = CaptureReader([path], skip_bad=True)
        got = list(reader)
        if cut < offsets[1]:  # the file header itself is cut: the file is skipped
            assert got == [] and reader.skipped.files == 1
            continue
        # Every frame that ends at or before the cut, nothing of the one it cuts.
        expected = sum(per_frame[start] for start, end in zip(offsets, offsets[1:]) if end <= cut)
        assert len(got) == expected
        assert reader.skipped.total == (0 if cut in offsets else 1)


def test_corrupt_record_in_the_middle(tmp_path):
    [path] = write_capture(tmp_path)
    bad = offset_of(path, 5)
    data = bytearray(Path(path).read_bytes())
    data[bad + FRAME_HEADER.size + 3] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CorruptRecord, match="CRC mismatch") as err:
        read_records([path])
    assert err.value.offset == bad and err.value.path == path
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [s for s in range(1, 21) if s != 5]
    assert reader.skipped.by_kind == {"corrupt": 1} and (reader.skipped.frames, reader.skipped.records) == (1, 0)


def test_damaged_length_resyncs_at_the_next_intact_record(tmp_path):
    [path] = write_capture(tmp_path)
    bad, next_frame = offset_of(path, 5), offset_of(path, 6)
    data = bytearray(Path(path).read_bytes())
    data[bad + 2 : bad + 6] = (2**31).to_bytes(4, "big")  # a length far past the end
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CaptureError) as err:
        read_records([path])
    assert err.value.offset == bad
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [s for s in range(1, 21) if s != 5]
    assert reader.skipped.bytes == next_frame - bad


def _write_raw(path: Path, bodies: list, version: int = 3, types: list | None = None) -> list[int]:
    """A capture file in format ``version`` (3 by default: flat, ``capture.wire``) from raw record bodies;
    returns each frame's offset.

    Messages in the bodies are encoded flat; the types they use (plus
    ``types``, raw ``[index, name, version, [fields]]`` entries) are declared
    in a types record right after the file header. For a ``version`` before
    bin marks, bodies are written as that version wrote them (``_with_ext_marks``).
    """
    enc = CaptureEncoder()
    older = _with_ext_marks if version < BIN_MARKS_SINCE else (lambda body: body)
    encoded = [body if isinstance(body, bytes) else older(enc.encode(body)) for body in bodies]
    table = [t.to_wire() for t in enc.take_new()] + (types or [])
    out = bytearray(FILE_HEADER.pack(FILE_MAGIC, version))
    offsets = []
    part = [2, {"run": "r1", "run_started_at": utc(2026, 3, 1), "part": 0, "opened_at": utc(2026, 3, 1)}]
    head = [enc.encode(part)] + ([enc.encode([5, table])] if table else [])
    for body in head + encoded:
        offsets.append(len(out))
        out += frame(body)
    path.write_bytes(bytes(out))
    return [offsets[0]] + offsets[len(head):]


def _with_ext_marks(body: bytes) -> bytes:
    """A body as capture formats 1 and 2 wrote it: type and definition marks as exts, not bins."""

    def head(values: list) -> list:
        if values and type(values[0]) is bytes:
            values[0] = msgpack.ExtType(EXT_TYPE_REF if len(values[0]) == 2 else EXT_DEFINE, values[0])
        return values

    value = msgpack.unpackb(body, list_hook=head, timestamp=3, strict_map_key=False)
    return msgpack.packb(value, datetime=True, use_bin_type=True)


def _ref(index: int) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_TYPE_REF, index.to_bytes(2, "big"))


def _delivery_body(seq: int, message) -> bytes:
    return msgpack.packb([0, [[seq, utc(2026, 3, 1), "chain-io", "tenant/x", 0, message]]], datetime=True)


def test_unknown_message_type_names_file_and_offset(tmp_path):
    path = tmp_path / "a.lwcap"
    offsets = _write_raw(path, [
        [0, [[1, utc(2026, 3, 1), "chain-io", "tenant/x", 0, Coin("umfx", 1)]]],
        _delivery_body(2, [_ref(7), "u"]),
        [0, [[3, utc(2026, 3, 1), "chain-io", "tenant/x", 0, Coin("umfx", 3)]]],
    ], types=[[7, "lease_teleported", 1, ["lease_uuid"]]])
    with pytest.raises(UnknownTypeInCapture, match="lease_teleported") as err:
        read_records([path])
    assert err.value.offset == offsets[2] and err.value.path == str(path)
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [1, 3]
    assert reader.skipped.by_kind == {"unknown-type": 1}
    assert "1 unknown-type" in reader.skipped.summary()


def test_one_bad_delivery_in_a_batch_costs_only_itself(tmp_path):
    path = tmp_path / "a.lwcap"
    at = utc(2026, 3, 1)
    offsets = _write_raw(path, [msgpack.packb([0, [
        [1, at, "chain-io", "tenant/x", 0, "fine"],
        [2, at, "chain-io", "tenant/x", 0, [_ref(7), "u"]],
        [3, at, "chain-io", "tenant/x", 0, "fine too"],
    ]], datetime=True)], types=[[7, "lease_teleported", 1, ["lease_uuid"]]])
    with pytest.raises(UnknownTypeInCapture, match="record 1 of the frame") as err:
        read_records([path])
    assert err.value.offset == offsets[1]
    entries = list(CaptureReader([path], skip_bad=True))
    assert [(e.record.seq, e.index) for e in entries] == [(1, 0), (3, 2)]
    assert entries[0].where() == f"{path}:{offsets[1]}[0]"
    # Frame by frame: the records before the bad one come first, then the
    # bad one is raised (or skipped), then the rest, each run with its index.
    seen = []
    with pytest.raises(UnknownTypeInCapture):
        for _, _, records, start in CaptureReader([path]).batches():
            seen.append(([r.seq for r in records], start))
    assert seen == [([1], 0)]
    batches = [([r.seq for r in records], start) for _, _, records, start in CaptureReader([path], skip_bad=True).batches()]
    assert batches == [([1], 0), ([3], 2)]


def test_each_bad_delivery_names_its_own_error_when_one_holds_several(tmp_path):
    """Record 0 holds two undecodable messages: record 1's error is still record 1's own."""
    path = tmp_path / "a.lwcap"
    at = utc(2026, 3, 1)
    _write_raw(path, [msgpack.packb([0, [
        [1, at, "chain-io", "tenant/x", 0, ([_ref(7), "u"], [_ref(8), "v"])],
        [2, at, "chain-io", "tenant/x", 0, [_ref(9), "w"]],
        [3, at, "chain-io", "tenant/x", 0, "fine"],
    ]], datetime=True)], types=[[7, "lease_teleported", 1, ["lease_uuid"]], [8, "lease_vanished", 1, ["lease_uuid"]],
                                [9, "lease_doubled", 1, ["lease_uuid"]]])
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [3]
    assert [str(p).split("byte ")[1].split(": ", 1)[1] for p in reader.skipped.problems] == [
        "record 0 of the frame: unknown message type 'lease_teleported'",
        "record 1 of the frame: unknown message type 'lease_doubled'",
    ]


def test_records_with_a_valid_crc_but_impossible_values_are_corrupt_records(tmp_path):
    """Numbers no writer makes: a sequence number below 1 or past 2**53, a 400-digit clock speed, int config keys."""
    from capture.format import RunStart

    at = utc(2026, 3, 1)
    start = RunStart("r1", at, "0.1.0", "ManualClock", 1.0, {"scheduler": {"withdraw_interval": "1h"}}).to_body()
    huge_speed = [start[0], {**start[1], "clock_speed": 10**400}]
    endless_speed = [start[0], {**start[1], "clock_speed": float("inf")}]
    int_keys = [start[0], {**start[1], "config": {"scheduler": {1: "x", "y": 2}}}]
    path = tmp_path / "a.lwcap"
    offsets = _write_raw(path, [
        _delivery_body(-5, "m"),
        _delivery_body(2**62, "m"),
        huge_speed,
        int_keys,
        endless_speed,
        _delivery_body(7, "fine"),
    ])
    with pytest.raises(CorruptRecord, match="sequence number -5 or cause 0 out of range") as err:
        read_records([path])
    assert err.value.offset == offsets[1]
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [7]
    assert reader.skipped.by_kind == {"corrupt": 5}
    kept = [str(p) for p in reader.skipped.problems]
    assert "OverflowError" in kept[2] and "config is not {section: {key: value}}" in kept[3]
    assert "clock_speed inf is not in (0, 1e+06]" in kept[4]


def count_crc_bytes(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Make the reader count the bytes it computes CRCs over, in the list returned (one item)."""
    import capture.reader as capture_reader

    counted = [0]
    real_crc = capture_reader.frame_crc

    def counting_crc(length, body):  # type: ignore[no-untyped-def]
        counted[0] += len(body)
        return real_crc(length, body)

    monkeypatch.setattr(capture_reader, "frame_crc", counting_crc)
    return counted


def test_damage_crafted_to_cost_a_crc_per_byte_is_read_in_linear_time(tmp_path, monkeypatch):
    """Every 10 bytes a frame mark whose length runs exactly to the end: each one a CRC of the rest."""
    import struct

    from capture.format import FRAME_MARK
    from capture.reader import RESYNC_CRC_FACTOR, RESYNC_CRC_SLACK

    path = tmp_path / "a.lwcap"
    _write_raw(path, [_delivery_body(1, "fine")])
    n = 100_000  # 1 MB: quadratic, about 20 s here; linear, well under a second
    tail = b"".join(FRAME_MARK + struct.pack(">II", (n - i) * 10 - 10, 0) for i in range(n))
    path.write_bytes(path.read_bytes() + tail)
    crc_bytes = count_crc_bytes(monkeypatch)
    with pytest.raises(CorruptRecord, match="CRC mismatch"):
        read_records([path])
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [1] and reader.skipped.total >= 1
    # Two reads, each resync bounded by RESYNC_CRC_FACTOR times the bytes it searched, plus a slack.
    assert crc_bytes[0] <= 2 * (RESYNC_CRC_FACTOR * len(tail) + RESYNC_CRC_SLACK + 2 * len(tail))


def test_a_crc_budget_shared_by_a_files_resyncs_keeps_many_damaged_regions_linear(tmp_path, monkeypatch):
    """With --skip-bad every damaged region is a resync of its own: the budget is the file's, not each one's."""
    import struct

    from capture.format import FRAME_MARK
    from capture.reader import RESYNC_CRC_FACTOR, RESYNC_CRC_SLACK

    path = tmp_path / "a.lwcap"
    _write_raw(path, [_delivery_body(1, "fine")])
    intact = frame(CaptureEncoder().encode([0, [[2, utc(2026, 3, 1), "chain-io", "tenant/x", 0, "tiny"]]]))
    units = 4_000  # each: 7 marks whose lengths run to the end of the file, then an intact frame
    unit = 7 * 10 + len(intact)
    head = path.read_bytes()
    out = bytearray(head)
    for u in range(units):
        for k in range(7):
            rest = (units - u) * unit - (k + 1) * 10
            out += FRAME_MARK + struct.pack(">II", rest, 0)
        out += intact
    path.write_bytes(bytes(out))
    crc_bytes = count_crc_bytes(monkeypatch)
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader)[0] == 1 and reader.skipped.total >= 1
    # The resyncs spend the budget; each damaged frame met on the way costs two CRCs (reading it,
    # then saying why it is bad), at most what its region's resync spends: three budgets at most.
    assert crc_bytes[0] <= 3 * (RESYNC_CRC_FACTOR * len(out) + RESYNC_CRC_SLACK)


def test_newer_schema_version_names_file_and_offset(tmp_path):
    path = tmp_path / "a.lwcap"
    offsets = _write_raw(path, [_delivery_body(1, [_ref(0), "umfx", 1])], types=[[0, "coin", 7, ["denom", "amount"]]])
    with pytest.raises(NewerSchemaInCapture, match="schema version 7") as err:
        read_records([path])
    assert err.value.offset == offsets[1]
    reader = CaptureReader([path], skip_bad=True)
    assert list(reader) == [] and reader.skipped.by_kind == {"newer-schema": 1}


def test_newer_format_and_unknown_record_kind(tmp_path):
    newer = tmp_path / "newer.lwcap"
    _write_raw(newer, [], version=FORMAT_VERSION + 1)
    with pytest.raises(NewerCaptureFormat, match="newer") as err:
        read_records([newer])
    assert err.value.offset == len(FILE_MAGIC)
    kind = tmp_path / "kind.lwcap"
    offsets = _write_raw(kind, [[9, {"hologram": True}]])
    with pytest.raises(NewerCaptureFormat, match="record kind 9") as err:
        read_records([kind])
    assert err.value.offset == offsets[1]


def test_not_a_capture_and_empty_files(tmp_path):
    text = tmp_path / "notes.lwcap"
    text.write_text("hello, this is not a capture\n")
    with pytest.raises(NotACapture, match="not a leasewarden capture") as err:
        read_records([text])
    assert err.value.path == str(text) and err.value.offset == 0
    empty = tmp_path / "empty.lwcap"
    empty.write_bytes(b"")
    with pytest.raises(TruncatedRecord):
        read_records([empty])
    reader = CaptureReader([text, empty], skip_bad=True)
    assert list(reader) == [] and reader.skipped.files == 2


def test_a_missing_middle_part_is_reported(tmp_path):
    paths = write_capture(tmp_path, n=300, max_file_bytes=4096)
    assert len(paths) >= 4
    with pytest.raises(MissingPart, match="part\\(s\\) 2..2") as err:
        read_records(paths[:2] + paths[3:])
    assert err.value.path == paths[3]
    reader = CaptureReader(paths[:2] + paths[3:], skip_bad=True)
    got = seqs(e.record for e in reader)
    assert got == sorted(got) and len(got) < 300 and reader.skipped.by_kind == {"missing-part": 1}


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(4)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] = rng.randrange(256)
        elif op == 1:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 12)))
        elif op == 2 and b:
            del b[i : i + rng.randint(1, 40)]
        else:
            b = b[: rng.randint(0, len(b))]
    return bytes(b)


def test_fuzz_random_and_damaged_logs_give_only_documented_errors(tmp_path):
    """Seeded: the same cases every run. Never a crash, never a hang."""
    rng = random.Random(20260301)
    [good] = write_capture(tmp_path, n=12)
    good_bytes = Path(good).read_bytes()
    target = tmp_path / "fuzz.lwcap"
    started = time.monotonic()
    outcomes = {"ok": 0, "error": 0}
    recovered = 0
    for case in range(400):
        if case % 4 == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            if rng.random() < 0.5:  # random bytes behind a valid header reach the frame parser
                data = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION) + data
        else:
            data = _mutate(rng, good_bytes)
        target.write_bytes(data)
        try:
            read_records([target])
            outcomes["ok"] += 1
        except CaptureError:
            outcomes["error"] += 1
        reader = CaptureReader([target], skip_bad=True)
        records = list(reader)  # skip_bad never raises
        if case % 4:
            # Damage never invents records (the CRC sees to that); many survive it.
            got = seqs(e.record for e in records)
            assert len(got) <= 12 and got == sorted(set(got))
            recovered += len(got)
        assert time.monotonic() - started < 15, "the reader is too slow on damaged input"
    assert outcomes["error"] > 250
    assert recovered > 300 * 12 // 4  # cuts and a damaged file header lose more


def test_fuzz_valid_frames_around_random_bodies(tmp_path):
    """Bodies with a correct CRC reach the decoder: it too may only raise capture errors."""
    rng = random.Random(7)
    target = tmp_path / "bodies.lwcap"
    enc = CaptureEncoder()
    good_body = enc.encode([0, [[1, utc(2026, 3, 1), "a", "b", 0, CreditRead(1, CreditAccount("t", ()))]]])
    types = [t.to_wire() for t in enc.take_new()]
    for _ in range(300):
        if rng.random() < 0.5:
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        else:
            body = _mutate(rng, good_body)
        _write_raw(target, [body, body], types=types)
        try:
            read_records([target])
        except CaptureError:
            pass
        reader = CaptureReader([target], skip_bad=True)
        list(reader)
        assert reader.skipped.records in (0, 2)


def test_older_formats_refused_and_version_1_files_still_read(tmp_path):
    older = tmp_path / "older.lwcap"
    _write_raw(older, [], version=OLDEST_FORMAT_VERSION - 1)
    with pytest.raises(OlderCaptureFormat, match="older") as err:
        read_records([older])
    assert err.value.offset == len(FILE_MAGIC) and err.value.kind == "older-format"
    # Version 1 is version 2 without interned objects: read as it always was.
    v1 = tmp_path / "v1.lwcap"
    _write_raw(v1, [[0, [[1, utc(2026, 3, 1), "chain-io", "tenant/x", 0, Coin("umfx", 1)]]]], version=1)
    assert [r.message for r in read_records([v1])] == [Coin("umfx", 1)]


def test_version_2_files_with_ext_marks_and_interned_leases_still_read(tmp_path):
    lease = Lease("lease-1", addr("tenant"), "prov", (LeaseItem("sku-1", 1, Coin("umfx", 2)),))
    enc = CaptureEncoder({"lease": "uuid"})
    at = utc(2026, 3, 1)
    bodies = [_with_ext_marks(enc.encode([0, [[seq, at, "chain-io", "scheduler", 0, ActiveLeasesRead(seq, (lease,))]]]))
              for seq in (1, 2)]
    read = msgpack.unpackb(bodies[0], timestamp=3)[1][0][5]  # [mark, cycle, [lease]]
    assert (read[0].code, read[2][0][0].code) == (EXT_TYPE_REF, EXT_DEFINE)  # written as format 2 wrote it
    v2 = tmp_path / "v2.lwcap"
    _write_raw(v2, bodies, version=2, types=[t.to_wire() for t in enc.take_new()])
    first, second = (r.message for r in read_records([v2]))
    assert first == ActiveLeasesRead(1, (lease,)) and second == ActiveLeasesRead(2, (lease,))
    assert second.leases[0] is first.leases[0]  # the back-reference resolved to the defined object


def test_a_lost_definition_costs_the_records_that_refer_to_it_with_file_and_offset(tmp_path):
    lease = Lease("lease-1", addr("tenant"), "prov", (LeaseItem("sku-1", 1, Coin("umfx", 2)),))
    enc = CaptureEncoder({"lease": "uuid"})
    at = utc(2026, 3, 1)
    bodies = [enc.encode([0, [[seq, at, "chain-io", "scheduler", 0, ActiveLeasesRead(seq, (lease,))]]])
              for seq in range(1, 4)]
    path = tmp_path / "a.lwcap"
    offsets = _write_raw(path, [[0, [[1, at, "chain-io", "scheduler", 0, "placeholder"]]]] + bodies[1:],
                         types=[t.to_wire() for t in enc.take_new()])
    with pytest.raises(CorruptRecord, match="object 0") as err:
        read_records([path])
    assert err.value.offset == offsets[2]
    reader = CaptureReader([path], skip_bad=True)
    assert seqs(e.record for e in reader) == [1]
    assert reader.skipped.by_kind == {"corrupt": 2}


def test_fuzz_bodies_with_interned_objects(tmp_path):
    """Damaged definitions and back-references give only capture errors too."""
    rng = random.Random(11)
    target = tmp_path / "interned.lwcap"
    leases = tuple(Lease(f"l{n}", "t", "p", (LeaseItem("s", 1, Coin("umfx", n + 1)),)) for n in range(3))
    enc = CaptureEncoder({"lease": "uuid"})
    at = utc(2026, 3, 1)
    good = [enc.encode([0, [[seq, at, "a", "b", 0, ActiveLeasesRead(seq, leases)]]]) for seq in (1, 2)]
    types = [t.to_wire() for t in enc.take_new()]
    for _ in range(300):
        bodies = [_mutate(rng, good[0]) if rng.random() < 0.5 else good[0], _mutate(rng, good[1])]
        _write_raw(target, bodies, types=types)
        try:
            read_records([target])
        except CaptureError:
            pass
        reader = CaptureReader([target], skip_bad=True)
        got = list(reader)
        assert len(got) <= 2 and all(type(e.record) is DeliveryRecord for e in got)


def test_a_file_in_the_first_nested_layout_is_called_older_not_corrupt(tmp_path):
    """The first format 1 builds wrote one record per delivery, messages in the codec's ext form."""
    at = utc(2026, 3, 1)
    nested = tmp_path / "nested.lwcap"
    offsets = _write_raw(nested, [
        msgpack.packb([0, 1, at, "chain-io", "tenant/x", 0, msgpack.ExtType(1, b"\x93\xa4coin\x01\x80")], datetime=True),
        msgpack.packb([4, 2, at, "chain-io", "tenant/x", 1, "some.Type"], datetime=True),
        msgpack.packb([0, 3, at, "chain-io", "tenant/x", 2, 7], datetime=True),
    ], version=1)
    with pytest.raises(OlderCaptureFormat, match="nested layout") as err:
        read_records([nested])
    assert err.value.path == str(nested) and err.value.offset == offsets[1]
    reader = CaptureReader([nested], skip_bad=True)
    assert list(reader) == [] and reader.skipped.by_kind == {"older-format": 3}
