"""The txs a chain included, found again by their events: what a node's tx indexer answers.

A CometBFT node whose ``[tx_index] indexer`` is ``kv`` keeps every included
tx under ``tx.hash`` and ``tx.height`` and, for each event attribute it
indexes, under ``type.attribute=value``; the SDK's
``cosmos.tx.v1beta1.Service/GetTxsEvent`` searches them with the query
language of the websocket subscriptions (``chain.ws_query``). The sidecar
asks it for the tx that ended a lease it did not hear end
(``lease_closed.lease_uuid='...'``, ``actors.close_search``), so that what
that tx settled reaches the books at the tx's block time.

``TxIndex`` is that indexer over ``TxEvents`` (``chain.model``): the
devnet node feeds it every tx the chain includes (its own and the ones
the demo's tenants make), and the in-process model's client searches it the
same way. End-of-block events are not txs and are not indexed (a node
keeps them in its block indexer, which ``GetTxsEvent`` does not search).

It is bounded (the oldest txs go first, as a node that prunes), thread-safe,
and finds candidates through an inverted index of the query's conditions,
so a search costs the txs that match, not every tx the chain ever made.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Iterable

from chain.model import BlockEvents, TxEvents
from chain.ws_query import Query

__all__ = ["TxIndex", "KEPT_TXS", "MAX_SEARCH_LIMIT", "flattened"]

#: Txs kept at most; a node keeps more, the sidecar asks about the recent ones.
KEPT_TXS = 500_000
#: ``GetTxsEvent`` answers at most this many txs a page (the SDK's max limit
#: is 100 by default; CometBFT's ``tx_search`` per_page cap is 100).
MAX_SEARCH_LIMIT = 100


#: What a node indexes whatever its ``index-events`` say.
_ALWAYS_INDEXED = ("tx.hash", "tx.height")


def flattened(tx: TxEvents) -> dict[str, set[str]]:
    """The tx's composite keys (``type.attribute``, ``tx.hash``, ``tx.height``) -> their values in it."""
    index: dict[str, set[str]] = {"tx.hash": {tx.tx_hash}, "tx.height": {str(tx.height)}, "tm.event": {"Tx"}}
    for event in tx.events:
        for key, value in event.attributes:
            index.setdefault(f"{event.type}.{key}", set()).add(value)
    return index


class TxIndex:
    """Included txs by hash, and by every ``type.attribute=value`` they carry."""

    def __init__(self, capacity: int = KEPT_TXS, events: bool = True) -> None:
        self.capacity = capacity
        #: event attributes are searchable (False: only ``tx.hash``/``tx.height``, as a node
        #: whose ``index-events`` leave the billing events out: a search on them finds nothing)
        self.events = events
        self._lock = threading.Lock()
        self._txs: OrderedDict[str, TxEvents] = OrderedDict()
        #: tx hash -> its place in inclusion order
        self._seq: dict[str, int] = {}
        self._next = 0
        self._by_pair: dict[tuple[str, str], set[str]] = {}

    def add(self, tx: TxEvents | BlockEvents) -> None:
        """A model listener: index ``tx`` (end-of-block events are left out)."""
        if isinstance(tx, BlockEvents) or not tx.tx_hash:
            return
        with self._lock:
            if tx.tx_hash in self._txs:
                return
            self._txs[tx.tx_hash] = tx
            self._seq[tx.tx_hash] = self._next
            self._next += 1
            for pair in self._pairs(tx):
                self._by_pair.setdefault(pair, set()).add(tx.tx_hash)
            while len(self._txs) > self.capacity:
                _, old = self._txs.popitem(last=False)
                del self._seq[old.tx_hash]
                for pair in self._pairs(old):
                    held = self._by_pair.get(pair)
                    if held is not None:
                        held.discard(old.tx_hash)
                        if not held:
                            del self._by_pair[pair]

    @staticmethod
    def _pairs(tx: TxEvents) -> Iterable[tuple[str, str]]:
        for key, values in flattened(tx).items():
            for value in values:
                yield key, value

    def get(self, tx_hash: str) -> TxEvents | None:
        with self._lock:
            return self._txs.get(tx_hash.upper()) or self._txs.get(tx_hash)

    def search(self, query: Query, page: int = 1, limit: int = MAX_SEARCH_LIMIT, descending: bool = False) -> tuple[list[TxEvents], int]:
        """(the page's txs in block order, or newest first; how many match in all). ``page`` counts from 1."""
        limit = max(1, min(limit, MAX_SEARCH_LIMIT))
        page = max(1, page)
        with self._lock:
            candidates: set[str] | None = None
            for condition in query.conditions:
                if condition.key == "tm.event":
                    continue  # every indexed tx is a Tx
                if not self.events and condition.key not in _ALWAYS_INDEXED:
                    return [], 0
                found = self._by_pair.get((condition.key, condition.value), set())
                candidates = set(found) if candidates is None else candidates & found
                if not candidates:
                    break
            if candidates is None:
                order = list(self._txs)
            else:
                order = sorted(candidates, key=self._seq.__getitem__)
            if descending:
                order.reverse()
            start = (page - 1) * limit
            return [self._txs[h] for h in order[start : start + limit]], len(order)
