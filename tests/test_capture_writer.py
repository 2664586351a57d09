"""The capture writer: round trip, rotation by size and age, flush policies, failures."""

from __future__ import annotations

import errno
import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from capture import CaptureReader, CaptureWriteError, CaptureWriter, DeliveryRecord, OpaqueDelivery, RunEnd, RunStart
from capture.format import FILE_HEADER
from capture.reader import read_records
from capture.settings import CaptureSettings
from capture.writer import effective_config
from messages.chain import CreditAccount, Lease, LeaseItem
from messages.chain_actor import CreditCall
from messages.codec import encode
from messages.coins import Coin
from messages.credit import CreditRead
from messages.scheduler import ActiveLeasesRead
from runtime.clock import ManualClock, utc
from runtime.config import ConfigError, load_config
from runtime.dispatch import Delivery, ManualDispatcher, PooledActor
from replay.engine import Divergence, Replayer, RunBegins
from tests.support import eventually


def settings(tmp_path: Path, **kw) -> CaptureSettings:
    return CaptureSettings(directory=str(tmp_path / "cap"), **kw)


def delivery(seq: int, clock: ManualClock, message=None) -> Delivery:
    message = message or CreditRead(seq, CreditAccount("manifest1tenant", (Coin("umfx", 10**30 + seq),), 1))
    return Delivery(seq, clock.now(), "chain-io", "tenant/manifest1tenant", seq - 1, message)


def deliveries(records):
    return [r for r in records if isinstance(r, DeliveryRecord)]


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("background", [True, False])
def test_round_trip_with_run_header_and_end(tmp_path, clock, background):
    cfg = load_config(overrides={"scheduler": {"credit_check_error_threshold": 4}})
    writer = CaptureWriter(settings(tmp_path, background=background), clock_now=clock.now, config=cfg).open()
    sent = []
    for seq in range(1, 201):
        d = delivery(seq, clock)
        sent.append(d)
        writer(d)
        clock.advance(1)
    writer.close()
    records = read_records(writer.paths)
    start, end = records[0], records[-1]
    assert isinstance(start, RunStart) and isinstance(end, RunEnd)
    assert start.config == effective_config(cfg)
    assert start.config.keys() == cfg.effective().keys()
    assert start.config["scheduler"]["credit_check_error_threshold"] == 4
    assert start.clock == "ManualClock" and start.started_at == utc(2026, 3, 1)
    assert start.version and start.version != "unknown"
    assert end.records == 200 and end.run_id == start.run_id
    got = deliveries(records)
    assert [(r.seq, r.at, r.sender, r.recipient, r.cause, r.message) for r in got] == [
        (d.seq, d.at, d.sender, d.recipient, d.cause, d.message) for d in sent
    ]


def test_config_secrets_never_reach_the_capture(tmp_path, clock):
    cfg = load_config()
    secret_keys = {
        (name, f.name)
        for name, obj in cfg.sections.items()
        for f in __import__("dataclasses").fields(obj)
        if f.metadata.get("secret")
    }
    writer = CaptureWriter(settings(tmp_path), clock_now=clock.now, config=cfg).open()
    writer.close()
    start = read_records(writer.paths)[0]
    for section, key in secret_keys:
        assert key not in start.config[section]


def test_rotation_by_size_reads_back_in_order_from_a_directory(tmp_path, clock):
    s = settings(tmp_path, max_file_bytes=4096, background=False)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 301):
        writer(delivery(seq, clock))
    writer.close()
    assert len(writer.paths) > 5
    for p in writer.paths[:-1]:
        assert os.path.getsize(p) <= 4096
    # The reader orders files by the run and part they declare, not by the order given.
    shuffled = list(reversed(writer.paths))
    assert [r.seq for r in deliveries(read_records(shuffled))] == list(range(1, 301))
    assert [r.seq for r in deliveries(read_records([s.directory]))] == list(range(1, 301))


def test_rotation_by_age_follows_the_clock(tmp_path, clock):
    s = settings(tmp_path, max_file_age=timedelta(minutes=10), background=False)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 31):  # one record a minute for 30 minutes
        writer(delivery(seq, clock))
        clock.advance(60)
    writer.close()
    assert len(writer.paths) == 3
    # Each file holds the records of its ten minutes.
    per_file = [[r.seq for r in deliveries(read_records([p]))] for p in writer.paths]
    assert per_file[0][0] == 1 and per_file[1][0] == 11 and per_file[2][0] == 21


