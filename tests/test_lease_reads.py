"""Leases read for the books: asked once while waiting, asked again after a failure, given up at last."""

from __future__ import annotations

from actors.effects import Note, Send
from actors.lease_reads import MAX_TRIES, LeaseReads
from messages.chain import ChainFailure, Lease
from messages.chain_actor import LeaseCall
from messages.ledger import LeaseObserved
from messages.scheduler import LeaseRead
from runtime.clock import utc
from runtime.router import CHAIN_IO, LEDGER
from tests.support import PROVIDER, item

T0 = utc(2026, 3, 1)
LEASE = Lease("l1", "manifest1t", PROVIDER, (item(5),), state="CLOSED", closed_at=T0)
DOWN = ChainFailure("lease", "unavailable", transient=True)


def calls(effects) -> list[str]:
    return [e.message.lease_uuid for e in effects if isinstance(e, Send) and e.to == CHAIN_IO
            and isinstance(e.message, LeaseCall)]


def test_a_lease_read_goes_to_the_ledger() -> None:
    reads = LeaseReads()
    assert calls(reads.ask(["l1", "l2"])) == ["l1", "l2"]
    out = reads.answered(LeaseRead("l2", LEASE), T0)
    assert [(e.to, e.message) for e in out] == [(LEDGER, LeaseObserved(T0, LEASE))]
    assert calls(reads.retry()) == []  # nothing failed


def test_a_lease_asked_for_again_while_read_is_read_anew_after_the_read_out() -> None:
    """Acknowledged (a read goes out), then gone from the active set before it answers: its ACTIVE
    answer is older than the reason for the second read, and must not reopen the lease in the books."""
    reads = LeaseReads()
    reads.ask(["l1"])
    assert calls(reads.ask(["l1"])) == []  # one read out at a time
    stale = Lease("l1", "manifest1t", PROVIDER, (item(5),))  # still ACTIVE when it was read
    assert calls(reads.answered(LeaseRead("l1", stale), T0)) == ["l1"]  # dropped, read anew
    out = reads.answered(LeaseRead("l1", LEASE), T0)
    assert [(e.to, e.message) for e in out] == [(LEDGER, LeaseObserved(T0, LEASE))]


def test_a_failed_read_is_asked_again_until_it_is_given_up() -> None:
    reads = LeaseReads()
    reads.ask(["l1"])
    for n in range(1, MAX_TRIES):
        (note,) = reads.answered(LeaseRead("l1", None, DOWN), T0)
        assert isinstance(note, Note) and "asked again at the next cycle" in note.text
        assert calls(reads.retry()) == ["l1"]
    (note,) = reads.answered(LeaseRead("l1", None, DOWN), T0)
    assert f"after {MAX_TRIES} tries" in note.text and calls(reads.retry()) == []
