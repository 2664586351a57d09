"""Messages the ``ChainActor`` receives: requests, and the answers of its own I/O.

The chain actor never blocks on the chain: it hands a call to its I/O
executor and the answer comes back as one of the ``*Answered`` messages, so
that every chain answer is a captured, replayable input.
"""

from __future__ import annotations

from dataclasses import dataclass

from messages.chain import ChainFailure, CloseOutcome, Lease, NodeStatus, WithdrawPage
from messages.codec import message

__all__ = [
    "WithdrawRequested",
    "WithdrawPageAnswered",
    "RetryWithdrawPage",
    "ActiveLeasesRequested",
    "CreditReadRequested",
    "FlushClosures",
    "NodeStatusAnswered",
    "CloseBatchAnswered",
    "CloseLeasesChecked",
]


@message("withdraw_requested")
@dataclass(frozen=True, slots=True)
class WithdrawRequested:
    cycle: int


@message("withdraw_page_answered")
@dataclass(frozen=True, slots=True)
class WithdrawPageAnswered:
    cycle: int
    page: int
    attempt: int
    result: WithdrawPage | None = None
    error: ChainFailure | None = None


@message("retry_withdraw_page")
@dataclass(frozen=True, slots=True)
class RetryWithdrawPage:
    cycle: int
    page: int
    attempt: int


@message("active_leases_requested")
@dataclass(frozen=True, slots=True)
class ActiveLeasesRequested:
    cycle: int


@message("credit_read_requested")
@dataclass(frozen=True, slots=True)
class CreditReadRequested:
    cycle: int
    tenants: tuple[str, ...]


@message("flush_closures")
@dataclass(frozen=True, slots=True)
class FlushClosures:
    cycle: int


@message("node_status_answered")
@dataclass(frozen=True, slots=True)
class NodeStatusAnswered:
    round: int
    status: NodeStatus | None = None
    error: ChainFailure | None = None


@message("close_batch_answered")
@dataclass(frozen=True, slots=True)
class CloseBatchAnswered:
    round: int
    batch: int
    lease_uuids: tuple[str, ...]
    outcome: CloseOutcome | None = None
    error: ChainFailure | None = None


@message("close_leases_checked")
@dataclass(frozen=True, slots=True)
class CloseLeasesChecked:
    """Which leases of a failed batch are still active (to drop the others)."""

    round: int
    batch: int
    active: tuple[Lease, ...] = ()
    error: ChainFailure | None = None
