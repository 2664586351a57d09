"""``chain-io``: performs chain calls and answers each with a typed message.

Nothing is decided here. Each ``*Call`` message maps to one ``ChainClient``
call; the answer (or the failure, as ``ChainFailure`` data) goes back as a
message, captured like any other, sent as ``chain-io`` and caused by the
call, so replay needs no chain.

Reads run on a pool bounded by ``max_queries_in_flight`` (the seed checks
tenants one at a time; at 2,000 tenants and a few ms per query that is the
difference between seconds and a minute). Transactions run on one thread:
one signer, one account sequence, one writer.

A check cycle's credit reads (``CreditReadsCall``) are read in bulk where
that costs fewer calls than one read per tenant: the listings of the other
providers our tenants share, every credit account and each denom's holders,
composed per tenant as ``actors.credit_bulk`` says they may be; a tenant they
do not hold whole is read on its own, as is every tenant when the listings
fail or were answered out of order.

Every call is answered, whatever happens (supervision, ``runtime.supervision``):

- a client that answers nothing and raises nothing, or answers something
  that is not what the call answers (``chain.answers``), has failed: the
  answer is a ``ChainFailure`` naming the call and what was wrong, like any
  other failed call;
- an error in answering (a bug here, or in a client past its own error
  handling) is reported to the supervisor with the call and its capture
  sequence number, and the caller still gets a failure (``_FAILED``), so no
  cycle waits for an answer that will never come. A write that signed a tx
  before it went wrong says the tx may have been applied, with its hash, so
  it is looked up rather than sent again.

Tests and replay use ``InlineExecutor``: the call runs at once in the
handling thread, so a run on the manual dispatcher is deterministic.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Any, Callable, Protocol

import msgspec

from actors.credit_bulk import compose, in_order, isolated, page_estimate, relevant_denoms
from actors.write_ahead import WriteAhead
from chain.answers import MalformedAnswer, check_answer
from chain.client import ChainClient, HolderListing, Listing
from chain.errors import ChainError, failure_from
from messages.chain import ChainFailure, CreditAccount, Lease
from messages.chain_actor import (
    ActiveLeasesCall,
    CloseBatchAnswered,
    CloseBatchCall,
    CloseSearchAnswered,
    CloseSearchCall,
    CloseTxAnswered,
    CloseTxCall,
    CloseTxSigned,
    CreditCall,
    CreditReadsCall,
    LeaseCall,
    LeaseCheckAnswered,
    LeaseCheckCall,
    NodeStatusAnswered,
    NodeStatusCall,
    WithdrawableAnswered,
    WithdrawableCall,
    WithdrawLeasesCall,
    WithdrawPageAnswered,
    WithdrawPageCall,
    WithdrawTxAnswered,
    WithdrawTxCall,
    WithdrawTxSigned,
)
from messages.credit import CreditRead, CreditReadFailed
from messages.scheduler import ActiveLeasesRead, LeaseRead
from runtime.dispatch import Dispatcher, PooledActor, current_sender, sending_as
from runtime.router import CHAIN, CHAIN_IO, SCHEDULER, Router, tenant_address

__all__ = ["ChainIO", "InlineExecutor", "Executor", "pool"]

logger = logging.getLogger(__name__)


class Executor(Protocol):
    def submit(self, fn: Callable[[], None]) -> Any: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...


class InlineExecutor:
    """Runs each call at once, in the caller's thread."""

    def submit(self, fn: Callable[[], None]) -> None:
        fn()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def pool(workers: int, name: str) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)


