"""An in-process model of the ``liftedinit.billing.v1`` module, in either chain version.

It holds what the chain holds (providers, tenants' credit accounts and the
multi-denom balances at their credit addresses, leases with items and
reservations) and applies the rules of ``CHAIN-VERSIONS.md`` sections 1-4
for the version it is built with (``chain.versions``: every difference is a
field there, read here):

- accrual per whole second of ``locked_price x quantity`` on ACTIVE leases
  (2.4); settlement only when a tx touches a lease, moving ``min(accrued,
  B)`` (v2.1.0) or ``min(accrued, B - (R - A))`` from the lease's own
  reservation tranche first (current; 2.6);
- lazy auto-close on touch only (2.5), signalled the way each path does it;
- provider-wide withdraw with or without the cursor, per-lease best effort
  with ``failed_lease_uuids`` (current) or silent failures (v2.1.0) (2.1);
  named withdraw, atomic, code 15 when nothing moved (2.2);
  ``MsgCloseLease``, all or nothing, roles and codes (2.3);
- lease creation reserving ``rate x min_lease_duration`` (2.6), provider
  acknowledgement (2.9), reject and cancel, and the end-of-block expiry of
  PENDING leases (2.9, 3), whose ``lease_expired`` is a block event;
- the queries as each version answers them (1.8, 2.7, 2.8), refusing with
  the gRPC status the querier sets (``chain.errors.QueryRefused``; 4).

It is the embedded default chain (``ModelChainClient`` puts the
``ChainClient`` interface on it) and the state machine behind the devnet's
gRPC server. It is thread-safe: every call takes one lock.

Every state change emits the chain's events (type + string attributes,
``msg_index`` on each) to the registered listeners: a ``TxEvents`` per tx,
a ``BlockEvents`` per end of block that expired something. A node
executing txs (the devnet) wraps a tx's messages in ``in_tx(height,
tx_hash, block_time)``: their events then go out once, as one ``TxEvents``,
the messages see the block's time, and a failing message undoes the whole
tx. Calls made outside a tx (genesis, the demo's tenants) are txs of their
own, at ``set_block_source``'s next height.

Where a fact is silent the chain's public source decided; what is not
modelled (vesting-locked credit, SKUs, custom domains, authz, params
updates) is listed, fact by fact, in ``tests/CONFORMANCE.md`` beside the
tests that check the rest on both versions.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import itertools
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Iterable, Iterator, Sequence

import msgspec

from chain.addresses import InvalidAddress, address_bytes, credit_address, credit_address_bytes, is_uuid7, uuid7
from chain.errors import (
    ACK_ACTIVE_CAP_EXCEEDED,
    ACK_DEADLINE_EXCEEDED,
    CREDIT_ACCOUNT_NOT_FOUND,
    EMPTY_LEASE_ITEMS,
    INSUFFICIENT_CREDIT,
    INVALID_CLOSURE_REASON,
    INVALID_CREDIT_OPERATION,
    INVALID_LEASE,
    INVALID_QUANTITY,
    INVALID_REJECTION_REASON,
    INVALID_REQUEST,
    LEASE_NOT_ACTIVE,
    LEASE_NOT_FOUND,
    LEASE_NOT_PENDING,
    LEASE_QUERY_LIMIT_EXCEEDED,
    MAX_LEASES_REACHED,
    MAX_PENDING_LEASES_REACHED,
    MIXED_PROVIDERS,
    NO_WITHDRAWABLE,
    PROVIDER_NOT_ACTIVE,
    PROVIDER_NOT_FOUND,
    RESERVATION_INVARIANT,
    UNAUTHORIZED,
    ChainError,
    QueryRefused,
)
from chain.versions import CURRENT, ChainVersion
from messages.chain import CreditAccount, CreditEstimate, Lease, LeaseItem
from messages.coins import Coin, coins, format_coins
from runtime.clock import Clock

__all__ = [
    "BillingModel",
    "ChainParams",
    "ChainEvent",
    "TxEvents",
    "BlockEvents",
    "WithdrawResult",
    "CloseResult",
    "PageRequest",
    "LeaseRecord",
    "GenesisAccount",
    "GenesisLease",
    "MAX_BATCH_LEASE_SIZE",
    "DEFAULT_WITHDRAW_LIMIT",
    "MAX_WITHDRAW_LIMIT",
    "MAX_CLOSURE_REASON",
    "CREDIT_EXHAUSTED",
    "CREDIT_EXHAUSTED_REASON",
]

#: ``MaxBatchLeaseSize``: MsgCloseLease and named MsgWithdraw take 1..100 leases,
#: a provider-wide ``limit`` is at most this.
MAX_BATCH_LEASE_SIZE = 100
#: ``DefaultProviderWithdrawLimit``: what a provider-wide ``limit`` of 0 means.
DEFAULT_WITHDRAW_LIMIT = 50
MAX_WITHDRAW_LIMIT = MAX_BATCH_LEASE_SIZE
#: ``MaxClosureReasonLength``, in UTF-8 bytes (longer answers code 26).
MAX_CLOSURE_REASON = 256
#: ``MaxRejectionReasonLength``.
MAX_REJECTION_REASON = 256
#: ``lease_auto_closed.reason`` (underscore) and the stored ``closure_reason`` (space).
CREDIT_EXHAUSTED = "credit_exhausted"
CREDIT_EXHAUSTED_REASON = "credit exhausted"
#: ``closed_by`` of a close that found the lease exhausted.
CLOSED_BY_EXHAUSTION = "credit_exhaustion"
#: ``MaxPendingLeaseExpirationsPerBlock``.
MAX_EXPIRIES_PER_BLOCK = 100
#: ``query.DefaultLimit`` and the current chain's cap on list queries.
DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 1000
#: Current chain: offset and count_total scans beyond this many rows are refused.
MAX_OFFSET_SCAN = 20_000
#: ProviderWithdrawable: v2.1.0 ``limit`` default and cap; current page default and cap.
V21_WITHDRAWABLE_LIMIT = (100, 1000)
CURRENT_WITHDRAWABLE_LIMIT = (50, 100)
#: Account numbers of credit addresses start here (the devnet node numbers its own accounts from 1).
CREDIT_ACCOUNT_NUMBERS = 1_000_000
#: ``sdk.ValidateDenom``'s pattern, which bank ``DenomOwners`` checks its denom against.
_DENOM = re.compile(r"[a-zA-Z][a-zA-Z0-9/:._-]{2,127}")
#: Current chain's CreditEstimate work bound on items (2.7).
MAX_ESTIMATE_ITEMS = 100_000
_UINT64_MAX = 2**64 - 1

_SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class ChainParams:
    """``liftedinit.billing.v1.Params`` the model uses, with the chain's defaults."""

    #: Seconds of a lease's rate reserved at creation (``min_lease_duration``).
    min_lease_duration: int = 3600
    #: Seconds a lease may stay PENDING before EndBlock expires it.
    pending_timeout: int = 1800
    max_leases_per_tenant: int = 100
    max_pending_leases_per_tenant: int = 10
    max_items_per_lease: int = 20


@dataclass(frozen=True)
class ChainEvent:
    type: str
    attributes: tuple[tuple[str, str], ...]

    def get(self, key: str, default: str = "") -> str:
        for k, v in self.attributes:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class TxEvents:
    """The events of one included tx."""

    height: int
    tx_hash: str
    time: datetime
    events: tuple[ChainEvent, ...]

    def pairs(self) -> list[tuple[str, dict[str, str]]]:
        """The events as ``(type, {key: value})``, the form the event parsers read (``chain.events``)."""
        return [(e.type, dict(e.attributes)) for e in self.events]


@dataclass(frozen=True)
class BlockEvents:
    """The end-of-block events of one block (``tm.event='NewBlockEvents'``): no tx behind them."""

    height: int
    time: datetime
    events: tuple[ChainEvent, ...]
    tx_hash: str = ""
    #: How many txs the block included (``NewBlockEvents.num_txs``).
    num_txs: int = 0

    def pairs(self) -> list[tuple[str, dict[str, str]]]:
        return [(e.type, dict(e.attributes)) for e in self.events]


@dataclass(frozen=True)
class WithdrawResult:
    total_amounts: tuple[Coin, ...]
    payout_address: str
    withdrawal_count: int
    has_more: bool
    next_key: bytes
    events: tuple[ChainEvent, ...]
    #: Current chain, provider-wide: leases skipped because their settlement failed.
    failed_lease_uuids: tuple[str, ...] = ()


@dataclass(frozen=True)
class CloseResult:
    closed_at: datetime
    closed_count: int
    total_settled_amounts: tuple[Coin, ...]
    events: tuple[ChainEvent, ...]


@dataclass(frozen=True)
class PageRequest:
    """``cosmos.base.query.v1beta1.PageRequest``."""

    key: bytes = b""
    offset: int = 0
    limit: int = 0
    count_total: bool = False
    reverse: bool = False


@dataclass(frozen=True)
class GenesisLease:
    """A lease ACTIVE from genesis (``BillingModel.load_genesis``): its provider and items."""

    provider_uuid: str
    items: tuple[LeaseItem, ...]


@dataclass(frozen=True)
class GenesisAccount:
    """A tenant's credit account at genesis: its balances and its leases, in creation order."""

    tenant: str
    balances: tuple[Coin, ...]
    leases: tuple[GenesisLease, ...] = ()


@dataclass(frozen=True)
class LeaseRecord:
    """Every field of a lease, as the wire carries it (``Lease`` fields 1-16)."""

    lease: Lease
    rejected_at: datetime | None
    rejection_reason: str
    expired_at: datetime | None
    meta_hash: bytes


@dataclass
class _Provider:
    uuid: str
    address: str
    payout_address: str
    active_flag: bool = True
    #: Lease uuids in index order (uuid order): every lease, ACTIVE ones, CLOSED ones.
    leases: list[str] = field(default_factory=list)
    active: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)


@dataclass
class _Account:
    """A credit account and the bank balance at its credit address."""

    tenant: str
    credit_address: str
    balances: dict[str, int] = field(default_factory=dict)
    #: R: ``reserved_amounts``.
    reserved: dict[str, int] = field(default_factory=dict)
    #: U (current): the legacy cohort's shared reservation, and how many leases share it.
    unattributed: dict[str, int] = field(default_factory=dict)
    unattributed_count: int = 0
    active: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)
    #: Every lease of the tenant, in uuid order (LeasesByTenant).
    leases: list[str] = field(default_factory=list)
    #: What ``auth/Account`` answers the credit address as (``devnet.node.ACCOUNT_KINDS``): a
    #: vesting account created there before the first funding stays one. Only the kind is
    #: modelled, no locked amount (tests/CONFORMANCE.md).
    address_kind: str = "base"
    #: The credit address's account number (its own range: the node's accounts have theirs).
    number: int = 0
    #: The tenant's and the credit address's bytes: the orders of ``CreditAccounts`` and ``DenomOwners``.
    key: bytes = b""
    credit_key: bytes = b""


