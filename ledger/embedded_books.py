"""The books of each embedded run, kept under a name of their own: the last N, every move logged.

An embedded chain (``[chain] mode = "model"`` or ``"devnet"``) lives as long
as its process, so the next run starts a new chain, and its books must not
be the last run's: restored, they would be metered as leases still
running. Each start therefore sets the previous run's ledger aside under
the time it was last written (``books-embedded-20261201T101500Z.sqlite``,
its ``-wal`` and ``-shm`` with it) and keeps the last ``[ledger]
embedded_keep`` of them; every move and every removal is logged, so no
run's books go without a line. (One ``.previous`` name, overwritten at
each start, once deleted the books of the run before last without a word.)
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["set_aside", "earlier_books"]

logger = logging.getLogger("leasewarden.ledger")

_STAMP = "%Y%m%dT%H%M%SZ"
#: A SQLite database in WAL mode is these files together.
_PARTS = ("", "-wal", "-shm")


def _name_re(path: Path) -> re.Pattern[str]:
    return re.compile(rf"{re.escape(path.stem)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?{re.escape(path.suffix)}\Z")


def earlier_books(path: Path) -> list[Path]:
    """The earlier runs' ledgers set aside beside ``path``, oldest first."""
    pattern = _name_re(path)
    found = []
    for candidate in path.parent.glob(f"{path.stem}-*{path.suffix}"):
        m = pattern.match(candidate.name)
        if m:
            found.append(((m.group(1), int(m.group(2) or 1)), candidate))
    return [p for _, p in sorted(found)]


def _free_name(path: Path, stamp: str) -> Path:
    target = path.with_name(f"{path.stem}-{stamp}{path.suffix}")
    n = 1
    while any(Path(f"{target}{part}").exists() for part in _PARTS):
        n += 1
        target = path.with_name(f"{path.stem}-{stamp}-{n}{path.suffix}")
    return target


def set_aside(path: Path, keep: int) -> list[str]:
    """Move the books at ``path`` aside and keep the ``keep`` latest set aside; what was done, one line each."""
    done = []
    if path.exists():
        stamp = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime(_STAMP)
        target = _free_name(path, stamp)
        for part in _PARTS:
            old = Path(f"{path}{part}")
            if old.exists():
                old.replace(Path(f"{target}{part}"))
        done.append(f"the previous embedded run's ledger was moved to {target}")
    earlier = earlier_books(path)
    for old in earlier[: max(0, len(earlier) - keep)]:
        for part in _PARTS:
            Path(f"{old}{part}").unlink(missing_ok=True)
        done.append(f"removed {old}: the books of the last {keep} embedded run(s) are kept ([ledger] embedded_keep)")
    for line in done:
        logger.info(line)
    return done