class ChainIO(PooledActor):
    def __init__(
        self,
        dispatcher: Dispatcher,
        router: Router,
        client: ChainClient,
        provider_uuid: str,
        reads: Executor,
        writes: Executor,
        write_ahead: WriteAhead | None = None,
    ) -> None:
        super().__init__(dispatcher, CHAIN_IO)
        self.router = router
        self.client = client
        self.provider_uuid = provider_uuid
        self.reads = reads
        self.writes = writes
        #: where a tx's hash is made durable before its broadcast (None: the chain actor's fact only)
        self.write_ahead = write_ahead
        self._in_flight = 0
        self._idle = threading.Condition()
        #: The delivery that asked for the call running on this thread (what its answers are caused by).
        self._calling = threading.local()
        #: The provider's ACTIVE leases by tenant, as its last listing (``LeasesByProvider``)
        #: returned them: a tenant's credit read asks for the tenant's own leases only where
        #: its account counts others (``_credit``). Replaced whole by each listing.
        self._listed: dict[str, tuple[Lease, ...]] = {}
        #: the denoms the items of those leases are priced in (what a bulk read of them all lists the holders of)
        self._listed_denoms: tuple[dict[str, tuple[Lease, ...]], set[str]] = ({}, set())
        #: (lowest, highest) height of that listing's pages; None: no listing with heights yet
        self._listed_at: tuple[int, int] | None = None
        #: What the bulk reads learn and plan on, shared by the read threads (``_state``):
        #: other provider -> our tenants seen with a lease of it (its listing is read when it pays);
        self._sharing: dict[str, set[str]] = {}
        #: a part of a bulk read ("accounts", "denom:D", "provider:P") -> the rows it last listed;
        self._rows: dict[str, int] = {}
        #: credit address -> its account kind, once ``account_kind`` said (a kind never changes back);
        self._kinds: dict[str, str] = {}
        #: tenant -> the denoms its last own read showed (a bulk read shows the same ones).
        self._shown: dict[str, frozenset[str]] = {}
        self._state = threading.Lock()
        self._handlers: dict[type, tuple[Executor, Callable[[Any], tuple[str, Any]]]] = {
            CreditCall: (reads, self._credit),
            ActiveLeasesCall: (reads, self._active_leases),
            LeaseCall: (reads, self._lease),
            NodeStatusCall: (reads, self._node_status),
            LeaseCheckCall: (reads, self._lease_check),
            WithdrawPageCall: (writes, self._withdraw_page),
            WithdrawLeasesCall: (writes, self._withdraw_leases),
            WithdrawableCall: (reads, self._withdrawable),
            WithdrawTxCall: (reads, self._withdraw_tx),
            CloseBatchCall: (writes, self._close_batch),
            CloseTxCall: (reads, self._close_tx),
            CloseSearchCall: (reads, self._close_search),
        }

    def on_receive(self, message: Any) -> None:
        if isinstance(message, CreditReadsCall):
            providers = self._bulk_plan(message.tenants)
            if providers is None:
                # One read per tenant, each its own call on the bounded pool.
                for tenant in message.tenants:
                    self._submit(self.reads, self._credit, CreditCall(message.cycle, tenant))
            else:
                self._submit_task(lambda cause: self._bulk(message, providers, cause))
            return
        try:
            executor, handler = self._handlers[type(message)]
        except KeyError:
            raise TypeError(f"chain-io cannot handle {type(message).__name__}") from None
        self._submit(executor, handler, message)

    def _submit(
        self, executor: Executor, handler: Callable[[Any], tuple[str, Any]], message: Any, cause: int | None = None
    ) -> None:
        if cause is None:
            _, cause = current_sender()
        with self._idle:
            self._in_flight += 1
        try:
            executor.submit(lambda: self._run(handler, message, cause))
        except RuntimeError:  # executor shut down: we are stopping
            self._done()

    def _run(self, handler: Callable[[Any], tuple[str, Any]], message: Any, cause: int) -> None:
        self._calling.cause = cause
        self._calling.signed = []
        try:
            try:
                address, answer = handler(message)
            except Exception as exc:
                # Counted and logged with the call's capture sequence, like a
                # handler's failure; the caller is still answered (the module doc).
                self.dispatcher.supervisor.failed(self.address, message, cause, exc, what="could not answer")
                address, answer = _FAILED[type(message)](message, self._bug(message, exc))
            with sending_as(CHAIN_IO, cause):
                self.router.tell(address, answer)
        except Exception as exc:  # not even a failure could be sent (a router that is gone): counted, logged
            self.dispatcher.supervisor.failed(self.address, message, cause, exc, what="could not send the answer to")
        finally:
            self._done()

    def _submit_task(self, task: Callable[[int], None]) -> None:
        """Run ``task(cause)`` on the read pool, counted in flight like a call; it answers on its own."""
        _, cause = current_sender()
        with self._idle:
            self._in_flight += 1

        def run() -> None:
            try:
                task(cause)
            finally:
                self._done()

        try:
            self.reads.submit(run)
        except RuntimeError:  # executor shut down: we are stopping
            self._done()

    def _bug(self, message: Any, exc: Exception) -> ChainFailure:
        """The failure a caller gets when answering its call went wrong here."""
        text = f"chain-io could not answer {type(message).__name__}: {type(exc).__name__}: {exc}"
        hashes = self._calling.signed
        if hashes:
            # It may have got as far as the chain (a withdraw or a close tells
            # each hash before it broadcasts): never sent again.
            return ChainFailure(
                type(message).__name__, text, transient=True, may_have_committed=True, tx_hash=hashes[-1] if hashes else ""
            )
        return ChainFailure(type(message).__name__, text, transient=True)

    def _done(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight (used by stop)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)

    def on_stop(self) -> None:
        self.reads.shutdown(wait=False, cancel_futures=True)
        self.writes.shutdown(wait=False, cancel_futures=True)
        if self.router.get(self.address) is self.actor_ref:
            self.router.remove(self.address)

    # -- one method per call ------------------------------------------------------
    def _credit(self, m: CreditCall) -> tuple[str, Any]:
        """A tenant's credit read: its account and its ACTIVE leases of every provider, or a failure.

        A read missing either part is failed: judging the credit on the
        account alone would miss every lease's unsettled accrual and
        reservation, and a partial read must never clear a grace window.

        The leases cost a second call (``LeasesByTenant``) only where they
        must: when the account counts as many ACTIVE leases as the
        provider's last listing holds for the tenant, they are all ours and
        the listing's are sent (``leases_listed``; the tenant's monitor asks
        again with ``full`` where it cannot act on them). At 10,000 tenants
        that is 10,000 calls a check, not 20,000.
        """
        to = tenant_address(m.tenant)
        account, error = _attempt("credit_account", lambda: self.client.credit_account(m.tenant))
        if error is not None:
            return to, CreditReadFailed(m.cycle, error)
        listed = None if m.full else self._listed.get(m.tenant)
        if listed is not None and account.active_lease_count == len(listed):
            # The listing's height is older than the account's: the account's stands for
            # the read. Its leases decide credit to spare only, which closes nothing;
            # anything else is read again in full, at both parts' heights.
            self._learn(m.tenant, account, listed)
            return to, CreditRead(m.cycle, account, leases=listed, leases_listed=True, height=account.height)
        listing, error = _attempt("leases_by_tenant", lambda: self.client.leases_by_tenant(m.tenant))
        if error is not None:
            return to, CreditReadFailed(m.cycle, error)
        if account.height and listing.height and listing.height < account.height:
            # The leases were answered below the account (a node further behind, behind a load
            # balancer): a settlement between the two heights counts twice, the balance after
            # it and the lease's accrual before it, and the tenant seems to have less credit
            # than it has. Read after the account, as asked, they can only err the other way.
            return to, CreditReadFailed(m.cycle, ChainFailure(
                "leases_by_tenant",
                f"the tenant's leases were answered from height {listing.height}, below its credit account's "
                f"{account.height} (a node further behind): the two parts do not make one read",
                transient=True,
            ))
        self._learn(m.tenant, account, listing.leases)
        # The read is as old as its older part (the account); a part of unknown height makes it unknown.
        height = min(account.height, listing.height) if account.height and listing.height else 0
        return to, CreditRead(m.cycle, account, leases=listing.leases, height=height)

    def _learn(self, tenant: str, account: CreditAccount, leases: tuple[Lease, ...]) -> None:
        """What a tenant's own read tells the bulk reads: the providers it shares, the denoms it shows,
        and (once, on the current chain) what kind of account its credit address is."""
        with self._state:
            for lease in leases:
                if lease.provider_uuid != self.provider_uuid:
                    self._sharing.setdefault(lease.provider_uuid, set()).add(tenant)
            self._shown[tenant] = frozenset(c.denom for c in account.balances)
            known = account.credit_address in self._kinds
        if not known and account.credit_address and isolated(leases):
            kind, error = _attempt("account_kind", lambda: self.client.account_kind(account.credit_address))
            if error is None and kind:  # no account there yet: asked again at the next read
                with self._state:
                    self._kinds[account.credit_address] = kind

    # -- bulk credit reads (actors.credit_bulk) --------------------------------------
    def _bulk_plan(self, tenants: tuple[str, ...]) -> list[str] | None:
        """The other providers to list when reading ``tenants`` in bulk costs fewer calls than one read
        each (the parts' sizes as last listed; a part never listed counted as one row per tenant),
        or None to read each on its own."""
        if self._listed_at is None or not tenants:
            return None
        wanted = set(tenants)
        lease_page = getattr(self.client, "page_size", 100) or 100
        with self._state:
            rows = self._rows
            providers = []
            cost = 2 * page_estimate(rows.get("accounts", len(tenants)))  # read before and after the balances
            for provider, sharing in self._sharing.items():
                pages = page_estimate(rows.get(f"provider:{provider}", len(sharing)), lease_page)
                if pages <= len(sharing & wanted):  # each tenant it holds saves a call at least
                    providers.append(provider)
                    cost += pages
            listed = self._listed
            of, denoms = self._listed_denoms
            if of is not listed or not wanted.issuperset(listed):  # not every tenant listed is read
                denoms = {item.locked_price.denom for t in tenants for lease in listed.get(t, ()) for item in lease.items}
            cost += sum(page_estimate(rows.get(f"denom:{d}", len(tenants))) for d in denoms)
        return sorted(providers) if cost < len(tenants) else None

    def _bulk(self, m: CreditReadsCall, providers: list[str], cause: int) -> None:
        """Read ``m``'s tenants in bulk; answer each composed read, and read every other tenant on its own."""
        try:
            reads, alone = self._bulk_reads(m, providers)
        except Exception as exc:  # a bug here: every tenant is still read, on its own
            self.dispatcher.supervisor.failed(self.address, m, cause, exc, what="could not read in bulk")
            reads, alone = {}, list(m.tenants)
        tell = self.router.tell
        with sending_as(CHAIN_IO, cause):  # one context for the lot: 10,000 answers a check
            for tenant, read in reads.items():
                try:
                    tell(tenant_address(tenant), read)
                except Exception as exc:
                    self.dispatcher.supervisor.failed(self.address, m, cause, exc, what="could not send the answer to")
        for tenant in alone:
            self._submit(self.reads, self._credit, CreditCall(m.cycle, tenant), cause)

    def _bulk_reads(self, m: CreditReadsCall, providers: list[str]) -> tuple[dict[str, CreditRead], list[str]]:
        """(composed reads by tenant, the tenants to read on their own). In the order ``actors.credit_bulk``
        needs: the lease listings (ours was read at the cycle's start), then the accounts, then balances."""
        tenants = list(m.tenants)
        wanted = set(tenants)
        ours, ours_at = self._listed, self._listed_at
        if ours_at is None:
            return {}, tenants
        listings: list[Listing] = [Listing((), *ours_at)]
        theirs: dict[str, list[Lease]] = {}
        for provider in providers:
            listing, error = _attempt("leases_by_provider", lambda: self.client.leases_by_provider(provider))
            if error is not None:
                logger.info("bulk credit read: %s; its tenants are read on their own", error.message)
                continue  # its tenants' counts will not match: read on their own
            listings.append(listing)
            sharing = {lease.tenant for lease in listing.leases if lease.tenant in wanted}
            for lease in listing.leases:
                if lease.tenant in wanted:
                    theirs.setdefault(lease.tenant, []).append(lease)
            with self._state:
                self._rows[f"provider:{provider}"] = len(listing.leases)
                if sharing:
                    self._sharing[provider] = sharing
                else:
                    self._sharing.pop(provider, None)
        accounts, error = _attempt("credit_accounts", self.client.credit_accounts)
        if error is not None:
            logger.info("bulk credit read: %s; every tenant is read on its own", error.message)
            return {}, tenants
        with self._state:
            self._rows["accounts"] = len(accounts.accounts)
            kinds, shown = dict(self._kinds), dict(self._shown)
        by_tenant = {a.tenant: a for a in accounts.accounts}  # looked up for ``tenants`` only
        # tenant -> (account, leases, the denoms its own read would show: None unless it counts them all)
        parts: dict[str, tuple[CreditAccount | None, tuple[Lease, ...], set[str] | None]] = {}
        denoms: set[str] = set()
        for tenant in tenants:
            account = by_tenant.get(tenant)
            leases = ours.get(tenant, ())
            other = theirs.get(tenant)
            if other:
                leases += tuple(other)
            relevant = None
            if account is not None and account.active_lease_count == len(leases):
                relevant = relevant_denoms(account, leases, shown.get(tenant, ()))
                denoms |= relevant
            parts[tenant] = (account, leases, relevant)
        holders: list[HolderListing] = []
        for denom in sorted(denoms):
            owners, error = _attempt("denom_owners", lambda: self.client.denom_owners(denom))
            if error is not None:
                logger.info("bulk credit read: %s; its holders are read on their own", error.message)
                continue
            holders.append(owners)
            with self._state:
                self._rows[f"denom:{denom}"] = len(owners.balances)
        # R and the counts again, after the balances: a lease created (its tranche reserved) or
        # settled between the accounts and the balances moves them; such a tenant is read alone.
        again, error = _attempt("credit_accounts", self.client.credit_accounts)
        if error is not None:
            logger.info("bulk credit read: %s; every tenant is read on its own", error.message)
            return {}, tenants
        later = {a.tenant: a for a in again.accounts}
        why = in_order(listings, accounts, holders)
        if why is None and holders and again.height < max(p.top_height for p in holders):
            why = "the accounts were read again below the balances' height (a node further behind)"
        if why is not None:
            logger.info("bulk credit read: %s; every tenant is read on its own", why)
            return {}, tenants
        height = min(p.height for p in (*listings, accounts, *holders))
        balances = {h.denom: dict(h.balances) for h in holders}
        reads: dict[str, CreditRead] = {}
        alone: list[str] = []
        cycle = m.cycle
        for tenant, (account, leases, relevant) in parts.items():
            kind = kinds.get(account.credit_address) if account is not None else None
            if account is not None and _moved(account, later.get(tenant)):
                alone.append(tenant)
                continue
            got = compose(account, leases, balances, kind, shown.get(tenant, ()), denoms=relevant, height=height)
            if type(got) is str:
                alone.append(tenant)
            else:
                reads[tenant] = CreditRead(cycle, got, leases=leases, leases_listed=True, height=height)
        return reads, alone

    def _active_leases(self, m: ActiveLeasesCall) -> tuple[str, Any]:
        listing, error = _attempt("leases_by_provider", lambda: self.client.leases_by_provider(self.provider_uuid))
        leases = listing.leases if listing is not None else ()
        if error is None:
            by_tenant: dict[str, list[Lease]] = {}
            for lease in leases:
                if lease.state == "ACTIVE":
                    tenant = lease.tenant
                    if tenant in by_tenant:
                        by_tenant[tenant].append(lease)
                    else:
                        by_tenant[tenant] = [lease]
            listed = {t: tuple(ls) for t, ls in by_tenant.items()}
            # Made with the listing and kept beside it: the read pool replaces them while chain-io plans.
            self._listed_denoms = (listed, {item.locked_price.denom for ls in listed.values() for lease in ls for item in lease.items})
            self._listed = listed
            # Its heights order it before the bulk reads' other parts (actors.credit_bulk).
            self._listed_at = (listing.height, listing.top_height) if listing.height else None
        return m.reply_to, ActiveLeasesRead(m.cycle, leases, error)

    def _lease(self, m: LeaseCall) -> tuple[str, Any]:
        lease, error = _attempt("lease", lambda: self.client.lease(m.lease_uuid))
        return SCHEDULER, LeaseRead(m.lease_uuid, lease, error)

    def _node_status(self, m: NodeStatusCall) -> tuple[str, Any]:
        status, error = _attempt("node_status", self.client.node_status)
        times = []
        if status is not None:
            for height in sorted(set(m.heights)):
                at, _ = _attempt("block_time", lambda: self.client.block_time(height))
                if at is not None:  # a block the node cannot tell of stays unknown: the core judges that
                    times.append((height, at))
        kept = unsaid = None
        if m.tx_index and status is not None:  # (a lambda: a client without the method fails inside _attempt)
            kept, unsaid = _attempt("keeps_tx_index", lambda: self.client.keeps_tx_index())
        return m.reply_to, NodeStatusAnswered(
            m.round, status, error, block_times=tuple(times), tx_index=kept, tx_index_error=unsaid
        )

    def _lease_check(self, m: LeaseCheckCall) -> tuple[str, Any]:
        leases, error = _attempt("active_leases_by_provider", lambda: self.client.active_leases_by_provider(self.provider_uuid))
        active = {lease.uuid for lease in leases or ()}
        return CHAIN, LeaseCheckAnswered(m.round, m.batch, tuple(u for u in m.lease_uuids if u in active), error)

    def _signed(self, told: Callable[[str], Any], ahead: Callable[[str], None] | None = None) -> Callable[[str], None]:
        """The client's ``signed``: each hash is written ahead (``ahead``, raising ``ChainError`` when
        the books cannot take it: the tx is not sent), kept for ``_write`` and told to the chain
        actor as ``told(hash)``."""
        cause = self._calling.cause
        hashes: list[str] = self._calling.signed

        def signed(tx_hash: str) -> None:
            if ahead is not None:
                ahead(tx_hash)  # durable before the client broadcasts (actors.write_ahead)
            hashes.append(tx_hash)
            # Before the broadcast: the chain actor has the books write the tx ahead.
            with sending_as(CHAIN_IO, cause):
                self.router.tell(CHAIN, told(tx_hash))

        return signed

    def _write(self, operation: str, call: Callable[[], Any], signs: bool) -> tuple[Any, ChainFailure | None]:
        """``_attempt`` for a call that sends a tx: one that went wrong unexplained may have reached the chain.

        No answer, one that cannot be read, or an error of the client's own
        code rather than a ``ChainError``: nothing says the tx did not go out.
        With the hash it was signed under it is looked up, never sent again.
        ``signs``: the client tells each hash before it broadcasts (withdraws
        and closes do), so a call that told none sent nothing.
        """
        try:
            answer = call()
            check_answer(operation, answer)
            return answer, None
        except Exception as exc:
            error = failure_from(exc, operation)
            if error.may_have_committed or not (isinstance(exc, MalformedAnswer) or not isinstance(exc, ChainError)):
                return None, error
        hashes = self._calling.signed
        if signs and not hashes:
            return None, error
        return None, msgspec.structs.replace(
            error, may_have_committed=True, tx_hash=hashes[-1] if hashes else "", transient=True
        )

    def _withdraw_ahead(self, cycle: int, page: int) -> Callable[[str], None] | None:
        wa = self.write_ahead
        return None if wa is None else lambda tx_hash: wa.withdraw(tx_hash, cycle, page)

    def _withdraw_page(self, m: WithdrawPageCall) -> tuple[str, Any]:
        signed = self._signed(
            lambda tx_hash: WithdrawTxSigned(m.cycle, m.page, m.attempt, tx_hash), self._withdraw_ahead(m.cycle, m.page)
        )
        page, error = self._write(
            "withdraw", lambda: self.client.withdraw_by_provider(self.provider_uuid, m.key, signed=signed), signs=True
        )
        return CHAIN, WithdrawPageAnswered(m.cycle, m.page, m.attempt, page, error)

    def _withdraw_leases(self, m: WithdrawLeasesCall) -> tuple[str, Any]:
        signed = self._signed(
            lambda tx_hash: WithdrawTxSigned(m.cycle, m.page, m.attempt, tx_hash), self._withdraw_ahead(m.cycle, m.page)
        )
        page, error = self._write(
            "withdraw_leases", lambda: self.client.withdraw_leases(m.lease_uuids, signed=signed), signs=True
        )
        return CHAIN, WithdrawPageAnswered(m.cycle, m.page, m.attempt, page, error)

    def _withdrawable(self, m: WithdrawableCall) -> tuple[str, Any]:
        due, error = _attempt("provider_withdrawable", lambda: self.client.provider_withdrawable(self.provider_uuid))
        return CHAIN, WithdrawableAnswered(m.cycle, due, error)

    def _withdraw_tx(self, m: WithdrawTxCall) -> tuple[str, Any]:
        page, error = _attempt("withdraw_outcome", lambda: self.client.withdraw_outcome(m.tx_hash, self.provider_uuid))
        return CHAIN, WithdrawTxAnswered(m.cycle, m.page, m.tx_hash, m.attempt, page, error)

    def _close_tx(self, m: CloseTxCall) -> tuple[str, Any]:
        outcome, error = _attempt("close_outcome", lambda: self.client.close_outcome(m.tx_hash, m.lease_uuids))
        return CHAIN, CloseTxAnswered(m.tx_hash, m.lease_uuids, m.attempt, outcome, error)

    def _close_search(self, m: CloseSearchCall) -> tuple[str, Any]:
        outcome, error = _attempt(
            "lease_end_tx", lambda: self.client.lease_end_tx(m.lease_uuid, self.provider_uuid, m.tx_hash)
        )
        return SCHEDULER, CloseSearchAnswered(m.lease_uuid, m.tenant, m.closed_at, m.attempt, outcome, error)

    def _close_batch(self, m: CloseBatchCall) -> tuple[str, Any]:
        wa = self.write_ahead
        signed = self._signed(
            lambda tx_hash: CloseTxSigned(m.round, m.batch, tx_hash),
            None if wa is None else lambda tx_hash: wa.close(tx_hash, m.reason, m.lease_uuids),
        )
        outcome, error = self._write(
            "close_leases", lambda: self.client.close_leases(m.lease_uuids, m.reason, signed=signed), signs=True
        )
        return CHAIN, CloseBatchAnswered(m.round, m.batch, m.lease_uuids, outcome, error)