@dataclass
class _Lease:
    uuid: str
    tenant: str
    provider_uuid: str
    items: tuple[LeaseItem, ...]
    rate: dict[str, int]
    state: str
    created_at: datetime
    last_settled_at: datetime
    min_lease_duration_at_creation: int
    #: A (current): what is left of the lease's own tranche; None on v2.1.0 (no field 16).
    reservation: dict[str, int] | None
    acknowledged_at: datetime | None = None
    closed_at: datetime | None = None
    rejected_at: datetime | None = None
    rejection_reason: str = ""
    expired_at: datetime | None = None
    closure_reason: str = ""
    meta_hash: bytes = b""
    #: What the lease owed and what it paid, per denom, over its life (for tests and audits).
    accrued_total: dict[str, int] = field(default_factory=dict)
    paid_total: dict[str, int] = field(default_factory=dict)
    _snap: Lease | None = None

    @property
    def legacy(self) -> bool:
        """Created before reservations were stored per lease: its tranche is the shared U."""
        return self.min_lease_duration_at_creation == 0

    def snapshot(self) -> Lease:
        """The lease as a query answers it; cached until the lease changes (reads of 50,000 leases are hot)."""
        if self._snap is None:
            self._snap = Lease(
                uuid=self.uuid,
                tenant=self.tenant,
                provider_uuid=self.provider_uuid,
                items=self.items,
                state=self.state,
                created_at=self.created_at,
                acknowledged_at=self.acknowledged_at,
                last_settled_at=self.last_settled_at,
                closed_at=self.closed_at,
                closure_reason=self.closure_reason,
                min_lease_duration_at_creation=self.min_lease_duration_at_creation,
                reservation=None if self.reservation is None else coins(self.reservation),
                ended_at=self.expired_at or self.rejected_at,
            )
        return self._snap


@dataclass
class _Settlement:
    """What settling one lease to ``at`` would do; computed before anything changes."""

    accrued: dict[str, int]
    transfer: dict[str, int]
    #: Taken from the lease's own tranche (current), per denom.
    from_tranche: dict[str, int]
    seconds: int
    #: Some denom's accrual reached what the lease may spend (the auto-close test).
    exhausted: bool


def _rate(items: Iterable[LeaseItem]) -> dict[str, int]:
    rate: dict[str, int] = {}
    for item in items:
        d = item.locked_price.denom
        rate[d] = rate.get(d, 0) + item.locked_price.amount * item.quantity
    return rate


def _check_items(items: tuple[LeaseItem, ...], params: ChainParams) -> None:
    """A new lease's items, as ``MsgCreateLease`` checks them first."""
    if not items:
        raise ChainError.billing(EMPTY_LEASE_ITEMS, "lease must contain at least one item")
    if len(items) > params.max_items_per_lease:
        raise ChainError.billing(21, f"lease has {len(items)} items, maximum allowed is {params.max_items_per_lease}")
    for i, item in enumerate(items):
        if item.quantity <= 0:
            raise ChainError.billing(INVALID_QUANTITY, f"item {i} has zero quantity")


def _add(into: dict[str, int], amounts: dict[str, int]) -> None:
    for d, a in amounts.items():
        if a:
            into[d] = into.get(d, 0) + a


def _sub_clamped(from_: dict[str, int], amounts: dict[str, int]) -> None:
    """``SubtractReservation``: per denom, never below zero; zero entries dropped."""
    for d, a in amounts.items():
        left = from_.get(d, 0) - a
        if left > 0:
            from_[d] = left
        else:
            from_.pop(d, None)


def _text(amounts: dict[str, int]) -> str:
    """``sdk.Coins.String()``: ``"12umfx,3upwr"``, ``""`` when empty."""
    return ",".join(f"{a}{d}" for d, a in sorted(amounts.items()) if a)


def sanitize_reason(reason: str) -> str:
    """Event attribute text of a reason: non-graphic characters removed (3)."""
    return "".join(ch for ch in reason if ch.isprintable())


class _Journal:
    """Originals of everything a message changed, to undo it if it fails whole."""

    def __init__(self) -> None:
        self.leases: dict[int, tuple[_Lease, dict]] = {}
        self.accounts: dict[int, tuple[_Account, dict]] = {}
        self.providers: dict[int, tuple[_Provider, dict]] = {}

    def lease(self, lease: _Lease) -> None:
        if id(lease) not in self.leases:
            saved = dict(lease.__dict__)
            for name in ("reservation", "accrued_total", "paid_total"):
                if saved[name] is not None:
                    saved[name] = dict(saved[name])
            self.leases[id(lease)] = (lease, saved)

    def account(self, acct: _Account) -> None:
        if id(acct) not in self.accounts:
            saved = dict(acct.__dict__)
            for name in ("balances", "reserved", "unattributed"):
                saved[name] = dict(saved[name])
            saved["active"] = set(saved["active"])
            saved["pending"] = set(saved["pending"])
            self.accounts[id(acct)] = (acct, saved)

    def provider(self, provider: _Provider) -> None:
        if id(provider) not in self.providers:
            saved = dict(provider.__dict__)
            for name in ("leases", "active", "closed"):
                saved[name] = list(saved[name])
            self.providers[id(provider)] = (provider, saved)

    def undo(self) -> None:
        for table in (self.leases, self.accounts, self.providers):
            for obj, saved in table.values():
                obj.__dict__.clear()
                obj.__dict__.update(saved)
        for lease, _ in self.leases.values():
            lease._snap = None


@dataclass
class _TxContext:
    height: int
    tx_hash: str
    time: datetime
    events: list[ChainEvent]
    msg_index: int = 0


