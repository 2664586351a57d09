"""``[capture]``: where capture logs go, when they rotate, how often they reach the disk."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["CaptureSettings", "FLUSH_POLICIES"]

#: ``record``: every record is handed to the OS as soon as it is written
#: (with ``background = false`` a process crash then loses at most the
#: record being written); ``count``: every ``flush_records`` records;
#: ``interval``: at least every ``flush_interval``. A clean stop always
#: flushes everything.
FLUSH_POLICIES = ("record", "count", "interval")


@section("capture")
@dataclass(frozen=True)
class CaptureSettings:
    enabled: bool = setting(True, "capture every delivered message to msgpack logs (for run.py replay)")
    directory: str = setting(
        "captures", "directory of the capture files (created if missing); relative to the config file's folder",
        path=True,
    )
    max_file_bytes: int = setting(
        64 * 1024 * 1024,
        "start a new file before one grows past this many bytes (a run's last file may pass it by its end record)",
        min=4096,
        max=2**40,
    )
    max_file_age: timedelta = setting(
        timedelta(hours=1), "start a new file when the current one is this old (clock time); 0: never",
        max=timedelta(days=30),
    )
    max_total_bytes: int = setting(
        2 * 1024 * 1024 * 1024,
        "when a new file starts, the oldest capture files go until all of them fit in this many bytes; 0: keep all",
        min=0, max=2**50,
    )
    flush: str = setting("interval", "when records reach the OS: record | count | interval", choices=FLUSH_POLICIES)
    flush_records: int = setting(1000, "with flush = count: records per flush", min=1, max=10_000_000)
    flush_interval: timedelta = setting(
        timedelta(seconds=1), "with flush = interval: longest wait before records reach the OS",
        min=timedelta(milliseconds=1), max=timedelta(hours=1),
    )
    fsync: bool = setting(False, "also fsync at every flush (survives a power loss, costs disk syncs)")
    background: bool = setting(
        True, "encode and write on a background thread (cheap for the actors); false: in the delivering thread"
    )
    queue_records: int = setting(
        65536, "records waiting for the background writer at most; a full queue makes delivery wait",
        min=16, max=10_000_000,
    )

    def validate(self) -> None:
        if 0 < self.max_total_bytes < self.max_file_bytes:
            raise ValueError("max_total_bytes must be 0 (keep every file) or at least max_file_bytes")
