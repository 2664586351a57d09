"""Closing leases: coalescing requests into ``MsgCloseLease`` batches, and their outcome.

Tenant monitors ask for closures during a check; the chain actor holds them
until the scheduler says the check is over (``FlushClosures``), then runs one
*closure round*:

1. Ask the node's status, and when the blocks of the reads behind the
   requests were made. A node that is catching up, or whose latest block is
   older than ``max_node_lag``, serves stale balances: nothing is closed,
   every tenant is told to try again after ``credit_check_retry_interval``.
   A request whose read was answered at a height whose block is more than
   ``max_node_lag`` older than the node's latest (a lagging node behind a
   load balancer, which says it is synced), or at a height nobody can date
   (none sent, or a block the node cannot tell of), closes nothing either:
   it fails as a stale read, and its tenant re-reads and asks again.
2. Send the leases in batches of at most ``MAX_BATCH_LEASE_SIZE``.
3. A batch fails whole when one lease is no longer active. Then ask which are
   still active, drop the others (reported as already closed) and send the
   rest once more. A batch refused for what one lease can cause alone
   (``chain.errors.PER_LEASE_REFUSALS``: a lease whose sender role differs from the
   others', as the provider's own lease in a batch of its tenants' is; a
   payout the bank blocks for one lease; a lease the chain cannot settle)
   is split in two and each half
   sent, down to single leases, ``MAX_SPLITS`` times a round at most: the
   message is atomic, and one bad lease kept every other tenant of its
   batch open, round after round.
4. Tell each tenant what became of its leases, and the scheduler the
   totals. The ledger hears what each batch closed and settled (its
   ``LeaseSettled``, each tenant's ``ClosureRecorded``, at the tx's block
   time) as soon as the batch is answered, in the same mail that closes
   the tx's write-ahead entry (``actors.close_lookup``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from actors.close_lookup import ByTenant, closure_facts
from actors.effects import Effect, Note, Send
from actors.scheduler_settings import SchedulerSettings
from chain.errors import is_lease_gone, is_one_lease_refusal
from chain.model import MAX_BATCH_LEASE_SIZE
from messages.chain import ChainFailure, NodeStatus
from messages.chain_actor import (
    CloseBatchAnswered,
    CloseBatchCall,
    LeaseCheckAnswered,
    LeaseCheckCall,
    NodeStatusAnswered,
    NodeStatusCall,
)
from messages.credit import CloseFailed, CloseRequested, LeasesClosed
from messages.scheduler import ClosuresFlushed
from runtime.router import CHAIN_IO, SCHEDULER, tenant_address

__all__ = ["ClosureBuffer", "CloseRound", "plan_batches", "MAX_SPLITS"]
#: Splits a round makes at most: a bad lease in a batch of 100 is alone after 7 (14 txs more), and a
#: refusal that every lease meets after all is not sent once per lease, round after round.
MAX_SPLITS = 32


def plan_batches(requests: list[CloseRequested], size: int = MAX_BATCH_LEASE_SIZE) -> list[tuple[str, tuple[str, ...]]]:
    """(reason, leases) batches of at most ``size``, one reason per batch, in request order."""
    by_reason: dict[str, list[str]] = {}
    seen: set[str] = set()
    for r in requests:
        for u in r.lease_uuids:
            if u not in seen:
                seen.add(u)
                by_reason.setdefault(r.reason, []).append(u)
    batches = []
    for reason, uuids in by_reason.items():
        for i in range(0, len(uuids), size):
            batches.append((reason, tuple(uuids[i : i + size])))
    return batches


class ClosureBuffer:
    """Closures requested during the current check, until it is flushed.

    A request belongs to the check cycle of the read that decided it.
    ``take(cycle)`` hands over that cycle's requests and drops those of
    earlier cycles: a read that arrived after its cycle's deadline, when the
    scheduler had moved on without flushing, asked for a closure that would
    otherwise wait here for whichever flush came next, maybe long after the
    tenant paid again. Its tenant asks again on its next read if the credit
    is still gone.
    """

    def __init__(self) -> None:
        self.requests: list[CloseRequested] = []

    def add(self, request: CloseRequested) -> None:
        self.requests.append(request)

    def take(self, cycle: int) -> tuple[list[CloseRequested], list[CloseRequested]]:
        """(``cycle``'s requests, the dropped ones of earlier cycles); later cycles' stay."""
        taken = [r for r in self.requests if r.cycle == cycle]
        stale = [r for r in self.requests if r.cycle < cycle]
        self.requests = [r for r in self.requests if r.cycle > cycle]
        return taken, stale


@dataclass
class _Batch:
    reason: str
    leases: tuple[str, ...]
    checked: bool = False
    done: bool = False


@dataclass
class CloseRound:
    round: int
    cycle: int
    settings: SchedulerSettings
    requests: list[CloseRequested]
    batches: dict[int, _Batch] = field(default_factory=dict)
    closed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # lease -> tx hashes
    already_closed: set[str] = field(default_factory=set)
    failed: dict[str, ChainFailure] = field(default_factory=dict)
    finished: bool = False
    #: the requests whose reads were fresh enough to act on (``_stale``)
    requests_to_send: list[CloseRequested] = field(default_factory=list)
    #: batches split in two so far (``_splits``)
    splits: int = 0

    def begin(self) -> list[Effect]:
        heights = tuple(sorted({r.read_height for r in self.requests if r.read_height}))
        return [Send(CHAIN_IO, NodeStatusCall(self.round, heights=heights))]

    def _stale(self, status: NodeStatus, block_times: dict[int, datetime]) -> list[Effect]:
        """Fail the requests decided on a read too far behind the chain (or of unknown age); notes saying so."""
        s = self.settings
        out: list[Effect] = []
        kept: list[CloseRequested] = []
        for r in self.requests:
            h, problem = r.read_height, ""
            made = block_times.get(h)
            if not h:
                problem = "its read carries no height (the node sent no x-cosmos-block-height)"
            elif h >= status.latest_block_height:
                pass  # read at the chain's latest block (or past it, on another node): fresh
            elif made is None:
                problem = f"its read was at height {h}, whose block the node could not date"
            elif status.latest_block_time - made > s.max_node_lag:
                behind = status.latest_block_time - made
                problem = (
                    f"its read was at height {h}, {behind.total_seconds():g}s behind the chain's latest block "
                    f"(height {status.latest_block_height}), more than max_node_lag {s.max_node_lag.total_seconds():g}s"
                )
            if not problem:
                kept.append(r)
                continue
            failure = ChainFailure("credit_read", f"stale read: {problem}; taken as a failed read, nothing closed", transient=True)
            for u in r.lease_uuids:
                self.failed[u] = failure
            out.append(Note(
                f"closures of tenant {r.tenant} wait: {problem}; a stale read never closes anything, it is read again",
                r.tenant, event="closures_wait_stale_read", fields=(("read_height", h), ("problem", problem)),
                level="warning",
            ))
        self.requests_to_send = kept
        return out

    def by_tenant(self, leases: tuple[str, ...]) -> ByTenant:
        """Each tenant's leases among ``leases`` (one batch's), in request order."""
        wanted = set(leases)
        return tuple(
            (r.tenant, tuple(u for u in r.lease_uuids if u in wanted))
            for r in self.requests
            if not wanted.isdisjoint(r.lease_uuids)
        )

    def on_status(self, message: NodeStatusAnswered, now: datetime) -> list[Effect]:
        s = self.settings
        status, problem = message.status, ""
        if message.error is not None:
            problem = f"node status unavailable ({message.error.message})"
        elif status is None:
            problem = "node status unavailable (no answer and no error)"
        elif status.catching_up:
            problem = f"node is catching up (height {status.latest_block_height})"
        elif now - status.latest_block_time > s.max_node_lag:
            problem = (
                f"node's latest block {status.latest_block_time:%Y-%m-%d %H:%M:%S} is older than "
                f"{s.max_node_lag.total_seconds():g}s"
            )
        if problem:
            failure = ChainFailure("node_status", f"{problem}: balances may be stale", transient=True)
            for r in self.requests:
                for u in r.lease_uuids:
                    self.failed[u] = failure
            wait = Note(f"closures wait: {problem}", event="closures_wait", fields=(("problem", problem),), level="warning")
            return [wait] + self._finish(now, retry_at=now + s.credit_check_retry_interval)
        out = self._stale(cast(NodeStatus, status), dict(message.block_times))  # not None: checked above
        for i, (reason, leases) in enumerate(plan_batches(self.requests_to_send), start=1):
            self.batches[i] = _Batch(reason, leases)
            out.append(Send(CHAIN_IO, CloseBatchCall(self.round, i, leases, reason)))
        if not self.batches:
            return out + self._finish(now, retry_at=now + s.credit_check_retry_interval if self.failed else None)
        return out

    def on_batch(self, message: CloseBatchAnswered, now: datetime) -> list[Effect]:
        batch = self.batches.get(message.batch)
        if batch is None or batch.done:
            return []
        out: list[Effect] = []
        if message.outcome is not None:
            for u in message.lease_uuids:
                self.closed[u] = message.outcome.tx_hashes
            batch.done = True
            # What the close took from each lease, as the tx's events said, and whose leases it closed.
            out += closure_facts(message.outcome, self.by_tenant(message.lease_uuids), batch.reason, now)
        elif message.error is not None and is_lease_gone(message.error) and not batch.checked:
            batch.checked = True
            out.append(
                Note(
                    f"close batch {message.batch} of {len(message.lease_uuids)} failed on a lease no longer "
                    f"active; finding which"
                )
            )
            out.append(Send(CHAIN_IO, LeaseCheckCall(self.round, message.batch, message.lease_uuids)))
            return out
        elif message.error is not None and self._splits(message.error, message.lease_uuids):
            # Refused for what one lease may be alone: the halves are sent, so that only it fails. (Not
            # a tx that may have applied: it is looked up, never sent again; nor one worth the same
            # try again, retried whole at the re-check.)
            batch.done = True
            leases = message.lease_uuids
            half = len(leases) // 2
            first = max(self.batches) + 1
            for i, part in enumerate((leases[:half], leases[half:]), start=first):
                self.batches[i] = _Batch(batch.reason, part)
                out.append(Send(CHAIN_IO, CloseBatchCall(self.round, i, part, batch.reason)))
            out.append(Note(
                f"close batch {message.batch} of {len(leases)} leases refused ({message.error.message}): "
                f"split into batches {first} and {first + 1} so that one lease does not keep the others open",
                event="close_batch_split", fields=(("leases", len(leases)),), level="warning",
            ))
            return out
        else:
            # No outcome and no error is a failed close too (chain-io says so itself).
            error = message.error or ChainFailure(
                "close_leases", "the chain answered no outcome and no error", codespace="protocol", transient=True
            )
            for u in message.lease_uuids:
                self.failed[u] = error
            batch.done = True
            out.append(Note(
                f"close batch {message.batch} failed: {error.message}",
                event="close_batch_failed", fields=(("leases", len(message.lease_uuids)),), level="warning",
            ))
        return out + self._maybe_finish(now)

    def _splits(self, error: ChainFailure, leases: tuple[str, ...]) -> bool:
        """Whether a batch of ``leases`` refused with ``error`` is split in two (see the module doc):
        a refusal one lease can cause alone, and not more than ``MAX_SPLITS`` times a round."""
        if len(leases) < 2 or error.may_have_committed or error.transient or self.splits >= MAX_SPLITS:
            return False
        if not is_one_lease_refusal(error):
            return False  # a refusal of the whole (a fee, the key): every half would be refused too
        self.splits += 1
        return True

    def on_check(self, message: LeaseCheckAnswered, now: datetime) -> list[Effect]:
        batch = self.batches.get(message.batch)
        if batch is None or batch.done:
            return []
        if message.error is not None:
            for u in batch.leases:
                self.failed[u] = message.error
            batch.done = True
            return self._maybe_finish(now)
        active = set(message.active)
        gone = tuple(u for u in batch.leases if u not in active)
        rest = tuple(u for u in batch.leases if u in active)
        self.already_closed.update(gone)
        out: list[Effect] = [Note(f"dropped {len(gone)} lease(s) already closed; closing the other {len(rest)}")]
        if rest:
            batch.leases = rest
            out.append(Send(CHAIN_IO, CloseBatchCall(self.round, message.batch, rest, batch.reason)))
            return out
        batch.done = True
        return out + self._maybe_finish(now)

    def abort(self, error: ChainFailure, now: datetime) -> list[Effect]:
        """End the round where it stands: every lease not yet closed (or found closed) failed with ``error``."""
        for r in self.requests:
            for u in r.lease_uuids:
                if u not in self.closed and u not in self.already_closed:
                    self.failed.setdefault(u, error)
        return self._finish(now, retry_at=now + self.settings.credit_check_retry_interval)

    def closed_after_all(self, leases: tuple[str, ...], tx_hashes: tuple[str, ...]) -> None:
        """A batch that failed here was found applied by its lookup before the round ended: the round's
        end reports these leases closed (by ``tx_hashes``), not failed."""
        for u in leases:
            self.failed.pop(u, None)
            self.closed[u] = tx_hashes

    def _maybe_finish(self, now: datetime) -> list[Effect]:
        if all(b.done for b in self.batches.values()):
            return self._finish(now)
        return []

    def _finish(self, now: datetime, retry_at: datetime | None = None) -> list[Effect]:
        self.finished = True
        out: list[Effect] = []
        for r in self.requests:
            closed = tuple(u for u in r.lease_uuids if u in self.closed)
            gone = tuple(u for u in r.lease_uuids if u in self.already_closed)
            failed = tuple(u for u in r.lease_uuids if u in self.failed)
            to = tenant_address(r.tenant)
            if closed:
                hashes = tuple(sorted({h for u in closed for h in self.closed[u]}))
                out.append(Send(to, LeasesClosed(r.tenant, closed, r.reason, hashes)))
                out.append(Note(
                    f"closed {len(closed)} lease(s) of tenant {r.tenant}: {r.reason}", r.tenant,
                    event="leases_closed", fields=(("leases", closed), ("reason", r.reason), ("tx_hashes", hashes)),
                ))
            if gone:
                out.append(Send(to, LeasesClosed(r.tenant, gone, r.reason, (), already_closed=True)))
            if failed:
                out.append(Send(to, CloseFailed(r.tenant, failed, self.failed[failed[0]], retry_at)))
        hashes = tuple(sorted({h for hs in self.closed.values() for h in hs}))
        first_error = next(iter(self.failed.values()), None)
        out.append(
            Send(
                SCHEDULER,
                ClosuresFlushed(
                    cycle=self.cycle,
                    closed=tuple(sorted(self.closed)),
                    already_closed=tuple(sorted(self.already_closed)),
                    failed=tuple(sorted(self.failed)),
                    tx_hashes=hashes,
                    error=first_error,
                    retry_at=retry_at,
                ),
            )
        )
        return out
