"""An in-process model of the ``liftedinit.billing.v1`` module, on the injected clock.

It holds what the chain holds (providers, tenants' multi-denom credit,
leases with items) and applies the rules of CHAIN.md: per-second accrual of
``locked_price x quantity`` on ACTIVE leases, settlement on withdraw and
close (moving ``min(accrued, balance)`` per denom), auto-close with
``lease_auto_closed`` when a settlement finds the credit exhausted,
provider-wide withdraw paged by ``limit``/``key``/``next_key``, and
``MsgCloseLease`` batches of 1..100 that fail whole when one lease is not
active. Other providers' leases live here too and draw on the same credit.

It is the embedded default chain (``ModelChainClient`` puts the
``ChainClient`` interface on it) and the state machine behind the devnet's
gRPC server. It is thread-safe: every call takes one lock.

Every state change emits the chain's events (type + string attributes) to
the registered listeners, one ``TxEvents`` per call, the way a tx result
carries them. A node executing txs (the devnet) wraps a tx's calls in
``in_tx(height, tx_hash)``: their events then go out once, as one
``TxEvents`` carrying the block height and tx hash, and a failing call
undoes the whole tx. ``set_block_source`` lets calls made outside a tx
(genesis, the demo's tenants) carry the node's next block height too.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import threading
import uuid as uuidlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Iterable, Iterator, Sequence

from chain.errors import (
    CREDIT_ACCOUNT_NOT_FOUND,
    INVALID_CLOSURE_REASON,
    INVALID_REQUEST,
    LEASE_NOT_ACTIVE,
    LEASE_NOT_FOUND,
    NO_WITHDRAWABLE,
    UNAUTHORIZED,
    ChainError,
)
from messages.chain import CreditAccount, CreditEstimate, Lease, LeaseItem
from messages.coins import Coin, coins, format_coins
from runtime.clock import Clock

__all__ = [
    "BillingModel",
    "ChainEvent",
    "TxEvents",
    "WithdrawResult",
    "CloseResult",
    "MAX_BATCH_LEASE_SIZE",
    "DEFAULT_WITHDRAW_LIMIT",
    "MAX_WITHDRAW_LIMIT",
]

#: MsgCloseLease / named MsgWithdraw accept at most this many leases.
MAX_BATCH_LEASE_SIZE = 100
#: Provider-wide MsgWithdraw: the default and the largest ``limit``.
DEFAULT_WITHDRAW_LIMIT = 50
MAX_WITHDRAW_LIMIT = 100
#: Longest closure reason the model accepts (longer answers billing code 26).
MAX_CLOSURE_REASON = 256
#: The chain's own name for an auto-close.
CREDIT_EXHAUSTED = "credit_exhausted"

_SECOND = timedelta(seconds=1)


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
    height: int
    tx_hash: str
    time: datetime
    events: tuple[ChainEvent, ...]

    def pairs(self) -> list[tuple[str, dict[str, str]]]:
        """The events as ``(type, {key: value})``, the form the event parsers read (``chain.events``)."""
        return [(e.type, dict(e.attributes)) for e in self.events]


@dataclass(frozen=True)
class WithdrawResult:
    total_amounts: tuple[Coin, ...]
    payout_address: str
    withdrawal_count: int
    has_more: bool
    next_key: bytes
    events: tuple[ChainEvent, ...]


@dataclass(frozen=True)
class CloseResult:
    closed_at: datetime
    closed_count: int
    total_settled_amounts: tuple[Coin, ...]
    events: tuple[ChainEvent, ...]


@dataclass
class _TxContext:
    height: int
    tx_hash: str
    events: list[ChainEvent]


@dataclass
class _Provider:
    uuid: str
    address: str
    payout_address: str
    #: ACTIVE lease uuids of this provider, sorted (the withdraw cursor order).
    active: list[str] = field(default_factory=list)


@dataclass
class _Lease:
    uuid: str
    tenant: str
    provider_uuid: str
    items: tuple[LeaseItem, ...]
    rate: dict[str, int]
    state: str
    created_at: datetime
    acknowledged_at: datetime | None = None
    last_settled_at: datetime | None = None
    closed_at: datetime | None = None
    closure_reason: str = ""
    #: What the lease owed and what it paid, per denom, over its life.
    accrued_total: dict[str, int] = field(default_factory=dict)
    paid_total: dict[str, int] = field(default_factory=dict)
    _snap: Lease | None = None

    def clone(self) -> "_Lease":
        """A copy whose mutable totals are its own (for undoing a failed tx)."""
        twin = object.__new__(_Lease)
        twin.__dict__.update(self.__dict__)
        twin.accrued_total = dict(self.accrued_total)
        twin.paid_total = dict(self.paid_total)
        return twin

    def snapshot(self) -> Lease:
        """The lease as a query answers it; cached until the lease changes (reads of 50,000 leases are hot)."""
        if self._snap is None:
            self._snap = self._build_snapshot()
        return self._snap

    def _build_snapshot(self) -> Lease:
        return Lease(
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
        )


def _rate(items: Iterable[LeaseItem]) -> dict[str, int]:
    rate: dict[str, int] = {}
    for item in items:
        d = item.locked_price.denom
        rate[d] = rate.get(d, 0) + item.locked_price.amount * item.quantity
    return rate


class BillingModel:
    """The billing module's state and rules. Time comes from ``clock``."""

    def __init__(self, clock: Clock, chain_id: str = "leasewarden-devnet", authority: str = "") -> None:
        self.clock = clock
        self.chain_id = chain_id
        self.authority = authority
        self._lock = threading.RLock()
        self._providers: dict[str, _Provider] = {}
        self._balances: dict[str, dict[str, int]] = {}
        self._leases: dict[str, _Lease] = {}
        #: tenant -> ACTIVE / PENDING lease uuids (any provider)
        self._tenant_active: dict[str, set[str]] = {}
        self._tenant_pending: dict[str, set[str]] = {}
        self._listeners: list[Callable[[TxEvents], None]] = []
        self._tx_counter = itertools.count(1)
        self.height = 1
        #: The tx being executed by ``in_tx`` (its events are held until it ends).
        self._tx: _TxContext | None = None
        #: Height a call outside a tx is attributed to (a node's next block).
        self._block_source: Callable[[], int] | None = None

    # -- wiring ---------------------------------------------------------------
    def subscribe(self, listener: Callable[[TxEvents], None]) -> None:
        """Call ``listener`` with the events of every state change."""
        with self._lock:
            self._listeners.append(listener)

    def set_block_source(self, source: Callable[[], int] | None) -> None:
        """Calls made outside ``in_tx`` take their event height from ``source()``."""
        with self._lock:
            self._block_source = source

    @contextmanager
    def in_tx(self, height: int, tx_hash: str, *, atomic: bool = True) -> Iterator[None]:
        """Run the calls inside as one tx included at ``height`` with hash ``tx_hash``.

        Their events are emitted once, when the block leaves the context, as
        one ``TxEvents(height, tx_hash, ...)``. With ``atomic``, an exception
        undoes every change the calls made (a tx with several messages is
        all or nothing; one call alone already is). The lock is held
        throughout, so no other call interleaves with the tx.
        """
        with self._lock:
            if self._tx is not None:
                raise RuntimeError("in_tx: a tx is already being executed")
            saved = self._snapshot() if atomic else None
            ctx = _TxContext(height, tx_hash, [])
            self._tx = ctx
            try:
                yield
            except BaseException:
                if saved is not None:
                    self._restore(saved)
                raise
            finally:
                self._tx = None
            self.height = max(self.height, height)
            if ctx.events:
                tx = TxEvents(height, tx_hash, self.clock.now(), tuple(ctx.events))
                for listener in list(self._listeners):
                    listener(tx)

    def _snapshot(self) -> tuple:
        """Copies of every mutable piece of state (lease items and rates are never mutated)."""
        return (
            {u: dataclasses.replace(p, active=list(p.active)) for u, p in self._providers.items()},
            {t: dict(b) for t, b in self._balances.items()},
            {u: lease.clone() for u, lease in self._leases.items()},
            {t: set(s) for t, s in self._tenant_active.items()},
            {t: set(s) for t, s in self._tenant_pending.items()},
        )

    def _restore(self, saved: tuple) -> None:
        (self._providers, self._balances, self._leases, self._tenant_active, self._tenant_pending) = saved

    def _emit(self, events: Sequence[ChainEvent], now: datetime) -> str:
        if self._tx is not None:
            self._tx.events.extend(events)
            return self._tx.tx_hash
        tx_hash = hashlib.sha256(f"{self.chain_id}/{next(self._tx_counter)}".encode()).hexdigest().upper()
        if not events:
            return tx_hash
        if self._block_source is not None:
            self.height = max(self.height, self._block_source())
        else:
            self.height += 1
        tx = TxEvents(self.height, tx_hash, now, tuple(events))
        for listener in list(self._listeners):
            listener(tx)
        return tx_hash

    # -- setup (genesis, demo, tests) -------------------------------------------
    def register_provider(self, provider_uuid: str, address: str, payout_address: str = "") -> None:
        with self._lock:
            self._providers[provider_uuid] = _Provider(provider_uuid, address, payout_address or address)

    def fund_credit(self, tenant: str, amounts: Iterable[Coin], sender: str = "") -> None:
        with self._lock:
            bal = self._balances.setdefault(tenant, {})
            for c in amounts:
                if c.amount < 0:
                    raise ChainError.billing(INVALID_REQUEST, "cannot fund a negative amount")
                bal[c.denom] = bal.get(c.denom, 0) + c.amount
            now = self.clock.now()
            self._emit(
                [
                    ChainEvent(
                        "credit_funded",
                        (
                            ("tenant", tenant),
                            ("credit_address", tenant),
                            ("sender", sender or tenant),
                            ("amount", format_coins(coins(amounts))),
                            ("new_balance", format_coins(coins(bal))),
                        ),
                    )
                ],
                now,
            )

    def create_lease(
        self,
        tenant: str,
        provider_uuid: str,
        items: Sequence[LeaseItem],
        *,
        lease_uuid: str | None = None,
        acknowledge: bool = True,
    ) -> Lease:
        """Create a lease (PENDING); with ``acknowledge`` the provider acknowledges it at once."""
        with self._lock:
            if provider_uuid not in self._providers:
                raise ChainError.billing(INVALID_REQUEST, f"unknown provider {provider_uuid}")
            if not items:
                raise ChainError.billing(INVALID_REQUEST, "a lease needs at least one item")
            now = self.clock.now()
            lease = _Lease(
                uuid=lease_uuid or str(uuidlib.uuid4()),
                tenant=tenant,
                provider_uuid=provider_uuid,
                items=tuple(items),
                rate=_rate(items),
                state="PENDING",
                created_at=now,
            )
            if lease.uuid in self._leases:
                raise ChainError.billing(INVALID_REQUEST, f"lease {lease.uuid} exists")
            self._leases[lease.uuid] = lease
            self._tenant_pending.setdefault(tenant, set()).add(lease.uuid)
            self._balances.setdefault(tenant, {})
            self._emit(
                [
                    ChainEvent(
                        "lease_created",
                        (
                            ("lease_uuid", lease.uuid),
                            ("tenant", tenant),
                            ("provider_uuid", provider_uuid),
                            ("item_count", str(len(items))),
                            ("total_rate_per_second", format_coins(coins(lease.rate))),
                            ("created_by", tenant),
                        ),
                    )
                ],
                now,
            )
            if acknowledge:
                self.acknowledge_lease(lease.uuid)
            return lease.snapshot()

    def acknowledge_lease(self, lease_uuid: str, sender: str = "") -> None:
        with self._lock:
            lease = self._get(lease_uuid)
            if lease.state != "PENDING":
                raise ChainError.billing(LEASE_NOT_ACTIVE, f"lease {lease_uuid} is not pending")
            provider = self._providers[lease.provider_uuid]
            if sender and sender not in (provider.address, self.authority):
                raise ChainError.billing(UNAUTHORIZED, f"{sender} may not acknowledge {lease_uuid}")
            now = self.clock.now()
            lease._snap = None
            lease.state = "ACTIVE"
            lease.acknowledged_at = now
            lease.last_settled_at = now
            bisect.insort(provider.active, lease.uuid)
            self._tenant_pending.get(lease.tenant, set()).discard(lease.uuid)
            self._tenant_active.setdefault(lease.tenant, set()).add(lease.uuid)
            self._emit(
                [
                    ChainEvent(
                        "lease_acknowledged",
                        (
                            ("lease_uuid", lease.uuid),
                            ("tenant", lease.tenant),
                            ("provider_uuid", lease.provider_uuid),
                            ("acknowledged_by", sender or provider.address),
                        ),
                    )
                ],
                now,
            )

    # -- settlement -------------------------------------------------------------
    def _accrued(self, lease: _Lease, now: datetime) -> tuple[dict[str, int], int]:
        assert lease.last_settled_at is not None
        seconds = max(0, (now - lease.last_settled_at) // _SECOND)
        return {d: r * seconds for d, r in lease.rate.items()}, seconds

    def _settle(self, lease: _Lease, now: datetime) -> tuple[dict[str, int], bool]:
        """Settle ``lease`` up to ``now``: returns (paid per denom, auto-closed?)."""
        accrued, seconds = self._accrued(lease, now)
        balance = self._balances.setdefault(lease.tenant, {})
        paid: dict[str, int] = {}
        exhausted = False
        for denom, owed in accrued.items():
            have = balance.get(denom, 0)
            if lease.rate[denom] > 0 and owed >= have:
                exhausted = True
            pay = min(owed, have)
            if pay:
                balance[denom] = have - pay
                paid[denom] = pay
            lease.accrued_total[denom] = lease.accrued_total.get(denom, 0) + owed
            lease.paid_total[denom] = lease.paid_total.get(denom, 0) + pay
        # Keep the sub-second remainder: accrual is per whole second.
        lease.last_settled_at = lease.last_settled_at + seconds * _SECOND  # type: ignore[operator]
        lease._snap = None
        return paid, exhausted

    def _close(self, lease: _Lease, now: datetime, reason: str) -> None:
        lease._snap = None
        lease.state = "CLOSED"
        lease.closed_at = now
        lease.closure_reason = reason
        provider = self._providers[lease.provider_uuid]
        i = bisect.bisect_left(provider.active, lease.uuid)
        if i < len(provider.active) and provider.active[i] == lease.uuid:
            del provider.active[i]
        self._tenant_active.get(lease.tenant, set()).discard(lease.uuid)

    def _auto_close_event(self, lease: _Lease) -> ChainEvent:
        return ChainEvent(
            "lease_auto_closed",
            (
                ("lease_uuid", lease.uuid),
                ("tenant", lease.tenant),
                ("provider_uuid", lease.provider_uuid),
                ("reason", CREDIT_EXHAUSTED),
            ),
        )

    def _withdraw_leases(
        self, provider: _Provider, leases: Sequence[_Lease], now: datetime
    ) -> tuple[dict[str, int], list[ChainEvent]]:
        total: dict[str, int] = {}
        events: list[ChainEvent] = []
        for lease in leases:
            paid, exhausted = self._settle(lease, now)
            for d, a in paid.items():
                total[d] = total.get(d, 0) + a
            events.append(
                ChainEvent(
                    "provider_withdraw",
                    (
                        ("lease_uuid", lease.uuid),
                        ("provider_uuid", provider.uuid),
                        ("payout_address", provider.payout_address),
                        ("amount", format_coins(coins(paid))),
                        ("auto_closed", "true" if exhausted else "false"),
                    ),
                )
            )
            if exhausted:
                self._close(lease, now, CREDIT_EXHAUSTED)
                events.append(self._auto_close_event(lease))
        return total, events

    # -- messages ---------------------------------------------------------------
    def withdraw(
        self,
        sender: str,
        *,
        provider_uuid: str = "",
        lease_uuids: Sequence[str] = (),
        limit: int = 0,
        key: bytes = b"",
    ) -> WithdrawResult:
        """``MsgWithdraw``: named leases, or provider-wide paged by ``limit``/``key``."""
        with self._lock:
            now = self.clock.now()
            if lease_uuids:
                if provider_uuid:
                    raise ChainError.billing(INVALID_REQUEST, "give lease_uuids or provider_uuid, not both")
                if len(lease_uuids) > MAX_BATCH_LEASE_SIZE:
                    raise ChainError.billing(
                        INVALID_REQUEST, f"at most {MAX_BATCH_LEASE_SIZE} leases per withdraw"
                    )
                leases = [self._get(u) for u in lease_uuids]
                owners = {lease.provider_uuid for lease in leases}
                if len(owners) != 1:
                    raise ChainError.billing(INVALID_REQUEST, "leases of more than one provider")
                provider = self._providers[owners.pop()]
                self._authorize_provider(provider, sender)
                for lease in leases:
                    if lease.state != "ACTIVE":
                        raise ChainError.billing(LEASE_NOT_ACTIVE, f"lease {lease.uuid} is not active")
                total, events = self._withdraw_leases(provider, leases, now)
                has_more, next_key = False, b""
            else:
                provider = self._providers.get(provider_uuid)
                if provider is None:
                    raise ChainError.billing(INVALID_REQUEST, f"unknown provider {provider_uuid!r}")
                self._authorize_provider(provider, sender)
                limit = limit or DEFAULT_WITHDRAW_LIMIT
                if limit > MAX_WITHDRAW_LIMIT:
                    raise ChainError.billing(INVALID_REQUEST, f"limit {limit} exceeds {MAX_WITHDRAW_LIMIT}")
                if not key and not provider.active:
                    raise ChainError.billing(NO_WITHDRAWABLE, "no withdrawable amount")
                after = key.decode() if key else ""
                start = bisect.bisect_right(provider.active, after) if after else 0
                page_uuids = provider.active[start : start + limit]
                last = page_uuids[-1] if page_uuids else ""
                total, events = self._withdraw_leases(
                    provider, [self._leases[u] for u in page_uuids], now
                )
                # Resume strictly after the settled leases, whether or not the
                # settlement auto-closed them.
                has_more = bool(last) and bisect.bisect_right(provider.active, last) < len(provider.active)
                next_key = last.encode() if has_more else b""
                leases = [self._leases[u] for u in page_uuids]
            if leases:
                events.append(
                    ChainEvent(
                        "batch_withdraw",
                        (
                            ("lease_count", str(len(leases))),
                            ("provider_uuid", provider.uuid),
                            ("amount", format_coins(coins(total))),
                        ),
                    )
                )
            self._emit(events, now)
            return WithdrawResult(
                total_amounts=coins(total),
                payout_address=provider.payout_address,
                withdrawal_count=len(leases),
                has_more=has_more,
                next_key=next_key,
                events=tuple(events),
            )

    def close_leases(self, sender: str, lease_uuids: Sequence[str], reason: str = "") -> CloseResult:
        """``MsgCloseLease``: settle and close 1..100 leases; all or nothing."""
        with self._lock:
            if not lease_uuids or len(lease_uuids) > MAX_BATCH_LEASE_SIZE:
                raise ChainError.billing(
                    INVALID_REQUEST, f"close 1..{MAX_BATCH_LEASE_SIZE} leases, got {len(lease_uuids)}"
                )
            if len(set(lease_uuids)) != len(lease_uuids):
                raise ChainError.billing(INVALID_REQUEST, "duplicate lease in close batch")
            if len(reason) > MAX_CLOSURE_REASON or any(ord(ch) < 32 for ch in reason):
                raise ChainError.billing(INVALID_CLOSURE_REASON, "invalid closure reason")
            leases = [self._get(u) for u in lease_uuids]
            for lease in leases:
                if lease.state != "ACTIVE":
                    raise ChainError.billing(
                        LEASE_NOT_ACTIVE, f"lease {lease.uuid} is not active ({lease.state})"
                    )
                provider = self._providers[lease.provider_uuid]
                if sender not in (provider.address, lease.tenant, self.authority):
                    raise ChainError.billing(UNAUTHORIZED, f"{sender} may not close lease {lease.uuid}")
            now = self.clock.now()
            total: dict[str, int] = {}
            events: list[ChainEvent] = []
            for lease in leases:
                paid, _ = self._settle(lease, now)
                for d, a in paid.items():
                    total[d] = total.get(d, 0) + a
                assert lease.acknowledged_at is not None
                self._close(lease, now, reason)
                events.append(
                    ChainEvent(
                        "lease_closed",
                        (
                            ("lease_uuid", lease.uuid),
                            ("tenant", lease.tenant),
                            ("provider_uuid", lease.provider_uuid),
                            ("settled_amounts", format_coins(coins(paid))),
                            ("closed_by", sender),
                            ("duration_seconds", str((now - lease.acknowledged_at) // _SECOND)),
                            ("closure_reason", reason),
                        ),
                    )
                )
            events.append(
                ChainEvent(
                    "batch_closed",
                    (
                        ("lease_count", str(len(leases))),
                        ("provider_uuid", leases[0].provider_uuid),
                        ("settled_amounts", format_coins(coins(total))),
                    ),
                )
            )
            self._emit(events, now)
            return CloseResult(now, len(leases), coins(total), tuple(events))

    def _authorize_provider(self, provider: _Provider, sender: str) -> None:
        if sender not in (provider.address, self.authority):
            raise ChainError.billing(UNAUTHORIZED, f"{sender} is not provider {provider.uuid}")

    def _get(self, lease_uuid: str) -> _Lease:
        lease = self._leases.get(lease_uuid)
        if lease is None:
            raise ChainError.billing(LEASE_NOT_FOUND, f"lease {lease_uuid} not found")
        return lease

    # -- queries ----------------------------------------------------------------
    def lease(self, lease_uuid: str) -> Lease:
        with self._lock:
            return self._get(lease_uuid).snapshot()

    def leases_by_provider(
        self, provider_uuid: str, state: str = "", key: bytes = b"", limit: int = 100
    ) -> tuple[tuple[Lease, ...], bytes]:
        """One page of the provider's leases in uuid order, and the next page's key."""
        with self._lock:
            provider = self._providers.get(provider_uuid)
            if provider is None:
                return (), b""
            if state == "ACTIVE":
                uuids = provider.active  # kept sorted
            else:
                uuids = sorted(
                    u
                    for u, lease in self._leases.items()
                    if lease.provider_uuid == provider_uuid and (not state or lease.state == state)
                )
            after = key.decode() if key else ""
            start = bisect.bisect_right(uuids, after) if after else 0
            page = uuids[start : start + limit]
            more = start + limit < len(uuids)
            return tuple(self._leases[u].snapshot() for u in page), (page[-1].encode() if more else b"")

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        with self._lock:
            provider = self._providers.get(provider_uuid)
            if provider is None:
                return ()
            return tuple(self._leases[u].snapshot() for u in provider.active)

    def credit_account(self, tenant: str) -> CreditAccount:
        with self._lock:
            if tenant not in self._balances:
                raise ChainError.billing(CREDIT_ACCOUNT_NOT_FOUND, f"no credit account for {tenant}")
            active = self._tenant_active.get(tenant, set())
            return CreditAccount(
                tenant=tenant,
                balances=coins(self._balances[tenant]),
                active_lease_count=len(active),
                pending_lease_count=len(self._tenant_pending.get(tenant, ())),
            )

    def credit_estimate(self, tenant: str) -> CreditEstimate:
        """The chain's estimate: unsettled accrual of every provider's leases included."""
        with self._lock:
            balance = self._balances.get(tenant)
            if balance is None:
                raise ChainError.billing(CREDIT_ACCOUNT_NOT_FOUND, f"no credit account for {tenant}")
            now = self.clock.now()
            rate: dict[str, int] = {}
            unsettled: dict[str, int] = {}
            active = self._tenant_active.get(tenant, ())
            for u in active:
                lease = self._leases[u]
                seconds = max(0, (now - lease.last_settled_at) // _SECOND)  # type: ignore[operator]
                for d, r in lease.rate.items():
                    rate[d] = rate.get(d, 0) + r
                    unsettled[d] = unsettled.get(d, 0) + r * seconds
            current = {d: max(0, a - unsettled.get(d, 0)) for d, a in balance.items()}
            for d in rate:
                current.setdefault(d, 0)
            durations = [current[d] // r for d, r in rate.items() if r > 0]
            return CreditEstimate(
                tenant=tenant,
                current_balance=coins(current),
                total_rate_per_second=coins(rate),
                estimated_duration_seconds=min(durations) if durations else 0,
                active_lease_count=len(active),
            )

    def provider_withdrawable(self, provider_uuid: str, limit: int = 0) -> tuple[tuple[Coin, ...], int]:
        """What a provider-wide withdraw would move now (each lease alone), and over how many leases."""
        with self._lock:
            provider = self._providers.get(provider_uuid)
            if provider is None:
                return (), 0
            now = self.clock.now()
            uuids = provider.active[: limit] if limit else provider.active
            total: dict[str, int] = {}
            for u in uuids:
                lease = self._leases[u]
                accrued, _ = self._accrued(lease, now)
                balance = self._balances.get(lease.tenant, {})
                for d, a in accrued.items():
                    total[d] = total.get(d, 0) + min(a, balance.get(d, 0))
            return coins(total), len(uuids)

    # -- inspection for tests, the demo and the ledger's end-to-end check --------
    def balance(self, tenant: str) -> dict[str, int]:
        with self._lock:
            return dict(self._balances.get(tenant, {}))

    def lease_totals(self, lease_uuid: str) -> tuple[dict[str, int], dict[str, int]]:
        """(accrued, paid) per denom over the lease's life, as settled so far."""
        with self._lock:
            lease = self._get(lease_uuid)
            return dict(lease.accrued_total), dict(lease.paid_total)

    def all_leases(self) -> tuple[Lease, ...]:
        with self._lock:
            return tuple(lease.snapshot() for lease in self._leases.values())

    def provider(self, provider_uuid: str) -> tuple[str, str]:
        """(address, payout address) of a registered provider."""
        with self._lock:
            p = self._providers[provider_uuid]
            return p.address, p.payout_address
