"""The chain facts the ledger needs beyond what the actors tell it, on the in-process model.

The actors tell the ledger about lease events, withdrawal pages, closures and
tenant state. To bill a month to the chain's last unit it also needs:

- each lease's price and the chain's own ``acknowledged_at``/``closed_at``: a
  ``LeaseObserved`` with the lease as read from the chain whenever one of our
  lease events arrives;
- per-lease settled amounts: ``LeaseSettled`` from the ``provider_withdraw``
  and ``lease_closed`` events of every transaction (``ledger.facts``);
- at start, a reconcile: ``LeasesReconciled`` with the provider's active leases
  (leases that began before the first run are known from their acknowledged
  time), and a ``LeaseObserved`` for every lease the ledger still holds as
  active that the chain has closed while the sidecar was down, so a crash
  loses no closure and the month is billed to the chain's ``closed_at``.

``ModelLedgerFeed`` does that for the ``model`` chain mode, reading the model
the way ``sidecar.app.ModelEventFeed`` does; it is a sidecar part (``extra``),
sending to ``ledger`` as ``listener``. In every mode the scheduler also has
the leases of our lease events, and those that vanish from the active set,
read from the chain for the books (``actors.lease_reads``); settlements come
from the chain I/O (withdraw and close tx events) and the listener.
"""

from __future__ import annotations

from typing import Any

from chain.errors import ChainError
from chain.events import lease_events_from_tx
from chain.model import BillingModel, TxEvents
from ledger.facts import settlements_from_tx
from ledger.store import Ledger
from messages.ledger import LeaseObserved, LeasesReconciled
from runtime.dispatch import sending_as
from runtime.router import LEDGER, LISTENER, Router

__all__ = ["ModelLedgerFeed"]


class ModelLedgerFeed:
    def __init__(self, model: BillingModel, router: Router, provider_uuid: str, ledger: Ledger | None = None) -> None:
        self.model = model
        self.router = router
        self.provider_uuid = provider_uuid
        self.active = True
        self.reconcile(ledger)
        model.subscribe(self._on_tx)

    def _tell(self, message: Any) -> None:
        with sending_as(LISTENER):
            self.router.tell(LEDGER, message)

    def reconcile(self, ledger: Ledger | None) -> None:
        """Tell the ledger the chain's active leases, and how the ones it missed ended."""
        now = self.model.clock.now()
        active = self.model.active_leases_by_provider(self.provider_uuid)
        self._tell(LeasesReconciled(now, active))
        if ledger is None:
            return
        still = {lease.uuid for lease in active}
        for uuid in ledger.open_lease_uuids():
            if uuid not in still:
                try:
                    lease = self.model.lease(uuid)
                except ChainError:  # unknown to the chain: nothing exact to tell
                    continue
                self._tell(LeaseObserved(now, lease))

    def _on_tx(self, tx: TxEvents) -> None:
        if not self.active:
            return
        pairs = tx.pairs()
        for ev in lease_events_from_tx(pairs, tx.height):
            if ev.provider_uuid == self.provider_uuid and ev.kind != "created":
                self._tell(LeaseObserved(tx.time, self.model.lease(ev.lease_uuid)))
        for settled in settlements_from_tx(tx.tx_hash, tx.time, pairs, self.provider_uuid):
            self._tell(settled)

    def close(self) -> None:
        self.active = False
