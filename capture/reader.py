"""Reading capture logs back: every record of every file, in order, or a clear error.

``CaptureReader(paths)`` takes files and directories (a directory means its
``*.lwcap`` files), orders the files by run and part (each file's first
record says which run and which part it is, so renamed or shuffled files
still read in order) and yields an ``Entry(path, offset, record)`` per
record: ``RunStart``, ``DeliveryRecord``, ``OpaqueDelivery``, ``RunEnd`` (and, when asked,
each file's ``FilePart``). A frame holding a batch of deliveries yields one
entry per delivery, each with its index in the frame. ``batches()`` gives
them frame by frame; ``batches(lazy=True)`` leaves a format 4 or 5 record's
message as its bytes until ``materialize`` decodes it, so that a replay of
one tenant decodes only what it replays.

Bad data raises one of ``capture.errors`` naming the file and the byte
offset: a file that is not a capture or has a newer format, a truncated
record (what a crash leaves at the end of the last file), a corrupt record
(CRC mismatch, damaged frame, malformed body), an unknown message type, a
newer schema version, a missing part of a run. With ``skip_bad=True`` the
reader goes on past each of them and counts it in ``skipped``: a record with
an intact frame is skipped alone; after a damaged frame it looks for the
next intact one. It never raises anything else on bad data and never loops
without making progress (the tests feed it random bytes).
"""

from __future__ import annotations

import mmap
import os

import msgspec
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

from capture.errors import (
    CaptureError,
    CorruptRecord,
    MissingPart,
    NewerCaptureFormat,
    NewerSchemaInCapture,
    NotACapture,
    OlderCaptureFormat,
    TruncatedRecord,
    UnknownTypeInCapture,
)
from capture.format import (
    FILE_HEADER,
    FILE_MAGIC,
    FILE_SUFFIX,
    FORMAT_VERSION,
    FRAME_HEADER,
    OLDEST_FORMAT_VERSION,
    TYPED_SINCE,
    FRAME_MARK,
    KIND_DELIVERIES,
    KIND_FILE_PART,
    KIND_RUN_END,
    KIND_RUN_START,
    KIND_OPAQUE_NESTED,
    KIND_TYPES,
    DeliveryRecord,
    FilePart,
    OpaqueDelivery,
    RunEnd,
    RunStart,
    frame_crc,
)
from capture.typed import TypedDecoder
from capture.wire import CaptureDecoder, NestedLayout, OpaqueMessage, first_undecodable
from messages.codec import CodecError, NewerSchemaVersion, UnknownMessageType

__all__ = ["Entry", "Batch", "SkipCounts", "CaptureReader", "capture_files", "read_records"]

#: How many skipped problems are kept for display; the rest are only counted.
KEPT_PROBLEMS = 100

_HEADER_SIZE = FRAME_HEADER.size
_unpack_header = FRAME_HEADER.unpack_from


class Entry:
    """One record and where it was read: ``path``, byte ``offset`` of its frame, and
    ``index`` within the frame when the frame holds several (else -1)."""

    __slots__ = ("path", "offset", "record", "index")

    def __init__(self, path: str, offset: int, record: Any, index: int = -1) -> None:
        self.path = path
        self.offset = offset
        self.record = record
        self.index = index

    def where(self) -> str:
        if self.index < 0:
            return f"{self.path}:{self.offset}"
        return f"{self.path}:{self.offset}[{self.index}]"

    def __repr__(self) -> str:
        return f"Entry({self.path}:{self.offset}, {self.record!r})"


#: One frame's records as ``CaptureReader.batches`` yields them: path, byte
#: offset of the frame, the records, index in the frame of the first (-1: the
#: frame holds one record).
Batch = tuple[str, int, list[Any], int]