def _disk_records(path: str) -> int:
    return len(deliveries(read_records([path], skip_bad=True)))


def test_flush_policy_count(tmp_path, clock):
    s = settings(tmp_path, flush="count", flush_records=10, background=False)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 10):
        writer(delivery(seq, clock))
    assert _disk_records(writer.paths[0]) == 0
    writer(delivery(10, clock))
    assert _disk_records(writer.paths[0]) == 10
    writer(delivery(11, clock))
    assert _disk_records(writer.paths[0]) == 10
    writer.close()
    assert _disk_records(writer.paths[0]) == 11


def test_flush_policy_record(tmp_path, clock):
    writer = CaptureWriter(settings(tmp_path, flush="record", background=False), clock_now=clock.now).open()
    for seq in range(1, 6):
        writer(delivery(seq, clock))
        assert _disk_records(writer.paths[0]) == seq
    writer.close()


def test_flush_policy_interval(tmp_path, clock):
    mono = FakeMonotonic()
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(seconds=2), background=False)
    writer = CaptureWriter(s, clock_now=clock.now, monotonic=mono).open()
    writer(delivery(1, clock))
    mono.t += 1.0
    writer(delivery(2, clock))
    assert _disk_records(writer.paths[0]) == 0
    mono.t += 1.0
    writer(delivery(3, clock))
    assert _disk_records(writer.paths[0]) == 3
    writer.close()


def test_without_the_background_writer_the_interval_flushes_after_a_quiet_spell(tmp_path, clock):
    """No delivery after the first three: the interval still flushes them (a crash would lose them)."""
    mono = FakeMonotonic()
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(seconds=2), background=False)
    writer = CaptureWriter(s, clock_now=clock.now, monotonic=mono).open()
    for seq in range(1, 4):
        writer(delivery(seq, clock))
    writer.flush_due()
    assert _disk_records(writer.paths[0]) == 0  # not due yet
    mono.t += 2.0
    writer.flush_due()  # what the timer does, with the real clock, every half interval
    assert _disk_records(writer.paths[0]) == 3
    writer.close()  # with the real clock a timer does it (the next test)


def test_a_tap_just_before_the_writer_goes_idle_is_still_written(tmp_path, clock, monkeypatch):
    """The tap lands after the writer found the queue empty and before it said it was idle: no wake-up."""
    import capture.writer

    monkeypatch.setattr(capture.writer, "IDLE_WAIT_MAX_S", 60.0)  # only the re-check once idle can save it
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(milliseconds=100))
    writer = CaptureWriter(s, clock_now=clock.now).open()
    sink = writer._sink
    real_due_in = sink.due_in
    armed = threading.Event()

    def due_in():  # the writer thread calls this in that very window; another thread taps now
        if armed.is_set():
            armed.clear()
            tapper = threading.Thread(target=writer, args=(delivery(1, clock),))
            tapper.start()
            tapper.join()
        return real_due_in()

    sink.due_in = due_in
    armed.set()
    writer._wake.set()  # the idle writer goes round its loop once
    assert eventually(lambda: _disk_records(writer.paths[0]) == 1), "waited in vain for the delivery tapped in the window to be written"
    writer.close()


def test_an_idle_writer_asked_for_nothing_goes_back_to_sleep(tmp_path, clock):
    """flush() can mark the writer urgent after its mark was answered: with nothing queued it must not spin."""
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(milliseconds=100))
    writer = CaptureWriter(s, clock_now=clock.now).open()
    writer._urgent = True  # as a flush() that came in just after the writer answered its mark
    writer._wake.set()
    assert eventually(lambda: writer._idle and not writer._urgent), "waited in vain for the writer to go back to sleep"
    writer.close()


@pytest.mark.parametrize("background", [True, False])
def test_the_writer_flushes_on_its_own_when_the_interval_passes(tmp_path, clock, background):
    """The background writer, or without it the flush timer: three deliveries, then nothing."""
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(milliseconds=20), background=background)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 4):
        writer(delivery(seq, clock))
    assert eventually(lambda: _disk_records(writer.paths[0]) == 3), "waited in vain for the idle writer to flush"
    writer.close()


