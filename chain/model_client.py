"""``ChainClient`` on the in-process ``BillingModel``: the embedded chain.

Calls go straight into the model as the provider's account would send them,
through the fault plan first, so tests can make any call fail, stall, lag or
answer stale.

A withdraw or close answers with the model's own tx: the client listens to
the model's events and keeps the ``TxEvents`` its call emitted (the model
emits synchronously, in the calling thread, under its lock; a thread-local
slot tells our tx from other threads'). So the tx hash it reports is the one
every other subscriber sees (the ledger's model feed deduplicates the
settlements it reads from the same events on (tx, lease, denom)), and the
per-lease settlements come from the events as on a node.

Every tx the model emits is also kept in a ``chain.tx_index.TxIndex`` (one
per model, as a node's indexer outlives its clients), which ``lease_end_tx``
searches as a node's ``GetTxsEvent`` is searched; ``tx_index`` set to
``null`` makes it answer as a node without an index.
"""

from __future__ import annotations

import threading
import weakref
from datetime import datetime
from typing import Any, Callable, Sequence

import msgspec

from chain.client import AccountListing, HolderListing, Listing
from chain.faults import Faults
from chain.listing import walk_pages, withdrawable_due
from chain.model import (
    CURRENT_WITHDRAWABLE_LIMIT,
    MAX_BATCH_LEASE_SIZE,
    V21_WITHDRAWABLE_LIMIT,
    BillingModel,
    PageRequest,
    TxEvents,
)
from chain.errors import INVALID_LEASE, NO_TX_INDEX, TX_INDEX, ChainError, QueryRefused
from chain.lease_end import ending_queries, lease_end_outcome
from chain.tx_index import TxIndex
from chain.ws_query import parse_query
from chain.sdk_errors import status_error
from chain.settlements import settlements_in_tx, settlements_in_withdraw
from messages.chain import CloseOutcome, CreditAccount, CreditEstimate, Lease, NodeStatus, WithdrawPage
from messages.coins import Coin

__all__ = ["ModelChainClient"]

#: Withdraw pages and close outcomes remembered by tx hash, of each kind, for
#: ``withdraw_outcome`` and ``close_outcome`` (a node keeps its txs for
#: longer; the sidecar looks one up within minutes).
KEPT_TXS = 10_000

#: Per model, the withdraw pages and the close outcomes it applied, by tx
#: hash: the chain remembers its txs, so a client made after a restart finds
#: what the one before sent.
_PAGES: "weakref.WeakKeyDictionary[BillingModel, dict[str, WithdrawPage]]" = weakref.WeakKeyDictionary()
_CLOSES: "weakref.WeakKeyDictionary[BillingModel, dict[str, CloseOutcome]]" = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()
#: Per model, every tx it emitted: its tx index (see the module doc).
_INDEXES: "weakref.WeakKeyDictionary[BillingModel, TxIndex]" = weakref.WeakKeyDictionary()


