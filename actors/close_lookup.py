"""Close txs written ahead into the books, and looked up when their answer never came.

A close batch's tx hash reaches the books as soon as it is signed
(``CloseTxSigned``, before the client waits for inclusion): the ledger
keeps it (``CloseLookupOpened``) until the batch's answer settles it
(``settled``: the answer booked what it closed and settled, or the tx was
refused before inclusion; ``CloseLookupClosed``). An answer that may have
committed (``may_have_committed``, the client never saw the inclusion)
hands the tx to the lookups instead (``begin``), and so does a restart for
every tx a previous run left open (``restore``): a sidecar killed while its
client waited for inclusion, the very moment a close is unknown, books it at
its next start. chain-io writes the hash itself before the broadcast
(``actors.write_ahead``), since the chain actor's fact reaches the ledger
writer only later.

A lookup asks the chain (``ChainClient.close_outcome``) on the withdraw
lookups' schedule (``actors.withdraw_lookup.LOOKUP_DELAYS``): applied, the
ledger gets its settlements and the closure of each tenant's leases, at the
tx's block time (its settlements carry it); the ledger keeps one row per
tx, lease and denom, and the closure is the same fact as the answer's
(same time, tenant, leases, reason and tx), so a close booked by both
counts once. Included and failed, or unknown after the last lookup, it
closed nothing. Either way the lookup ends in the books too.

Every method takes ``now`` and returns effects.
"""

from __future__ import annotations

from datetime import datetime

from actors.effects import Effect, Note, Send
from actors.withdraw_lookup import KEPT_FOR_NEXT_START, LOOKUP_DELAYS, not_applied_yet, outcome_unreadable
from messages.chain import CloseOutcome
from messages.chain_actor import CloseBatchAnswered, CloseTxAnswered, CloseTxCall, CloseTxSigned
from messages.coins import coins, coins_to_dict, format_coins
from messages.credit import LeasesClosed
from messages.ledger import ClosureRecorded, CloseLookupClosed, CloseLookupOpened, SettlementsRecorded
from messages.scheduler import NO_CYCLE, ClosuresFlushed
from runtime.router import CHAIN_IO, LEDGER, SCHEDULER, tenant_address

__all__ = ["CloseLookups", "ByTenant", "closure_facts", "closed_after_its_round"]

#: (tenant, its leases in one tx), as a close round groups them.
ByTenant = tuple[tuple[str, tuple[str, ...]], ...]


def closure_facts(outcome: CloseOutcome, by_tenant: ByTenant, reason: str, now: datetime) -> list[Effect]:
    """The books' facts of a close tx that was applied: what it settled, and each tenant's closure.

    At the tx's block time (its settlements carry it), not at ``now``,
    when its answer or its lookup came: the same facts whichever brings
    them, so that the ledger counts them once.
    """
    out: list[Effect] = []
    if outcome.settlements:
        out.append(Send(LEDGER, SettlementsRecorded(outcome.settlements)))
    at = min((s.at for s in outcome.settlements), default=now)
    out += [
        Send(LEDGER, ClosureRecorded(at, tenant, leases, reason, outcome.tx_hashes))
        for tenant, leases in by_tenant
        if leases
    ]
    return out


def closed_after_its_round(
    outcome: CloseOutcome, by_tenant: ByTenant, reason: str, cycle: int = NO_CYCLE,
    told_elsewhere: frozenset[str] = frozenset(),
) -> list[Effect]:
    """A close found applied after its round ended (a late answer, a lookup): who must hear it.

    The round's end said these leases failed to close. Without this the
    scheduler never learns that their close is booked: a tenant asks to
    close them again, that round finds them closed, and the scheduler
    searches for the tx that ended them; on a node that finds txs by hash
    but not by event, that search records a false ``close_not_found``.
    The tenants are told too (one a lookup restored at start names may no
    longer be watched: its mail is dropped). ``told_elsewhere``: leases whose tenants hear
    of the close from a round still going (``ChainDecisions``).
    """
    closed = tuple(sorted(u for _, leases in by_tenant for u in leases))
    if not closed:
        return []
    out: list[Effect] = []
    for tenant, leases in by_tenant:
        leases = tuple(u for u in leases if u not in told_elsewhere)
        if leases:
            out.append(Send(tenant_address(tenant), LeasesClosed(tenant, leases, reason, outcome.tx_hashes)))
    return out + [Send(SCHEDULER, ClosuresFlushed(cycle, closed=closed, tx_hashes=outcome.tx_hashes))]


