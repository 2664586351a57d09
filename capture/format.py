"""The capture file format: a file header, then framed msgpack records.

A capture file is::

    file header   8 bytes  b"LWCAP\\r\\n\\x1a"  (the \\r\\n and ^Z catch text-mode copies)
                  2 bytes  format version, big-endian
    frame*        2 bytes  FRAME_MARK
                  4 bytes  body length, big-endian
                  4 bytes  CRC-32 of the mark, the length and the body
                  body     one msgpack array

The CRC covers the length, so a damaged length is caught as surely as a
damaged body. Frames are only ever appended, whole, so a crash can leave at
most one partial frame at the end of the last file; the reader reports it as
a truncated record. The mark lets a reader that skips bad data find the next
frame.

Record bodies (the first element says which):

- ``[0, [[seq, at, sender, recipient, cause, message], ...], leases]``:
  deliveries, in the order they were tapped (one frame holds a batch of
  them; with the ``record`` flush policy, one each), and the leases they
  introduce to the file (nil if none), each with its number: inside the
  messages every lease is its number (format 5, ``capture.interning``;
  formats 1 to 4 wrote ``[0, [...]]``, leases inside the messages);
- ``[1, {...}]``: the start of a run: version, start time, clock, the
  effective configuration (secrets left out). First record of every run;
- ``[2, {...}]``: a file header: which run, which part, when it was opened,
  and (key ``start``) the run's start record again. First record of every
  file, so each file says where it belongs and replays on its own;
- ``[3, {...}]``: a clean end of a run (records written, time);
- ``[5, [[index, name, version, [field, ...]], ...]]``: message types. Since
  format 4, every registered type, second record of every file
  (``capture.typed``); before, each type before the first record using it.

Since format 4 a message inside a delivery is the array msgspec writes (its
tag, then its fields: ``messages.codec``), and a reader decodes a whole
frame into its records typed, in one call (``capture.typed``); since format
5 with each lease as the number of its definition in the file, written once
per version. Formats 1 to 3 wrote flat arrays referring to the file's type table by index, and a
``Lease`` unchanged since it was last written in the file as a
back-reference (``capture.wire``, which still reads them). A message that
is not a registered type is written as its Python type name
(``OpaqueDelivery``), so replay knows an input is missing rather than
silently skipping it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runtime.dispatch import Delivery

__all__ = [
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "OLDEST_FORMAT_VERSION",
    "FILE_HEADER",
    "FRAME_MARK",
    "FRAME_HEADER",
    "FILE_SUFFIX",
    "frame",
    "frame_crc",
    "RunStart",
    "FilePart",
    "RunEnd",
    "DeliveryRecord",
    "OpaqueDelivery",
    "KIND_DELIVERIES",
    "KIND_RUN_START",
    "KIND_FILE_PART",
    "KIND_RUN_END",
    "KIND_TYPES",
    "KIND_OPAQUE_NESTED",
    "TYPED_SINCE",
    "INTERNED_SINCE",
]

FILE_MAGIC = b"LWCAP\r\n\x1a"
#: Raised when the frame layout or the record kinds change meaning; a reader
#: refuses files written with a newer version instead of misreading them.
#: Version 2 added interned objects (``capture.wire``: definitions and
#: back-references); a version 1 file is a version 2 file without them.
#: (The very first version 1 builds wrote another, nested layout under the
#: same number; a reader reports such a file as an older format.)
#: Version 3 writes type and definition marks as bins instead of exts
#: (``capture.wire``: a quarter of the encoding cost). This build reads all
#: three; versions below ``OLDEST_FORMAT_VERSION`` are refused as older
#: than this build reads.
#: Version 4 writes messages as msgspec does, read typed (``capture.typed``),
#: and interns nothing. Version 5 writes each lease once per version per file
#: and refers to it by number (``capture.interning``): on the chain model a
#: delivery took 615 B in format 4, most of it leases written again and again.
#: This build writes 5 and reads 1 to 5.
FORMAT_VERSION = 5
OLDEST_FORMAT_VERSION = 1
#: The first format read by ``capture.typed`` (earlier ones by ``capture.wire``).
TYPED_SINCE = 4
#: The first format whose deliveries frames name their leases by number (``capture.interning``).
INTERNED_SINCE = 5
FILE_HEADER = struct.Struct(">8sH")
FRAME_MARK = b"\xc1\xa7"  # 0xc1 is never used by msgpack, so a body rarely holds the mark
FRAME_HEADER = struct.Struct(">2sII")
FILE_SUFFIX = ".lwcap"

KIND_DELIVERIES = 0
KIND_RUN_START = 1
KIND_FILE_PART = 2
KIND_RUN_END = 3
KIND_TYPES = 5
#: An opaque delivery in the nested layout of the first format 1 builds; the
#: kind is not reused, so a reader can say such a file is older than it reads.
KIND_OPAQUE_NESTED = 4


def frame_crc(length: int, body: bytes | memoryview) -> int:
    return zlib.crc32(body, zlib.crc32(FRAME_MARK + length.to_bytes(4, "big")))


def frame(body: bytes) -> bytes:
    """One framed record around an encoded body."""
    n = len(body)
    if n > 0xFFFFFFFF:
        raise ValueError(f"a capture record of {n} bytes is larger than the format allows (4 GiB)")
    return FRAME_HEADER.pack(FRAME_MARK, n, frame_crc(n, body)) + body


@dataclass(frozen=True, slots=True)
class RunStart:
    """First record of a run: what was running, since when, configured how."""

    run_id: str
    started_at: datetime
    version: str
    #: The clock the run used (``ManualClock``, ``RealClock``) and its speed.
    clock: str
    clock_speed: float
    #: ``Config.effective()``: every section, secrets left out.
    config: dict[str, dict[str, Any]]
    format: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_body(self) -> list[Any]:
        return [
            KIND_RUN_START,
            {
                "run": self.run_id,
                "started_at": self.started_at,
                "version": self.version,
                "clock": self.clock,
                "clock_speed": self.clock_speed,
                "config": self.config,
                "format": self.format,
                "extra": self.extra,
            },
        ]


@dataclass(frozen=True, slots=True)
class FilePart:
    """First record of every file.

    ``start`` repeats the run's ``RunStart`` (configuration included), so
    that a file whose run's first files are gone (removed to keep the
    captures under their size budget) still replays on its own.
    """

    run_id: str
    run_started_at: datetime
    part: int
    opened_at: datetime
    start: RunStart | None = None

    def to_body(self) -> list[Any]:
        body: dict[str, Any] = {
            "run": self.run_id, "run_started_at": self.run_started_at, "part": self.part, "opened_at": self.opened_at,
        }
        if self.start is not None:
            body["start"] = self.start.to_body()[1]
        return [KIND_FILE_PART, body]


@dataclass(frozen=True, slots=True)
class RunEnd:
    """Written by a clean stop: a run without one ended in a crash (or is still running)."""

    run_id: str
    ended_at: datetime
    records: int
    unencodable: int = 0

    def to_body(self) -> list[Any]:
        return [
            KIND_RUN_END,
            {"run": self.run_id, "ended_at": self.ended_at, "records": self.records, "unencodable": self.unencodable},
        ]


class DeliveryRecord(Delivery):
    """One captured delivery, read back: a ``runtime.dispatch.Delivery`` that compares by value."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeliveryRecord):
            return NotImplemented
        return tuple.__eq__(self, other)  # both are (seq, at, sender, recipient, cause, message)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"DeliveryRecord(seq={self.seq}, at={self.at.isoformat()}, {self.sender} -> {self.recipient}, "
            f"cause={self.cause}, {type(self.message).__name__})"
        )


class OpaqueDelivery(DeliveryRecord):
    """A delivery whose message could not be captured; ``message`` is its type name."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"OpaqueDelivery(seq={self.seq}, {self.sender} -> {self.recipient}, {self.message})"