class ModelChainClient:
    def __init__(
        self,
        model: BillingModel,
        provider_uuid: str,
        sender: str,
        faults: Faults | None = None,
        withdraw_limit: int = 50,
        page_size: int = 1000,
    ) -> None:
        self.model = model
        self.provider_uuid = provider_uuid
        self.sender = sender
        self.faults = faults or Faults()
        self.withdraw_limit = withdraw_limit
        #: Leases per listing page (the chain's most); tests page smaller to exercise the walk.
        self.page_size = page_size
        #: answers frozen while a stale fault is on
        self._last: dict[tuple[str, Any], Any] = {}
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        #: withdraw pages and close outcomes the model applied, by tx hash (the latest KEPT_TXS of each)
        with _KEPT_LOCK:
            self._pages = _PAGES.setdefault(model, {})
            self._closes = _CLOSES.setdefault(model, {})
            self.tx_index = _INDEXES.get(model)
            if self.tx_index is None:
                self.tx_index = _INDEXES[model] = TxIndex()
                model.subscribe(self.tx_index.add)
        #: the node's indexer as ``[devnet] tx_index`` names it: kv, hash_only, null
        self.tx_index_mode = "kv"
        #: per thread: the txs the model emitted during this thread's write, or None
        self._emitted = threading.local()
        #: height -> the time of the first tx or block seen at it
        self._block_times: dict[int, Any] = {}
        model.subscribe(self._on_tx)

    def _on_tx(self, tx: TxEvents) -> None:
        # When each height was made, for ``block_time`` (the latest KEPT_TXS heights).
        with _KEPT_LOCK:
            self._block_times.setdefault(tx.height, tx.time)
            if len(self._block_times) > KEPT_TXS:
                del self._block_times[next(iter(self._block_times))]
        sink = getattr(self._emitted, "txs", None)
        if sink is not None:
            sink.append(tx)

    def _write(self, fn: Callable[[], Any]) -> tuple[Any, TxEvents | None]:
        """Run one model write; its answer and the tx it emitted (None when it emitted nothing)."""
        self._emitted.txs = []
        try:
            result = fn()
            txs = self._emitted.txs
        finally:
            self._emitted.txs = None
        return result, (txs[-1] if txs else None)

    def _call(self, operation: str, subject: Any, fn: Callable[[], Any]) -> Any:
        with self._lock:
            self.calls[operation] = self.calls.get(operation, 0) + 1
        stale = self.faults.before(operation, subject if isinstance(subject, str) else "")
        if not stale:
            self._last.clear()
            return self._answer(operation, subject, fn)
        # Stale: the first answer after staleness began, again and again.
        key = (operation, subject)
        if key not in self._last:
            self._last[key] = self._answer(operation, subject, fn)
        return self._last[key]

    @staticmethod
    def _answer(operation: str, subject: Any, fn: Callable[[], Any]) -> Any:
        """``fn()``; a query the chain refuses with a gRPC status fails as it does over gRPC."""
        try:
            return fn()
        except QueryRefused as exc:
            raise status_error(f"{operation} {subject}", exc.status, exc.message) from None

    def provider_withdrawable(self, provider_uuid: str) -> tuple[Coin, ...] | None:
        """As the chain's client reads it: () when nothing is due, None when unknowable (see ``CosmpyChainClient``)."""

        def page(key: bytes) -> tuple[tuple[Coin, ...], bool, bool, bytes]:
            amounts, _, has_more, next_key, _ = self.model.provider_withdrawable(
                provider_uuid, V21_WITHDRAWABLE_LIMIT[1], PageRequest(key=key, limit=CURRENT_WITHDRAWABLE_LIMIT[1])
            )
            return amounts, has_more, self.model.version.withdrawable_pagination, next_key

        return self._call("provider_withdrawable", provider_uuid,
                          lambda: withdrawable_due(f"provider_withdrawable {provider_uuid}", page))

    def withdraw_by_provider(
        self, provider_uuid: str, key: bytes, signed: Callable[[str], None] | None = None
    ) -> WithdrawPage:
        """As the chain's; the model knows a tx's hash only once it applied it, so ``signed`` hears it then."""
        return self._call(
            "withdraw_by_provider",
            (provider_uuid, key),
            lambda: self._withdraw(
                "withdraw_by_provider",
                provider_uuid,
                lambda: self.model.withdraw(self.sender, provider_uuid=provider_uuid, limit=self.withdraw_limit, key=key),
                signed,
            ),
        )

    def withdraw_leases(self, lease_uuids: Sequence[str], signed: Callable[[str], None] | None = None) -> WithdrawPage:
        """One named ``MsgWithdraw`` of 1..100 of our leases (see ``CosmpyChainClient.withdraw_leases``)."""
        return self._call(
            "withdraw_leases",
            tuple(lease_uuids),
            lambda: self._withdraw(
                "withdraw_leases",
                self.provider_uuid,
                lambda: self.model.withdraw(self.sender, lease_uuids=list(lease_uuids)),
                signed,
            ),
        )

    def _withdraw(
        self, operation: str, provider_uuid: str, send: Callable[[], Any], signed: Callable[[str], None] | None
    ) -> WithdrawPage:
        r, tx = self._write(send)
        # Every withdraw emits events (its SDK message event at least): its tx is known.
        if tx is None:
            raise ChainError(f"{operation}: the model applied it but emitted no tx", codespace="protocol",
                             transient=False, may_have_committed=True)
        tx_hash = tx.tx_hash
        settled = tuple(
            settlements_in_withdraw(tx.tx_hash, tx.time, tx.pairs(), r.total_amounts, provider_uuid=provider_uuid)
        )
        page = WithdrawPage(
            tx_hash=tx_hash,
            total_amounts=r.total_amounts,
            withdrawal_count=r.withdrawal_count,
            has_more=r.has_more,
            next_key=r.next_key,
            payout_address=r.payout_address,
            settlements=settled,
            failed_lease_uuids=r.failed_lease_uuids,
        )
        _keep(self._pages, tx_hash, page)
        if signed is not None:
            signed(tx_hash)
        self._maybe_lose_answer(operation, provider_uuid, tx_hash)
        return page

    def withdraw_outcome(self, tx_hash: str, provider_uuid: str) -> WithdrawPage | None:
        return self._call("withdraw_outcome", tx_hash, lambda: _kept(self._pages, tx_hash))

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        """Paged as over gRPC, so a listing cut short between pages is caught the same way."""
        op = "active_leases_by_provider"
        return self._call(
            op, provider_uuid, lambda: walk_pages(op, self._pager(self.model.leases_by_provider, provider_uuid))
        )

    def leases_by_provider(self, provider_uuid: str) -> Listing:
        """Paged as over gRPC; every page at the height the model held before it was read."""
        op = "leases_by_provider"
        return self._call(op, provider_uuid, lambda: self._heights(
            lambda page: walk_pages(op, self._pager(self.model.leases_by_provider, provider_uuid, page)),
            lambda leases, low, high: Listing(leases, low, high),
        ))

    def credit_accounts(self) -> AccountListing:
        op = "credit_accounts"

        def fetch(page: Callable[[int], None]) -> tuple[Any, ...]:
            def one(key: bytes) -> tuple[Sequence[CreditAccount], bytes]:
                page(self.model.height)
                accounts, next_key, _ = self.model.credit_accounts(PageRequest(key=key, limit=self.page_size))
                unreadable = self.faults.always_failing("credit_account")
                return [a for a in accounts if a.tenant not in unreadable], next_key

            return walk_pages(op, one)

        return self._call(op, "", lambda: self._heights(fetch, lambda accounts, low, high: AccountListing(accounts, low, high)))

    def denom_owners(self, denom: str) -> HolderListing:
        op = "denom_owners"

        def fetch(page: Callable[[int], None]) -> tuple[Any, ...]:
            def one(key: bytes) -> tuple[Sequence[tuple[str, int]], bytes]:
                page(self.model.height)
                owners, next_key, _ = self.model.denom_owners(denom, PageRequest(key=key, limit=self.page_size))
                return owners, next_key

            return walk_pages(op, one)

        return self._call(op, denom, lambda: self._heights(fetch, lambda owners, low, high: HolderListing(denom, owners, low, high)))

    def account_kind(self, address: str) -> str:
        """A funded credit address's kind (the model holds no other accounts: "" for any other address)."""
        def kind() -> str:
            found = self.model.credit_address_kind(address)
            return found[0] if found is not None else ""

        return self._call("account_kind", address, kind)

    @staticmethod
    def _heights(fetch: Callable[[Callable[[int], None]], tuple[Any, ...]], build: Callable[[tuple[Any, ...], int, int], Any]) -> Any:
        """``build(items, lowest, highest)`` of a walk whose every page tells ``fetch``'s callback the height it read at."""
        heights: list[int] = []
        items = fetch(heights.append)
        return build(items, min(heights, default=0), max(heights, default=0))

    def leases_by_tenant(self, tenant: str) -> Listing:
        op = "leases_by_tenant"

        def read() -> Listing:
            height = self.model.height  # before the read: the state read is at least this recent
            return Listing(walk_pages(op, self._pager(self.model.leases_by_tenant, tenant)), height)

        return self._call(op, tenant, read)

    def _pager(
        self, query: Callable[..., Any], subject: str, heights: Callable[[int], None] | None = None
    ) -> Callable[[bytes], tuple[list[Lease], bytes]]:
        def page(key: bytes) -> tuple[list[Lease], bytes]:
            if heights is not None:
                heights(self.model.height)  # before the page: the state read is at least this recent
            records, next_key, _ = query(subject, "ACTIVE", PageRequest(key=key, limit=self.page_size))
            return [r.lease for r in records], next_key

        return page

    def lease(self, lease_uuid: str) -> Lease:
        return self._call("lease", lease_uuid, lambda: self.model.lease(lease_uuid))

    def credit_account(self, tenant: str) -> CreditAccount:
        def read() -> CreditAccount:
            height = self.model.height  # before the read, as for a listing
            return msgspec.structs.replace(self.model.credit_account(tenant)[0], height=height)

        return self._call("credit_account", tenant, read)

    def credit_estimate(self, tenant: str) -> CreditEstimate:
        return self._call("credit_estimate", tenant, lambda: self.model.credit_estimate(tenant))

    def close_leases(
        self, lease_uuids: Sequence[str], reason: str, signed: Callable[[str], None] | None = None
    ) -> CloseOutcome:
        """As the chain's; ``signed`` hears the tx's hash once the model applied it (it knows none before)."""
        if len(lease_uuids) > MAX_BATCH_LEASE_SIZE:
            raise ChainError.billing(INVALID_LEASE, f"at most {MAX_BATCH_LEASE_SIZE} leases per close")

        def send() -> CloseOutcome:
            r, tx = self._write(lambda: self.model.close_leases(self.sender, list(lease_uuids), reason))
            if tx is None:  # a close that succeeded emits its lease_closed events
                raise ChainError("close_leases: the model applied it but emitted no tx", codespace="protocol",
                                 transient=False, may_have_committed=True)
            settled = settlements_in_tx(tx.tx_hash, tx.time, tx.pairs(), lease_uuids=set(lease_uuids))
            outcome = CloseOutcome(closed_count=r.closed_count, tx_hashes=(tx.tx_hash,), settlements=tuple(settled))
            _keep(self._closes, tx.tx_hash, outcome)
            if signed is not None:
                signed(tx.tx_hash)
            self._maybe_lose_answer("close_leases", f"({len(lease_uuids)} leases)", tx.tx_hash)
            return outcome

        return self._call("close_leases", tuple(lease_uuids), send)

    def close_outcome(self, tx_hash: str, lease_uuids: Sequence[str]) -> CloseOutcome | None:
        return self._call("close_outcome", tx_hash, lambda: _kept(self._closes, tx_hash))

    def lease_end_tx(self, lease_uuid: str, provider_uuid: str, tx_hash: str = "") -> CloseOutcome | None:
        """The tx that ended ``lease_uuid``, searched in the model's tx index (see ``CosmpyChainClient.lease_end_tx``)."""

        def find() -> CloseOutcome | None:
            queries = ending_queries(lease_uuid)
            if self.tx_index_mode == "null":
                raise ChainError(
                    f"lease_end_tx {lease_uuid}: the node keeps no tx index (transaction indexing is disabled)",
                    codespace=TX_INDEX, code=NO_TX_INDEX, transient=False,
                )
            self.tx_index.events = self.tx_index_mode == "kv"
            candidates = [self.tx_index.get(tx_hash)] if tx_hash else []
            for query in queries:
                candidates += self.tx_index.search(parse_query(query))[0]
            for tx in candidates:
                if tx is None:
                    continue
                page = self._pages.get(tx.tx_hash)
                total = page.total_amounts if page is not None else None
                outcome = lease_end_outcome(tx.tx_hash, tx.time, tx.pairs(), lease_uuid, provider_uuid, total)
                if outcome is not None:
                    return outcome
            return None

        return self._call("lease_end_tx", lease_uuid, find)

    def _maybe_lose_answer(self, operation: str, subject: str, tx_hash: str) -> None:
        """An applied tx whose answer the faults say is lost: as a node's client, "may have committed"."""
        if self.faults.answer_lost(operation):
            raise ChainError.transport(
                f"{operation} {subject}: tx {tx_hash} was broadcast but not included in time "
                "(injected: the answer was lost)",
                may_have_committed=True,
                tx_hash=tx_hash,
            )

    def node_status(self) -> NodeStatus:
        def status() -> NodeStatus:
            return NodeStatus(
                latest_block_height=self.model.height,
                latest_block_time=self.model.clock.now(),
                catching_up=self.faults.catching_up,
            )

        return self._call("node_status", "", status)

    def keeps_tx_index(self) -> bool:
        """The node's indexer as ``[devnet] tx_index`` names it: any but ``null`` keeps txs by hash."""
        return self._call("keeps_tx_index", "", lambda: self.tx_index_mode != "null")

    def block_time(self, height: int) -> datetime:
        """As ``node_status`` has it, the latest height is now; an earlier one is when its first tx was seen."""

        def when() -> datetime:
            if height >= self.model.height:
                return self.model.clock.now()
            with _KEPT_LOCK:
                at = self._block_times.get(height)
            if at is None:
                raise ChainError(f"block_time {height}: no block of that height is known", codespace="grpc", code=5)
            return at

        return self._call("block_time", str(height), when)

    def close(self) -> None:
        self.faults.close()


def _keep(kept: dict[str, Any], tx_hash: str, outcome: Any) -> None:
    """Remember what a tx applied, by its hash (the latest ``KEPT_TXS``)."""
    with _KEPT_LOCK:
        kept[tx_hash] = outcome
        if len(kept) > KEPT_TXS:
            del kept[next(iter(kept))]


def _kept(kept: dict[str, Any], tx_hash: str) -> Any:
    with _KEPT_LOCK:
        return kept.get(tx_hash)