class CloseLookups:
    """The close txs being looked up, and the signed ones whose answer has not come."""

    def __init__(self) -> None:
        #: tx hash -> (each tenant's leases in it, the reason)
        self.pending: dict[str, tuple[ByTenant, str]] = {}
        #: (round, batch) of a close call -> the hashes it signed, while it has not answered
        self.unanswered: dict[tuple[int, int], list[str]] = {}

    def signed(self, m: CloseTxSigned, by_tenant: ByTenant, reason: str, now: datetime) -> list[Effect]:
        """A batch's tx is signed and goes out: the books remember it until its answer settles it."""
        hashes = self.unanswered.setdefault((m.round, m.batch), [])
        if not m.tx_hash or m.tx_hash in hashes:
            return []
        hashes.append(m.tx_hash)
        return [Send(LEDGER, CloseLookupOpened(m.tx_hash, reason, by_tenant, now))]

    def settled(self, m: CloseBatchAnswered) -> tuple[list[Effect], bool]:
        """The batch's answer came: close what it settled; and whether its tx is already in the books.

        Called after the answer's facts (if any) went to the ledger, so the
        lookup is closed only behind them. The tx of an answer that may have
        committed stays open: the lookups take it over (``begin``).
        """
        hashes = self.unanswered.pop((m.round, m.batch), [])
        error = m.error
        keep = error.tx_hash if error is not None and error.may_have_committed else ""
        out: list[Effect] = [Send(LEDGER, CloseLookupClosed(h)) for h in hashes if h != keep]
        return out, bool(keep) and keep in hashes

    def begin(self, tx_hash: str, by_tenant: ByTenant, reason: str, now: datetime, recorded: bool = False) -> list[Effect]:
        """Look ``tx_hash`` up; ``recorded``: the books already hold it (it was signed in this run)."""
        if not tx_hash or tx_hash in self.pending:
            return []
        opened = [] if recorded else [Send(LEDGER, CloseLookupOpened(tx_hash, reason, by_tenant, now))]
        return [*opened, *self._first(tx_hash, by_tenant, reason, "may have been applied", now)]

    def restore(self, lookups: tuple[CloseLookupOpened, ...], now: datetime) -> list[Effect]:
        """Go on with the close txs a previous run left open: each is looked up from the first delay."""
        out: list[Effect] = []
        for lookup in lookups:
            if lookup.tx_hash not in self.pending:
                out += self._first(lookup.tx_hash, lookup.by_tenant, lookup.reason, "is not in the books yet (from before a restart)", now)
        return out

    def _first(self, tx_hash: str, by_tenant: ByTenant, reason: str, why: str, now: datetime) -> list[Effect]:
        self.pending[tx_hash] = (by_tenant, reason)
        leases = tuple(u for _, uuids in by_tenant for u in uuids)
        return [
            Note(f"close tx {tx_hash} of {len(leases)} lease(s) {why}; "
                 f"looking it up in {LOOKUP_DELAYS[0].total_seconds():g}s",
                 event="close_lookup", fields=(("tx_hash", tx_hash), ("leases", len(leases)))),
            Send(CHAIN_IO, CloseTxCall(tx_hash, leases, 1), at=now + LOOKUP_DELAYS[0]),
        ]

    def answered(self, m: CloseTxAnswered, now: datetime, held: frozenset[str] = frozenset()) -> list[Effect]:
        """A lookup's answer. ``held``: leases that a round not yet ended holds failed; that round's end
        tells their tenants of the close (``CloseRound.closed_after_all``), so this does not. The
        scheduler hears of every lease here, as a lookup's (``NO_CYCLE``): its books' notes are resolved."""
        entry = self.pending.get(m.tx_hash)
        if entry is None:
            return []  # already settled by an earlier answer
        where = f"close tx {m.tx_hash}"
        if m.result is not None:
            self._end(m.tx_hash)
            by_tenant, reason = entry
            total = coins_to_dict(tuple(c for s in m.result.settlements for c in s.amounts))
            return [
                Note(f"{where} was applied after all: {m.result.closed_count} lease(s) closed, "
                     f"{format_coins(coins(total)) or 'nothing'} settled, now in the books",
                     event="close_looked_up", fields=(("tx_hash", m.tx_hash),)),
                *closure_facts(m.result, by_tenant, reason, now),
                Send(LEDGER, CloseLookupClosed(m.tx_hash)),
                # Its tenants are told, those of a lookup restored at start too: a restored monitor
                # not told kept its leases and its saved state (a grace window) when the scheduler
                # stopped it, and a later start restored that window onto the tenant's next lease.
                # (Mail to a tenant no longer watched is dropped.)
                *closed_after_its_round(m.result, by_tenant, reason, told_elsewhere=held),
            ]
        text, delay = not_applied_yet(where, m.attempt, m.error, "it closed nothing")
        if delay is None and outcome_unreadable(m.error):
            self._end(m.tx_hash)
            return [Note(f"{text}; {KEPT_FOR_NEXT_START}", event="close_lookup_ended", level="warning")]
        if delay is None:
            self._end(m.tx_hash)
            return [Note(text, event="close_lookup_ended", level="warning"), Send(LEDGER, CloseLookupClosed(m.tx_hash))]
        return [Note(text), Send(CHAIN_IO, CloseTxCall(m.tx_hash, m.lease_uuids, m.attempt + 1), at=now + delay)]

    def _end(self, tx_hash: str) -> None:
        del self.pending[tx_hash]