@dataclass
class SkipCounts:
    """What ``skip_bad`` went past."""

    #: bad records of frames that could be read (each one record)
    records: int = 0
    #: frames that could not be read at all: how many records each held is
    #: unknown (a background writer's frame holds up to a batch of them)
    frames: int = 0
    bytes: int = 0
    files: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    problems: list[CaptureError] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def add(self, error: CaptureError, *, records: int = 0, frames: int = 0, nbytes: int = 0, files: int = 0) -> None:
        self.records += records
        self.frames += frames
        self.bytes += nbytes
        self.files += files
        self.by_kind[error.kind] = self.by_kind.get(error.kind, 0) + 1
        if len(self.problems) < KEPT_PROBLEMS:
            self.problems.append(error)

    def summary(self) -> str:
        if not self.by_kind:
            return "nothing skipped"
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.by_kind.items()))
        frames = f"{self.frames} unreadable frame(s) (their records uncounted), " if self.frames else ""
        return f"skipped {frames}{self.records} record(s), {self.bytes} byte(s), {self.files} file(s) ({kinds})"


class _File:
    __slots__ = ("path", "size", "part", "format")

    def __init__(self, path: str, size: int, part: FilePart, format: int) -> None:
        self.path = path
        self.size = size
        self.part = part
        #: The capture format version in the file's header.
        self.format = format

    def order(self) -> tuple[datetime, str, int]:
        return (self.part.run_started_at, self.part.run_id, self.part.part)