def test_flush_and_close_write_everything_even_with_a_long_interval(tmp_path, clock):
    s = settings(tmp_path, flush="interval", flush_interval=timedelta(hours=1))
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 51):
        writer(delivery(seq, clock))
    writer.flush()
    assert _disk_records(writer.paths[0]) == 50
    for seq in range(51, 101):
        writer(delivery(seq, clock))
    writer.close()
    records = read_records(writer.paths)
    assert len(deliveries(records)) == 100 and isinstance(records[-1], RunEnd)


def test_a_full_queue_makes_delivery_wait_instead_of_losing_records(tmp_path, clock):
    writer = CaptureWriter(settings(tmp_path, queue_records=16), clock_now=clock.now).open()
    for seq in range(1, 2001):
        writer(delivery(seq, clock))
    writer.close()
    assert writer.max_queue <= 16 + 1
    assert [r.seq for r in deliveries(read_records(writer.paths))] == list(range(1, 2001))


def test_flush_amid_taps_from_several_threads_writes_all_tapped_before_it(tmp_path, clock):
    """The writer takes deliveries in bulk while no flush is queued: a flush queued among them still waits for all before it."""
    writer = CaptureWriter(settings(tmp_path, flush="interval", flush_interval=timedelta(hours=1)),
                           clock_now=clock.now).open()
    tapped = [0, 0, 0]
    shortfalls = []
    first_flush = threading.Event()  # the taps go on after it, so flushes do come amid them

    def tap(n: int) -> None:
        for i in range(1500):
            if i == 750:
                first_flush.wait(30)
            writer(delivery(1 + n * 1500 + i, clock))
            tapped[n] += 1

    def flusher() -> None:
        while True:
            before = sum(tapped)  # every one of these was tapped before flush() began
            writer.flush()
            on_disk = sum(_disk_records(p) for p in writer.paths)
            if on_disk < before:
                shortfalls.append((before, on_disk))
            first_flush.set()
            if before == 4500:
                return

    threads = [threading.Thread(target=tap, args=(n,)) for n in range(3)] + [threading.Thread(target=flusher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    writer.close()
    assert shortfalls == []
    seqs = [r.seq for r in deliveries(read_records(writer.paths))]
    assert sorted(seqs) == list(range(1, 4501))
    for n in range(3):  # each thread's deliveries in the order it tapped them
        mine = [q for q in seqs if n * 1500 < q <= (n + 1) * 1500]
        assert mine == sorted(mine)


def test_a_message_that_cannot_be_encoded_is_captured_as_opaque(tmp_path, clock, caplog):
    writer = CaptureWriter(settings(tmp_path, background=False), clock_now=clock.now).open()
    with caplog.at_level("WARNING", logger="capture.writer"):
        writer(Delivery(1, clock.now(), "external", "scheduler", 0, object()))
    writer(delivery(2, clock))
    writer.close()
    got = deliveries(read_records(writer.paths))
    assert isinstance(got[0], OpaqueDelivery) and got[0].message == "builtins.object"
    assert got[1].seq == 2 and writer.unencodable == 1
    assert [r.getMessage() for r in caplog.records] == [
        "capture: builtins.object is not a registered message; captured as opaque (replay cannot feed it)"]


def test_capture_taps_a_real_dispatcher(tmp_path, clock):
    """Every delivery of a running actor system lands in the capture, in seq order per actor."""
    writer = CaptureWriter(settings(tmp_path), clock_now=clock.now).open()
    dispatcher = ManualDispatcher(clock.now, tap=writer)

    class Echo(PooledActor):
        def on_receive(self, message):
            if message.cycle < 5:
                self.actor_ref.tell(CreditCall(message.cycle + 1, message.tenant))

    ref = Echo.start(dispatcher, "tenant/a")
    ref.tell(CreditCall(0, "a"))
    dispatcher.run_until_idle()
    ref.stop(block=False)
    dispatcher.run_until_idle()
    writer.close()
    got = deliveries(read_records(writer.paths))
    assert [r.message.cycle for r in got] == [0, 1, 2, 3, 4, 5]
    assert [r.sender for r in got] == ["external"] + ["tenant/a"] * 5
    assert [r.cause for r in got[1:]] == [r.seq for r in got[:-1]]


def test_open_fails_clearly_when_the_directory_cannot_be_written(tmp_path, clock):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = CaptureSettings(directory=str(blocker / "cap"))
    with pytest.raises(CaptureWriteError, match="cannot start a capture"):
        CaptureWriter(s, clock_now=clock.now).open()


def test_a_disk_failure_stops_capture_not_the_sender(tmp_path, clock, monkeypatch):
    writer = CaptureWriter(settings(tmp_path, flush="record"), clock_now=clock.now).open()
    writer(delivery(1, clock))
    writer.flush()
    real_write = os.write

    def full(fd, data):
        if threading.current_thread().name == "capture-writer":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    for seq in range(2, 100):
        writer(delivery(seq, clock))  # never blocks, never raises
    with pytest.raises(CaptureWriteError, match="No space left"):
        writer.flush()
    monkeypatch.setattr(os, "write", real_write)
    writer.close()
    assert writer.dropped >= 97
    # What reached the disk before the failure is still readable.
    assert [r.seq for r in deliveries(read_records(writer.paths, skip_bad=True))] == [1]


def test_a_file_never_grows_past_max_file_bytes_with_the_types_a_record_declares(tmp_path, clock):
    """The first record of a new type comes with a types record: both count when deciding to rotate."""
    from messages.chain import ChainFailure
    from messages.credit import CreditReadFailed

    limit = 4096
    failed = CreditReadFailed(1, ChainFailure("credit_account", "unavailable", transient=True))
    for n in range(40, 80):  # the new type's record lands at every distance from the limit
        s = settings(tmp_path / str(n), max_file_bytes=limit, background=False)
        writer = CaptureWriter(s, clock_now=clock.now).open()
        for seq in range(1, n + 1):
            writer(delivery(seq, clock))
        writer(delivery(n + 1, clock, failed))
        for seq in range(n + 2, n + 5):
            writer(delivery(seq, clock))
        writer.close()
        sizes = [os.path.getsize(p) for p in writer.paths]
        assert max(sizes[:-1]) <= limit, (n, sizes)  # the last file also holds the run's end record
        assert [r.seq for r in deliveries(read_records(writer.paths))] == list(range(1, n + 5))


def test_file_names_sort_by_run_start_and_part(tmp_path, clock):
    writer = CaptureWriter(settings(tmp_path, max_file_bytes=4096, background=False), clock_now=clock.now,
                           run_id="abc123").open()
    for seq in range(1, 100):
        writer(delivery(seq, clock))
    writer.close()
    names = [Path(p).name for p in writer.paths]
    assert names == sorted(names)
    assert names[0] == "leasewarden-20260301T000000Z-abc123-0000.lwcap"
    with open(writer.paths[1], "rb") as fh:
        assert fh.read(FILE_HEADER.size)[:5] == b"LWCAP"
    assert len(CaptureReader(writer.paths).files) == len(names)


def test_lease_lists_read_back_from_every_rotated_file_on_its_own(tmp_path, clock):
    """The same Lease objects in every cycle: each file declares the types it holds."""
    leases = tuple(
        Lease(f"lease-{n}", "manifest1tenant", "prov", (LeaseItem("sku-1", 1, Coin("umfx", n + 1)),))
        for n in range(30)
    )
    s = settings(tmp_path, max_file_bytes=4096, background=False)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 41):
        # An unregistered message in the mix: the batch is retried row by row.
        message = ActiveLeasesRead(seq, leases) if seq % 7 else object()
        writer(Delivery(seq, clock.now(), "chain-io", "scheduler", seq - 1, message))
        clock.advance(60)
    writer.close()
    assert len(writer.paths) >= 3
    assert os.path.getsize(writer.paths[0]) <= 4096
    seen = []
    for p in writer.paths:
        got = deliveries(read_records([p]))  # each file alone
        assert got
        for r in got:
            if r.seq % 7:
                assert r.message == ActiveLeasesRead(r.seq, leases)
            else:
                assert isinstance(r, OpaqueDelivery)
            seen.append(r.seq)
    assert seen == list(range(1, 41))


def _capture_files(directory) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir() if p.name.endswith(".lwcap"))


