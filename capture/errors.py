"""What can be wrong with a capture log: every error names the file and the byte offset.

These are the only errors the reader raises for bad data (anything else
would be a bug in the reader). ``--skip-bad`` goes past each of them and
counts it instead.
"""

from __future__ import annotations

__all__ = [
    "CaptureError",
    "NotACapture",
    "NewerCaptureFormat",
    "OlderCaptureFormat",
    "TruncatedRecord",
    "CorruptRecord",
    "UnknownTypeInCapture",
    "NewerSchemaInCapture",
    "MissingPart",
    "CaptureWriteError",
]


class CaptureError(Exception):
    """Bad capture data at ``path``, byte ``offset``."""

    #: Short name of the problem, used in skip counts and JSON output.
    kind = "bad"

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, int, str]]:
        # Rebuilt from its parts (a replay worker process sends it to the one that reports it):
        # the default would call the class with the formatted message alone.
        return (type(self), (self.path, self.offset, self.reason))


class NotACapture(CaptureError):
    """The file does not start with the capture file header."""

    kind = "not-a-capture"


class NewerCaptureFormat(CaptureError):
    """Written by a newer version of the capture format (or a record kind this build does not know)."""

    kind = "newer-format"


class OlderCaptureFormat(CaptureError):
    """Written by a capture format older than this build still reads."""

    kind = "older-format"


class TruncatedRecord(CaptureError):
    """The file ends inside a record: the writer stopped mid-record (a crash) or the file was cut."""

    kind = "truncated"


class CorruptRecord(CaptureError):
    """A record whose frame or body is damaged (bad mark, CRC mismatch, malformed msgpack)."""

    kind = "corrupt"


class UnknownTypeInCapture(CaptureError):
    """A record holds a message type this build does not know."""

    kind = "unknown-type"


class NewerSchemaInCapture(CaptureError):
    """A record holds a message written with a newer schema version of its type."""

    kind = "newer-schema"


class MissingPart(CaptureError):
    """A run's files skip a part: the records of the missing file are lost."""

    kind = "missing-part"


class CaptureWriteError(RuntimeError):
    """The capture writer could not write (disk full, permissions); capture has stopped."""
