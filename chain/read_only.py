"""A chain client that sends no transaction: a dry run's guard (``[scheduler] dry_run``).

The chain actor already sends no withdraw or close in a dry run
(``actors.dry_run``); this wrapper makes sure of it at the last step, so
that a path that reached the client anyway fails with a clear error
instead of signing and paying. Every read goes through unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from chain.errors import ChainError
from messages.chain import CloseOutcome, WithdrawPage

__all__ = ["ReadOnlyClient"]


class ReadOnlyClient:
    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)  # every read, close(), address, ...

    def withdraw_by_provider(self, provider_uuid: str, key: bytes, signed: Callable[[str], None] | None = None) -> WithdrawPage:
        raise ChainError("withdraw_by_provider: dry run: no tx is sent", codespace="dry_run", transient=False)

    def close_leases(self, lease_uuids: Sequence[str], reason: str, signed: Callable[[str], None] | None = None) -> CloseOutcome:
        raise ChainError("close_leases: dry run: no tx is sent", codespace="dry_run", transient=False)
