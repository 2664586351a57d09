"""The errors an operator's input can cause, from every part: what ``run.py`` prints as one line.

Each part raises its own (a setting, a key, the ledger, a month, a capture
file), and each message already names the input and what would be right.
The wiring is the one layer that knows every part, so the list is here;
``runtime.cli.run_guarded`` prints these as ``error: ...`` with exit status
2, and anything else as an internal error (a bug).
"""

from __future__ import annotations

import sqlite3

from capture.errors import CaptureError, CaptureWriteError
from chain.keys import KeyLoadError
from ledger.identity import IdentityMismatch
from ledger.periods import PeriodError
from ledger.schema import NewerSchemaError, NotALedgerError
from ledger.store import LedgerError
from runtime.config import ConfigError

__all__ = ["OPERATOR_ERRORS"]

#: OSError: a file the input names cannot be made or read (a path in a
#: read-only folder, a full disk); sqlite3.Error: the ledger file refuses
#: (locked past the busy timeout, damaged). Neither is a bug.
OPERATOR_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    KeyLoadError,
    LedgerError,
    IdentityMismatch,
    NewerSchemaError,
    NotALedgerError,
    PeriodError,
    CaptureError,
    CaptureWriteError,  # [capture] directory cannot be made or written: the setting, not a bug
    OSError,
    sqlite3.Error,
)