class BillingModel:
    """The billing module's state and rules for one chain ``version``. Time comes from ``clock``."""

    def __init__(
        self,
        clock: Clock,
        chain_id: str = "leasewarden-devnet",
        authority: str = "",
        *,
        version: ChainVersion = CURRENT,
        params: ChainParams | None = None,
    ) -> None:
        self.clock = clock
        self.chain_id = chain_id
        self.authority = authority
        self.version = version
        self.params = params or ChainParams()
        self._lock = threading.RLock()
        self._providers: dict[str, _Provider] = {}
        self._accounts: dict[str, _Account] = {}
        #: credit address -> its account (``auth/Account`` and ``DenomOwners`` answer by address)
        self._by_credit_address: dict[str, _Account] = {}
        #: The accounts in tenant and in credit address byte order, with those keys (``_orders``);
        #: None: an account was made since. The list queries page through them.
        self._ordered: tuple[list[bytes], list[_Account], list[bytes], list[_Account]] | None = None
        self._leases: dict[str, _Lease] = {}
        self._listeners: list[Callable[[TxEvents | BlockEvents], None]] = []
        self._tx_counter = itertools.count(1)
        self._lease_sequence = 0
        self.height = 1
        #: The tx being executed by ``in_tx`` (its events are held until it ends).
        self._tx: _TxContext | None = None
        self._journal: _Journal | None = None
        #: the time a message outside a tx happens at: read once, as a block has one time (a real
        #: clock read again for the tx's events stamped them later than the settlement they carry)
        self._message_time: datetime | None = None
        #: Height a call outside a tx is attributed to (a node's next block).
        self._block_source: Callable[[], int] | None = None
        #: Time queries are answered at (a node's latest block time); the clock otherwise.
        self._query_time: Callable[[], datetime] | None = None
        #: PENDING leases by expiry deadline: (created_at + pending_timeout, uuid).
        self._expiries: list[tuple[datetime, str]] = []
        #: Told the deadline of each new PENDING lease; the node cuts a block after it.
        self._expiry_hook: Callable[[datetime], None] | None = None
        self._expiry_timer = None
        #: Fault switch: leases whose settlement transfer fails, as a payout the bank blocks does.
        self._blocked_payouts: set[str] = set()

    # -- wiring ---------------------------------------------------------------
    def subscribe(self, listener: Callable[[TxEvents | BlockEvents], None]) -> None:
        """Call ``listener`` with the events of every tx and every end of block."""
        with self._lock:
            self._listeners.append(listener)

    def set_block_source(
        self,
        source: Callable[[], int] | None,
        query_time: Callable[[], datetime] | None = None,
        expiry_hook: Callable[[datetime], None] | None = None,
    ) -> None:
        """A node's blocks: heights of calls outside ``in_tx``, the time queries see,
        and who cuts the block that expires a PENDING lease (the model's own timer if nobody)."""
        with self._lock:
            self._block_source = source
            self._query_time = query_time
            self._expiry_hook = expiry_hook
            if self._expiry_timer is not None:
                self._expiry_timer.cancel()
                self._expiry_timer = None
            if self._expiries:
                self._announce_expiry(self._expiries[0][0])

    @contextmanager
    def in_tx(
        self, height: int, tx_hash: str, block_time: datetime | None = None, *, atomic: bool = True
    ) -> Iterator[_TxContext]:
        """Run the calls inside as one tx included at ``height`` (at ``block_time``) with hash ``tx_hash``.

        Their events are emitted once, when the block leaves the context, as
        one ``TxEvents``; the context it yields holds them (``events``) for
        the node's tx result. With ``atomic``, an exception undoes every
        change the calls made (a tx is all or nothing). The lock is held
        throughout, so no other call interleaves with the tx.
        """
        with self._lock:
            if self._tx is not None:
                raise RuntimeError("in_tx: a tx is already being executed")
            ctx = _TxContext(height, tx_hash, block_time or self.clock.now(), [])
            journal = _Journal() if atomic else None
            self._tx, self._journal = ctx, journal
            try:
                yield ctx
            except BaseException:
                if journal is not None:
                    journal.undo()
                raise
            finally:
                self._tx, self._journal = None, None
            self.height = max(self.height, height)
            if ctx.events:
                self._publish(TxEvents(height, tx_hash, ctx.time, tuple(ctx.events)))

    def begin_message(self, index: int) -> None:
        """The next events belong to the tx's message ``index`` (their ``msg_index``)."""
        if self._tx is not None:
            self._tx.msg_index = index

    def _publish(self, events: TxEvents | BlockEvents) -> None:
        for listener in list(self._listeners):
            listener(events)

    def _now(self) -> datetime:
        """Block time: the tx's block, the message's for a message outside a tx, or the clock."""
        if self._tx is not None:
            return self._tx.time
        return self._message_time if self._message_time is not None else self.clock.now()

    def _query_now(self) -> datetime:
        return self._query_time() if self._query_time is not None else self.clock.now()

    @contextmanager
    def _message(self) -> Iterator[None]:
        """One message: all or nothing, and its events tagged and emitted (or held by the tx)."""
        outer = self._journal
        journal = outer if outer is not None else _Journal()
        self._journal = journal
        outer_time = self._message_time
        if outer is None and self._tx is None:
            self._message_time = self.clock.now()
        try:
            yield
        except BaseException:
            if outer is None:
                journal.undo()
            raise
        finally:
            self._journal = outer
            self._message_time = outer_time

    def _emit(self, events: Sequence[ChainEvent], action: str = "", sender: str = "") -> str:
        """Tag a message's events with ``msg_index`` and emit them; returns the tx hash."""
        if self._tx is not None:
            index = str(self._tx.msg_index)
            tagged = [ChainEvent(e.type, e.attributes + (("msg_index", index),)) for e in events]
            if action:
                tagged.insert(0, _message_event(action, sender, index))
            self._tx.events.extend(tagged)
            return self._tx.tx_hash
        tx_hash = hashlib.sha256(f"{self.chain_id}/{next(self._tx_counter)}".encode()).hexdigest().upper()
        if not events:
            return tx_hash
        tagged = [ChainEvent(e.type, e.attributes + (("msg_index", "0"),)) for e in events]
        if action:
            tagged.insert(0, _message_event(action, sender, "0"))
        if self._block_source is not None:
            self.height = max(self.height, self._block_source())
        else:
            self.height += 1
        self._publish(TxEvents(self.height, tx_hash, self._now(), tuple(tagged)))
        return tx_hash

    # -- journalled changes -------------------------------------------------------
    def _touch(self, *objects: object) -> None:
        journal = self._journal
        if journal is None:
            return
        for obj in objects:
            if isinstance(obj, _Lease):
                journal.lease(obj)
            elif isinstance(obj, _Account):
                journal.account(obj)
            elif isinstance(obj, _Provider):
                journal.provider(obj)

    # -- setup: genesis, the demo, tests ---------------------------------------------
    def register_provider(self, provider_uuid: str, address: str, payout_address: str = "", *, active: bool = True) -> None:
        """The sku module's provider record (the model has no sku module of its own)."""
        with self._lock:
            if not is_uuid7(provider_uuid):
                raise ChainError.billing(PROVIDER_NOT_FOUND, f"invalid provider_uuid format: {provider_uuid}")
            self._require_address(address, "provider address", INVALID_REQUEST)
            if payout_address:
                self._require_address(payout_address, "payout address", INVALID_REQUEST)
            self._providers[provider_uuid] = _Provider(provider_uuid, address, payout_address or address, active)

    def fund_credit(self, tenant: str, amounts: Iterable[Coin], sender: str = "") -> None:
        """``MsgFundCredit``: move coins to the tenant's credit address, creating its account."""
        amounts = tuple(amounts)
        with self._lock, self._message():
            self._require_address(tenant, "tenant address", INVALID_CREDIT_OPERATION)
            if sender:
                self._require_address(sender, "sender address", INVALID_CREDIT_OPERATION)
            if not amounts or any(c.amount <= 0 for c in amounts):
                raise ChainError.billing(INVALID_CREDIT_OPERATION, "amount must be positive")
            acct = self._accounts.get(tenant)
            if acct is None:
                acct = self._new_account(tenant, CREDIT_ACCOUNT_NUMBERS + len(self._accounts))
                self._accounts[tenant] = acct
                self._by_credit_address[acct.credit_address] = acct
                self._ordered = None
            self._touch(acct)
            for c in amounts:
                acct.balances[c.denom] = acct.balances.get(c.denom, 0) + c.amount
            self._emit(
                [
                    ChainEvent(
                        "credit_funded",
                        (
                            ("tenant", tenant),
                            ("credit_address", acct.credit_address),
                            ("sender", sender or tenant),
                            ("amount", _text({c.denom: c.amount for c in coins(amounts)})),
                            ("new_balance", _text(acct.balances)),
                        ),
                    )
                ],
                "/liftedinit.billing.v1.MsgFundCredit",
                sender or tenant,
            )

    def create_lease(
        self,
        tenant: str,
        provider_uuid: str,
        items: Sequence[LeaseItem],
        *,
        acknowledge: bool = True,
        meta_hash: bytes = b"",
        legacy: bool = False,
        created_by: str = "tenant",
    ) -> Lease:
        """``MsgCreateLease``: a PENDING lease reserving ``rate x min_lease_duration``;
        with ``acknowledge`` the provider acknowledges it at once (a second tx).

        ``legacy`` makes a lease as one imported from before per-lease
        reservations (``min_lease_duration_at_creation`` 0): on the current
        chain it shares the account's unattributed reservation U.
        """
        with self._lock:
            with self._message():
                lease = self._create_lease(tenant, provider_uuid, tuple(items), meta_hash, legacy, created_by)
            if acknowledge:
                self.acknowledge_lease(lease.uuid)
            return self._leases[lease.uuid].snapshot()

    def _create_lease(
        self, tenant: str, provider_uuid: str, items: tuple[LeaseItem, ...], meta_hash: bytes, legacy: bool, created_by: str
    ) -> _Lease:
        params = self.params
        self._require_address(tenant, "tenant address", INVALID_LEASE)
        acct = self._accounts.get(tenant)
        if acct is None:
            _check_items(items, params)
            raise ChainError.billing(CREDIT_ACCOUNT_NOT_FOUND, f"tenant {tenant} has no credit account")
        provider, rate, reservation = self._lease_terms(acct, provider_uuid, items)
        now = self._now()
        self._lease_sequence += 1
        lease_uuid = uuid7(now, self._lease_sequence, f"{self.chain_id}/billing")
        self._touch(acct, provider)
        _add(acct.reserved, reservation)
        if self.version.reservation_isolation:
            if legacy:
                _add(acct.unattributed, reservation)
                acct.unattributed_count += 1
                tranche: dict[str, int] | None = {}
            else:
                tranche = dict(reservation)
        else:
            tranche = None
        lease = _Lease(
            uuid=lease_uuid,
            tenant=tenant,
            provider_uuid=provider_uuid,
            items=items,
            rate=rate,
            state="PENDING",
            created_at=now,
            last_settled_at=now,
            min_lease_duration_at_creation=0 if legacy else params.min_lease_duration,
            reservation=tranche,
            meta_hash=meta_hash,
        )
        self._leases[lease_uuid] = lease
        acct.pending.add(lease_uuid)
        bisect.insort(acct.leases, lease_uuid)
        bisect.insort(provider.leases, lease_uuid)
        deadline = now + timedelta(seconds=params.pending_timeout)
        heapq.heappush(self._expiries, (deadline, lease_uuid))
        if self._expiries[0][1] == lease_uuid:
            self._announce_expiry(deadline)
        attributes = [
            ("lease_uuid", lease_uuid),
            ("tenant", tenant),
            ("provider_uuid", provider_uuid),
            ("item_count", str(len(items))),
            ("total_rate_per_second", _text(rate)),
            ("pending_lease_count", str(len(acct.pending))),
            ("created_by", created_by),
        ]
        if self.version.created_event_sender:
            attributes.append(("sender", tenant))
        if meta_hash:
            attributes.append(("meta_hash", meta_hash.hex()))
        self._emit([ChainEvent("lease_created", tuple(attributes))], "/liftedinit.billing.v1.MsgCreateLease", tenant)
        return lease

    def _lease_terms(
        self, acct: _Account, provider_uuid: str, items: tuple[LeaseItem, ...]
    ) -> tuple[_Provider, dict[str, int], dict[str, int]]:
        """``MsgCreateLease``'s checks in the chain's order, for a tenant holding ``acct``:
        the provider, the lease's rate and the reservation it takes. Raises what the chain answers."""
        params = self.params
        _check_items(items, params)
        if len(acct.active) >= params.max_leases_per_tenant:
            raise ChainError.billing(
                MAX_LEASES_REACHED, f"tenant has {len(acct.active)} active leases, max is {params.max_leases_per_tenant}"
            )
        if len(acct.pending) >= params.max_pending_leases_per_tenant:
            raise ChainError.billing(
                MAX_PENDING_LEASES_REACHED,
                f"tenant has {len(acct.pending)} pending leases, max is {params.max_pending_leases_per_tenant}",
            )
        provider = self._providers.get(provider_uuid)
        if provider is None:
            raise ChainError.billing(PROVIDER_NOT_FOUND, f"provider_uuid {provider_uuid} not found")
        if not provider.active_flag:
            raise ChainError.billing(PROVIDER_NOT_ACTIVE, f"provider_uuid {provider_uuid} is not active")
        rate = _rate(items)
        reservation = {d: r * params.min_lease_duration for d, r in rate.items() if r}
        for d, need in sorted(reservation.items()):
            available = acct.balances.get(d, 0) - acct.reserved.get(d, 0)
            if available < need:
                raise ChainError.billing(
                    INSUFFICIENT_CREDIT,
                    f"insufficient available credit for denom {d}: need {need}, have {max(available, 0)} available "
                    f"(balance: {acct.balances.get(d, 0)}, reserved: {acct.reserved.get(d, 0)})",
                )
        return provider, rate, reservation

    def load_genesis(self, accounts: Iterable[GenesisAccount]) -> int:
        """Credit accounts and ACTIVE leases loaded as a chain's genesis holds them; returns the leases loaded.

        The state is the one ``fund_credit`` of each account and
        ``create_lease`` (acknowledged at once) of each of its leases, in
        order, would leave at the clock's now: the same checks and answers
        (all or nothing: the first refusal raises it, and nothing is
        loaded), the same lease uuids, reservations and indexes. What it
        leaves out is what no query answers: the txs' events and blocks,
        and the PENDING moment between creation and acknowledgement.

        Why it exists: each message is journalled so that a failing one can
        be undone, and the journal copies the provider's lease indexes, so
        a world built message by message costs time in the square of its
        leases (a minute for 50,000; 500,000 did not finish in 8 CPU
        minutes). Benchmarks and fixtures with large worlds load them here.
        Only tenants without an account may be loaded.
        """
        with self._lock:
            now = self._now()
            sequence = self._lease_sequence
            salt = f"{self.chain_id}/billing"
            reservation_isolation = self.version.reservation_isolation
            min_duration = self.params.min_lease_duration
            staged: dict[str, _Account] = {}
            leases: dict[str, _Lease] = {}
            by_provider: dict[str, list[str]] = {}
            for spec in accounts:
                tenant = spec.tenant
                self._require_address(tenant, "tenant address", INVALID_CREDIT_OPERATION)
                if tenant in self._accounts or tenant in staged:
                    raise ValueError(f"genesis: tenant {tenant} already has a credit account")
                if not spec.balances or any(c.amount <= 0 for c in spec.balances):
                    raise ChainError.billing(INVALID_CREDIT_OPERATION, "amount must be positive")
                acct = staged[tenant] = self._new_account(tenant, CREDIT_ACCOUNT_NUMBERS + len(self._accounts) + len(staged))
                for c in spec.balances:
                    acct.balances[c.denom] = acct.balances.get(c.denom, 0) + c.amount
                for spec_lease in spec.leases:
                    items = tuple(spec_lease.items)
                    provider, rate, reservation = self._lease_terms(acct, spec_lease.provider_uuid, items)
                    sequence += 1
                    lease_uuid = uuid7(now, sequence, salt)
                    _add(acct.reserved, reservation)
                    lease = _Lease(
                        uuid=lease_uuid,
                        tenant=tenant,
                        provider_uuid=provider.uuid,
                        items=items,
                        rate=rate,
                        state="ACTIVE",
                        created_at=now,
                        last_settled_at=now,
                        min_lease_duration_at_creation=min_duration,
                        reservation=dict(reservation) if reservation_isolation else None,
                        acknowledged_at=now,
                    )
                    leases[lease_uuid] = lease
                    acct.active.add(lease_uuid)
                    acct.leases.append(lease_uuid)
                    by_provider.setdefault(provider.uuid, []).append(lease_uuid)
            # Checked whole: now it goes in, indexes sorted once (as insort would have kept them).
            self._lease_sequence = sequence
            self._leases.update(leases)
            for acct in staged.values():
                acct.leases.sort()
                self._accounts[acct.tenant] = acct
                self._by_credit_address[acct.credit_address] = acct
            if staged:
                self._ordered = None
            for provider_uuid, uuids in by_provider.items():
                provider = self._providers[provider_uuid]
                provider.leases.extend(uuids)
                provider.leases.sort()
                provider.active.extend(uuids)
                provider.active.sort()
            return len(leases)

    def acknowledge_lease(self, lease_uuid: str, sender: str = "") -> None:
        """``MsgAcknowledgeLease`` of one lease by its provider (or the authority)."""
        self.acknowledge_leases([lease_uuid], sender)

    def acknowledge_leases(self, lease_uuids: Sequence[str], sender: str = "") -> datetime:
        """``MsgAcknowledgeLease``: 1..100 PENDING leases of one provider become ACTIVE, all or
        nothing; a ``batch_acknowledged`` follows their events when there is more than one (3).
        Returns ``acknowledged_at`` (block time)."""
        with self._lock, self._message():
            if sender:
                self.validate_acknowledge(sender, lease_uuids)
            leases, provider = self._pending_batch(lease_uuids, sender, "acknowledge")
            sender = sender or provider.address
            now = self._now()
            deadline = timedelta(seconds=self.params.pending_timeout)
            if self.version.ack_active_cap:
                self._check_active_cap(leases)
            for lease in leases:
                if self.version.ack_deadline and now > lease.created_at + deadline:
                    raise ChainError.billing(ACK_DEADLINE_EXCEEDED, f"lease {lease.uuid} acknowledgement deadline exceeded")
                acct = self._accounts[lease.tenant]
                self._touch(lease, acct, provider)
                lease._snap = None
                lease.state = "ACTIVE"
                lease.acknowledged_at = now
                lease.last_settled_at = now
                bisect.insort(provider.active, lease.uuid)
                acct.pending.discard(lease.uuid)
                acct.active.add(lease.uuid)
            events = _batch_events("lease_acknowledged", "batch_acknowledged", ("acknowledged_by", sender), leases, provider)
            self._emit(events, "/liftedinit.billing.v1.MsgAcknowledgeLease", sender)
            return now

    def _check_active_cap(self, leases: list[_Lease]) -> None:
        """Current chain: no tenant may hold more than ``max_leases_per_tenant`` ACTIVE leases
        once the batch is acknowledged (creation counts only ACTIVE ones, so PENDING ones can
        outnumber the room left)."""
        joining: dict[str, int] = {}
        for lease in leases:
            joining[lease.tenant] = joining.get(lease.tenant, 0) + 1
        cap = self.params.max_leases_per_tenant
        for tenant, n in joining.items():
            after = len(self._accounts[tenant].active) + n
            if after > cap:
                raise ChainError.billing(
                    ACK_ACTIVE_CAP_EXCEEDED, f"tenant {tenant} would have {after} active leases, max is {cap}"
                )

    def reject_lease(self, lease_uuid: str, reason: str = "", sender: str = "") -> None:
        """``MsgRejectLease`` of one lease by its provider: PENDING -> REJECTED, reservation released."""
        self.reject_leases([lease_uuid], reason, sender)

    def reject_leases(self, lease_uuids: Sequence[str], reason: str = "", sender: str = "") -> datetime:
        """``MsgRejectLease``: 1..100 PENDING leases of one provider become REJECTED, their
        reservations released, all or nothing; ``batch_rejected`` when more than one (3).
        Returns ``rejected_at`` (block time)."""
        with self._lock, self._message():
            if sender:
                self.validate_reject(sender, lease_uuids, reason)
            leases, provider = self._pending_batch(lease_uuids, sender, "reject")
            sender = sender or provider.address
            for lease in leases:
                self._end_pending(lease, "REJECTED", reason)
            events = _batch_events(
                "lease_rejected", "batch_rejected", ("rejected_by", sender), leases, provider,
                (("rejection_reason", sanitize_reason(reason)),),
            )
            self._emit(events, "/liftedinit.billing.v1.MsgRejectLease", sender)
            return self._now()

    def _pending_batch(self, lease_uuids: Sequence[str], sender: str, operation: str) -> tuple[list[_Lease], _Provider]:
        """``validatePendingLeaseBatch`` and the provider's authorization: the leases, all
        PENDING and of one provider, and that provider."""
        _validate_batch(lease_uuids)
        leases: list[_Lease] = []
        for u in lease_uuids:
            lease = self._get(u)
            if lease.state != "PENDING":
                raise ChainError.billing(LEASE_NOT_PENDING, f"lease {u} is not in PENDING state")
            if leases and lease.provider_uuid != leases[0].provider_uuid:
                raise ChainError.billing(
                    MIXED_PROVIDERS, f"lease {u} belongs to provider {lease.provider_uuid}, expected {leases[0].provider_uuid}"
                )
            leases.append(lease)
        provider = self._providers[leases[0].provider_uuid]
        if sender and sender not in (provider.address, self.authority):
            raise ChainError.billing(
                UNAUTHORIZED, f"sender {sender} is not authorized to {operation} leases for provider {provider.uuid}"
            )
        return leases, provider

    def cancel_lease(self, lease_uuid: str) -> None:
        """``MsgCancelLease`` by the tenant: PENDING -> REJECTED, reservation released."""
        with self._lock, self._message():
            lease = self._get(lease_uuid)
            self._end_pending(lease, "REJECTED", "")
            self._emit(
                [
                    ChainEvent(
                        "lease_cancelled",
                        (
                            ("lease_uuid", lease.uuid),
                            ("tenant", lease.tenant),
                            ("provider_uuid", lease.provider_uuid),
                            ("cancelled_by", lease.tenant),
                        ),
                    )
                ],
                "/liftedinit.billing.v1.MsgCancelLease",
                lease.tenant,
            )

    def _end_pending(self, lease: _Lease, state: str, reason: str) -> None:
        if lease.state != "PENDING":
            raise ChainError.billing(LEASE_NOT_PENDING, f"lease {lease.uuid} is not pending")
        acct = self._accounts[lease.tenant]
        self._touch(lease, acct)
        now = self._now()
        lease._snap = None
        lease.state = state
        if state == "EXPIRED":
            lease.expired_at = now
        else:
            lease.rejected_at = now
            lease.rejection_reason = reason
        acct.pending.discard(lease.uuid)
        self._release_reservation(acct, lease)

    # -- end of block ----------------------------------------------------------------
    def _announce_expiry(self, deadline: datetime) -> None:
        if self._expiry_hook is not None:
            self._expiry_hook(deadline)
            return
        # No node cuts blocks: the model ends a block of its own just after the deadline.
        when = deadline + _SECOND
        timer = self._expiry_timer
        if timer is not None and not timer.cancelled and timer.when <= when:
            return
        if timer is not None:
            timer.cancel()
        self._expiry_timer = self.clock.call_at(when, self._own_end_block)

    def _own_end_block(self) -> None:
        with self._lock:
            self._expiry_timer = None
            if self._block_source is not None:
                self.height = max(self.height, self._block_source())
            else:
                self.height += 1
            self.end_block(self.height, self.clock.now())
            if self._expiries:
                self._announce_expiry(self._expiries[0][0])

    def next_expiry(self) -> datetime | None:
        """The earliest deadline of a PENDING lease (an end of block strictly after it expires it)."""
        with self._lock:
            self._drop_settled_expiries()
            return self._expiries[0][0] if self._expiries else None

    def _drop_settled_expiries(self) -> None:
        while self._expiries and self._leases[self._expiries[0][1]].state != "PENDING":
            heapq.heappop(self._expiries)

    def end_block(self, height: int, block_time: datetime, num_txs: int = 0) -> BlockEvents | None:
        """EndBlock at ``height`` (a block of ``num_txs`` txs): expire up to 100 PENDING leases
        whose timeout has passed."""
        with self._lock:
            events: list[ChainEvent] = []
            self._drop_settled_expiries()
            while self._expiries and len(events) < MAX_EXPIRIES_PER_BLOCK:
                deadline, uuid = self._expiries[0]
                if not block_time > deadline:
                    break
                heapq.heappop(self._expiries)
                lease = self._leases[uuid]
                if lease.state != "PENDING":
                    continue
                saved = self._tx
                self._tx = _TxContext(height, "", block_time, [])
                try:
                    self._end_pending(lease, "EXPIRED", "")
                finally:
                    self._tx = saved
                events.append(
                    ChainEvent(
                        "lease_expired",
                        (
                            ("lease_uuid", lease.uuid),
                            ("tenant", lease.tenant),
                            ("provider_uuid", lease.provider_uuid),
                            ("reason", "pending_timeout"),
                            ("mode", "EndBlock"),
                        ),
                    )
                )
                self._drop_settled_expiries()
            self.height = max(self.height, height)
            block = BlockEvents(height, block_time, tuple(events), num_txs=num_txs)
            # Published with no event too: a node's NewBlockEvents comes for every block, saying how
            # many txs it held (``actors.listener`` checks its tx frames against that).
            self._publish(block)
            return block if events else None

    # -- faults ------------------------------------------------------------------
    def block_payouts(self, lease_uuids: Iterable[str]) -> None:
        """Settling these leases fails from now on (a transfer to a payout address the bank blocks)."""
        with self._lock:
            self._blocked_payouts.update(lease_uuids)

    def unblock_payouts(self, lease_uuids: Iterable[str] | None = None) -> None:
        with self._lock:
            if lease_uuids is None:
                self._blocked_payouts.clear()
            else:
                self._blocked_payouts.difference_update(lease_uuids)

    # -- settlement ------------------------------------------------------------------
    def _spendable(self, acct: _Account, lease: _Lease, denom: str) -> int:
        """What ``lease`` may take of ``denom``: B (v2.1.0) or B - (R - A) (current, 2.6)."""
        balance = acct.balances.get(denom, 0)
        if not self.version.reservation_isolation:
            return balance
        reserved = acct.reserved.get(denom, 0)
        own = (acct.unattributed if lease.legacy else (lease.reservation or {})).get(denom, 0)
        if balance < reserved:
            raise ChainError.billing(
                RESERVATION_INVARIANT,
                f"tenant {acct.tenant} credit {balance}{denom} is below its reservations {reserved}{denom}",
            )
        return balance - (reserved - own)

    def _plan(self, lease: _Lease, at: datetime) -> _Settlement:
        """What settling ``lease`` to ``at`` would move, and whether the lease is exhausted."""
        acct = self._accounts[lease.tenant]
        elapsed = at - lease.last_settled_at
        seconds = max(0, elapsed // _SECOND)
        accrued = {d: r * seconds for d, r in lease.rate.items() if r * seconds > 0}
        transfer: dict[str, int] = {}
        from_tranche: dict[str, int] = {}
        exhausted = False
        for d, owed in accrued.items():
            spendable = self._spendable(acct, lease, d)
            if owed >= spendable:
                exhausted = True
            pay = min(owed, max(spendable, 0))
            if pay:
                transfer[d] = pay
                if self.version.reservation_isolation:
                    own = (acct.unattributed if lease.legacy else (lease.reservation or {})).get(d, 0)
                    if own:
                        from_tranche[d] = min(pay, own)
        if elapsed == timedelta(0) and lease.state == "ACTIVE":
            # No time has passed: exhausted if some denom it is charged in has nothing to spend.
            for d, r in lease.rate.items():
                if r and self._spendable(acct, lease, d) <= 0:
                    exhausted = True
        return _Settlement(accrued, transfer, from_tranche, seconds, exhausted)

    def _check_payout(self, lease: _Lease, plan: _Settlement) -> None:
        if plan.transfer and lease.uuid in self._blocked_payouts:
            payout = self._providers[lease.provider_uuid].payout_address
            raise ChainError.billing(
                INVALID_CREDIT_OPERATION, f"failed to transfer: {payout} is not allowed to receive funds"
            )

    def _apply(self, lease: _Lease, plan: _Settlement) -> None:
        """Move the planned transfer from the tenant's credit to the provider."""
        acct = self._accounts[lease.tenant]
        self._touch(lease, acct)
        for d, pay in plan.transfer.items():
            acct.balances[d] = acct.balances.get(d, 0) - pay
            if not acct.balances[d]:
                del acct.balances[d]
        if plan.from_tranche:
            _sub_clamped(acct.reserved, plan.from_tranche)
            if lease.legacy:
                _sub_clamped(acct.unattributed, plan.from_tranche)
            else:
                _sub_clamped(lease.reservation, plan.from_tranche)  # type: ignore[arg-type]
        _add(lease.accrued_total, plan.accrued)
        _add(lease.paid_total, plan.transfer)
        lease._snap = None

    def _advance(self, lease: _Lease, plan: _Settlement, at: datetime) -> None:
        """A live settlement's new cursor: whole seconds charged (current) or the settlement time (v2.1.0)."""
        if self.version.carries_fraction:
            lease.last_settled_at = lease.last_settled_at + plan.seconds * _SECOND
        else:
            lease.last_settled_at = at

    def _release_reservation(self, acct: _Account, lease: _Lease) -> None:
        """A terminal transition gives back what the lease still reserves (2.6)."""
        self._touch(acct, lease)
        if not self.version.reservation_isolation:
            duration = lease.min_lease_duration_at_creation or self.params.min_lease_duration
            _sub_clamped(acct.reserved, {d: r * duration for d, r in lease.rate.items()})
            return
        if lease.legacy:
            acct.unattributed_count = max(0, acct.unattributed_count - 1)
            if acct.unattributed_count == 0:
                _sub_clamped(acct.reserved, acct.unattributed)
                acct.unattributed.clear()
        else:
            _sub_clamped(acct.reserved, lease.reservation or {})
            lease.reservation = {}

    def _close(self, lease: _Lease, at: datetime, reason: str) -> None:
        acct = self._accounts[lease.tenant]
        provider = self._providers[lease.provider_uuid]
        self._touch(lease, acct, provider)
        lease._snap = None
        lease.state = "CLOSED"
        lease.closed_at = at
        lease.last_settled_at = at
        lease.closure_reason = reason
        i = bisect.bisect_left(provider.active, lease.uuid)
        if i < len(provider.active) and provider.active[i] == lease.uuid:
            del provider.active[i]
        bisect.insort(provider.closed, lease.uuid)
        acct.active.discard(lease.uuid)
        self._release_reservation(acct, lease)

    def _auto_close(self, lease: _Lease, at: datetime, plan: _Settlement) -> None:
        """The chain's silent settlement and close of an exhausted lease."""
        self._apply(lease, plan)
        self._close(lease, at, CREDIT_EXHAUSTED_REASON)

    # -- messages ------------------------------------------------------------------
    def withdraw(
        self,
        sender: str,
        *,
        provider_uuid: str = "",
        lease_uuids: Sequence[str] = (),
        limit: int = 0,
        key: bytes = b"",
    ) -> WithdrawResult:
        """``MsgWithdraw``: named leases (2.2), or provider-wide paged by ``limit``/``key`` (2.1)."""
        with self._lock, self._message():
            self.validate_withdraw(sender, provider_uuid=provider_uuid, lease_uuids=lease_uuids, limit=limit, key=key)
            if lease_uuids:
                result = self._withdraw_named(sender, list(lease_uuids))
            else:
                result = self._withdraw_provider(sender, provider_uuid, limit, key)
            self._emit(result.events, "/liftedinit.billing.v1.MsgWithdraw", sender)
            return result

    # -- ValidateBasic: what a node refuses at CheckTx, before any state is read (4) --
    def validate_withdraw(
        self, sender: str, *, provider_uuid: str = "", lease_uuids: Sequence[str] = (), limit: int = 0, key: bytes = b""
    ) -> None:
        """``MsgWithdraw.ValidateBasic``. Raises ``ChainError``."""
        self._require_address(sender, "sender address", UNAUTHORIZED)
        if lease_uuids and provider_uuid:
            raise ChainError.billing(INVALID_REQUEST, "cannot specify both lease_uuids and provider_uuid")
        if not lease_uuids and not provider_uuid:
            raise ChainError.billing(INVALID_REQUEST, "must specify either lease_uuids or provider_uuid")
        if key and not self.version.withdraw_cursor:
            # v2.1.0's MsgWithdraw has no field 5: a node refuses the tx at decoding.
            raise ChainError(
                "errUnknownField \"*types.MsgWithdraw\": {TagNum: 5, WireType:\"bytes\"}: tx parse error",
                codespace="sdk",
                code=2,
                transient=False,
            )
        if key:
            if lease_uuids:
                raise ChainError.billing(INVALID_REQUEST, "key is only valid in provider-wide mode")
            if len(key) > self.version.max_withdraw_key:
                raise ChainError.billing(INVALID_REQUEST, f"key length {len(key)} exceeds maximum {self.version.max_withdraw_key}")
        if lease_uuids:
            _validate_batch(lease_uuids)
            return
        if not is_uuid7(provider_uuid):
            raise ChainError.billing(PROVIDER_NOT_FOUND, f"invalid provider_uuid format: {provider_uuid}")
        if limit > MAX_WITHDRAW_LIMIT:
            raise ChainError.billing(INVALID_LEASE, f"limit {limit} exceeds maximum allowed {MAX_WITHDRAW_LIMIT}")

    def validate_close(self, sender: str, lease_uuids: Sequence[str], reason: str = "") -> None:
        """``MsgCloseLease.ValidateBasic``: sender (9), 1..100 distinct UUIDv7 (9), reason bytes (26)."""
        self._require_address(sender, "sender address", INVALID_LEASE)
        _validate_batch(lease_uuids)
        if len(reason.encode()) > MAX_CLOSURE_REASON:
            raise ChainError.billing(INVALID_CLOSURE_REASON, f"reason exceeds maximum length of {MAX_CLOSURE_REASON} characters")

    def validate_acknowledge(self, sender: str, lease_uuids: Sequence[str]) -> None:
        """``MsgAcknowledgeLease.ValidateBasic``: sender (6), 1..100 distinct UUIDv7 (9)."""
        self._require_address(sender, "sender address", UNAUTHORIZED)
        _validate_batch(lease_uuids)

    def validate_reject(self, sender: str, lease_uuids: Sequence[str], reason: str = "") -> None:
        """``MsgRejectLease.ValidateBasic``: sender (6), the batch (9), reason bytes (24)."""
        self.validate_acknowledge(sender, lease_uuids)
        if len(reason.encode()) > MAX_REJECTION_REASON:
            raise ChainError.billing(INVALID_REJECTION_REASON, f"reason exceeds maximum length of {MAX_REJECTION_REASON} characters")

    def _authorized_provider(self, provider_uuid: str, sender: str, operation: str) -> _Provider:
        provider = self._providers.get(provider_uuid)
        if provider is None:
            raise ChainError.billing(PROVIDER_NOT_FOUND, f"provider_uuid {provider_uuid} not found")
        if sender not in (provider.address, self.authority):
            raise ChainError.billing(
                UNAUTHORIZED, f"sender {sender} is not authorized to {operation} leases for provider {provider_uuid}"
            )
        return provider

    def _withdraw_named(self, sender: str, lease_uuids: list[str]) -> WithdrawResult:
        leases: list[_Lease] = []
        provider: _Provider | None = None
        for u in lease_uuids:
            lease = self._leases.get(u)
            if lease is None:
                raise ChainError.billing(LEASE_NOT_FOUND, "lease not found")
            if provider is None:
                provider = self._authorized_provider(lease.provider_uuid, sender, "withdraw from")
            elif lease.provider_uuid != provider.uuid:
                raise ChainError.billing(
                    INVALID_LEASE,
                    f"lease {u} belongs to provider {lease.provider_uuid}, expected {provider.uuid} "
                    "(all leases must belong to same provider)",
                )
            leases.append(lease)
        assert provider is not None
        now = self._now()
        version = self.version
        total: dict[str, int] = {}
        count = 0
        events: list[ChainEvent] = []
        for lease in leases:
            if lease.state == "ACTIVE":
                if now < lease.last_settled_at:
                    raise ChainError.billing(INVALID_LEASE, f"lease {lease.uuid} has LastSettledAt in the future")
                plan = self._plan(lease, now)
                self._check_payout(lease, plan)
                if plan.exhausted:
                    self._auto_close(lease, now, plan)
                    _add(total, plan.transfer)
                    count += 1
                    attributes = [("lease_uuid", lease.uuid)]
                    if version.named_auto_close_amount:
                        attributes += [
                            ("amount", _text(plan.transfer)),
                            ("provider_uuid", provider.uuid),
                            ("payout_address", provider.payout_address),
                        ]
                    else:
                        attributes += [("amount", "0"), ("provider_uuid", provider.uuid)]
                    attributes.append(("auto_closed", "true"))
                    events.append(ChainEvent("provider_withdraw", tuple(attributes)))
                    continue
                settle_to = now
            elif lease.closed_at is not None and lease.last_settled_at < lease.closed_at:
                settle_to = lease.closed_at  # a retained interval of an imported CLOSED lease
                plan = self._plan(lease, settle_to)
                self._check_payout(lease, plan)
            else:
                continue
            if not plan.accrued:
                continue
            self._apply(lease, plan)
            if lease.state == "ACTIVE":
                self._advance(lease, plan, settle_to)
            else:
                lease.last_settled_at = settle_to
            _add(total, plan.transfer)
            count += 1
            events.append(
                ChainEvent(
                    "provider_withdraw",
                    (
                        ("lease_uuid", lease.uuid),
                        ("amount", _text(plan.transfer)),
                        ("provider_uuid", provider.uuid),
                        ("payout_address", provider.payout_address),
                    ),
                )
            )
        if count == 0:
            raise ChainError.billing(NO_WITHDRAWABLE, "no withdrawable amount")
        if len(lease_uuids) > 1:
            events.append(
                ChainEvent(
                    "batch_withdraw",
                    (
                        ("lease_count", str(count)),
                        ("provider_uuid", provider.uuid),
                        ("amount", _text(total)),
                        ("payout_address", provider.payout_address),
                    ),
                )
            )
        return WithdrawResult(coins(total), provider.payout_address, count, False, b"", tuple(events))

    def _withdraw_provider(self, sender: str, provider_uuid: str, limit: int, key: bytes) -> WithdrawResult:
        provider = self._authorized_provider(provider_uuid, sender, "withdraw from")
        limit = limit or DEFAULT_WITHDRAW_LIMIT
        version = self.version
        if version.withdraw_cursor:
            start = bisect.bisect_right(provider.active, key.decode(errors="replace")) if key else 0
            page = provider.active[start : start + limit]
            has_more = start + limit < len(provider.active)
        else:
            # v2.1.0: no cursor; ACTIVE leases first, then CLOSED ones, from the start every time.
            page = provider.active[:limit]
            if len(page) < limit:
                page = page + provider.closed[: limit - len(page)]
            has_more = len(provider.active) + len(provider.closed) > limit
        now = self._now()
        total: dict[str, int] = {}
        count = auto_closed = 0
        failed: list[str] = []
        events: list[ChainEvent] = []
        for u in page:
            lease = self._leases[u]
            try:
                outcome = self._withdraw_one(provider, lease, now)
            except ChainError:
                failed.append(u)  # its own cache context is discarded; the page goes on
                continue
            if outcome is None:
                continue
            plan, closed = outcome
            _add(total, plan.transfer)
            count += 1
            amount = _text(plan.transfer)
            if version.provider_wide_lease_events:
                attributes = [
                    ("lease_uuid", u),
                    ("amount", amount),
                    ("provider_uuid", provider.uuid),
                    ("payout_address", provider.payout_address),
                ]
                if closed:
                    attributes.append(("auto_closed", "true"))
                events.append(ChainEvent("provider_withdraw", tuple(attributes)))
            if closed:
                auto_closed += 1
                attributes = [("lease_uuid", u), ("tenant", lease.tenant), ("provider_uuid", provider.uuid)]
                if version.auto_close_event_amounts:
                    attributes += [("amount", amount), ("payout_address", provider.payout_address)]
                attributes.append(("reason", CREDIT_EXHAUSTED))
                events.append(ChainEvent("lease_auto_closed", tuple(attributes)))
        attributes = [
            ("lease_count", str(count)),
            ("provider_uuid", provider.uuid),
            ("amount", _text(total)),
            ("payout_address", provider.payout_address),
            ("auto_closed", str(auto_closed)),
        ]
        if version.batch_withdraw_failures:
            attributes += [("failed_lease_count", str(len(failed))), ("failed_lease_uuids", ",".join(failed))]
        events.append(ChainEvent("batch_withdraw", tuple(attributes)))
        next_key = page[-1].encode() if (version.withdraw_cursor and has_more and page) else b""
        return WithdrawResult(
            coins(total),
            provider.payout_address,
            count,
            has_more,
            next_key,
            tuple(events),
            tuple(failed) if version.lists_failed_leases else (),
        )

    def _withdraw_one(self, provider: _Provider, lease: _Lease, now: datetime) -> tuple[_Settlement, bool] | None:
        """One lease of a provider-wide page: (what it moved, auto-closed), or None when nothing counted.
        Raises ``ChainError`` before changing anything when the lease's settlement fails."""
        if lease.state == "ACTIVE":
            if now < lease.last_settled_at:
                raise ChainError.billing(INVALID_LEASE, f"lease {lease.uuid} has LastSettledAt in the future")
            plan = self._plan(lease, now)
            self._check_payout(lease, plan)
            if plan.exhausted:
                self._auto_close(lease, now, plan)
                return plan, True
            settle_to = now
        elif lease.closed_at is not None and not self.version.withdraw_cursor:
            settle_to = lease.closed_at
            plan = self._plan(lease, settle_to)
            self._check_payout(lease, plan)
        else:
            return None
        if not settle_to > lease.last_settled_at or not plan.transfer:
            return None
        self._apply(lease, plan)
        if lease.state == "ACTIVE":
            self._advance(lease, plan, settle_to)
        else:
            lease.last_settled_at = settle_to
        return plan, False

    def close_leases(self, sender: str, lease_uuids: Sequence[str], reason: str = "") -> CloseResult:
        """``MsgCloseLease``: settle and close 1..100 ACTIVE leases; all or nothing (2.3)."""
        with self._lock, self._message():
            self.validate_close(sender, lease_uuids, reason)
            leases: list[_Lease] = []
            role = ""
            is_authority = bool(self.authority) and sender == self.authority
            for u in lease_uuids:
                lease = self._leases.get(u)
                if lease is None:
                    raise ChainError.billing(LEASE_NOT_FOUND, f"lease {u} not found")
                if lease.state != "ACTIVE":
                    raise ChainError.billing(LEASE_NOT_ACTIVE, f"lease {u} is not active")
                if is_authority:
                    this = "authority"
                elif sender == lease.tenant:
                    this = "tenant"
                elif sender == self._providers[lease.provider_uuid].address:
                    this = "provider"
                else:
                    raise ChainError.billing(UNAUTHORIZED, f"sender {sender} is not authorized to close lease {u}")
                if role and this != role:
                    raise ChainError.billing(
                        UNAUTHORIZED,
                        f"sender {sender} has inconsistent authorization: lease {u} requires {this} role but batch uses {role}",
                    )
                role = this
                if lease.tenant not in self._accounts:
                    raise ChainError.billing(CREDIT_ACCOUNT_NOT_FOUND, f"credit account not found for tenant {lease.tenant}")
                leases.append(lease)
            now = self._now()
            total: dict[str, int] = {}
            events: list[ChainEvent] = []
            for lease in leases:
                if now < lease.last_settled_at:
                    raise ChainError.billing(INVALID_LEASE, f"lease {lease.uuid} has LastSettledAt in the future")
                before = lease.last_settled_at
                plan = self._plan(lease, now)
                self._check_payout(lease, plan)
                closed_by, stored_reason = role, reason
                if plan.exhausted:
                    paid_in_full = bool(plan.accrued) and plan.transfer == plan.accrued
                    if not (self.version.close_keeps_role_when_paid and paid_in_full):
                        closed_by, stored_reason = CLOSED_BY_EXHAUSTION, CREDIT_EXHAUSTED_REASON
                self._apply(lease, plan)
                self._close(lease, now, stored_reason)
                _add(total, plan.transfer)
                attributes = [
                    ("lease_uuid", lease.uuid),
                    ("tenant", lease.tenant),
                    ("provider_uuid", lease.provider_uuid),
                    ("settled_amounts", _text(plan.transfer)),
                    ("closed_by", closed_by),
                    ("duration_seconds", str((now - before) // _SECOND)),
                    ("active_lease_count", str(len(self._accounts[lease.tenant].active))),
                ]
                if stored_reason:
                    attributes.append(("closure_reason", sanitize_reason(stored_reason)))
                events.append(ChainEvent("lease_closed", tuple(attributes)))
            if len(leases) > 1:
                events.append(
                    ChainEvent(
                        "batch_closed",
                        (("lease_count", str(len(leases))), ("closed_by", role), ("settled_amounts", _text(total))),
                    )
                )
            self._emit(events, "/liftedinit.billing.v1.MsgCloseLease", sender)
            return CloseResult(now, len(leases), coins(total), tuple(events))

    def _require_address(self, text: str, what: str, code: int) -> None:
        try:
            address_bytes(text)
        except InvalidAddress as exc:
            raise ChainError.billing(code, f"invalid {what}: {exc}") from None

    def _get(self, lease_uuid: str) -> _Lease:
        lease = self._leases.get(lease_uuid)
        if lease is None:
            raise ChainError.billing(LEASE_NOT_FOUND, f"lease {lease_uuid} not found")
        return lease

    # -- queries -------------------------------------------------------------------
    def lease(self, lease_uuid: str) -> Lease:
        """``Query/Lease``. Raises ``QueryRefused`` (InvalidArgument, NotFound)."""
        return self.lease_record(lease_uuid).lease

    def lease_record(self, lease_uuid: str) -> LeaseRecord:
        with self._lock:
            if not lease_uuid:
                raise QueryRefused("INVALID_ARGUMENT", "lease_uuid cannot be empty")
            lease = self._leases.get(lease_uuid)
            if lease is None:
                raise QueryRefused("NOT_FOUND", "lease not found")
            return self._record(lease)

    @staticmethod
    def _record(lease: _Lease) -> LeaseRecord:
        return LeaseRecord(lease.snapshot(), lease.rejected_at, lease.rejection_reason, lease.expired_at, lease.meta_hash)

    def leases_by_provider(
        self, provider_uuid: str, state: str = "", page: PageRequest = PageRequest()
    ) -> tuple[tuple[LeaseRecord, ...], bytes, int]:
        """``Query/LeasesByProvider``: (leases, ``next_key``, total); ``next_key`` is the first unread lease."""
        with self._lock:
            if not provider_uuid:
                raise QueryRefused("INVALID_ARGUMENT", "provider_uuid cannot be empty")
            if self.version.list_limit_cap and not is_uuid7(provider_uuid):
                raise QueryRefused("INVALID_ARGUMENT", "provider_uuid must be a valid UUIDv7")
            provider = self._providers.get(provider_uuid)
            if provider is None:
                return (), b"", 0
            if state == "ACTIVE":
                index, keep = provider.active, None
            elif state == "CLOSED":
                index, keep = provider.closed, None
            elif state:
                index, keep = provider.leases, (lambda lease: lease.state == state)
            else:
                index, keep = provider.leases, None
            return self._paginate(index, page, keep)

    def leases_by_tenant(
        self, tenant: str, state: str = "", page: PageRequest = PageRequest()
    ) -> tuple[tuple[LeaseRecord, ...], bytes, int]:
        """``Query/LeasesByTenant``: every provider's leases of ``tenant``."""
        with self._lock:
            self._query_tenant(tenant)
            acct = self._accounts.get(tenant)
            if acct is None:
                return (), b"", 0
            keep = (lambda lease: lease.state == state) if state else None
            return self._paginate(acct.leases, page, keep)

    def _paginate(
        self, index: list[str], page: PageRequest, keep: Callable[[_Lease], bool] | None
    ) -> tuple[tuple[LeaseRecord, ...], bytes, int]:
        """``pkg/pagination.PaginateStringIndex``: ``key`` must name a lease of the index exactly
        (inclusive); a key no longer in it gives an empty page and no ``next_key``."""
        limit = page.limit or DEFAULT_PAGE_LIMIT
        if self.version.list_limit_cap:
            if page.key and page.offset:
                raise QueryRefused("INVALID_ARGUMENT", "invalid request, either offset or key is expected, got both")
            limit = min(limit, MAX_PAGE_LIMIT)
            if (page.offset or page.count_total) and max(len(index), page.offset) > MAX_OFFSET_SCAN:
                raise QueryRefused("RESOURCE_EXHAUSTED", f"offset/count_total scan exceeds {MAX_OFFSET_SCAN} rows")
        ordered = list(reversed(index)) if page.reverse else index
        start = 0
        if page.key:
            wanted = page.key.decode(errors="replace")
            if page.reverse:
                try:
                    start = ordered.index(wanted)
                except ValueError:
                    return (), b"", 0
            else:
                start = bisect.bisect_left(ordered, wanted)
                if start >= len(ordered) or ordered[start] != wanted:
                    return (), b"", 0
        out: list[LeaseRecord] = []
        next_key = b""
        total = skipped = 0
        for at in range(start, len(ordered)):  # not ordered[start:]: a copy of the rest for every page
            u = ordered[at]
            lease = self._leases[u]
            if keep is not None and not keep(lease):
                continue
            total += 1
            if not page.key and skipped < page.offset:
                skipped += 1
                continue
            if len(out) >= limit:
                if not next_key:
                    next_key = u.encode()
                if not page.count_total:
                    break
                continue
            out.append(self._record(lease))
        return tuple(out), next_key, (total if page.count_total else 0)

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        """Every ACTIVE lease of the provider (all pages of ``LeasesByProvider(ACTIVE)``)."""
        with self._lock:
            provider = self._providers.get(provider_uuid)
            if provider is None:
                return ()
            return tuple(self._leases[u].snapshot() for u in provider.active)

    def _query_tenant(self, tenant: str) -> None:
        if not tenant:
            raise QueryRefused("INVALID_ARGUMENT", "tenant cannot be empty")
        try:
            address_bytes(tenant)
        except InvalidAddress:
            raise QueryRefused("INVALID_ARGUMENT", "invalid tenant address") from None

    def _account(self, tenant: str) -> _Account:
        self._query_tenant(tenant)
        acct = self._accounts.get(tenant)
        if acct is None:
            raise QueryRefused("NOT_FOUND", "credit account not found")
        return acct

    def credit_account(self, tenant: str, page: PageRequest = PageRequest()) -> tuple[CreditAccount, bytes]:
        """``Query/CreditAccount``: the account, its balances (paged on the current chain) and what is available."""
        with self._lock:
            acct = self._account(tenant)
            relevant: list[str] = list(dict.fromkeys(sorted(acct.reserved)))
            for state_set in (acct.active, acct.pending):
                for u in sorted(state_set)[:100]:
                    for d in self._leases[u].rate:
                        if d not in relevant:
                            relevant.append(d)
            if relevant:
                balances = {d: acct.balances.get(d, 0) for d in relevant if acct.balances.get(d, 0)}
            else:
                balances = dict(acct.balances)
            next_key = b""
            if self.version.credit_account_pagination:
                if page.offset or page.count_total:
                    raise QueryRefused("INVALID_ARGUMENT", "credit account balances support cursor pagination only")
                limit = min(page.limit or DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT)
                denoms = sorted(balances)
                start = bisect.bisect_left(denoms, page.key.decode(errors="replace")) if page.key else 0
                shown = denoms[start : start + limit]
                if start + limit < len(denoms):
                    next_key = denoms[start + limit].encode()
                balances = {d: balances[d] for d in shown}
            available = {d: a - acct.reserved.get(d, 0) for d, a in balances.items() if a > acct.reserved.get(d, 0)}
            record = self._account_record(acct)
            return (
                msgspec.structs.replace(record, balances=coins(balances), available_balances=coins(available)),
                next_key,
            )

    def credit_accounts(self, page: PageRequest = PageRequest()) -> tuple[tuple[CreditAccount, ...], bytes, int]:
        """``Query/CreditAccounts`` (both versions, 1.8): every credit account, no balances; (accounts,
        ``next_key``, total). Paged as ``query.CollectionPaginate`` pages the accounts collection: in
        tenant address byte order, ``key`` the first row to answer (inclusive, and a key no longer there
        starts at the next row: such a walk is never cut short), ``next_key`` the first row not answered."""
        with self._lock:
            keys, accounts, _, _ = self._orders()
            rows, next_key, total = _collection_page(keys, page)
            return tuple(self._account_record(accounts[i]) for i in rows), next_key, total

    def _new_account(self, tenant: str, number: int) -> _Account:
        return _Account(
            tenant, credit_address(tenant), number=number,
            key=address_bytes(tenant), credit_key=credit_address_bytes(tenant),
        )

    def _orders(self) -> tuple[list[bytes], list[_Account], list[bytes], list[_Account]]:
        """(tenant keys, accounts) and (credit address keys, accounts), each in key order.

        Sorted once for every page until an account is made: sorted for each
        page, and every key decoded from its bech32 text again, a walk of the
        accounts cost their square (at 100,000 accounts, minutes a walk).
        """
        if self._ordered is None:
            by_tenant = sorted(self._accounts.values(), key=lambda a: a.key)
            by_credit = sorted(self._accounts.values(), key=lambda a: a.credit_key)
            self._ordered = ([a.key for a in by_tenant], by_tenant, [a.credit_key for a in by_credit], by_credit)
        return self._ordered

    def _account_record(self, acct: _Account) -> CreditAccount:
        """The stored ``CreditAccount`` (fields 1-5, and 6-7 on the current chain), without balances."""
        return CreditAccount(
            tenant=acct.tenant,
            balances=(),
            active_lease_count=len(acct.active),
            pending_lease_count=len(acct.pending),
            credit_address=acct.credit_address,
            reserved_amounts=coins(acct.reserved),
            unattributed_reserved_amounts=coins(acct.unattributed) if self.version.unattributed_fields else (),
            unattributed_lease_count=acct.unattributed_count if self.version.unattributed_fields else 0,
        )

    def denom_owners(self, denom: str, page: PageRequest = PageRequest()) -> tuple[tuple[tuple[str, int], ...], bytes, int]:
        """``cosmos.bank.v1beta1.Query/DenomOwners`` (cosmos-sdk 0.50 and 0.53, so both versions): every
        account holding ``denom``, as (address, raw balance), paged like ``credit_accounts`` over the bank's
        (denom, address) index in address byte order. A zero balance is not stored, so never listed; the
        raw balance counts vesting-locked coins too. The model's bank holds the credit addresses only."""
        with self._lock:
            if not _DENOM.fullmatch(denom or ""):
                raise QueryRefused("INVALID_ARGUMENT", f"invalid denom: {denom}")
            _, _, keys, by_credit = self._orders()
            rows, next_key, total = _collection_page(keys, page, lambda i: by_credit[i].balances.get(denom, 0) > 0)
            return tuple((by_credit[i].credit_address, by_credit[i].balances[denom]) for i in rows), next_key, total

    def credit_address_kind(self, address: str) -> tuple[str, int] | None:
        """(``auth/Account`` kind, account number) of a funded credit address; None for any other address."""
        with self._lock:
            acct = self._by_credit_address.get(address)
            return (acct.address_kind, acct.number) if acct is not None else None

    def set_credit_address_kind(self, tenant: str, kind: str) -> None:
        """Tests: the tenant's credit address is an account of ``kind`` (a vesting account created there
        before it was funded, which the current chain's spendable balance excludes the locked coins of)."""
        with self._lock:
            self._account(tenant).address_kind = kind

    def credit_address(self, tenant: str) -> str:
        """``Query/CreditAddress``: derived, account or not."""
        if not tenant:
            raise QueryRefused("INVALID_ARGUMENT", "tenant cannot be empty")
        try:
            return credit_address(tenant)
        except InvalidAddress:
            raise QueryRefused("INVALID_ARGUMENT", "invalid tenant address") from None

    def credit_estimate(self, tenant: str) -> CreditEstimate:
        """``Query/CreditEstimate`` (2.7): gross runway of the balance at the ACTIVE rate.

        Neither unsettled accrual nor reservations are subtracted: it is not
        a forecast of the auto-close.
        """
        with self._lock:
            acct = self._account(tenant)
            version = self.version
            active = sorted(acct.active)
            if version.reservation_isolation and len(active) > version.estimate_lease_cap:
                raise QueryRefused(
                    "RESOURCE_EXHAUSTED",
                    f"tenant {tenant} has {len(active)} active leases; unpaginated query ceiling is "
                    f"{version.estimate_lease_cap}: tenant lease query limit exceeded",
                )
            rate: dict[str, int] = {}
            counted = items = 0
            for u in active:
                counted += 1
                if not version.reservation_isolation and counted > version.estimate_lease_cap:
                    break  # v2.1.0 stops scanning: the count reads one more, the rates are partial
                lease = self._leases[u]
                items += len(lease.items)
                if version.reservation_isolation and items > MAX_ESTIMATE_ITEMS:
                    raise QueryRefused(
                        "RESOURCE_EXHAUSTED",
                        f"tenant {tenant} active leases contain more than {MAX_ESTIMATE_ITEMS} items; "
                        "credit-estimate work ceiling exceeded: tenant lease query limit exceeded",
                    )
                for d, r in lease.rate.items():
                    rate[d] = rate.get(d, 0) + r
            balance = {d: acct.balances.get(d, 0) for d in rate}
            duration = 0
            if counted and any(rate.values()):
                duration = _UINT64_MAX
                for d, r in sorted(rate.items()):
                    if not r:
                        continue
                    if not balance[d]:
                        duration = 0
                        break
                    duration = min(duration, min(balance[d] // r, _UINT64_MAX))
                if duration == _UINT64_MAX and not version.estimate_saturates:
                    duration = 0
            return CreditEstimate(
                tenant=tenant,
                current_balance=coins(balance),
                total_rate_per_second=coins(rate),
                estimated_duration_seconds=duration,
                active_lease_count=counted,
            )

    def withdrawable_amount(self, lease_uuid: str) -> tuple[Coin, ...]:
        """``Query/WithdrawableAmount``: ``min(accrued, B)`` or ``min(accrued, B - (R - A))``, read-only."""
        with self._lock:
            if not lease_uuid:
                raise QueryRefused("INVALID_ARGUMENT", "lease_uuid cannot be empty")
            lease = self._leases.get(lease_uuid)
            if lease is None:
                raise QueryRefused("NOT_FOUND", "lease not found")
            if lease.state == "ACTIVE":
                at = self._query_now()
            elif lease.closed_at is not None:
                at = lease.closed_at
            else:
                return ()
            if at <= lease.last_settled_at:
                return ()
            try:
                return coins(self._plan(lease, at).transfer)
            except ChainError as exc:
                raise QueryRefused("INTERNAL", str(exc)) from None

    def provider_withdrawable(
        self, provider_uuid: str, limit: int = 0, page: PageRequest = PageRequest()
    ) -> tuple[tuple[Coin, ...], int, bool, bytes, tuple[str, ...]]:
        """``Query/ProviderWithdrawable``: (amounts, lease_count, has_more, next_key, failed).

        v2.1.0 reads ``limit`` (default 100, at most 1000) over leases of
        every state and answers ``has_more``; the current chain reads
        ``pagination`` (default 50, at most 100, cursor only) over ACTIVE
        leases, dry-running the withdraw itself, and answers the page's
        ``next_key`` (the first unread lease) and ``failed_lease_uuids``.
        """
        with self._lock:
            if not provider_uuid:
                raise QueryRefused("INVALID_ARGUMENT", "provider_uuid cannot be empty")
            provider = self._providers.get(provider_uuid)
            at = self._query_now()
            if not self.version.withdrawable_pagination:
                default, cap = V21_WITHDRAWABLE_LIMIT
                n = min(limit or default, cap)
                uuids = provider.leases if provider is not None else []
                total: dict[str, int] = {}
                count = 0
                for u in uuids[:n]:
                    lease = self._leases[u]
                    end = at if lease.state == "ACTIVE" else lease.closed_at
                    if end is None or end <= lease.last_settled_at:
                        continue
                    try:
                        moved = self._plan(lease, end).transfer
                    except ChainError:
                        continue
                    if moved:
                        _add(total, moved)
                        count += 1
                return coins(total), count, len(uuids) > n, b"", ()
            if provider is None:
                raise QueryRefused("NOT_FOUND", f"provider_uuid {provider_uuid} not found: provider not found")
            if page.offset:
                raise QueryRefused("INVALID_ARGUMENT", "provider-withdrawable supports cursor pagination only; offset must be zero")
            if page.count_total:
                raise QueryRefused("INVALID_ARGUMENT", "provider-withdrawable does not support count_total")
            default, cap = CURRENT_WITHDRAWABLE_LIMIT
            records, next_key, _ = self._paginate(
                provider.active, PageRequest(key=page.key, limit=min(page.limit or default, cap)), None
            )
            amounts, count, failed = self._dry_run(provider, [r.lease.uuid for r in records], at)
            return amounts, count, False, next_key, failed

    def _dry_run(self, provider: _Provider, uuids: list[str], at: datetime) -> tuple[tuple[Coin, ...], int, tuple[str, ...]]:
        """Run the withdraw of ``uuids`` at ``at`` against state that is then put back:
        (what it would move, over how many leases, which would fail)."""
        journal = _Journal()
        outer_tx, outer_journal = self._tx, self._journal
        self._tx = _TxContext(0, "SIMULATION", at, [])
        self._journal = journal
        total: dict[str, int] = {}
        count = 0
        failed: list[str] = []
        try:
            for u in uuids:
                try:
                    outcome = self._withdraw_one(provider, self._leases[u], at)
                except ChainError:
                    failed.append(u)
                    continue
                if outcome is not None:
                    _add(total, outcome[0].transfer)
                    count += 1
        finally:
            journal.undo()
            self._tx, self._journal = outer_tx, outer_journal
        return coins(total), count, tuple(failed)

    # -- inspection for tests, the demo and the ledger's end-to-end check --------
    def balance(self, tenant: str) -> dict[str, int]:
        with self._lock:
            acct = self._accounts.get(tenant)
            return dict(acct.balances) if acct else {}

    def reserved(self, tenant: str) -> dict[str, int]:
        with self._lock:
            acct = self._accounts.get(tenant)
            return dict(acct.reserved) if acct else {}

    def lease_totals(self, lease_uuid: str) -> tuple[dict[str, int], dict[str, int]]:
        """(accrued, paid) per denom over the lease's life, as settled so far."""
        with self._lock:
            lease = self._get(lease_uuid)
            return dict(lease.accrued_total), dict(lease.paid_total)

    def all_leases(self) -> tuple[Lease, ...]:
        with self._lock:
            return tuple(lease.snapshot() for lease in self._leases.values())

    def tenants(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._accounts)

    def provider(self, provider_uuid: str) -> tuple[str, str]:
        """(address, payout address) of a registered provider; KeyError if unknown."""
        with self._lock:
            p = self._providers[provider_uuid]
            return p.address, p.payout_address


def _validate_batch(lease_uuids: Sequence[str]) -> None:
    """``ValidateBatchLeaseUUIDs``: 1..100 distinct canonical UUIDv7, else code 9."""
    if not lease_uuids:
        raise ChainError.billing(INVALID_LEASE, "lease_uuids cannot be empty")
    if len(lease_uuids) > MAX_BATCH_LEASE_SIZE:
        raise ChainError.billing(INVALID_LEASE, f"too many leases: {len(lease_uuids)} exceeds maximum {MAX_BATCH_LEASE_SIZE}")
    seen: set[str] = set()
    for i, u in enumerate(lease_uuids):
        if not u:
            raise ChainError.billing(INVALID_LEASE, f"lease_uuids[{i}] is empty")
        if not is_uuid7(u):
            raise ChainError.billing(INVALID_LEASE, f"lease_uuids[{i}] invalid format: {u}")
        if u in seen:
            raise ChainError.billing(INVALID_LEASE, f"duplicate lease_uuid: {u}")
        seen.add(u)


def _batch_events(
    kind: str,
    batch_kind: str,
    by: tuple[str, str],
    leases: Sequence[_Lease],
    provider: _Provider,
    extra: tuple[tuple[str, str], ...] = (),
) -> list[ChainEvent]:
    """A pending batch's events (3): one ``kind`` per lease (who did it, then ``extra``), and a
    ``batch_kind`` summary when the batch has more than one lease."""
    events = [
        ChainEvent(
            kind, (("lease_uuid", lease.uuid), ("tenant", lease.tenant), ("provider_uuid", lease.provider_uuid), by) + extra
        )
        for lease in leases
    ]
    if len(leases) > 1:
        events.append(ChainEvent(batch_kind, (("lease_count", str(len(leases))), ("provider_uuid", provider.uuid), by)))
    return events


def _message_event(action: str, sender: str, msg_index: str) -> ChainEvent:
    """The SDK's ``message`` event of a message (action, sender, module, msg_index)."""
    return ChainEvent(
        "message", (("action", action), ("sender", sender), ("module", "billing"), ("msg_index", msg_index))
    )


def _collection_page(
    keys: list[bytes], page: PageRequest, keep: Callable[[int], bool] | None = None
) -> tuple[list[int], bytes, int]:
    """``query.CollectionPaginate`` over rows whose keys are ``keys`` (sorted): (the indexes of the page's
    rows, ``next_key``, total). ``key`` starts the page at the first row at or after it (at or before it,
    ``reverse``); without one, ``offset`` rows are skipped and ``count_total`` counts every row. A limit
    of 0 is ``DefaultLimit`` (100); the SDK caps no limit.

    ``keep``: the collection is only the rows it admits (``DenomOwners``: the holders of one denom,
    among every account). A page costs the rows it passes over, not the whole collection: a walk of
    100,000 accounts a page at a time cost their square.
    """
    if page.key and page.offset:
        raise QueryRefused("INVALID_ARGUMENT", "invalid request, either offset or key is expected, got both")
    limit = page.limit or DEFAULT_PAGE_LIMIT
    n = len(keys)
    total = 0
    if page.count_total and not page.key:
        total = n if keep is None else sum(1 for i in range(n) if keep(i))
    if page.reverse:
        i, step = (bisect.bisect_right(keys, page.key) if page.key else n) - 1, -1
    else:
        i, step = (bisect.bisect_left(keys, page.key) if page.key else 0), 1
    skip = 0 if page.key else page.offset
    rows: list[int] = []
    while 0 <= i < n:
        if keep is None or keep(i):
            if skip:
                skip -= 1
            elif len(rows) == limit:
                return rows, keys[i], total
            else:
                rows.append(i)
        i += step
    return rows, b"", total
