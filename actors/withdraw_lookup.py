"""Withdraw txs of unknown outcome: looked up until the chain says what they applied.

A withdraw page whose tx was broadcast but whose inclusion the client never
saw (``may_have_committed``) is not sent again (``actors.withdraw_cycle``),
yet it may well have been applied: its leases settled, the provider paid.
Without this the books would never learn what that page withdrew; the
statement would show it only as a difference.

So the chain actor looks the tx up (``ChainClient.withdraw_outcome``) after
each of ``LOOKUP_DELAYS``:

- applied: the ledger is told the page and its settlements, as for any page;
- included but failed: it applied nothing; the lookups end;
- not known to the node (yet), or the lookup itself failed transiently
  (the node unreachable, or answering UNKNOWN or INTERNAL): the next lookup;
  after the last, a node that answers "not found" has the tx reported as
  never seen (an operator can still check the hash), while a lookup that
  failed is asked again at the last delay: nothing is decided on a failed read;
- what it did cannot be read (an answer that does not decode, or a node
  that keeps no tx index): reported; the lookups end for this run, but its
  record stays in the books (``run.py periods`` lists it) and the next
  start looks it up again;
- any other failure: reported, the lookups end.

Each lookup is kept in the ledger while it lasts (``WithdrawLookupOpened``,
``WithdrawLookupClosed``), and a restart goes on with it (``restore``): a
sidecar restarted because its node was unreachable, the very thing that
leaves a tx's outcome unknown, must not forget the tx.

The books learn a withdraw tx's hash even earlier, as soon as it is signed
(``WithdrawTxSigned``, before the client waits for inclusion): the same
ledger fact, closed when the page's answer settles it (``settled``:
booked, or refused before inclusion), kept when the answer hands the tx to
the lookups. A sidecar that dies while the client waits, before any answer,
thus looks the tx up at its next start instead of leaving its page out of
the books. That fact reaches the ledger writer asynchronously, so chain-io
writes the hash itself before the broadcast (``actors.write_ahead``): a
death between the signing and the writer's commit loses nothing either.

Every method takes ``now`` and returns effects.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from actors.effects import Effect, Note, Send
from actors.withdraw_cycle import page_to_ledger
from chain.errors import is_no_tx_index
from messages.chain import ChainFailure
from messages.chain_actor import WithdrawPageAnswered, WithdrawTxAnswered, WithdrawTxCall, WithdrawTxSigned
from messages.coins import format_coins
from messages.ledger import WithdrawLookupClosed, WithdrawLookupOpened
from runtime.router import CHAIN_IO, LEDGER

__all__ = ["WithdrawLookups", "LOOKUP_DELAYS", "not_applied_yet", "outcome_unreadable", "KEPT_FOR_NEXT_START"]

#: When to look a tx up, each counted from the previous lookup. The client
#: already waited its ``tx_timeout`` for inclusion; a tx still in a mempool
#: then is usually included within a few blocks, and one not included after
#: some twenty minutes most likely never will be (its sequence is taken by
#: the next withdraw).
LOOKUP_DELAYS = (
    timedelta(seconds=10),
    timedelta(seconds=30),
    timedelta(minutes=1),
    timedelta(minutes=2),
    timedelta(minutes=5),
    timedelta(minutes=10),
)


class WithdrawLookups:
    """The txs being looked up: hash -> (cycle, page); and the signed ones still unanswered."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[int, int]] = {}
        #: (cycle, page, attempt) of a page call -> the hashes it signed, while it has not answered
        self.unanswered: dict[tuple[int, int, int], list[str]] = {}

    def signed(self, m: WithdrawTxSigned, now: datetime) -> list[Effect]:
        """A page's tx is signed and goes out: the books remember it until its answer settles it."""
        hashes = self.unanswered.setdefault((m.cycle, m.page, m.attempt), [])
        if not m.tx_hash or m.tx_hash in hashes:
            return []
        hashes.append(m.tx_hash)
        return [Send(LEDGER, WithdrawLookupOpened(m.tx_hash, m.cycle, m.page, now))]

    def settled(self, m: WithdrawPageAnswered) -> tuple[list[Effect], bool]:
        """The page call's answer came: close what it settled; and whether its tx is already in the books.

        Called after the answer's page (if any) went to the ledger, so the
        fact is closed only behind it. The tx of an answer that may have
        committed stays open: the lookups take it over (``begin``).
        """
        hashes = self.unanswered.pop((m.cycle, m.page, m.attempt), [])
        error = m.error
        keep = error.tx_hash if error is not None and error.may_have_committed else ""
        out: list[Effect] = [Send(LEDGER, WithdrawLookupClosed(h)) for h in hashes if h != keep]
        return out, bool(keep) and keep in hashes

    def begin(self, cycle: int, page: int, tx_hash: str, now: datetime, recorded: bool = False) -> list[Effect]:
        """Look ``tx_hash`` up; ``recorded``: the books already hold it (it was signed in this run)."""
        if not tx_hash or tx_hash in self.pending:
            return []
        opened = [] if recorded else [Send(LEDGER, WithdrawLookupOpened(tx_hash, cycle, page, now))]
        return [*opened, *self._first(cycle, page, tx_hash, "may have been applied", now)]

    def restore(self, lookups: tuple[WithdrawLookupOpened, ...], now: datetime) -> list[Effect]:
        """Go on with the lookups a previous run left open: each starts over from the first delay."""
        out: list[Effect] = []
        for lookup in lookups:
            if lookup.tx_hash not in self.pending:
                why = "still to be looked up (from before a restart)"
                out += self._first(lookup.cycle, lookup.page, lookup.tx_hash, why, now)
        return out

    def _first(self, cycle: int, page: int, tx_hash: str, why: str, now: datetime) -> list[Effect]:
        self.pending[tx_hash] = (cycle, page)
        return [
            Note(f"withdraw page {page} of cycle {cycle}: tx {tx_hash} {why}; "
                 f"looking it up in {LOOKUP_DELAYS[0].total_seconds():g}s"),
            Send(CHAIN_IO, WithdrawTxCall(cycle, page, tx_hash, 1), at=now + LOOKUP_DELAYS[0]),
        ]

    def _end(self, tx_hash: str) -> Send:
        del self.pending[tx_hash]
        return Send(LEDGER, WithdrawLookupClosed(tx_hash))

    def answered(self, m: WithdrawTxAnswered, now: datetime) -> list[Effect]:
        if self.pending.get(m.tx_hash) != (m.cycle, m.page):
            return []  # already settled by an earlier answer
        where = f"withdraw page {m.page} of cycle {m.cycle}: tx {m.tx_hash}"
        if m.result is not None:
            page = m.result
            return [
                Note(f"{where} was applied after all: {format_coins(page.total_amounts)} from "
                     f"{page.withdrawal_count} lease(s), now in the books"),
                *page_to_ledger(m.cycle, m.page, page, now),
                self._end(m.tx_hash),
            ]
        text, delay = not_applied_yet(where, m.attempt, m.error, "it withdrew nothing")
        if delay is None and outcome_unreadable(m.error):
            del self.pending[m.tx_hash]
            return [Note(f"{text}; {KEPT_FOR_NEXT_START}", event="withdraw_lookup_ended", level="warning")]
        if delay is None:
            return [Note(text, event="withdraw_lookup_ended", level="warning"), self._end(m.tx_hash)]
        return [Note(text), Send(CHAIN_IO, WithdrawTxCall(m.cycle, m.page, m.tx_hash, m.attempt + 1), at=now + delay)]