def test_the_oldest_capture_files_go_to_keep_the_total_under_its_budget(tmp_path, clock, caplog):
    directory = tmp_path / "cap"
    # An earlier run's files, and files that are not captures: the budget never touches the latter.
    old = CaptureWriter(settings(tmp_path, max_file_bytes=4096, max_total_bytes=0, background=False), clock_now=clock.now).open()
    for seq in range(1, 101):
        old(delivery(seq, clock))
    old.close()
    old_files = _capture_files(directory)
    assert len(old_files) >= 3
    (directory / "notes.txt").write_text("operator's notes")
    (directory / "leasewarden-keep.lwcap").write_bytes(b"x" * 50_000)  # not a name the writer gives
    clock.advance(3600)
    budget = 20_000
    s = settings(tmp_path, max_file_bytes=4096, max_total_bytes=budget, background=False)
    with caplog.at_level("INFO", logger="capture.writer"):  # from the open: the first file may already prune
        writer = CaptureWriter(s, clock_now=clock.now).open()
        for seq in range(1, 201):
            writer(delivery(seq, clock))
            current = writer.paths[-1]
            written = [directory / f for f in _capture_files(directory) if f != "leasewarden-keep.lwcap"]
            # Within budget, but for the file being written (the budget is kept when a file starts).
            assert sum(p.stat().st_size for p in written if str(p) != current) <= budget
            assert os.path.exists(current)
    writer.close()
    left = _capture_files(directory)
    assert not set(old_files) & set(left)  # the earlier run went first, all of it
    assert "leasewarden-keep.lwcap" in left and (directory / "notes.txt").exists()
    assert "removed" in caplog.text and old_files[0] in caplog.text
    # What is left still reads: the run's first parts are gone, the rest in order.
    seqs = [r.seq for r in deliveries(read_records([str(directory / f) for f in left if f != "leasewarden-keep.lwcap"]))]
    assert seqs == list(range(seqs[0], 201)) and seqs[0] > 1
    # ... and replays: every file repeats its run's start, configuration included.
    events = list(Replayer().replay(
        CaptureReader([str(directory / f) for f in left if f != "leasewarden-keep.lwcap"], file_parts=True)
    ))
    [begins] = [e for e in events if isinstance(e, RunBegins)]
    assert begins.notices[0].startswith(f"run {writer.run_id} begins at part ")
    assert begins.version != "unknown"
    assert not [e for e in events if isinstance(e, Divergence)]


