"""What a run did, counted from the messages it delivered (for ``--duration``'s summary).

"withdrawn" is what the run knows was applied: a page answered, or found
applied by a later lookup of its tx. A page whose tx may have applied but
whose outcome is still unknown at the end (its answer lost and the lookups
not done, or a node that keeps no tx index and cannot say) is not in it;
the line counts such pages beside the figure, or an operator reads
"withdrawn 0" of a run whose withdrawals the chain applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from messages.chain_actor import WithdrawTxAnswered
from messages.coins import Coin, add_coins, format_coins
from messages.credit import CreditReadFailed
from messages.scheduler import ClosuresFlushed, LeaseEventReceived, TenantChecked, WithdrawFinished
from runtime.dispatch import Delivery

__all__ = ["RunSummary"]


@dataclass
class RunSummary:
    withdraw_cycles: int = 0
    withdraw_pages: int = 0
    withdrawn: tuple[Coin, ...] = ()
    withdraw_errors: int = 0
    #: pages whose answer was lost, found applied by a later lookup of their tx
    withdraw_pages_found: int = 0
    #: txs of pages that may have applied, their outcome not known (yet): not in ``withdrawn``
    withdraw_txs_unknown: set[str] = field(default_factory=set)
    credit_checks: int = 0
    failed_reads: int = 0
    closed: set[str] = field(default_factory=set)
    already_closed: set[str] = field(default_factory=set)
    #: Leases whose close failed (those closed later are not counted as failed).
    failed_closes: set[str] = field(default_factory=set)
    lease_events: int = 0

    def __call__(self, d: Delivery) -> None:
        m = d.message
        if isinstance(m, WithdrawFinished):
            self.withdraw_cycles += 1
            self.withdraw_pages += m.pages
            self.withdrawn = add_coins(self.withdrawn, m.total_amounts)
            self.withdraw_errors += m.error is not None
            if m.error is not None and m.error.may_have_committed and m.error.tx_hash:
                self.withdraw_txs_unknown.add(m.error.tx_hash)
        elif isinstance(m, WithdrawTxAnswered):
            if m.result is not None:
                self.withdraw_txs_unknown.discard(m.tx_hash)
                self.withdraw_pages_found += 1
                self.withdraw_pages += 1
                self.withdrawn = add_coins(self.withdrawn, m.result.total_amounts)
            elif m.error is not None and not m.error.transient and not m.error.may_have_committed:
                self.withdraw_txs_unknown.discard(m.tx_hash)  # included and failed: known to have withdrawn nothing
        elif isinstance(m, TenantChecked):
            self.credit_checks += 1
        elif isinstance(m, CreditReadFailed):
            self.failed_reads += 1
        elif isinstance(m, ClosuresFlushed):
            self.closed.update(m.closed)
            self.already_closed.update(m.already_closed)
            self.failed_closes.update(m.failed)
        elif isinstance(m, LeaseEventReceived):
            self.lease_events += 1

    def lines(self) -> list[str]:
        return [
            f"withdraw cycles: {self.withdraw_cycles} ({self.withdraw_pages} pages, "
            f"{self.withdraw_errors} ended early"
            + (f", {self.withdraw_pages_found} found applied by a later lookup" if self.withdraw_pages_found else "")
            + f"), withdrawn {format_coins(self.withdrawn)}"
            + (f"; {len(self.withdraw_txs_unknown)} page(s) of unknown outcome not in that figure (their txs may "
               "have applied: see the log's warnings)" if self.withdraw_txs_unknown else ""),
            f"credit checks: {self.credit_checks} ({self.failed_reads} failed reads)",
            # A close that failed, or was found done, may be heard applied by us later (a late
            # answer, a lookup), in either order: each lease is counted once, where it ended.
            f"leases closed by us: {len(self.closed)}; "
            f"found already closed: {len(self.already_closed - self.closed)}; "
            f"failed closes: {len(self.failed_closes - self.closed - self.already_closed)}",
            f"lease events received: {self.lease_events}",
        ]
