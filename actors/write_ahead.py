"""A tx's hash in the books before it is broadcast, durably, from the thread that broadcasts it.

The chain actor tells the ledger writer of every signed withdraw and close
tx (``WithdrawLookupOpened``, ``CloseLookupOpened``), and a restart looks up
what the books hold. That message is asynchronous: the writer commits it
when its mailbox runs dry, behind whatever is queued (a cycle's 10,000
tenant states), while the client has long since broadcast the tx and seen
it included. A sidecar killed in that window forgot a tx the chain applied:
a fault run with an accelerated clock lost one named withdraw's 9,520 umfx
that way (killed 14 s of chain time after cycle 219 began).

``WriteAhead`` closes the window: chain-io's write thread records the fact
itself, in its own transaction, and only then lets the client broadcast.
The ledger serialises it with the writer's batches (``ledger.store.Ledger``
is one transaction at a time), so the wait is at most one batch. The
chain actor's own fact follows as before and changes nothing (the ledger
keeps the first of the same hash, and a close's tenants from the second).

A hash the books cannot take is a tx not sent (``ChainError``, transient,
never committed): a tx the books could not find again after a crash is
worse than a withdraw one cycle late.

A close's fact, written here, knows the batch's leases but not their
tenants (chain-io is told leases only); the ledger fills the tenants in
from its leases when it restores the lookup (``Ledger.close_lookups``).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from chain.errors import ChainError
from messages.ledger import CloseLookupOpened, WithdrawLookupOpened
from runtime.clock import Clock

__all__ = ["WriteAhead", "WRITE_AHEAD"]

logger = logging.getLogger(__name__)

#: ``ChainError.codespace`` of a tx not sent because the books could not write it ahead.
WRITE_AHEAD = "write_ahead"


class WriteAhead:
    """Records a signed tx's lookup fact with ``record`` (a ledger's, synchronous) before it goes out."""

    def __init__(self, record: Callable[[Any], None], clock: Clock) -> None:
        self._record = record
        self._clock = clock

    def withdraw(self, tx_hash: str, cycle: int, page: int) -> None:
        self._write(WithdrawLookupOpened(tx_hash, cycle, page, self._clock.now()), f"withdraw page {page} of cycle {cycle}")

    def close(self, tx_hash: str, reason: str, lease_uuids: Sequence[str]) -> None:
        fact = CloseLookupOpened(tx_hash, reason, (("", tuple(lease_uuids)),), self._clock.now())
        self._write(fact, f"close of {len(lease_uuids)} lease(s)")

    def _write(self, fact: Any, what: str) -> None:
        try:
            self._record(fact)
        except Exception as exc:
            logger.error("the books could not write the tx of a %s ahead of its broadcast: %s", what, exc)
            raise ChainError(
                f"{what}: tx {fact.tx_hash} not sent: the books could not write it ahead ({type(exc).__name__}: {exc})",
                codespace=WRITE_AHEAD, transient=True,
            ) from None
