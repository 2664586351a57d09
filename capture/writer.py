"""The capture writer: a delivery tap that appends every delivered message to a log.

``CaptureWriter`` is a ``runtime.dispatch.DeliveryTap``: give it to the
dispatcher (``tap=writer``) and every message handed to an actor is appended
with its sequence number, clock time, sender, recipient and cause. The first
record of a run is a ``RunStart``: version, start time, clock and the
effective configuration (``Config.effective()``, secrets already left out).

Cheap for the actors: with ``background = true`` (the default) the tap only
appends the delivery to a queue; a writer thread gathers deliveries for up
to ``GATHER_S`` (or until a batch of ``BATCH_RECORDS`` waits), encodes the
batch in one msgspec call (``capture.typed``; each lease as the number of its
definition in the file, ``capture.interning``), frames it (``capture.format``) and
writes: few wake-ups, one CRC and one buffer append per batch, little
contention with the actors for the interpreter. The queue is bounded: when
it is full a delivering thread waits for room rather than losing a record,
since a capture with holes cannot be replayed. ``flush()`` returns once everything
tapped before it is written out; ``close()`` (a clean stop) writes
everything and a ``RunEnd`` record.

Files rotate by size and by age (clock time of the records, so a test on a
manual clock rotates deterministically) under ``directory``, named
``leasewarden-<run start>-<run id>-<part>.lwcap``; each begins with a header
naming its run and part, then declares every message type met so far in the
run (``capture.typed``), so that each file reads on its own; a type met
later is declared just before the frame that first holds it. When a file starts,
the oldest capture files are removed until all fit in ``max_total_bytes``
(``_Sink._prune``), so that a sidecar left alone for months does not fill
its disk. When records reach the OS is the flush policy
(``CaptureSettings.flush``). Frames are appended whole, so what a crash
leaves is whole records plus at most one partial one, which the reader
reports as truncated; how many records a crash can lose before that is what
the flush policy bounds (``record`` with ``background = false``: none but the
one being written; with batches, the frame being written).

A disk that fails (full, read-only) stops the capture, not the sidecar: the
error is logged once, kept in ``failed``, raised by ``flush()``, and later
records are counted in ``dropped``.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from capture.errors import CaptureWriteError
from capture.format import (
    FILE_HEADER,
    FILE_MAGIC,
    FILE_SUFFIX,
    FORMAT_VERSION,
    FRAME_HEADER,
    KIND_DELIVERIES,
    KIND_TYPES,
    FilePart,
    RunEnd,
    RunStart,
    frame,
)
from capture.settings import CaptureSettings
from capture.interning import LeaseInterner
from capture.typed import OpaqueRecord, TypedEncoder, contained_types
from messages.codec import CodecError
from runtime.config import format_duration
from runtime.dispatch import Delivery
from runtime.version import sidecar_version

__all__ = ["CaptureWriter", "effective_config"]

logger = logging.getLogger(__name__)

#: Buffered bytes that are written out whatever the policy, so a slow flush
#: policy cannot hold an unbounded amount of memory.
MAX_BUFFER_BYTES = 4 * 1024 * 1024

#: Deliveries the background writer packs into one frame at most: one
#: framing, CRC and buffer append for many records. A crash loses at most
#: the frame being written.
#:
#: Each wake-up of the writer hands the interpreter lock over and back:
#: futex calls, and an I/O thread (the websocket listener) kept waiting for
#: the lock while the writer encodes. Waking per 1,024 deliveries or 100 ms
#: instead of per 256 or 20 ms halved the CPU the capture cost on the
#: lease-event path (12.7% to 6.0% per CPU second, alternating trials in one
#: process, ``bench/capture_overhead.py``) and cut it on full cycles too.
BATCH_RECORDS = 1024

#: Longest a delivery waits in the queue before the writer takes it (when
#: fewer than a batch are waiting). The ``interval`` flush policy bounds it
#: to half its interval, so that records still reach the OS in time.
GATHER_S = 0.1

#: The names the writer gives its files: the only files the size budget
#: (``max_total_bytes``) ever removes; anything else in the directory stays.
CAPTURE_FILE_NAME = re.compile(r"^leasewarden-(\d{8}T\d{6})Z-([0-9A-Za-z]+)-(\d{4,})" + re.escape(FILE_SUFFIX) + "$")

#: How long ``close()`` waits for the writer thread to drain its queue.
CLOSE_TIMEOUT_S = 60.0

#: Longest the idle writer sleeps without looking at its queue: a wake-up
#: lost to a race between a tap and the writer going idle costs at most this
#: long, never records left unwritten until the next batch fills up.
IDLE_WAIT_MAX_S = 1.0


def _exact_duration(value: timedelta) -> str:
    """A duration text ``runtime.config.parse_duration`` reads back exactly."""
    micros = value // timedelta(microseconds=1)
    if micros % 1_000_000 == 0:
        return format_duration(value)
    if micros % 1000 == 0:
        return f"{micros // 1000}ms"
    return repr(micros / 1_000_000)


def effective_config(config: Any) -> dict[str, dict[str, Any]]:
    """``config.effective()`` (secrets left out), with sub-second durations kept exact.

    ``format_duration`` writes whole seconds, so a 100 ms setting would read
    back as ``0s`` (and fail its minimum) when a replay rebuilds the config.
    """
    if config is None:
        return {}
    if not hasattr(config, "effective"):
        return {name: dict(values) for name, values in config.items()}
    out = config.effective()
    for name, values in out.items():
        obj = config.sections.get(name)
        for key in values:
            v = getattr(obj, key, None)
            if isinstance(v, timedelta) and v % timedelta(seconds=1):
                values[key] = _exact_duration(v)
    return out


def _clock_of(clock_now: Callable[[], datetime]) -> tuple[str, float]:
    owner = getattr(clock_now, "__self__", None)
    if owner is None:
        return "unknown", 1.0
    return type(owner).__name__, float(getattr(owner, "speed", 1.0))


class _Sink:
    """Frames to files: the write buffer, the flush policy and rotation.

    Used by one thread at a time (the writer thread, or the tap under a lock).
    """

    def __init__(
        self,
        settings: CaptureSettings,
        start: RunStart,
        monotonic: Callable[[], float],
        declarations: Callable[[], bytes | None],
    ) -> None:
        self.settings = settings
        #: The run's start, repeated in every file's header.
        self.start = start
        #: The framed type table of every message type met so far (each file declares it).
        self.declarations = declarations
        self.directory = Path(settings.directory)
        self.run_id = start.run_id
        self.run_started_at = start.started_at
        self.monotonic = monotonic
        self.max_bytes = settings.max_file_bytes
        self.max_age = settings.max_file_age if settings.max_file_age.total_seconds() > 0 else None
        self.policy = settings.flush
        self.flush_records = settings.flush_records
        self.flush_interval = settings.flush_interval.total_seconds()
        self.fd: int | None = None
        self.path: str | None = None
        self.part = -1
        self.file_bytes = 0
        self.file_records = 0
        self.file_opened_at: datetime | None = None
        self.buffer = bytearray()
        self.buffered = 0
        self.buffered_since = 0.0
        self.paths: list[str] = []
        self.bytes_written = 0

    def _file_name(self, part: int) -> str:
        stamp = self.run_started_at.strftime("%Y%m%dT%H%M%S")
        return f"leasewarden-{stamp}Z-{self.run_id}-{part:04d}{FILE_SUFFIX}"

    def _open(self, at: datetime) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.part += 1
        path = self.directory / self._file_name(self.part)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
        self.path = str(path)
        self.paths.append(self.path)
        self.file_opened_at = at
        self.file_records = 0
        self.file_bytes = 0
        header = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION) + frame(
            _encode_header(FilePart(self.run_id, self.run_started_at, self.part, at, self.start))
        )
        types = self.declarations()
        if types:
            header += types
        self.buffer += header
        self.file_bytes += len(header)
        self.flush()  # a file names its run and part on disk from its first moment
        self._prune()

    def _prune(self) -> None:
        """Remove the oldest capture files until all of them fit in ``max_total_bytes``.

        Runs when a file starts, so between two starts the captures may
        outgrow the budget by the file being written. A sidecar left alone
        for months must not fill the disk its ledger is on; the oldest runs
        are the least likely to be replayed. The file being written is never
        removed, nor anything in the directory that is not a capture file
        by its name. A file that cannot be removed is logged and kept.
        """
        budget = self.settings.max_total_bytes
        if not budget:
            return
        found: list[tuple[tuple[str, str, int], str, int]] = []
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    m = CAPTURE_FILE_NAME.match(entry.name)
                    if m and entry.is_file(follow_symlinks=False):
                        order = (m.group(1), m.group(2), int(m.group(3)))
                        found.append((order, entry.path, entry.stat(follow_symlinks=False).st_size))
        except OSError as exc:
            logger.warning("capture: cannot list %s to keep it under max_total_bytes: %s", self.directory, exc)
            return
        total = sum(size for _, _, size in found)
        current = os.path.basename(self.path) if self.path else None
        for _, path, size in sorted(found):
            if total <= budget:
                break
            if os.path.basename(path) == current:
                continue
            try:
                os.remove(path)
            except FileNotFoundError:  # removed meanwhile (an operator, another sidecar)
                pass
            except OSError as exc:
                logger.warning("capture: cannot remove %s to keep the captures under max_total_bytes: %s", path, exc)
                continue
            else:
                logger.info(
                    "capture: removed %s (%d bytes), the oldest capture file, to keep the captures under "
                    "max_total_bytes (%d)", path, size, budget,
                )
            total -= size

    def _close_file(self) -> None:
        self.flush()
        if self.fd is not None:
            fd, self.fd = self.fd, None
            if self.settings.fsync:
                os.fsync(fd)
            os.close(fd)

    def add(
        self,
        framed: bytes,
        at: datetime,
        *,
        records: int = 1,
        types: bytes | None = None,
        force_flush: bool = False,
    ) -> None:
        """Append one frame holding ``records`` records; ``types`` declares the new types it uses.

        Never rotates: the caller asks ``rotation_due`` before it encodes for
        good, since a frame's back-references belong to the file it goes in.
        """
        if self.fd is None:
            self._open(at)  # a new file declares every type known: ``types`` included
        elif types:
            self.buffer += types
            self.file_bytes += len(types)
        if not self.buffered:
            self.buffered_since = self.monotonic()
        self.buffer += framed
        self.buffered += records
        self.file_bytes += len(framed)
        self.file_records += records
        if (
            force_flush
            or self.policy == "record"
            or (self.policy == "count" and self.buffered >= self.flush_records)
            or (self.policy == "interval" and self.monotonic() - self.buffered_since >= self.flush_interval)
            or len(self.buffer) >= MAX_BUFFER_BYTES
        ):
            self.flush()

    def rotation_due(self, nbytes: int, at: datetime) -> bool:
        """Whether a frame of ``nbytes`` written at ``at`` belongs in a new file (size or age)."""
        return bool(
            self.fd is not None
            and self.file_records
            and (
                self.file_bytes + nbytes > self.max_bytes
                or (self.max_age is not None and at - self.file_opened_at >= self.max_age)  # type: ignore[operator]
            )
        )

    def rotate(self, at: datetime) -> None:
        """Close the current file and open the next part (which declares every type known)."""
        self._close_file()
        self._open(at)

    def due_in(self) -> float | None:
        """Seconds until the interval policy wants a flush (None: nothing waits for time)."""
        if not self.buffered or self.policy != "interval":
            return None
        return max(0.0, self.buffered_since + self.flush_interval - self.monotonic())

    def flush(self) -> None:
        if self.fd is None or not self.buffer:
            self.buffered = 0
            return
        buf = self.buffer
        while buf:
            n = os.write(self.fd, buf)  # a regular file takes it all; a short write goes round again
            del buf[:n]
            self.bytes_written += n
        self.buffered = 0
        if self.settings.fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        self._close_file()

    def abandon(self) -> None:
        """After a write failed: drop what is buffered (it is counted lost) and let go of the file."""
        self.buffer.clear()
        self.buffered = 0
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                os.close(fd)
            except OSError:
                pass


def _encode_header(record: Any) -> bytes:
    return TypedEncoder().encode(record.to_body())


class _FlushMark:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_CLOSE = object()


class CaptureWriter:
    """The capture tap. ``open()`` it, give it to the dispatcher, ``close()`` it at stop."""

    def __init__(
        self,
        settings: CaptureSettings,
        *,
        clock_now: Callable[[], datetime],
        config: Any = None,
        extra: dict[str, Any] | None = None,
        run_id: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock_now = clock_now
        self.run_id = run_id or uuid.uuid4().hex[:16]
        self._config = config
        self._extra = dict(extra or {})
        self._monotonic = monotonic
        self._encoder = TypedEncoder()
        #: Each lease written once per version per file (format 5); and the file part it is keeping for.
        self._interner = LeaseInterner()
        self._interned_part = -1
        #: Message types declared in the run so far (each new file declares them all), in order,
        #: with each one's index; and those met since the last declaration.
        self._met: list[type] = []
        self._met_index: dict[type, int] = {}
        self._pending: list[type] = []
        self._sink: _Sink | None = None
        self._lock = threading.Lock()
        self._queue: collections.deque[Any] = collections.deque()
        self._limit = settings.queue_records
        self._wake = threading.Event()
        self._idle = False
        #: The writer is woken when this many deliveries wait (else it gathers
        #: them for up to GATHER_S, or half the flush interval): few wake-ups,
        #: big batches, little contention with the actors for the interpreter.
        self._wake_at = 1 if settings.flush == "record" else BATCH_RECORDS
        self._gather_s = GATHER_S
        if settings.flush == "interval":
            self._gather_s = min(GATHER_S, settings.flush_interval.total_seconds() / 2)
        #: flush() or close() wants the queue handled now.
        self._urgent = False
        self._room = threading.Condition()
        #: Flush marks and closes ever queued (``_put_control``); the writer
        #: counts those it took, and while the two agree it knows the queue
        #: holds only deliveries.
        self._controls_put = 0
        self._controls_lock = threading.Lock()
        self._waiting_for_room = 0
        self._thread: threading.Thread | None = None
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._open = False
        self._closed = False
        self.failed: CaptureWriteError | None = None
        #: Deliveries written, written as opaque (unencodable message), lost (after a failure or close).
        self.records = 0
        self.unencodable = 0
        self.dropped = 0
        #: Most deliveries seen waiting in the queue at once.
        self.max_queue = 0
        self._unencodable_types: set[str] = set()

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> "CaptureWriter":
        """Write the run's first record and start accepting deliveries."""
        if self._open:
            raise RuntimeError("capture writer already opened")
        started = self.clock_now()
        clock, speed = _clock_of(self.clock_now)
        effective = effective_config(self._config)
        start = RunStart(
            run_id=self.run_id,
            started_at=started,
            version=sidecar_version(),
            clock=clock,
            clock_speed=speed,
            config=effective,
            extra=self._extra,
        )
        self._sink = _Sink(self.settings, start, self._monotonic, self._declarations)
        try:
            self._sink.add(frame(self._encoder.encode(start.to_body())), started, force_flush=True)
        except OSError as exc:
            raise CaptureWriteError(f"cannot start a capture in {self.settings.directory}: {exc}") from exc
        self._open = True
        if self.settings.background:
            self._thread = threading.Thread(target=self._run, name="capture-writer", daemon=True)
            self._thread.start()
        elif self.settings.flush == "interval" and self._monotonic is time.monotonic:
            # Written in the tapping thread, the interval is only looked at
            # when the next delivery comes: after a quiet spell nothing would
            # flush what waits, and a crash would lose it. (With a monotonic
            # clock of its own, the caller drives time: it calls flush_due.)
            self._flusher = threading.Thread(target=self._flush_on_time, name="capture-flusher", daemon=True)
            self._flusher.start()
        return self

    def _flush_on_time(self) -> None:
        interval = self.settings.flush_interval.total_seconds()
        while not self._stop_flusher.wait(interval / 2):
            self.flush_due()

    def flush_due(self) -> None:
        """Without the background writer: flush what the interval policy says is due by now."""
        with self._lock:
            sink = self._sink
            if not self._closed and sink is not None and sink.due_in() == 0.0:
                self._flush_now()

    def __enter__(self) -> "CaptureWriter":
        return self if self._open else self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def paths(self) -> list[str]:
        """The files of this run, in order."""
        return list(self._sink.paths) if self._sink else []

    @property
    def bytes_written(self) -> int:
        return self._sink.bytes_written if self._sink else 0

    # -- the tap -----------------------------------------------------------------------
    def __call__(self, delivery: Delivery) -> None:
        if self._thread is not None:
            q = self._queue
            q.append(delivery)
            n = len(q)
            if self._idle and (n == 1 or n >= self._wake_at):
                self._wake.set()  # the first delivery starts a gathering, a full batch ends it
            if n >= self._limit:
                self._wait_for_room()
            return
        with self._lock:
            if not self._open or self._closed:  # looked at under the lock: close() may be running
                self.dropped += 1
                return
            self._write([delivery])

    def _wait_for_room(self) -> None:
        with self._room:
            self._waiting_for_room += 1
            self._urgent = True
            self._wake.set()
            try:
                while len(self._queue) >= self._limit // 2 and self._thread is not None and self._thread.is_alive():
                    self._room.wait(0.05)
            finally:
                self._waiting_for_room -= 1

    # -- writing -----------------------------------------------------------------------
    def _declarations(self) -> bytes | None:
        """The framed ``TYPES`` record a new file begins with: every type met so far in the run."""
        self._pending = []
        return self._types_frame(self._met) if self._met else None

    def _types_frame(self, types: list[type]) -> bytes:
        index = self._met_index
        return frame(self._encoder.encode((KIND_TYPES, [
            [index[t], t.MESSAGE_NAME, t.MESSAGE_VERSION, list(t.__struct_fields__)] for t in types  # type: ignore[attr-defined]
        ])))

    def _meet(self, batch: list[Delivery]) -> list[tuple[Any, ...]]:
        """``batch``'s rows, a type met for the first time declared (with the types nested in it),
        a message of no registered type made opaque."""
        rows: list[tuple[Any, ...]] = []
        met, known = self._met_index, self._encoder.known
        for d in batch:
            t = type(d[5])
            if t not in met:
                if t not in known:
                    row = self._capturable(d)
                    if row is not None:
                        rows.append(row)
                    continue
                for nested in contained_types(t):
                    if nested not in met:
                        met[nested] = len(self._met)
                        self._met.append(nested)
                        self._pending.append(nested)
            rows.append(d)
        return rows

    def _write(self, batch: list[Delivery]) -> None:
        """One frame of deliveries (and the declaration of the types they use first)."""
        if self.failed is not None:
            self.dropped += len(batch)
            return
        sink = self._sink
        assert sink is not None
        met = self._met_index
        rows: list[tuple[Any, ...]] = batch  # a Delivery is its own row: (seq, at, sender, recipient, cause, message)
        for d in batch:
            if type(d[5]) not in met:
                rows = self._meet(batch)
                break
        if not rows:
            return
        if sink.fd is None or sink.part != self._interned_part:
            self._new_file_leases()
        body, rows = self._body(rows)
        if body is None:
            return
        types = self._types_frame(self._pending) if self._pending else None
        self._pending = []
        at = rows[0][1]
        if sink.rotation_due(len(body) + FRAME_HEADER.size + (len(types) if types else 0), at):  # type: ignore[arg-type]
            try:
                sink.rotate(at)  # type: ignore[arg-type]  (the new file declares every type met)
            except OSError as exc:
                self._fail(exc)
                self.dropped += len(rows)
                return
            types = None
            # The frame's lease numbers belong to the file it goes in: encoded again for the new one.
            self._new_file_leases()
            body, rows = self._body(rows)
            if body is None:
                return
        try:
            sink.add(frame(body), at, records=len(rows), types=types)  # type: ignore[arg-type]
            self.records += len(rows)
        except OSError as exc:
            self._fail(exc)
            self.dropped += len(rows)

    def _new_file_leases(self) -> None:
        """The file being written starts its lease numbers afresh (each file reads on its own)."""
        self._interner.reset()
        self._interned_part = self._sink.part  # type: ignore[union-attr]

    def _body(self, rows: list[tuple[Any, ...]]) -> tuple[bytes | None, list[tuple[Any, ...]]]:
        """The encoded deliveries frame of ``rows`` and the rows it holds (a message that cannot be
        encoded is made opaque; None when nothing is left to write)."""
        interner, enc = self._interner, self._encoder
        wire, defs, undo = interner.frame(rows)
        try:
            return enc.encode((KIND_DELIVERIES, wire, defs)), rows
        except CodecError:
            interner.undo(undo)
        rows = [r for r in (self._capturable(d, checked=True) for d in rows) if r is not None]
        if not rows:
            return None, rows
        wire, defs, _ = interner.frame(rows)
        return enc.encode((KIND_DELIVERIES, wire, defs)), rows

    def _capturable(self, d: tuple[Any, ...], checked: bool = False) -> tuple[Any, ...] | None:
        """The row for ``d``; a message of no registered type becomes its type name (an opaque delivery).

        ``checked``: the batch failed to encode, so even a registered message is tried alone.
        """
        enc = self._encoder
        message = d[5]
        if type(message) in enc.known and not checked:
            return d
        why = "is not a registered message"
        if type(message) in enc.known or type(message) is OpaqueRecord:
            try:
                enc.encode(d)
                return d
            except CodecError as exc:
                why = f"cannot be encoded ({exc})"  # a registered message holding what no record may
        if type(message) is OpaqueRecord:
            return d
        name = f"{type(message).__module__}.{type(message).__qualname__}"
        if name not in self._unencodable_types:
            self._unencodable_types.add(name)
            logger.warning("capture: %s %s; captured as opaque (replay cannot feed it)", name, why)
        self.unencodable += 1
        return (d[0], d[1], d[2], d[3], d[4], OpaqueRecord(name))

    def _fail(self, exc: OSError) -> None:
        where = self._sink.path if self._sink and self._sink.path else self.settings.directory
        self.failed = CaptureWriteError(f"capture stopped: cannot write {where}: {exc}")
        if self._sink is not None:
            self._sink.abandon()
        logger.error("%s; the sidecar goes on without capture", self.failed)

    def _run(self) -> None:
        q = self._queue
        popleft = q.popleft
        sink = self._sink
        assert sink is not None
        monotonic = self._monotonic
        wake_at = batch_size = self._wake_at  # a full batch wakes the writer, and is what one frame holds
        gathering_since: float | None = None
        controls_taken = 0  # flush marks and the close taken from the queue (see _controls_put)
        gather_s = self._gather_s
        while True:
            n = len(q)
            if n and (
                n >= wake_at
                or self._urgent
                or (gathering_since is not None and monotonic() - gathering_since >= gather_s)
            ):
                self._urgent = False
                gathering_since = None
                if n > self.max_queue:
                    self.max_queue = n
                if self._controls_put == controls_taken:
                    # No flush or close was queued before n was read: the first
                    # n items are deliveries, taken a batch at a time.
                    while n:
                        k = n if n < batch_size else batch_size
                        self._write([popleft() for _ in range(k)])
                        n -= k
                        self._let_senders_in()
                    continue
                batch: list[Delivery] = []
                for _ in range(n):
                    item = popleft()
                    if type(item) is Delivery:
                        batch.append(item)
                        if len(batch) < batch_size:
                            continue
                        self._write(batch)
                        batch = []
                    else:
                        controls_taken += 1
                        if batch:
                            self._write(batch)
                            batch = []
                        if item is _CLOSE:
                            self._finish()
                            return
                        self._flush_now()
                        item.done.set()
                    self._let_senders_in()
                if batch:
                    self._write(batch)
                continue
            if n and gathering_since is None:
                gathering_since = monotonic()
            self._let_senders_in(drained=True)
            due = sink.due_in()
            if due == 0.0:
                self._flush_now()
                continue
            timeout = due
            if gathering_since is not None:
                left = max(0.0, gathering_since + gather_s - monotonic())
                timeout = left if timeout is None else min(timeout, left)
            self._idle = True
            # Looked at again once idle: a tap that came after the queue was
            # read above, but before the writer said it was idle, woke no one.
            if self._urgent and not q:
                self._urgent = False  # what flush() or close() queued is handled already
            if len(q) >= wake_at or self._urgent or (q and gathering_since is None):
                self._idle = False
                continue
            self._wake.wait(IDLE_WAIT_MAX_S if timeout is None else timeout)
            self._wake.clear()
            self._idle = False

    def _let_senders_in(self, drained: bool = False) -> None:
        """Wake the taps waiting for room once the queue is below half its limit (or ``drained``)."""
        if self._waiting_for_room and (drained or len(self._queue) < self._limit // 2):
            with self._room:
                self._room.notify_all()

    def _flush_now(self) -> None:
        if self.failed is None:
            try:
                self._sink.flush()  # type: ignore[union-attr]
            except OSError as exc:
                self._fail(exc)

    def _finish(self) -> None:
        sink = self._sink
        assert sink is not None
        if self.failed is None:
            try:
                end = RunEnd(self.run_id, self.clock_now(), self.records, self.unencodable)
                # The end of a run stays with its last records, whatever their age.
                sink.add(frame(self._encoder.encode(end.to_body())), end.ended_at, force_flush=True)
                sink.close()
            except OSError as exc:
                self._fail(exc)
        else:
            sink.abandon()

    # -- control -----------------------------------------------------------------------
    def _put_control(self, item: Any) -> None:
        """Queue a flush mark or the close, counted first: the writer takes deliveries
        in bulk only while it has seen as many counted as it has taken."""
        with self._controls_lock:
            self._controls_put += 1
            self._queue.append(item)

    def flush(self, timeout: float = 30.0) -> None:
        """Return once every delivery tapped so far is written to the OS."""
        if not self._open:
            raise RuntimeError("capture writer is not open")
        if self._thread is not None and not self._closed:
            mark = _FlushMark()
            self._put_control(mark)
            self._urgent = True
            self._wake.set()
            if not mark.done.wait(timeout):
                raise CaptureWriteError(f"capture writer did not flush within {timeout} s")
        elif not self._closed:
            with self._lock:
                self._flush_now()
        if self.failed is not None:
            raise self.failed

    def close(self) -> None:
        """Write everything still queued, a ``RunEnd`` record, and close the file."""
        if not self._open or self._closed:
            return
        if self._thread is not None:
            self._put_control(_CLOSE)
            self._urgent = True
            self._wake.set()
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                logger.error("capture writer did not finish within %s s; records may be lost", CLOSE_TIMEOUT_S)
            self._thread = None
            self._closed = True
        else:
            self._stop_flusher.set()
            with self._lock:
                self._closed = True
                self._finish()
            if self._flusher is not None:
                self._flusher.join(CLOSE_TIMEOUT_S)
                self._flusher = None
