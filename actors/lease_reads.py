"""Leases read from the chain: what an event only hints at, and what the books need.

A lease event is a hint (``actors.schedule``): the lease is read, and only
its read starts or ends what a monitor watches. The ledger bills a lease
from its price and its acknowledged and closed times. Every cycle's
active-lease read gives both for the leases still active; a lease that
ended between two such reads (opened and closed within the hour, closed
during a websocket gap or while the sidecar was down) is in none of them.
Without its price the lease cannot be billed; without the chain's
closed_at, a lease closed while the sidecar was down would be billed up to
the restart.

So the scheduler has such a lease read on its own (``LeaseCall``): when one
of our lease events names it, when it vanishes from the active set, and at
start for the leases the books still want. It hands the answer to the
ledger as a ``LeaseObserved``.

A read the chain answers NOT_FOUND is an answer: no such lease (a
forged event named it), nothing to watch or book. A read that fails is
asked again with backoff (``retry_delay``: 10 s
doubling to 30 min), for as long as it takes: a lease the node keeps
failing to answer for is reported, never dropped. Each failure is a log
line, and a ``LeaseIssue`` ("unread") for the books, which ``run.py
periods`` lists and a restart reads again (``Ledger.leases_to_read``); the
lease's successful read clears it. Such a lease holds back only itself:
every other lease of its month is billed as usual.

Every method returns effects; nothing here reads a clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from actors.effects import Effect, Note, Send
from chain.errors import GRPC, GRPC_NOT_FOUND
from messages.chain_actor import LeaseCall
from messages.ledger import LeaseIssue, LeaseIssueResolved, LeaseObserved
from messages.scheduler import LeaseRead
from runtime.router import CHAIN_IO, LEDGER

__all__ = ["LeaseReads", "not_found", "MAX_OWED", "FIRST_RETRY", "MAX_RETRY", "retry_delay", "UNREAD"]

#: Failed reads retried on a timer at most: after a long outage a mass of
#: closures must not grow this without bound. Past it, a lease is left to
#: the books' report and the next start's read.
MAX_OWED = 100_000

#: The wait before the first read again, doubling per failure up to ``MAX_RETRY``.
FIRST_RETRY = timedelta(seconds=10)
MAX_RETRY = timedelta(minutes=30)

#: ``LeaseIssue.kind`` of a lease whose read keeps failing.
UNREAD = "unread"


def retry_delay(failures: int) -> timedelta:
    """How long after its ``failures``-th failed read in a row a lease is read again."""
    delay = FIRST_RETRY
    for _ in range(max(0, failures - 1)):
        delay *= 2
        if delay >= MAX_RETRY:
            return MAX_RETRY
    return delay


def not_found(read: LeaseRead) -> bool:
    """Whether a lease read failed with the chain's NOT_FOUND: an answer (no such lease), unlike a failed read."""
    error = read.error
    return error is not None and error.codespace == GRPC and error.code == GRPC_NOT_FOUND


class LeaseReads:
    """The lease reads asked for and not answered, and the failed ones being asked again."""

    def __init__(self) -> None:
        self.waiting: set[str] = set()
        #: leases asked for again while a read was out: that read may answer
        #: what was true before the reason for the new one (an ACTIVE lease
        #: that has closed since), so its answer is dropped and they are read anew
        self.again: set[str] = set()
        #: lease uuid -> failed reads in a row
        self.failed: dict[str, int] = {}

    def ask(self, lease_uuids: Iterable[str]) -> list[Effect]:
        """Have these leases read (after the read already out, for those being read)."""
        out: list[Effect] = []
        for uuid in lease_uuids:
            if uuid in self.waiting:
                self.again.add(uuid)
            else:
                self.waiting.add(uuid)
                out.append(Send(CHAIN_IO, LeaseCall(uuid)))
        return out

    def retry(self) -> list[Effect]:
        """Ask again for the leases whose read failed and is not on a timer (past ``MAX_OWED``)."""
        return self.ask([uuid for uuid in self.failed if uuid not in self.waiting])

    def answered(self, message: LeaseRead, now: datetime) -> list[Effect]:
        uuid = message.lease_uuid
        self.waiting.discard(uuid)
        if uuid in self.again:
            self.again.discard(uuid)
            return self.ask((uuid,))  # this answer may be older than what asked again
        if message.lease is not None:
            tries = self.failed.pop(uuid, 0)
            out: list[Effect] = [Send(LEDGER, LeaseObserved(now, message.lease))]  # the books clear its issue
            if tries:
                out.append(Note(f"lease {uuid}: read from the chain after {tries} failed read(s)",
                                event="lease_read", fields=(("lease", uuid), ("failures", tries))))
            return out
        error = message.error
        if not_found(message):
            # An answer: the chain holds no such lease (a forged event named it). Nothing to read again.
            self.failed.pop(uuid, None)
            return [
                Send(LEDGER, LeaseIssueResolved(uuid, UNREAD)),
                Note(f"lease {uuid}: the chain knows no such lease ({error.message}); nothing of it is watched or booked",
                     event="lease_unknown", fields=(("lease", uuid),), level="warning"),
            ]
        why = error.message if error is not None else "no answer"
        tries = self.failed.get(uuid, 0) + 1
        issue = Send(LEDGER, LeaseIssue(now, uuid, UNREAD, f"{tries} failed read(s), the last: {why}"))
        if uuid not in self.failed and len(self.failed) >= MAX_OWED:
            return [issue, Note(
                f"lease {uuid}: read failed ({why}), and {MAX_OWED} reads are owed already: read again at the next "
                "start (the books list it as unread)",
                event="lease_unread", fields=(("lease", uuid), ("failures", tries)), level="warning",
            )]
        self.failed[uuid] = tries
        delay = retry_delay(tries)
        self.waiting.add(uuid)
        return [
            issue,
            Note(
                f"lease {uuid}: read failed ({why}), {tries} in a row; read again in {delay.total_seconds():g}s "
                "(only its own billing waits for it)",
                event="lease_unread", fields=(("lease", uuid), ("failures", tries)), level="warning",
            ),
            Send(CHAIN_IO, LeaseCall(uuid), at=now + delay),
        ]
