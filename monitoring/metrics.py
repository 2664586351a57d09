"""The sidecar's Prometheus metrics, counted from the messages its actors exchange.

``SidecarMetrics`` is a delivery tap (``runtime.dispatch``), like the
capture: every message handed to an actor passes it, and the ones that say
what the sidecar did move the metrics. Nothing here reads an actor's state.
Its registry holds, under ``leasewarden_``:

- revenue: ``withdrawn_total{denom}`` (every included page, and pages a
  lookup found applied), ``withdraw_pages_total{outcome}``,
  ``withdraw_txs_signed_total``, ``withdraw_cycles_total{outcome}``,
  ``withdraw_lookups_total{outcome}``, ``last_withdraw_timestamp_seconds``;
- credit: ``credit_reads_total{outcome}``, ``last_credit_check_timestamp_seconds``,
  ``tenants_watched``, ``leases_watched``, ``tenants_failing_reads``;
- closures: ``leases_closed_total{reason}``, ``leases_found_closed_total``,
  ``lease_closes_failed_total``, ``close_txs_signed_total``, ``close_searches_total{outcome}``;
- reads: ``leases_unread`` (a lease whose read keeps failing, retried);
- events: ``websocket_connected``, ``websocket_reconnects_total``,
  ``websocket_failed_attempts_total``, ``lease_events_total{kind,provider}``,
  ``lease_event_latency_seconds`` (from the listener reading the frame to
  the scheduler taking the event);
- node: ``node_lag_seconds``, ``node_catching_up``, ``node_height``,
  ``node_status_failures_total``;
- txs: ``tx_fees_total{denom}``, ``tx_gas_used_total``, ``tx_gas_wanted_total``,
  ``tx_sequence_retries_total``, ``tx_out_of_gas_retries_total``,
  ``txs_included_total{kind}``;
- books: ``ledger_write_errors_total``, ``ledger_facts_held``, ``billing_months{stage}``;
- runtime, read when scraped (``watch``): ``capture_bytes_total``,
  ``capture_dropped_total``, ``mailbox_depth_max{actor}``,
  ``message_failures_total{actor}``, and ``messages_delivered_total{actor}``.

Money is counted in integers of each denom's base unit (``umfx``): a
Prometheus sample is a float, but what is added to it never is. Times are
the clock's, as Unix seconds.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from chain.errors import BILLING, NO_WITHDRAWABLE, is_no_tx_index
from messages.chain import ChainFailure, CloseOutcome, WithdrawPage
from messages.chain_actor import (
    CloseBatchAnswered,
    CloseBatchCall,
    CloseSearchAnswered,
    CloseTxAnswered,
    NodeStatusAnswered,
    WithdrawPageAnswered,
    WithdrawTxAnswered,
    WithdrawTxSigned,
    CloseTxSigned,
)
from messages.credit import CreditRead, CreditReadFailed, LeaseGone, LeaseOpened, LeasesSynced, TenantRestored
from messages.health import BooksTicked, LedgerWriteFailed, LedgerWritesResumed, WebsocketLost, WebsocketSubscribed
from messages.scheduler import ClosuresFlushed, LeaseEventReceived, LeaseRead, WithdrawFinished
from messages.tx_cost import TxCost
from runtime.dispatch import Delivery, actor_kind

__all__ = ["SidecarMetrics", "MONTH_STAGES", "LATENCY_BUCKETS"]

# No ``*_created`` series beside every counter: a scraper has the process's start
# (``process_start_time_seconds`` where it wants it) and they double what a scrape carries.
disable_created_metrics()

#: Every stage a billing month can be in, so each has a sample (0 when none is there).
MONTH_STAGES = ("open", "grace", "metered", "finalized")

#: Seconds from the listener reading a frame to the scheduler taking its event: the
#: bench measures ~2 ms at p50 and ~15 ms at p99 at 5,000 events/s; a second is a stall.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

_TENANT = "tenant/"


def _outcome(error: ChainFailure) -> str:
    if error.codespace == BILLING and error.code == NO_WITHDRAWABLE:
        return "nothing_to_withdraw"
    if error.may_have_committed:
        return "unknown"  # broadcast, inclusion not seen: looked up, never resent
    return "transient_error" if error.transient else "error"


class _Watched:
    """Our leases per tenant as the tenant monitors are told them, mirrored from their mail
    (and from the scheduler's, which a retired monitor no longer gets)."""

    def __init__(self) -> None:
        self.leases: dict[str, set[str]] = {}
        self.tenant_of: dict[str, str] = {}
        self.failing: set[str] = set()
        self.lock = threading.Lock()

    def set(self, tenant: str, leases: Iterable[str]) -> None:
        with self.lock:
            for lease in self.leases.pop(tenant, ()):
                self.tenant_of.pop(lease, None)
            now = set(leases)
            if now:
                self.leases[tenant] = now
                self.tenant_of.update(dict.fromkeys(now, tenant))
            else:
                self.failing.discard(tenant)

    def add(self, tenant: str, lease: str) -> None:
        with self.lock:
            self.leases.setdefault(tenant, set()).add(lease)
            self.tenant_of[lease] = tenant

    def remove(self, leases: Iterable[str]) -> None:
        with self.lock:
            for lease in leases:
                tenant = self.tenant_of.pop(lease, None)
                held = self.leases.get(tenant) if tenant is not None else None
                if held is None:
                    continue
                held.discard(lease)
                if not held:
                    del self.leases[tenant]  # type: ignore[arg-type]
                    self.failing.discard(tenant)  # type: ignore[arg-type]

    def read(self, tenant: str, failed: bool) -> None:
        if not failed and tenant not in self.failing:
            return  # the common case, once per tenant per cycle: nothing to change, no lock to take
        with self.lock:
            if failed and tenant in self.leases:
                self.failing.add(tenant)
            else:
                self.failing.discard(tenant)

    def counts(self) -> tuple[int, int, int]:
        with self.lock:
            return len(self.leases), sum(len(v) for v in self.leases.values()), len(self.failing)


class SidecarMetrics:
    """A delivery tap that keeps the sidecar's metrics; ``registry`` is what ``/metrics`` serves."""

    def __init__(self, provider_uuid: str, clock_speed: float = 1.0, version: str = "") -> None:
        self.provider_uuid = provider_uuid
        #: clock seconds per real second: a latency on an accelerated demo clock is this much longer
        self.clock_speed = clock_speed
        r = self.registry = CollectorRegistry()
        ns = "leasewarden"

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=ns, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, namespace=ns, registry=r)

        gauge("build_info", "1, labelled with the running leasewarden's version", ("version",)).labels(version).set(1)
        self.withdrawn = counter("withdrawn", "Amount withdrawn to the provider, in each denom's base unit (e.g. umfx)", ("denom",))
        self.withdraw_pages = counter("withdraw_pages", "MsgWithdraw pages by outcome: included, nothing_to_withdraw, "
                                      "unknown (may have committed: looked up), transient_error, error", ("outcome",))
        self.withdraw_txs = counter("withdraw_txs_signed", "Withdraw txs signed (a page signed again counts again)")
        self.withdraw_cycles = counter("withdraw_cycles", "Withdraw cycles by outcome: drained, page_bound, nothing_due, error", ("outcome",))
        self.withdraw_lookups = counter("withdraw_lookups", "Lookups of withdraw txs of unknown outcome: found, failed, pending", ("outcome",))
        self.last_withdraw = gauge("last_withdraw_timestamp_seconds", "When the last withdraw cycle ended without an error (Unix time)")
        self.failing_withdraws = gauge(
            "leases_failing_withdraw",
            "Leases whose withdraw keeps failing (the chain's failed_lease_uuids, or a named batch split down to them), "
            "retried by name with backoff, at the last cycle's end",
        )
        self.credit_reads = counter("credit_reads", "Tenant credit reads by outcome: ok, failed", ("outcome",))
        self._reads_ok, self._reads_failed = self.credit_reads.labels("ok"), self.credit_reads.labels("failed")
        self.last_credit_check = gauge("last_credit_check_timestamp_seconds", "When a tenant's credit was last read successfully (Unix time)")
        self.closed = counter("leases_closed", "Leases closed by us, by closure reason (looked_up: a close of unknown outcome found applied)", ("reason",))
        self.found_closed = counter("leases_found_closed", "Leases found already closed on chain when we meant to close them")
        self.close_failed = counter("lease_closes_failed", "Leases whose close failed (tried again at the next check)")
        self.close_searches = counter(
            "close_searches", "Searches for the tx that ended a lease found ended while unheard, by outcome: found, "
            "not_found, no_tx_index (the node keeps none), failed (asked again)", ("outcome",))
        self.close_txs = counter("close_txs_signed", "Close txs signed, each written ahead into the books before its broadcast")
        self.ws_connected = gauge("websocket_connected", "1 while the websocket has every subscription acknowledged, else 0")
        self.ws_reconnects = counter("websocket_reconnects", "Websocket sessions subscribed after the first")
        self.ws_failed = counter("websocket_failed_attempts", "Websocket connects that never got every subscription acknowledged")
        self._unread: set[str] = set()
        gauge("leases_unread", "Leases whose last read from the chain failed, read again with backoff "
              "(only their own billing waits for them)").set_function(lambda: len(self._unread))
        self.lease_events = counter("lease_events", "Lease events received, by kind, ours or another provider's", ("kind", "provider"))
        self.event_latency = Histogram(
            "lease_event_latency_seconds", "Real seconds from the listener reading an event's frame to the scheduler taking it",
            namespace=ns, registry=r, buckets=LATENCY_BUCKETS,
        )
        self.node_lag = gauge("node_lag_seconds", "How old the node's latest block was at its last status check (clock seconds)")
        self.node_catching_up = gauge("node_catching_up", "1 while the node says it is catching up, else 0")
        self.node_height = gauge("node_height", "The node's latest block height at its last status check")
        self.node_failures = counter("node_status_failures", "Node status checks the node did not answer")
        self.fees = counter("tx_fees", "Fees of our included txs, in each denom's base unit (e.g. umfx)", ("denom",))
        self.gas_used = counter("tx_gas_used", "Gas our included txs used")
        self.gas_wanted = counter("tx_gas_wanted", "Gas limits our included txs were signed with")
        self.sequence_retries = counter("tx_sequence_retries", "Txs signed again because the node expected another account sequence")
        self.gas_retries = counter("tx_out_of_gas_retries", "Txs signed again with more gas after running out")
        self.txs = counter("txs_included", "Our txs included on chain, by kind: withdraw, close", ("kind",))
        self.ledger_errors = counter("ledger_write_errors", "Ledger writes the database refused (the facts are held and written later)")
        self.ledger_held = gauge("ledger_facts_held", "Facts held for the ledger's next write after a refused one")
        self.months = gauge("billing_months", "Billing months in the books by stage: open, grace, metered, finalized", ("stage",))
        self.delivered = counter("messages_delivered", "Messages handed to actors, by actor kind", ("actor",))
        self._delivered_by_kind: dict[str, Any] = {}
        self._watched = _Watched()
        gauge("tenants_watched", "Tenants with a lease of ours being watched").set_function(lambda: self._watched.counts()[0])
        gauge("leases_watched", "Our leases being watched (active, or pending from their event)").set_function(
            lambda: self._watched.counts()[1]
        )
        gauge("tenants_failing_reads", "Watched tenants whose last credit read failed").set_function(
            lambda: self._watched.counts()[2]
        )
        self._handlers: dict[type, Callable[[Delivery, Any], None]] = {
            WithdrawPageAnswered: self._page,
            WithdrawTxSigned: lambda d, m: self.withdraw_txs.inc(),
            CloseTxSigned: lambda d, m: self.close_txs.inc(),
            CloseSearchAnswered: self._close_search,
            WithdrawTxAnswered: self._lookup,
            WithdrawFinished: self._cycle,
            CreditRead: self._read,
            CreditReadFailed: self._read_failed,
            CloseBatchCall: self._close_call,
            CloseBatchAnswered: self._close_batch,
            CloseTxAnswered: self._close_lookup,
            ClosuresFlushed: self._flushed,
            LeasesSynced: lambda d, m: self._watched.set(d.recipient[len(_TENANT):], (lease.uuid for lease in m.leases)),
            LeaseOpened: lambda d, m: self._watched.add(d.recipient[len(_TENANT):], m.lease.uuid),
            LeaseGone: lambda d, m: self._watched.remove((m.lease_uuid,)),
            TenantRestored: lambda d, m: self._watched.set(m.snapshot.tenant, m.snapshot.lease_uuids),
            WebsocketSubscribed: self._subscribed,
            WebsocketLost: self._lost,
            LeaseEventReceived: self._event,
            LeaseRead: self._lease_read,
            NodeStatusAnswered: self._node,
            LedgerWriteFailed: self._ledger_failed,
            LedgerWritesResumed: lambda d, m: self.ledger_held.set(0),
            BooksTicked: self._books,
        }
        self._sessions = 0
        #: the reason of each close batch in flight, by (round, batch), from its call
        self._close_reasons: dict[tuple[int, int], str] = {}

    # -- the tap ---------------------------------------------------------------------
    def __call__(self, d: Delivery) -> None:
        kind = actor_kind(d.recipient)
        child = self._delivered_by_kind.get(kind)
        if child is None:
            child = self._delivered_by_kind[kind] = self.delivered.labels(kind)
        child.inc()
        handler = self._handlers.get(type(d.message))
        if handler is not None:
            handler(d, d.message)

    # -- revenue ------------------------------------------------------------------------
    def _page(self, d: Delivery, m: WithdrawPageAnswered) -> None:
        if m.result is not None:
            self.withdraw_pages.labels("included").inc()
            self._applied(m.result, "withdraw")
        elif m.error is not None:
            self.withdraw_pages.labels(_outcome(m.error)).inc()

    def _lookup(self, d: Delivery, m: WithdrawTxAnswered) -> None:
        if m.result is not None:
            self.withdraw_lookups.labels("found").inc()
            self._applied(m.result, "withdraw")
        else:
            self.withdraw_lookups.labels("failed" if m.error is not None else "pending").inc()

    def _applied(self, page: WithdrawPage, kind: str) -> None:
        for c in page.total_amounts:
            self.withdrawn.labels(c.denom).inc(c.amount)
        self._cost(page.cost, kind)

    def _cost(self, cost: TxCost | None, kind: str) -> None:
        self.txs.labels(kind).inc()
        if cost is None:
            return  # the in-process model: no fees, no gas
        for c in cost.fee:
            self.fees.labels(c.denom).inc(c.amount)
        self.gas_used.inc(cost.gas_used)
        self.gas_wanted.inc(cost.gas_wanted)
        self.sequence_retries.inc(cost.sequence_retries)
        self.gas_retries.inc(cost.out_of_gas_retries)

    def _cycle(self, d: Delivery, m: WithdrawFinished) -> None:
        self.failing_withdraws.set(len(m.failing))
        if m.error is not None:
            self.withdraw_cycles.labels("error").inc()
            return
        outcome = "nothing_due" if m.nothing_due else "page_bound" if m.hit_page_bound else "drained"
        self.withdraw_cycles.labels(outcome).inc()
        self.last_withdraw.set(d.at.timestamp())

    # -- credit ---------------------------------------------------------------------------
    def _read(self, d: Delivery, m: CreditRead) -> None:
        self._reads_ok.inc()
        self.last_credit_check.set(d.at.timestamp())
        self._watched.read(m.account.tenant, failed=False)

    def _read_failed(self, d: Delivery, m: CreditReadFailed) -> None:
        self._reads_failed.inc()
        self._watched.read(d.recipient[len(_TENANT):], failed=True)

    # -- closures -------------------------------------------------------------------------
    # Counted from the chain actor's and the scheduler's mail: a tenant monitor retired
    # by the lease event of its own close (it can come first) never gets its LeasesClosed.
    def _close_call(self, d: Delivery, m: CloseBatchCall) -> None:
        self._close_reasons[(m.round, m.batch)] = m.reason

    def _close_batch(self, d: Delivery, m: CloseBatchAnswered) -> None:
        reason = self._close_reasons.pop((m.round, m.batch), "")
        if m.outcome is not None:
            self.closed.labels(reason).inc(len(m.lease_uuids))
            self._closed_tx(m.outcome)

    def _flushed(self, d: Delivery, m: ClosuresFlushed) -> None:
        self.found_closed.inc(len(m.already_closed))
        self.close_failed.inc(len(m.failed))
        self._watched.remove(m.closed + m.already_closed)

    def _close_lookup(self, d: Delivery, m: CloseTxAnswered) -> None:
        if m.result is not None:
            self.closed.labels("looked_up").inc(m.result.closed_count)
            self._closed_tx(m.result)

    def _close_search(self, d: Delivery, m: CloseSearchAnswered) -> None:
        if m.outcome is not None:
            outcome = "found"
        elif m.error is None:
            outcome = "not_found"
        else:
            outcome = "no_tx_index" if is_no_tx_index(m.error) else "failed"
        self.close_searches.labels(outcome).inc()

    def _closed_tx(self, outcome: CloseOutcome) -> None:
        self._cost(outcome.cost, "close")

    # -- events ---------------------------------------------------------------------------
    def _subscribed(self, d: Delivery, m: WebsocketSubscribed) -> None:
        self._sessions += 1
        if self._sessions > 1:
            self.ws_reconnects.inc()
        self.ws_connected.set(1)

    def _lost(self, d: Delivery, m: WebsocketLost) -> None:
        self.ws_connected.set(0)
        if not m.was_subscribed:
            self.ws_failed.inc()

    def _event(self, d: Delivery, m: LeaseEventReceived) -> None:
        ev = m.event
        self.lease_events.labels(ev.kind, "ours" if ev.provider_uuid == self.provider_uuid else "other").inc()
        if m.received_at is not None:
            waited = (d.at - m.received_at).total_seconds() / self.clock_speed
            self.event_latency.observe(max(waited, 0.0))

    def _lease_read(self, d: Delivery, m: LeaseRead) -> None:
        if m.lease is None:
            self._unread.add(m.lease_uuid)
        else:
            self._unread.discard(m.lease_uuid)

    # -- node, books ------------------------------------------------------------------------
    def _node(self, d: Delivery, m: NodeStatusAnswered) -> None:
        if m.status is None:
            self.node_failures.inc()
            return
        self.node_height.set(m.status.latest_block_height)
        self.node_catching_up.set(1 if m.status.catching_up else 0)
        self.node_lag.set(max((d.at - m.status.latest_block_time).total_seconds(), 0.0))

    def _ledger_failed(self, d: Delivery, m: LedgerWriteFailed) -> None:
        self.ledger_errors.inc()
        self.ledger_held.set(m.held)

    def _books(self, d: Delivery, m: BooksTicked) -> None:
        counts = dict.fromkeys(MONTH_STAGES, 0)
        for month in m.months:
            counts[month.stage] = counts.get(month.stage, 0) + 1
        for stage, n in counts.items():
            self.months.labels(stage).set(n)

    # -- the runtime, read when scraped ---------------------------------------------------------
    def watch(self, mailboxes: Callable[[], dict[str, int]], failures: Callable[[], dict[str, int]],
              capture: Any = None) -> None:
        """Also report, at each scrape, the deepest mailbox and the handler failures per actor kind,
        and what the capture wrote and dropped (``capture``: its writer, or None)."""
        self.registry.register(_RuntimeCollector(mailboxes, failures, capture))


