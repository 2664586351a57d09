"""Closes found after the fact: the tx that ended a lease, found by the node's tx search, and booked.

A lease of ours can end while the sidecar hears nothing of it: the tenant
closes it while the sidecar is down or its websocket is cut, or our own
close's answer and event are both lost. Its read (``actors.lease_reads``)
says it ended and when, but what its last settlement moved is only in the
tx that ended it. So whenever a read finds one of our leases CLOSED after
it was active (a lease that expired, or was rejected or cancelled while
PENDING, never accrued: nothing to find), that tx is looked for
(``CloseSearchCall``, ``ChainClient.lease_end_tx``): first the tx an ending
event named, if one did (a hint: used only if that tx did end the lease),
then the node's tx search (``chain.lease_end``). What it settled goes to the
books at the tx's block time; the ledger keeps one row per tx, lease and
denom, so a close the sidecar booked already (its own, answered) counts
once. The leases whose close the chain actor booked from its own answer are
not searched again (``booked``).

A search is written ahead into the books, as a close tx is: its lease
carries a ``close_sought`` issue from the moment the search starts (sent
before the read that found the lease ended, so the books never hold the
chain's close without it) until the search ends. A sidecar stopped while a
search is out or waiting to be asked again reads that lease at its next
start (``Ledger.leases_to_read``) and searches anew; the books show it
meanwhile as a settlement they may lack.

When the tx cannot be found, the books say so for that lease (a
``LeaseIssue``, shown by ``run.py periods`` and the statements) instead of
silently lacking its settlement:

- ``no_tx_index``: the node keeps no tx index ("transaction indexing is
  disabled"); nothing to retry against this node;
- ``close_not_found``: the search found no tx (a node whose index leaves
  the billing events out, or one not yet indexed): searched again after
  ``NOT_FOUND_RETRIES``, then left reported; a later find clears it.

A search that fails for a passing reason (the node unreachable) is asked
again with the lease reads' backoff (``retry_delay``), for as long as it
takes. Every method takes ``now`` and returns effects.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Iterable

from actors.effects import Effect, Note, Send
from actors.lease_reads import retry_delay
from chain.errors import is_no_tx_index
from messages.chain import Lease
from messages.chain_actor import CloseSearchAnswered, CloseSearchCall
from messages.coins import coins, coins_to_dict, format_coins
from messages.ledger import LeaseIssue, LeaseIssueResolved, SettlementsRecorded
from runtime.router import CHAIN_IO, LEDGER

__all__ = ["CloseSearches", "NOT_FOUND_RETRIES", "NO_TX_INDEX", "CLOSE_NOT_FOUND", "CLOSE_SOUGHT"]

#: When a search that found nothing is asked again (a tx indexed late), each
#: counted from the search before; after the last the lease stays reported.
NOT_FOUND_RETRIES = (timedelta(seconds=30), timedelta(minutes=5), timedelta(minutes=30))

#: ``LeaseIssue.kind`` values of this module.
NO_TX_INDEX = "no_tx_index"
CLOSE_NOT_FOUND = "close_not_found"
CLOSE_SOUGHT = "close_sought"

#: Leases remembered at most, per table below: a hint or a booked close is
#: useful for minutes; a flood of closes must not grow these without bound.
_KEPT = 10_000


def _bounded_put(table: "OrderedDict[str, str]", key: str, value: str) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > _KEPT:
        table.popitem(last=False)


class CloseSearches:
    """The ended leases whose closing tx is being looked for; the hints and our own booked closes."""

    def __init__(self) -> None:
        #: lease -> the tx an ending event named (a hint)
        self.hints: OrderedDict[str, str] = OrderedDict()
        #: leases whose close is booked: by our own close round from its answer, or found here
        self.booked: OrderedDict[str, str] = OrderedDict()
        #: lease -> searches that failed or found nothing so far, while one is out or due
        self.pending: dict[str, int] = {}
        #: leases whose search ended leaving an issue in the books (not found, no tx index)
        self.unfound: OrderedDict[str, str] = OrderedDict()

    def hint(self, lease_uuid: str, tx_hash: str) -> None:
        _bounded_put(self.hints, lease_uuid, tx_hash)

    def booked_by_us(self, lease_uuids: Iterable[str], looked_up: bool = False) -> list[Effect]:
        """Our close round booked these leases' close from its tx's answer: no search needed.

        A search for one (its round's end said the close failed, a re-check
        found the lease closed, and only then did the close's answer or lookup
        come) is over, whether still out (its answer is then ignored) or ended:
        what it noted in the books is resolved, or a "not found" would stand
        beside the close. ``looked_up``: the close was found by a lookup, which
        may be one a previous run left open, whose search this run never saw:
        the books' notes are resolved for every lease it closed.
        """
        out: list[Effect] = []
        for uuid in lease_uuids:
            _bounded_put(self.booked, uuid, "")
            searched = self.pending.pop(uuid, None) is not None
            if self.unfound.pop(uuid, None) is not None or searched or looked_up:
                out += [Send(LEDGER, LeaseIssueResolved(uuid, kind)) for kind in (CLOSE_NOT_FOUND, NO_TX_INDEX, CLOSE_SOUGHT)]
        return out

    def ended(self, lease: Lease, now: datetime) -> list[Effect]:
        """A read found ``lease`` (ours) ended: look for the tx that ended it, unless nothing is to be found.

        The search is in the books (``close_sought``) before it is asked:
        these effects go ahead of the read's own ``LeaseObserved``.
        """
        if lease.state != "CLOSED" or lease.acknowledged_at is None:
            return []  # expired, rejected or cancelled while PENDING: it never accrued
        if lease.uuid in self.pending or lease.uuid in self.booked:
            return []
        self.pending[lease.uuid] = 0
        hint = self.hints.pop(lease.uuid, "")
        sought = "the tx that ended it is being looked for: what it settled is not in the books yet"
        return [
            Send(LEDGER, LeaseIssue(lease.closed_at or now, lease.uuid, CLOSE_SOUGHT, sought, lease.tenant)),
            Send(CHAIN_IO, CloseSearchCall(lease.uuid, lease.tenant, lease.closed_at, hint)),
        ]

    def answered(self, m: CloseSearchAnswered, now: datetime) -> list[Effect]:
        failures = self.pending.get(m.lease_uuid)
        if failures is None:
            return []
        where = f"lease {m.lease_uuid} of tenant {m.tenant}"
        at = m.closed_at or now
        if m.outcome is not None:
            del self.pending[m.lease_uuid]
            _bounded_put(self.booked, m.lease_uuid, "")  # read again later: nothing more to find
            total = coins_to_dict(tuple(c for s in m.outcome.settlements for c in s.amounts))
            tx = m.outcome.tx_hashes[0] if m.outcome.tx_hashes else "?"
            out: list[Effect] = [
                Note(f"{where}: tx {tx} ended it, settling {format_coins(coins(total)) or 'nothing'}, "
                     "in the books at its block time",
                     m.tenant, event="close_found", fields=(("lease", m.lease_uuid), ("tx_hash", tx))),
            ]
            if m.outcome.settlements:
                out.append(Send(LEDGER, SettlementsRecorded(m.outcome.settlements)))
            # After the settlements: a stop between the two leaves the search to be made again, never lost.
            out += [Send(LEDGER, LeaseIssueResolved(m.lease_uuid, kind))
                    for kind in (CLOSE_NOT_FOUND, NO_TX_INDEX, CLOSE_SOUGHT)]
            return out
        error = m.error
        if error is not None and is_no_tx_index(error):
            del self.pending[m.lease_uuid]
            _bounded_put(self.unfound, m.lease_uuid, NO_TX_INDEX)
            return [
                Send(LEDGER, LeaseIssue(at, m.lease_uuid, NO_TX_INDEX, error.message, m.tenant)),
                Send(LEDGER, LeaseIssueResolved(m.lease_uuid, CLOSE_SOUGHT)),  # over: no_tx_index says what is lacking
                Note(f"{where} ended while unheard, and the node keeps no tx index to find the tx that ended it: "
                     "what that tx settled is not in the books (listed by run.py periods)",
                     m.tenant, event="close_unsearchable", fields=(("lease", m.lease_uuid),), level="warning"),
            ]
        if error is not None and error.transient:
            self.pending[m.lease_uuid] = failures + 1
            delay = retry_delay(failures + 1)
            return [
                Note(f"{where}: the search for the tx that ended it failed ({error.message}); again in "
                     f"{delay.total_seconds():g}s", m.tenant, event="close_search_failed",
                     fields=(("lease", m.lease_uuid),), level="warning"),
                Send(CHAIN_IO, CloseSearchCall(m.lease_uuid, m.tenant, m.closed_at, "", m.attempt + 1), at=now + delay),
            ]
        why = f"the search failed ({error.message})" if error is not None else "the node's tx search found no tx that ended it"
        out = [Send(LEDGER, LeaseIssue(at, m.lease_uuid, CLOSE_NOT_FOUND, why, m.tenant))]
        tries = failures + 1
        if error is None and tries <= len(NOT_FOUND_RETRIES):
            self.pending[m.lease_uuid] = tries
            delay = NOT_FOUND_RETRIES[tries - 1]
            out += [
                Note(f"{where} ended while unheard; {why}: searched again in {delay.total_seconds():g}s",
                     m.tenant, event="close_not_found", fields=(("lease", m.lease_uuid),), level="warning"),
                Send(CHAIN_IO, CloseSearchCall(m.lease_uuid, m.tenant, m.closed_at, "", m.attempt + 1), at=now + delay),
            ]
            return out
        del self.pending[m.lease_uuid]
        _bounded_put(self.unfound, m.lease_uuid, CLOSE_NOT_FOUND)
        return out + [Send(LEDGER, LeaseIssueResolved(m.lease_uuid, CLOSE_SOUGHT)), Note(
            f"{where} ended while unheard; {why}: what its closing tx settled is not in the books "
            "(listed by run.py periods)",
            m.tenant, event="close_not_found", fields=(("lease", m.lease_uuid),), level="warning",
        )]
