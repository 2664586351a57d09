"""Capture: every delivered message, appended to msgpack logs that replay reads back.

- ``capture.writer.CaptureWriter``: the dispatcher's delivery tap;
- ``capture.reader.CaptureReader``: records back, in order, or errors naming file and offset;
- ``capture.format``: the file format (framing, record kinds);
- ``capture.typed``: how messages are written since format 4 (as msgspec writes them, read typed);
- ``capture.interning``: format 5's leases, each written once per version per file;
- ``capture.wire``: how formats 1 to 3 wrote messages (flat msgpack with a per-file type table);
- ``capture.settings``: the ``[capture]`` config section.
"""

from capture.errors import (  # noqa: F401
    CaptureError,
    CaptureWriteError,
    CorruptRecord,
    MissingPart,
    NewerCaptureFormat,
    NewerSchemaInCapture,
    NotACapture,
    OlderCaptureFormat,
    TruncatedRecord,
    UnknownTypeInCapture,
)
from capture.format import DeliveryRecord, OpaqueDelivery, RunEnd, RunStart  # noqa: F401
from capture.reader import CaptureReader, Entry, SkipCounts, read_records  # noqa: F401
from capture.writer import CaptureWriter  # noqa: F401