class _RuntimeCollector:
    """Read at scrape time: what the dispatcher and the capture count themselves (they are not actors)."""

    def __init__(self, mailboxes: Callable[[], dict[str, int]], failures: Callable[[], dict[str, int]], capture: Any) -> None:
        self.mailboxes = mailboxes
        self.failures = failures
        self.capture = capture

    def describe(self) -> list[Any]:
        return []  # collected on demand only: its values exist only when scraped

    def collect(self) -> Iterable[Any]:
        depth = GaugeMetricFamily("leasewarden_mailbox_depth_max", "Messages waiting in the fullest mailbox, by actor kind",
                                  labels=("actor",))
        for kind, n in sorted(self.mailboxes().items()):
            depth.add_metric((kind,), n)
        yield depth
        failed = CounterMetricFamily("leasewarden_message_failures", "Messages whose handler raised (dropped; the actor went on), "
                                     "by actor kind", labels=("actor",))
        for kind, n in sorted(self.failures().items()):
            failed.add_metric((kind,), n)
        yield failed
        if self.capture is not None:
            yield CounterMetricFamily("leasewarden_capture_bytes", "Bytes the capture has written", value=self.capture.bytes_written)
            yield CounterMetricFamily("leasewarden_capture_dropped", "Deliveries the capture could not write (a disk that failed)",
                                      value=self.capture.dropped)