def capture_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The files named: directories expand to their ``*.lwcap`` files (sorted); duplicates dropped."""
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.name.endswith(FILE_SUFFIX) and f.is_file())
        else:
            found = [str(path)]
        for f in found:
            key = os.path.realpath(f)
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


#: Builds a ``DeliveryRecord`` (a named tuple) from a decoded row in C,
#: without the named tuple's Python-level ``__new__``: once per record read.
_new_record = tuple.__new__


#: What a record of the first format 1 builds' layout is told as.
_NESTED_LAYOUT = (
    "written in the nested layout of the first format 1 builds (one record per delivery, messages in the "
    "codec's form), which this build no longer reads; replay it with a build from before the flat layout"
)


def _codec_error(path: str, offset: int, exc: CodecError, where: str = "") -> CaptureError:
    if isinstance(exc, NestedLayout):
        return OlderCaptureFormat(path, offset, f"{where}{_NESTED_LAYOUT}")
    if isinstance(exc, UnknownMessageType):
        return UnknownTypeInCapture(path, offset, f"{where}{exc}")
    if isinstance(exc, NewerSchemaVersion):
        return NewerSchemaInCapture(path, offset, f"{where}{exc}")
    return CorruptRecord(path, offset, f"{where}malformed record body: {exc}")


class _Decoding:
    """Turns a frame body into records, mapping every decode failure to a capture error.

    Format 4 and 5 bodies go to ``capture.typed`` (msgspec, typed); formats 1 to 3
    to ``capture.wire``'s decoder (msgpack, built by name): one decoder per
    format family, so the captures older builds wrote still replay.
    """

    def __init__(self) -> None:
        self.decoder = CaptureDecoder()
        self.typed = TypedDecoder()
        self.format = FORMAT_VERSION
        #: The last frame's records are all good (no ``CaptureError`` among them).
        self.clean = True

    def new_file(self, format: int) -> None:
        self.format = format
        if format >= TYPED_SINCE:
            self.typed.reset(format)
        else:
            self.decoder.reset(format)

    def frame(self, path: str, offset: int, body: bytes, lazy: bool = False) -> list[Any]:
        """The records of one frame, in order; a record that cannot be read is its ``CaptureError``.

        ``lazy``: where the file allows it (``TypedDecoder.lazy``), deliveries
        with their messages left as bytes (``CaptureReader.materialize``).
        Raises ``CaptureError`` when the frame as a whole cannot be read.
        """
        if self.format >= TYPED_SINCE:
            if lazy and self.typed.lazy and len(body) >= 2 and body[1] == KIND_DELIVERIES:
                self.clean = True
                try:
                    rows = self.typed.rows(body)
                except CodecError as exc:
                    raise _codec_error(path, offset, exc) from None
                if rows is not None:
                    return rows
            return self._typed_frame(path, offset, body)
        decoder = self.decoder
        self.clean = True
        try:
            value = decoder.decode(body)
        except CodecError as exc:
            raise _codec_error(path, offset, exc) from None
        if type(value) is not tuple or not value or type(value[0]) is not int:
            raise CorruptRecord(path, offset, "record body is not [kind, ...]")
        kind = value[0]
        if kind == KIND_OPAQUE_NESTED or (kind == KIND_DELIVERIES and len(value) == 7):
            raise OlderCaptureFormat(path, offset, _NESTED_LAYOUT)  # [0|4, seq, at, sender, recipient, cause, m]
        if kind == KIND_DELIVERIES:
            if len(value) != 2 or type(value[1]) is not tuple:
                raise CorruptRecord(path, offset, "deliveries record is not [0, [...]]")
            out: list[Any] = []
            problems = decoder.problems
            for i, d in enumerate(value[1]):
                if type(d) is not tuple or len(d) != 6:
                    self.clean = False
                    out.append(CorruptRecord(path, offset, f"record {i} of the frame is not a delivery"))
                    continue
                seq, at, sender, recipient, cause, message = d
                if not (
                    type(seq) is int
                    and isinstance(at, datetime)
                    and type(sender) is str
                    and type(recipient) is str
                    and type(cause) is int
                ):
                    self.clean = False
                    out.append(CorruptRecord(path, offset, f"record {i} of the frame: delivery fields have the wrong types"))
                    continue
                if not (0 < seq < MAX_SEQ and 0 <= cause < MAX_SEQ):
                    self.clean = False
                    out.append(CorruptRecord(path, offset, f"record {i} of the frame: sequence number {seq} or "
                                                           f"cause {cause} out of range"))
                    continue
                if problems:
                    bad = first_undecodable(message)
                    if bad is not None:
                        self.clean = False
                        out.append(_codec_error(path, offset, bad.error, f"record {i} of the frame: "))
                        continue
                if type(message) is OpaqueMessage:
                    out.append(OpaqueDelivery(seq, at, sender, recipient, cause, str(message)))
                else:
                    out.append(_new_record(DeliveryRecord, d))  # d is (seq, at, sender, recipient, cause, message)
            return out
        if decoder.problems:
            raise _codec_error(path, offset, decoder.problems[0])
        return _other_record(path, offset, value, decoder.declare)

    def _typed_frame(self, path: str, offset: int, body: bytes) -> list[Any]:
        typed = self.typed
        self.clean = True
        if len(body) >= 2 and (body[0] == 0x92 or body[0] == 0x93) and body[1] == KIND_DELIVERIES:
            try:
                records = typed.deliveries(body)
            except CodecError as exc:
                raise _codec_error(path, offset, exc) from None
            if not typed.clean:
                self.clean = False
                records = [
                    _codec_error(path, offset, r, f"record {i} of the frame: ") if isinstance(r, CodecError) else r
                    for i, r in enumerate(records)
                ]
            return records
        try:
            value = _plain_decode(body)
        except (msgspec.DecodeError, CodecError) as exc:
            raise CorruptRecord(path, offset, f"malformed record body: {exc}") from None
        if type(value) is not list or not value or type(value[0]) is not int:
            raise CorruptRecord(path, offset, "record body is not [kind, ...]")
        if value[0] == KIND_DELIVERIES:
            raise CorruptRecord(path, offset, "deliveries record is not [0, [...]]")
        return _other_record(path, offset, _tuples(value), typed.declare)


def _other_record(path: str, offset: int, value: Any, declare: Callable[[Any], None]) -> list[Any]:
    """A record other than deliveries (``[kind, ...]``): a type table (``declare`` takes it), a header, or refused."""
    kind = value[0]
    if kind == KIND_TYPES:
        if len(value) != 2:
            raise CorruptRecord(path, offset, "types record is not [5, [...]]")
        try:
            declare(value[1])
        except CodecError as exc:
            raise CorruptRecord(path, offset, f"bad type table: {exc}") from None
        return []
    if kind in (KIND_RUN_START, KIND_FILE_PART, KIND_RUN_END):
        if len(value) != 2 or type(value[1]) is not dict:
            raise CorruptRecord(path, offset, f"record of kind {kind} is not [kind, {{...}}]")
        try:
            return [_header_record(kind, value[1])]
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Overflow: a clock speed of 400 digits
            raise CorruptRecord(path, offset, f"record of kind {kind} is malformed: {exc!r}") from None
    raise NewerCaptureFormat(
        path, offset, f"record kind {kind} is unknown to this build (written by a newer leasewarden?)"
    )


def _tuples(value: Any) -> Any:
    """``value`` with its lists as tuples, as formats 1 to 3 read them (a configuration's lists are tuples)."""
    if type(value) is list:
        return tuple(_tuples(v) for v in value)
    if type(value) is dict:
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _plain_ext(code: int, data: memoryview) -> Any:
    raise CodecError(f"unknown ext type {code} in a header record")


#: Format 4's records other than deliveries (run start, file header, run end, type table): plain values.
_plain_decode = msgspec.msgpack.Decoder(ext_hook=_plain_ext).decode


#: Sequence numbers a delivery can have: from 1, below 2**53 (a float's exact
#: integers, which JSON output keeps). A run delivering a million messages a
#: second would take 285 years to reach it; a larger one is damaged data.
MAX_SEQ = 2**53


def _typed(d: dict[Any, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = d[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise TypeError(f"{key} is {type(value).__name__}")
    return value


def _speed(value: float) -> float:
    """A run's clock speed: a finite, positive factor no clock runs beyond (``MAX_CLOCK_SPEED``)."""
    speed = float(value)
    if not (0 < speed <= MAX_CLOCK_SPEED):  # also NaN
        raise ValueError(f"clock_speed {value!r} is not in (0, {MAX_CLOCK_SPEED:g}]")
    return speed


#: The fastest clock a run can have been captured on (``run.py --speed``
#: accelerates the clock; a million times faster is beyond any use).
MAX_CLOCK_SPEED = 1e6


def _header_record(kind: int, d: dict[Any, Any]) -> Any:
    if kind == KIND_RUN_START:
        config = _typed(d, "config", dict)
        for section, values in config.items():
            if not isinstance(section, str) or not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
                raise TypeError("config is not {section: {key: value}}")
        extra = d.get("extra", {})
        if not isinstance(extra, dict):
            raise TypeError("extra is not a table")
        return RunStart(
            run_id=_typed(d, "run", str),
            started_at=_typed(d, "started_at", datetime),
            version=_typed(d, "version", str),
            clock=_typed(d, "clock", str),
            clock_speed=_speed(_typed(d, "clock_speed", (int, float))),
            config=config,
            format=_typed(d, "format", int),
            extra=extra,
        )
    if kind == KIND_FILE_PART:
        start = d.get("start")
        return FilePart(
            run_id=_typed(d, "run", str),
            run_started_at=_typed(d, "run_started_at", datetime),
            part=_typed(d, "part", int),
            opened_at=_typed(d, "opened_at", datetime),
            start=_header_record(KIND_RUN_START, _typed(d, "start", dict)) if start is not None else None,
        )
    return RunEnd(
        run_id=_typed(d, "run", str),
        ended_at=_typed(d, "ended_at", datetime),
        records=_typed(d, "records", int),
        unencodable=_typed(d, "unencodable", int),
    )


def _frame_at(buf: Any, path: str, pos: int, end: int) -> tuple[bytes, int]:
    """The body of the frame at ``pos`` and where the next frame starts."""
    if end - pos < _HEADER_SIZE:
        raise TruncatedRecord(
            path, pos, f"truncated record: the file ends {end - pos} byte(s) into a record header (the writer stopped mid-record)"
        )
    mark, length, crc = _unpack_header(buf, pos)
    if mark != FRAME_MARK:
        raise CorruptRecord(path, pos, f"no record starts here (found {bytes(mark).hex()}, expected {FRAME_MARK.hex()})")
    body_end = pos + _HEADER_SIZE + length
    if body_end > end:
        raise TruncatedRecord(
            path,
            pos,
            f"truncated record: {length} byte(s) long, the file ends after {end - pos - _HEADER_SIZE} "
            "(the writer stopped mid-record, or its length is damaged)",
        )
    body = buf[pos + _HEADER_SIZE : body_end]
    if frame_crc(length, body) != crc:
        raise CorruptRecord(path, pos, f"CRC mismatch in a record of {length} byte(s)")
    return body, body_end


def _frame_problem(buf: Any, path: str, pos: int, end: int) -> CaptureError:
    """Why the frame at ``pos`` cannot be read (the caller found it bad)."""
    try:
        _frame_at(buf, path, pos, end)
    except CaptureError as exc:
        return exc
    return CorruptRecord(path, pos, "unreadable record")


#: CRC work the resyncs of one file may do together: this many times the
#: file's size, plus ``RESYNC_CRC_SLACK``. Damage crafted so that every byte
#: starts a frame mark whose length runs to the end of the file would
#: otherwise cost a CRC of the rest of the file per byte: hours for one
#: 64 MiB file (and a budget per resync would not do: with ``--skip-bad``
#: every damaged region is a resync of its own). Ordinary damage (a mark by
#: chance every 64 KiB, its length rarely inside the file) stays far below it.
RESYNC_CRC_FACTOR = 8
RESYNC_CRC_SLACK = 16 << 20


def _resync(buf: Any, pos: int, end: int, budget: list[int]) -> int:
    """The offset of the next intact frame after ``pos`` (``end`` if there is none, or the search costs too much).

    ``budget``: the CRC bytes the file's resyncs may still spend (one list per file, shared).
    """
    find = buf.find
    while True:
        cand = find(FRAME_MARK, pos, end)
        if cand < 0:
            return end
        if end - cand >= _HEADER_SIZE:
            _, length, crc = _unpack_header(buf, cand)
            body_end = cand + _HEADER_SIZE + length
            if body_end <= end:
                budget[0] -= length
                if budget[0] < 0:
                    return end  # the rest of the file counts as damaged
                if frame_crc(length, buf[cand + _HEADER_SIZE : body_end]) == crc:
                    return cand
        pos = cand + 1


def _probe(path: str, decoding: _Decoding) -> _File:
    """Check the file header and read the first record (which run, which part)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(FILE_HEADER.size)
            size = os.fstat(fh.fileno()).st_size
            if len(head) < FILE_HEADER.size:
                if FILE_MAGIC.startswith(head[: len(FILE_MAGIC)]):
                    raise TruncatedRecord(
                        path, len(head), f"file ends inside its {FILE_HEADER.size}-byte header ({len(head)} byte(s))"
                    )
                raise NotACapture(path, 0, "not a leasewarden capture file (no capture header)")
            magic, version = FILE_HEADER.unpack(head)
            if magic != FILE_MAGIC:
                raise NotACapture(path, 0, "not a leasewarden capture file (no capture header)")
            if version > FORMAT_VERSION:
                raise NewerCaptureFormat(
                    path, len(FILE_MAGIC),
                    f"capture format version {version} is newer than the version {FORMAT_VERSION} this build reads",
                )
            if version < OLDEST_FORMAT_VERSION:
                raise OlderCaptureFormat(
                    path, len(FILE_MAGIC),
                    f"capture format version {version} is older than the oldest version "
                    f"({OLDEST_FORMAT_VERSION}) this build reads",
                )
            first = fh.read(_HEADER_SIZE)
            if len(first) == _HEADER_SIZE:
                _, length, _ = _unpack_header(first, 0)
                if length <= size:
                    first += fh.read(length)
    except OSError as exc:
        raise NotACapture(path, 0, f"cannot read: {exc.strerror or exc}") from None
    pos = FILE_HEADER.size
    try:
        body, _ = _frame_at(first, path, 0, len(first))
    except CaptureError as exc:
        raise _shift(exc, pos) from None
    decoding.new_file(version)
    records = decoding.frame(path, pos, body)
    record = records[0] if len(records) == 1 else None
    if not isinstance(record, FilePart):
        raise CorruptRecord(path, pos, "the first record of a capture file is not its file header")
    return _File(path, size, record, version)


def _shift(error: CaptureError, base: int) -> CaptureError:
    """``error`` with its offset moved by ``base`` (frames parsed from a slice)."""
    return type(error)(error.path, error.offset + base, error.reason)


class CaptureReader:
    """Iterate the records of capture files, in run and part order."""

    def __init__(
        self, paths: Iterable[str | os.PathLike[str]], *, skip_bad: bool = False, file_parts: bool = False
    ) -> None:
        self.skip_bad = skip_bad
        #: Also yield each file's ``FilePart`` header (replay uses it to see where runs begin).
        self.file_parts = file_parts
        self.skipped = SkipCounts()
        self._decoding = _Decoding()
        self.files: list[_File] = []
        self._order_problems: list[tuple[CaptureError, _File | None]] = []
        for path in capture_files(paths):
            try:
                f = _probe(path, self._decoding)
            except CaptureError as exc:
                self._bad(exc, files=1)
                continue
            self.files.append(f)
        self.files.sort(key=_File.order)
        self._check_parts()
        self.total_bytes = sum(f.size for f in self.files)
        #: Bytes of the files read so far (for a progress bar).
        self.bytes_done = 0

    def _bad(self, error: CaptureError, *, records: int = 0, frames: int = 0, nbytes: int = 0, files: int = 0) -> None:
        if not self.skip_bad:
            raise error
        self.skipped.add(error, records=records, frames=frames, nbytes=nbytes, files=files)

    def _check_parts(self) -> None:
        """Parts of a run must follow each other; a run may begin at any part
        (its earlier files were left out or cleaned up), which replay reports."""
        kept: list[_File] = []
        prev: _File | None = None
        for f in self.files:
            p = f.part
            if prev is not None and prev.part.run_id == p.run_id:
                if p.part == prev.part.part:
                    self._bad(CorruptRecord(f.path, FILE_HEADER.size, f"second file for part {p.part} of run {p.run_id} (the other is {prev.path})"), files=1)
                    continue
                if p.part != prev.part.part + 1:
                    self._bad(MissingPart(
                        f.path, FILE_HEADER.size,
                        f"part(s) {prev.part.part + 1}..{p.part - 1} of run {p.run_id} are missing (between {prev.path} and this file)",
                    ))
            kept.append(f)
            prev = f
        self.files = kept

    def __iter__(self) -> Iterator[Entry]:
        for path, offset, records, start in self.batches():
            if start < 0:
                for record in records:
                    yield Entry(path, offset, record)
            else:
                for i, record in enumerate(records, start):
                    yield Entry(path, offset, record, i)

    def batches(self, lazy: bool = False) -> Iterator[Batch]:
        """The records frame by frame: ``(path, offset, records, start)``, every record an entry's.

        ``start`` is the index in its frame of the first record (each next
        record is the next index), or -1 for a frame of a single record. A
        frame with a bad record yields the records before it, then the bad
        record is raised (or skipped) and the rest follow as another batch.
        Replay reads this way: it makes no ``Entry`` for a record that
        never needs to say where it was read.

        ``lazy``: a delivery of a format 4 or 5 file comes with its message
        as its bytes (``msgspec.Raw``), which ``materialize`` decodes, so
        that a replay of one tenant decodes only the records it replays.
        Every frame's CRC is still checked, and its records' sequence
        numbers, times and addresses; a message is checked when it is
        decoded, so a bad one that is never asked for is never reported.
        (A file that declares a message type this build does not know is
        read whole, so that a record of that type is refused where it is.)
        """
        done = 0
        for f in self.files:
            yield from self._read_file(f, done, lazy)
            done += f.size
            self.bytes_done = done

    def materialize(self, record: Any, path: str, offset: int, index: int = -1) -> Any:
        """``record`` of a lazy batch (``batches(lazy=True)``) with its message decoded; None if it
        is bad and ``skip_bad`` skips it (counted), else its ``CaptureError`` is raised.

        Only until the next batch is read (the leases it refers to may be forgotten then).
        """
        if type(record) is not DeliveryRecord or type(record[5]) is not msgspec.Raw:
            return record
        try:
            return self._decoding.typed.materialize(record)
        except CodecError as exc:
            self._bad(_codec_error(path, offset, exc, f"record {index} of the frame: " if index >= 0 else ""), records=1)
            return None

    def _read_file(self, f: _File, done_before: int, lazy: bool = False) -> Iterator[Batch]:
        path = f.path
        try:
            fh = open(path, "rb")
        except OSError as exc:
            self._bad(NotACapture(path, 0, f"cannot read: {exc.strerror or exc}"), files=1)
            return
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                self._bad(TruncatedRecord(path, 0, "the file is empty"), files=1)
                return
            if self.file_parts:
                yield (path, FILE_HEADER.size, [f.part], -1)
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                yield from self._frames(buf, path, size, done_before, f.format, lazy)
            finally:
                buf.close()

    def _frames(
        self, buf: mmap.mmap, path: str, end: int, done_before: int, format: int, lazy: bool = False
    ) -> Iterator[Batch]:
        decoding = self._decoding
        decoding.new_file(format)
        records_of = decoding.frame
        # The first frame is the file header, already read by _probe.
        try:
            _, pos = _frame_at(buf, path, FILE_HEADER.size, end)
        except CaptureError as exc:  # the file changed since it was opened
            self._bad(exc, files=1)
            return
        unpack = _unpack_header
        crc_of = frame_crc
        mark_ok = FRAME_MARK
        hsize = _HEADER_SIZE
        resync_budget = [RESYNC_CRC_FACTOR * end + RESYNC_CRC_SLACK]
        while pos < end:
            # The common case inline (an intact frame); _frame_at explains the rest.
            body = None
            if end - pos >= hsize:
                mark, length, crc = unpack(buf, pos)
                nxt = pos + hsize + length
                if mark == mark_ok and nxt <= end:
                    body = buf[pos + hsize : nxt]
                    if crc_of(length, body) != crc:
                        body = None
            if body is None:
                problem = _frame_problem(buf, path, pos, end)
                resume = _resync(buf, pos + 1, end, resync_budget)
                if isinstance(problem, TruncatedRecord):
                    if resume == end:  # nothing intact after it: the tail a crash leaves
                        self._bad(problem, frames=1, nbytes=end - pos)
                        break
                    problem = CorruptRecord(
                        path, pos, "record length runs past the end of the file, yet intact records follow: damaged length"
                    )
                self._bad(problem, frames=1, nbytes=resume - pos)
                pos = resume
                continue
            try:
                records = records_of(path, pos, body, lazy)
            except CaptureError as exc:
                self._bad(exc, frames=1, nbytes=nxt - pos)
                pos = nxt
                continue
            if records:
                if decoding.clean and type(records[0]) is not FilePart:  # a file header only ever comes alone
                    yield (path, pos, records, 0 if len(records) > 1 else -1)
                else:
                    yield from self._split(path, pos, records)
            pos = nxt
            self.bytes_done = done_before + pos

    def _split(self, path: str, pos: int, records: list[Any]) -> Iterator[Batch]:
        """A frame holding bad records: the good runs between them, each bad one raised or skipped in turn."""
        first = 0 if len(records) > 1 else -1
        run: list[Any] = []
        for i, record in enumerate(records):
            bad: CaptureError | None = None
            if isinstance(record, CaptureError):
                bad = record
            elif type(record) is FilePart:
                bad = CorruptRecord(path, pos, "a file header in the middle of a file")
            if bad is None:
                if not run and first >= 0:
                    first = i
                run.append(record)
                continue
            if run:
                yield (path, pos, run, first)
                run = []
            self._bad(bad, records=1)
        if run:
            yield (path, pos, run, first)


def read_records(paths: Iterable[str | os.PathLike[str]], *, skip_bad: bool = False) -> list[Any]:
    """Every record of ``paths``, in order (for tests and small logs)."""
    return [e.record for e in CaptureReader(paths, skip_bad=skip_bad)]
