"""Leases read from the chain: asked once while waiting, and a failed read asked again with backoff for as long as it takes, reported."""

from __future__ import annotations

from datetime import timedelta

from actors.effects import Note, Send
from actors.lease_reads import MAX_RETRY, LeaseReads, retry_delay
from messages.chain import ChainFailure, Lease
from messages.chain_actor import LeaseCall
from messages.ledger import LeaseIssue, LeaseObserved
from messages.scheduler import LeaseRead
from runtime.clock import utc
from runtime.router import CHAIN_IO, LEDGER
from tests.support import PROVIDER, item

T0 = utc(2026, 3, 1)
LEASE = Lease("l1", "manifest1t", PROVIDER, (item(5),), state="CLOSED", closed_at=T0)
DOWN = ChainFailure("lease", "UNAVAILABLE: node down", transient=True)


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


def test_the_wait_doubles_from_ten_seconds_to_half_an_hour_and_stays_there() -> None:
    waits = [retry_delay(n).total_seconds() for n in range(1, 12)]
    assert waits == [10, 20, 40, 80, 160, 320, 640, 1280, 1800, 1800, 1800]
    assert retry_delay(10**6) == MAX_RETRY  # no overflow, however long it fails


def test_a_failing_read_is_asked_again_on_a_timer_reported_each_time_and_cleared_by_its_read() -> None:
    reads = LeaseReads()
    assert [e.message for e in reads.ask(["l1"])] == [LeaseCall("l1")]
    now = T0
    for n in range(1, 13):
        out = reads.answered(LeaseRead("l1", None, DOWN), now)
        (issue,) = [e.message for e in out if isinstance(e, Send) and isinstance(e.message, LeaseIssue)]
        assert (issue.lease_uuid, issue.kind) == ("l1", "unread") and issue.detail.startswith(f"{n} failed read(s)")
        (again,) = [e for e in out if isinstance(e, Send) and isinstance(e.message, LeaseCall)]
        assert again.at == now + retry_delay(n)
        assert [x.level for x in out if isinstance(x, Note)] == ["warning"]
        assert reads.ask(["l1"]) == []  # asked meanwhile (an event): the timer's read does, and is read anew
        now = again.at
        reads.again.discard("l1")
    lease = Lease("l1", "t1", PROVIDER, (item(3),))
    out = reads.answered(LeaseRead("l1", lease), now)
    assert [e.message for e in out if isinstance(e, Send)] == [LeaseObserved(now, lease)]
    assert "after 12 failed read(s)" in [x for x in out if isinstance(x, Note)][0].text
    assert reads.failed == {} and reads.waiting == set()


def test_a_lease_the_chain_does_not_know_is_an_answer_not_a_failure() -> None:
    from chain.errors import GRPC, GRPC_NOT_FOUND
    from messages.ledger import LeaseIssueResolved

    reads = LeaseReads()
    reads.ask(["forged"])
    missing = ChainFailure("lease", "gRPC NOT_FOUND: lease not found", codespace=GRPC, code=GRPC_NOT_FOUND)
    out = reads.answered(LeaseRead("forged", None, missing), T0)
    assert [e.message for e in out if isinstance(e, Send)] == [LeaseIssueResolved("forged", "unread")]
    assert calls(out) == [] and reads.failed == {} and reads.waiting == set()