def test_a_budget_of_zero_keeps_every_file_and_a_budget_below_a_file_is_refused(tmp_path, clock):
    s = settings(tmp_path, max_file_bytes=4096, max_total_bytes=0, background=False)
    writer = CaptureWriter(s, clock_now=clock.now).open()
    for seq in range(1, 201):
        writer(delivery(seq, clock))
    writer.close()
    assert len(_capture_files(s.directory)) == len(writer.paths) > 5
    with pytest.raises(ConfigError, match=r"\[capture\] max_total_bytes must be 0 .* or at least max_file_bytes"):
        load_config(overrides={"capture": {"max_file_bytes": 1 << 20, "max_total_bytes": 4096}})


def test_node_url_credentials_never_reach_a_capture_file(tmp_path: Path, clock) -> None:
    cfg = load_config(overrides={"node": {
        "grpc_url": "grpc+https://alice:s3cr3tpass@grpc.example.net:443",
        "websocket_url": "wss://rpc.example.net/v3/a1b2c3d4e5f6a7b8c9d0e1f2/websocket",
    }})
    writer = CaptureWriter(CaptureSettings(directory=str(tmp_path / "cap"), background=False),
                           clock_now=clock.now, config=cfg).open()
    writer.close()
    raw = b"".join(Path(p).read_bytes() for p in writer.paths)
    assert b"s3cr3tpass" not in raw
    assert b"a1b2c3d4e5f6a7b8c9d0e1f2" not in raw
    # and the masked capture still replays: its configuration is rebuilt
    from replay.config import replay_config
    start = next(e.record for e in CaptureReader(writer.paths) if type(e.record).__name__ == "RunStart")
    replay_config(start.config)