def _moved(before: CreditAccount, after: CreditAccount | None) -> bool:
    """Whether an account's reservations or lease counts changed between two listings of it."""
    return after is None or (
        before.reserved_amounts, before.unattributed_reserved_amounts, before.active_lease_count,
        before.pending_lease_count, before.unattributed_lease_count,
    ) != (
        after.reserved_amounts, after.unattributed_reserved_amounts, after.active_lease_count,
        after.pending_lease_count, after.unattributed_lease_count,
    )


def _attempt(operation: str, call: Callable[[], Any]) -> tuple[Any, ChainFailure | None]:
    """(answer, None) or (None, the failure as data): a failed call is an answer too.

    So is an answer that is none, or not what ``operation`` answers
    (``chain.answers.check_answer``): the failure says what was wrong.
    """
    try:
        answer = call()
        check_answer(operation, answer)
        return answer, None
    except Exception as exc:
        return None, failure_from(exc, operation)


#: Per call: the answer its caller gets when answering it went wrong (``ChainIO._run``).
_FAILED: dict[type, Callable[[Any, ChainFailure], tuple[str, Any]]] = {
    CreditCall: lambda m, f: (tenant_address(m.tenant), CreditReadFailed(m.cycle, f)),
    ActiveLeasesCall: lambda m, f: (m.reply_to, ActiveLeasesRead(m.cycle, (), f)),
    LeaseCall: lambda m, f: (SCHEDULER, LeaseRead(m.lease_uuid, None, f)),
    NodeStatusCall: lambda m, f: (m.reply_to, NodeStatusAnswered(m.round, None, f)),
    LeaseCheckCall: lambda m, f: (CHAIN, LeaseCheckAnswered(m.round, m.batch, (), f)),
    WithdrawPageCall: lambda m, f: (CHAIN, WithdrawPageAnswered(m.cycle, m.page, m.attempt, None, f)),
    WithdrawLeasesCall: lambda m, f: (CHAIN, WithdrawPageAnswered(m.cycle, m.page, m.attempt, None, f)),
    WithdrawableCall: lambda m, f: (CHAIN, WithdrawableAnswered(m.cycle, None, f)),
    WithdrawTxCall: lambda m, f: (CHAIN, WithdrawTxAnswered(m.cycle, m.page, m.tx_hash, m.attempt, None, f)),
    CloseBatchCall: lambda m, f: (CHAIN, CloseBatchAnswered(m.round, m.batch, m.lease_uuids, None, f)),
    CloseTxCall: lambda m, f: (CHAIN, CloseTxAnswered(m.tx_hash, m.lease_uuids, m.attempt, None, f)),
    CloseSearchCall: lambda m, f: (SCHEDULER, CloseSearchAnswered(m.lease_uuid, m.tenant, m.closed_at, m.attempt, None, f)),
}
