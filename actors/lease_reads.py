"""Leases the books need read from the chain: their price and the chain's own times.

The ledger bills a lease from its price and its acknowledged and closed
times. Every cycle's active-lease read gives both for the leases still
active; a lease that ended between two such reads (opened and closed
within the hour, closed during a websocket gap or while the sidecar was
down) is in none of them. Without its price, the ledger cannot meter the
month it ran in, and holds every statement of that month back ("no known
price"); without the chain's closed_at, a lease closed while the sidecar
was down is billed up to the restart.

So the scheduler has such a lease read on its own (``LeaseCall``): when one
of our lease events says it became active or ended, and when it vanishes
from the active set. It hands the answer to the ledger as a
``LeaseObserved``. A read that fails is asked again at the next cycle's
active-lease read, up to ``MAX_TRIES`` times in all.

Every method returns effects; nothing here reads a clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from actors.effects import Effect, Note, Send
from messages.chain_actor import LeaseCall
from messages.ledger import LeaseObserved
from messages.scheduler import LeaseRead
from runtime.router import CHAIN_IO, LEDGER

__all__ = ["LeaseReads", "MAX_TRIES", "MAX_OWED"]

#: Reads of one lease at most: a lease the node keeps failing to answer for
#: (pruned, or a node that does not serve the query) is not asked for every
#: cycle for ever; the books keep what the events and reconciles told them.
MAX_TRIES = 5

#: Failed reads kept to be asked again at most: after a long outage a mass
#: of closures must not grow this without bound.
MAX_OWED = 100_000


class LeaseReads:
    """The lease reads asked for and not answered, and the failed ones still owed to the books."""

    def __init__(self) -> None:
        self.waiting: set[str] = set()
        #: leases asked for again while a read was out: that read may answer
        #: what was true before the reason for the new one (an ACTIVE lease
        #: that has closed since), so its answer is dropped and they are read anew
        self.again: set[str] = set()
        #: lease uuid -> failed reads so far
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
        """Ask again for the leases whose last read failed."""
        return self.ask([uuid for uuid in self.failed if uuid not in self.waiting])

    def answered(self, message: LeaseRead, now: datetime) -> list[Effect]:
        uuid = message.lease_uuid
        self.waiting.discard(uuid)
        if uuid in self.again:
            self.again.discard(uuid)
            return self.ask((uuid,))  # this answer may be older than what asked again
        if message.lease is not None:
            self.failed.pop(uuid, None)
            return [Send(LEDGER, LeaseObserved(now, message.lease))]
        why = message.error.message if message.error is not None else "no answer"
        tries = self.failed.pop(uuid, 0) + 1
        if tries >= MAX_TRIES:
            return [Note(f"lease {uuid}: not read from the chain after {tries} tries ({why}); the books keep "
                         "what its events and the active-lease reads told them")]
        if len(self.failed) >= MAX_OWED:
            return [Note(f"lease {uuid}: read failed ({why}), and {MAX_OWED} reads are owed already: not asked again")]
        self.failed[uuid] = tries
        return [Note(f"lease {uuid}: read for the books failed ({why}); asked again at the next cycle")]
