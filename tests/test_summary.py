"""The run summary counts what the run delivered, including pages found applied by a lookup."""

from __future__ import annotations

from messages.chain import ChainFailure, WithdrawPage
from messages.chain_actor import WithdrawTxAnswered
from messages.coins import Coin
from messages.scheduler import ClosuresFlushed, WithdrawFinished
from runtime.clock import utc
from runtime.dispatch import Delivery
from sidecar.summary import RunSummary

T0 = utc(2026, 3, 1)


def deliver(summary: RunSummary, message) -> None:
    summary(Delivery(1, T0, "chain", "scheduler", 0, message))


def test_a_page_found_by_a_lookup_counts_in_the_withdrawn_total() -> None:
    s = RunSummary()
    lost = ChainFailure("withdraw", "inclusion timed out", transient=True, may_have_committed=True, tx_hash="AB")
    deliver(s, WithdrawFinished(1, 1, (Coin("umfx", 10),), 2, ("T1",), error=lost))
    deliver(s, WithdrawTxAnswered(1, 2, "AB", 1))  # not known yet: nothing to count
    deliver(s, WithdrawTxAnswered(1, 2, "AB", 2, result=WithdrawPage("AB", (Coin("umfx", 5),), 1, False, b"")))
    assert s.withdrawn == (Coin("umfx", 15),) and s.withdraw_pages == 2
    assert s.lines()[0] == (
        "withdraw cycles: 1 (2 pages, 1 ended early, 1 found applied by a later lookup), withdrawn 15umfx"
    )


def test_a_close_that_failed_and_was_heard_applied_later_counts_once_as_closed() -> None:
    s = RunSummary()
    deliver(s, ClosuresFlushed(1, closed=("la",), failed=("lb", "lc")))  # the round's end: lb and lc failed
    deliver(s, ClosuresFlushed(0, closed=("lb",)))  # lb's tx was applied after all (a late answer, a lookup)
    assert s.lines()[2] == "leases closed by us: 2; found already closed: 0; failed closes: 1"
    # The other order (a lookup that answers before its round ends), and a re-check that found it closed
    s = RunSummary()
    deliver(s, ClosuresFlushed(0, closed=("la",)))
    deliver(s, ClosuresFlushed(1, already_closed=("la",), failed=("la", "lb")))
    assert s.lines()[2] == "leases closed by us: 1; found already closed: 0; failed closes: 1"


def test_a_page_of_unknown_outcome_at_the_end_is_counted_beside_the_withdrawn_total() -> None:
    """A node that keeps no tx index cannot say whether a page applied: "withdrawn 0" alone would read as
    nothing withdrawn, although the chain may have applied every page."""
    s = RunSummary()
    for cycle, tx in ((1, "AA"), (2, "BB"), (3, "CC")):
        lost = ChainFailure("withdraw", "inclusion timed out", transient=True, may_have_committed=True, tx_hash=tx)
        deliver(s, WithdrawFinished(cycle, 1, (), 0, (), error=lost))
    unreadable = ChainFailure("withdraw_outcome", "transaction indexing is disabled", may_have_committed=True)
    deliver(s, WithdrawTxAnswered(1, 1, "AA", 1, error=unreadable))  # still unknown
    deliver(s, WithdrawTxAnswered(2, 1, "BB", 1, error=ChainFailure("withdraw_outcome", "out of gas", code=11)))
    deliver(s, WithdrawTxAnswered(3, 1, "CC", 1, error=ChainFailure("withdraw_outcome", "node down", transient=True)))
    line = s.lines()[0]
    assert line.startswith("withdraw cycles: 3 (3 pages, 3 ended early), withdrawn ")
    # AA (unreadable) and CC (a failed lookup) may have applied; BB was included and failed.
    assert "; 2 page(s) of unknown outcome not in that figure" in line, line
    deliver(s, WithdrawTxAnswered(3, 1, "CC", 2, result=WithdrawPage("CC", (Coin("umfx", 7),), 1, False, b"")))
    assert "; 1 page(s) of unknown outcome" in s.lines()[0] and s.withdrawn == (Coin("umfx", 7),)
