"""Messages of the chain side: requests to the ``ChainActor`` and calls to ``chain-io``.

The ``ChainActor`` decides (which withdraw page next, how closures batch,
what to retry); the ``chain-io`` endpoint only performs chain calls, with
bounded concurrency, and answers each ``*Call`` with its typed answer. Every
chain answer therefore reaches an actor as a captured message, which is what
makes a run replayable without a chain.
"""

from __future__ import annotations

from datetime import datetime

from messages.chain import ChainFailure, CloseOutcome, NodeStatus, WithdrawPage
from messages.codec import Message
from messages.coins import Coin
from messages.ledger import CloseLookupOpened, WithdrawLookupOpened

__all__ = [
    "WithdrawRequested",
    "FlushClosures",
    "RetryWithdrawPage",
    "WithdrawableCall",
    "WithdrawableAnswered",
    "WithdrawLeasesCall",
    "WithdrawPageCall",
    "WithdrawPageAnswered",
    "WithdrawTxCall",
    "WithdrawTxAnswered",
    "WithdrawLookupsRestored",
    "CloseTxCall",
    "CloseTxAnswered",
    "CloseTxSigned",
    "CloseLookupsRestored",
    "CloseSearchCall",
    "CloseSearchAnswered",
    "ActiveLeasesCall",
    "LeaseCall",
    "CreditCall",
    "CreditReadsCall",
    "NodeStatusCall",
    "NodeStatusAnswered",
    "CloseBatchCall",
    "CloseBatchAnswered",
    "LeaseCheckCall",
    "LeaseCheckAnswered",
]


# -- requests to the ChainActor ---------------------------------------------------
class WithdrawRequested(Message, tag="withdraw_requested"):
    cycle: int
    #: Leases near the end of their credit, to be withdrawn each in a tx of
    #: its own where leases go by name: what a v2.1.0 auto-close in a named
    #: withdraw moved is only known when it is alone in its tx.
    alone: tuple[str, ...] = ()


class FlushClosures(Message, tag="flush_closures"):
    """The check of ``cycle`` is over: send the closures requested during it."""

    cycle: int


class RetryWithdrawPage(Message, tag="retry_withdraw_page"):
    cycle: int
    page: int
    attempt: int


# -- calls to chain-io and their answers --------------------------------------------
class WithdrawableCall(Message, tag="withdrawable_call"):
    """Is anything due? (``ChainClient.provider_withdrawable``), asked before a paid withdraw."""

    cycle: int


class WithdrawableAnswered(Message, tag="withdrawable_answered"):
    """``due``: what is due (``()``: nothing at all); None with no error: the node cannot tell."""

    cycle: int
    due: tuple[Coin, ...] | None = None
    error: ChainFailure | None = None


class WithdrawLeasesCall(Message, tag="withdraw_leases_call"):
    """One named ``MsgWithdraw`` of these leases, as page ``page`` of the cycle; answered like a page."""

    cycle: int
    page: int
    attempt: int
    lease_uuids: tuple[str, ...]


class WithdrawPageCall(Message, tag="withdraw_page_call"):
    cycle: int
    page: int
    attempt: int
    key: bytes


class WithdrawTxSigned(Message, tag="withdraw_tx_signed"):
    """chain-io, during a ``WithdrawPageCall``: the page's tx is signed, with this hash, and goes out now.

    Told before the call answers, so that the books hold the hash while the
    client waits for inclusion: a sidecar that dies then looks it up at its
    next start (``actors.withdraw_lookup``). A call that signs again (a
    stale sequence, too little gas) tells each hash.
    """

    cycle: int
    page: int
    attempt: int
    tx_hash: str


class WithdrawPageAnswered(Message, tag="withdraw_page_answered"):
    cycle: int
    page: int
    attempt: int
    result: WithdrawPage | None = None
    error: ChainFailure | None = None


class WithdrawTxCall(Message, tag="withdraw_tx_call"):
    """Look up what a withdraw tx of unknown outcome applied (``ChainClient.withdraw_outcome``)."""

    cycle: int
    page: int
    tx_hash: str
    attempt: int


class WithdrawTxAnswered(Message, tag="withdraw_tx_answered"):
    """``result``: the page the tx applied; neither it nor ``error``: no node knows the tx (yet)."""

    cycle: int
    page: int
    tx_hash: str
    attempt: int
    result: WithdrawPage | None = None
    error: ChainFailure | None = None


class CloseTxCall(Message, tag="close_tx_call"):
    """Look up what a close tx of unknown outcome applied (``ChainClient.close_outcome``)."""

    tx_hash: str
    lease_uuids: tuple[str, ...]
    attempt: int


