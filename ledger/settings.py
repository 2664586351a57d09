"""The ``[ledger]`` section of ``config.toml``: where the books are kept and how months close."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from runtime.config import section, setting

__all__ = ["LedgerSettings", "ledger_path", "embedded_ledger_path"]


@section("ledger")
@dataclass(frozen=True)
class LedgerSettings:
    path: str = setting(
        "state/leasewarden.sqlite",
        "the ledger's SQLite file; relative to the config file's folder; empty: keep no ledger",
        path=True,
    )
    # 24 h: what a month waits for is facts that arrive late. Events lost in a
    # websocket gap come back at the next reconcile (every withdraw_interval,
    # 1 h by default), a sidecar or node restart takes minutes, and the
    # settlement that realises the month's last hour happens within one
    # withdraw interval. A day covers all of those many times over, including
    # an outage of most of a day, and still closes the month the day after it ends.
    grace_hours: int = setting(
        24, "hours a month that has ended waits for late facts before it is metered", min=0, max=24 * 31
    )
    auto_finalize: bool = setting(
        False, "finalize a month over its completed run without an operator (off: review, then `finalize`)"
    )
    tick_interval: timedelta = setting(
        timedelta(hours=1), "how often the billing months are walked", min=timedelta(seconds=1),
        max=timedelta(days=1),
    )
    embedded_keep: int = setting(
        5, "with an embedded chain: earlier runs' books kept beside the current one (the oldest go)",
        min=0, max=1000,
    )
    synchronous: str = setting(
        "full",
        "full: a committed fact survives a power cut; normal: it survives a crash of the process only (faster)",
        choices=("full", "normal"),
    )


def ledger_path(settings: LedgerSettings) -> Path | None:
    """The ledger file (the loader has resolved it against the config file's folder); None when off."""
    return Path(settings.path) if settings.path else None


def embedded_ledger_path(path: Path) -> Path:
    """Where the books of an embedded chain go: beside ``[ledger] path``, never in it.

    The sidecar writes these books and the ledger's commands read them, so the
    name is the ledger's to give, not the wiring's.
    """
    return path.with_name(f"{path.stem}-embedded{path.suffix}")