#: Said of a tx whose lookups end while its outcome is still unknown: its record stays.
KEPT_FOR_NEXT_START = "its record stays in the books (run.py periods lists it) and it is looked up again at the next start"


def outcome_unreadable(error: ChainFailure | None) -> bool:
    """The lookup cannot read what the tx did: found, with an answer that does not decode, or
    asked of a node that keeps no tx index (GetTx: "transaction indexing is disabled").

    The tx may well have applied: its record is kept, not closed, so the books
    keep saying they lack it, and a later start (a fixed build, a node that
    indexes txs) reads it again.
    """
    return error is not None and not error.transient and error.may_have_committed


def not_applied_yet(where: str, attempt: int, error: ChainFailure | None, nothing: str) -> tuple[str, timedelta | None]:
    """A lookup that found no applied tx: what to say, and when to look again (None: the lookups end).

    ``where`` names the tx, ``nothing`` says what a tx that failed did
    ("it withdrew nothing"). An error that is not transient ends the
    lookups: the tx was included and failed, or its outcome cannot be read
    (a node that keeps no tx index cannot say: that is not a failed tx).
    """
    if error is not None and is_no_tx_index(error):
        return (f"{where}: its outcome cannot be read, the node keeps no tx index ({error.message}): if it was "
                "applied, its settlements are missing from the books; look it up on a node that indexes txs"), None
    if error is not None and not error.transient:
        if error.may_have_committed:
            return f"{where}: its outcome cannot be read ({error.message}); look it up by hand", None
        return f"{where} was included and failed ({error.message}): {nothing}", None
    if attempt >= len(LOOKUP_DELAYS) and error is not None:
        # The schedule is over, but this lookup failed to read (the node down for an upgrade, say):
        # nothing is decided on a failed read. Asked again at the last delay until a node answers.
        delay = LOOKUP_DELAYS[-1]
        return (f"{where}: lookup failed ({error.message}) after the last scheduled one: its outcome is "
                f"still unknown; next lookup in {delay.total_seconds():g}s"), delay
    if attempt >= len(LOOKUP_DELAYS):
        waited = sum(LOOKUP_DELAYS, timedelta()).total_seconds() / 60
        return (f"{where} is still unknown to the node after {attempt} lookups over {waited:g} minutes: "
                "taken as never applied (if it was, its settlements are missing from the books)"), None
    delay = LOOKUP_DELAYS[attempt]
    why = f"lookup failed ({error.message})" if error is not None else "not known to the node yet"
    return f"{where}: {why}; next lookup in {delay.total_seconds():g}s", delay