class CloseTxAnswered(Message, tag="close_tx_answered"):
    """``result``: what the tx closed; neither it nor ``error``: no node knows the tx (yet)."""

    tx_hash: str
    lease_uuids: tuple[str, ...]
    attempt: int
    result: CloseOutcome | None = None
    error: ChainFailure | None = None


class CloseTxSigned(Message, tag="close_tx_signed"):
    """chain-io, during a ``CloseBatchCall``: the batch's tx is signed, with this hash, and goes out now.

    As ``WithdrawTxSigned``: the books hold the hash while the client waits
    for inclusion, so a sidecar that dies then books the close at its next
    start (``actors.close_lookup``).
    """

    round: int
    batch: int
    tx_hash: str


class CloseLookupsRestored(Message, tag="close_lookups_restored"):
    """At start: the close txs a previous run left unsettled (from the ledger)."""

    lookups: tuple[CloseLookupOpened, ...]


class CloseSearchCall(Message, tag="close_search_call"):
    """Find the tx that ended our lease ``lease_uuid`` (``ChainClient.lease_end_tx``); answered to the scheduler.

    ``tx_hash``: the tx an event named, a hint tried first. ``tenant`` and
    ``closed_at`` (the lease's read) come back on the answer, for the books.
    """

    lease_uuid: str
    tenant: str
    closed_at: datetime | None
    tx_hash: str = ""
    attempt: int = 1


class CloseSearchAnswered(Message, tag="close_search_answered"):
    """``outcome``: the tx found and what it settled; neither it nor ``error``: the node found no such tx."""

    lease_uuid: str
    tenant: str
    closed_at: datetime | None
    attempt: int
    outcome: CloseOutcome | None = None
    error: ChainFailure | None = None


class WithdrawLookupsRestored(Message, tag="withdraw_lookups_restored"):
    """At start: the withdraw txs a previous run was still looking up (from the ledger)."""

    lookups: tuple[WithdrawLookupOpened, ...]


class ActiveLeasesCall(Message, tag="active_leases_call"):
    """Answered with ``messages.scheduler.ActiveLeasesRead`` to ``reply_to``."""

    cycle: int
    reply_to: str


class LeaseCall(Message, tag="lease_call"):
    """Read one lease, in any state; answered with ``messages.scheduler.LeaseRead`` to the scheduler."""

    lease_uuid: str


class CreditCall(Message, tag="credit_call"):
    """Read one tenant's credit (account + its ACTIVE leases of every provider).

    Answered to the tenant's actor with ``CreditRead`` or ``CreditReadFailed``.
    """

    cycle: int
    tenant: str
    #: Read the tenant's leases from the chain whatever the provider's listing holds
    #: (its monitor asks, after a ``CreditRead`` with ``leases_listed`` it cannot act on).
    full: bool = False


class CreditReadsCall(Message, tag="credit_reads_call"):
    """Read the credit of every tenant listed: one message per cycle, not one per tenant.

    Each tenant's actor gets its own ``CreditRead`` or ``CreditReadFailed``.
    """

    cycle: int
    tenants: tuple[str, ...]


class NodeStatusCall(Message, tag="node_status_call"):
    """Answered with ``NodeStatusAnswered`` to ``reply_to``: the chain actor before closing, or ``health``."""

    round: int
    #: the chain actor's address by default (``runtime.router.CHAIN``)
    reply_to: str = "chain"
    #: heights whose block times are wanted too (the reads a closure round is about to act on)
    heights: tuple[int, ...] = ()
    #: also ask whether the node keeps a tx index (``health``'s checks)
    tx_index: bool = False


class NodeStatusAnswered(Message, tag="node_status_answered"):
    round: int
    status: NodeStatus | None = None
    error: ChainFailure | None = None
    #: (height, its block's time) for the heights asked about that the node could tell
    block_times: tuple[tuple[int, datetime], ...] = ()
    #: the node keeps a tx index (None: not asked, or the node could not say)
    tx_index: bool | None = None
    #: why the node could not say (a proxy that refuses GetTx, a timeout)
    tx_index_error: ChainFailure | None = None


class CloseBatchCall(Message, tag="close_batch_call"):
    round: int
    batch: int
    lease_uuids: tuple[str, ...]
    reason: str


class CloseBatchAnswered(Message, tag="close_batch_answered"):
    round: int
    batch: int
    lease_uuids: tuple[str, ...]
    outcome: CloseOutcome | None = None
    error: ChainFailure | None = None


class LeaseCheckCall(Message, tag="lease_check_call"):
    """Which of ``lease_uuids`` are still active (after a batch failed on one)."""

    round: int
    batch: int
    lease_uuids: tuple[str, ...]


class LeaseCheckAnswered(Message, tag="lease_check_answered"):
    round: int
    batch: int
    active: tuple[str, ...] = ()
    error: ChainFailure | None = None

