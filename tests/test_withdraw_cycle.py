"""Paging MsgWithdraw through next_key: bound, retries, and never re-driving a committed page."""

from __future__ import annotations

from datetime import timedelta

from actors.chain_actor import ChainDecisions
from actors.effects import Note, Send
from actors.withdraw_cycle import WithdrawCycle, backoff_delay
from actors.withdraw_lookup import LOOKUP_DELAYS
from chain.errors import BILLING, NO_WITHDRAWABLE
from messages.chain import ChainFailure, WithdrawPage
from messages.chain_actor import (
    RetryWithdrawPage,
    WithdrawableAnswered,
    WithdrawPageAnswered,
    WithdrawPageCall,
    WithdrawLookupsRestored,
    WithdrawRequested,
    WithdrawTxAnswered,
    WithdrawTxCall,
    WithdrawTxSigned,
)
from messages.coins import Coin
from messages.ledger import (
    LeaseSettled,
    SettlementsRecorded,
    WithdrawalRecorded,
    WithdrawLookupClosed,
    WithdrawLookupOpened,
)
from messages.scheduler import WithdrawFinished
from runtime.clock import utc
from runtime.router import CHAIN_IO, LEDGER
from tests.support import settings

T0 = utc(2026, 3, 1)


def page(n: int, next_key: bytes) -> WithdrawPage:
    return WithdrawPage(f"TX{n}", (Coin("umfx", 10 * n),), 2, bool(next_key), next_key)


DUE = (Coin("umfx", 1),)


def paging(s=None, cycle: int = 1):
    """A cycle on a chain with the cursor, past its "anything due?" question: (cycle, its first page's effects)."""
    c = WithdrawCycle(cycle, s or settings(), cursor=True)
    c.begin()
    return c, c.withdrawable(WithdrawableAnswered(cycle, DUE), T0)


def paging_chain() -> ChainDecisions:
    """A chain actor that knows its chain has the cursor, with cycle 1 at its first page."""
    chain = ChainDecisions(settings())
    chain.cursor = True
    chain.handle(WithdrawRequested(1), T0)
    chain.handle(WithdrawableAnswered(1, DUE), T0)
    return chain


def only(effects, kind):
    return [e for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def test_pages_until_the_cursor_is_empty() -> None:
    c, first = paging(settings())
    (call,) = only(first, WithdrawPageCall)
    assert call.message.key == b""
    out = c.answered(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    (call,) = only(out, WithdrawPageCall)
    assert (call.message.page, call.message.key) == (2, b"k1")
    assert only(out, WithdrawalRecorded)[0].message.tx_hash == "TX1"
    out = c.answered(WithdrawPageAnswered(1, 2, 1, result=page(2, b"")), T0)
    (done,) = only(out, WithdrawFinished)
    assert done.message.pages == 2 and done.message.total_amounts == (Coin("umfx", 30),)
    assert done.message.withdrawal_count == 4 and not done.message.hit_page_bound and done.message.error is None


def test_stops_at_the_page_bound_and_reports_it() -> None:
    c, _ = paging(settings(max_withdraw_iterations=2), 1)
    c.answered(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    out = c.answered(WithdrawPageAnswered(1, 2, 1, result=page(2, b"k2")), T0)
    assert not only(out, WithdrawPageCall)
    (done,) = only(out, WithdrawFinished)
    assert done.message.hit_page_bound and done.message.error is None and done.message.pages == 2


def test_transient_error_retries_with_doubling_backoff_then_gives_up() -> None:
    s = settings(max_retries=3, initial_backoff="1s", max_backoff="10s")
    c, _ = paging(s, 1)
    c.answered(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    err = ChainFailure("withdraw", "unavailable", transient=True)
    out = c.answered(WithdrawPageAnswered(1, 2, 1, error=err), T0)
    (retry,) = only(out, RetryWithdrawPage)
    assert retry.at == T0 + timedelta(seconds=1) and retry.message == RetryWithdrawPage(1, 2, 2)
    (again,) = only(c.retry(retry.message), WithdrawPageCall)
    assert again.message.key == b"k1"  # the same page, the same cursor
    out = c.answered(WithdrawPageAnswered(1, 2, 2, error=err), T0)
    assert only(out, RetryWithdrawPage)[0].at == T0 + timedelta(seconds=2)
    out = c.answered(WithdrawPageAnswered(1, 2, 3, error=err), T0)
    (done,) = only(out, WithdrawFinished)
    assert done.message.error == err and done.message.pages == 1  # error mid-pages ends the cycle


def test_backoff_is_capped() -> None:
    delays = [backoff_delay(a, timedelta(seconds=1), timedelta(seconds=10)) for a in range(1, 7)]
    assert delays == [timedelta(seconds=s) for s in (1, 2, 4, 8, 10, 10)]


def test_a_page_that_may_have_committed_is_never_sent_again() -> None:
    c, _ = paging(settings(), 1)
    err = ChainFailure("withdraw", "inclusion timed out", transient=True, may_have_committed=True)
    out = c.answered(WithdrawPageAnswered(1, 1, 1, error=err), T0)
    assert not only(out, RetryWithdrawPage) and not only(out, WithdrawPageCall)
    assert only(out, WithdrawFinished)[0].message.error == err


def test_permanent_error_is_not_retried_and_nothing_to_withdraw_is_not_an_error() -> None:
    c, _ = paging(settings(), 1)
    out = c.answered(WithdrawPageAnswered(1, 1, 1, error=ChainFailure("withdraw", "unauthorized", "billing", 6)), T0)
    assert only(out, WithdrawFinished)[0].message.error is not None and not only(out, RetryWithdrawPage)
    c, _ = paging(settings(), 2)
    none = ChainFailure("withdraw", "no withdrawable amount", BILLING, NO_WITHDRAWABLE)
    out = c.answered(WithdrawPageAnswered(2, 1, 1, error=none), T0)
    assert only(out, WithdrawFinished)[0].message.error is None


def test_stale_answers_and_retry_timers_are_ignored() -> None:
    c, _ = paging(settings(), 1)
    assert c.answered(WithdrawPageAnswered(1, 1, 2, result=page(1, b"")), T0) == []
    assert c.retry(RetryWithdrawPage(1, 1, 3)) == []


def test_each_pages_lease_settlements_go_to_the_ledger_after_the_page() -> None:
    at = T0 - timedelta(seconds=3)  # the block time, not when the answer arrived
    settled = (
        LeaseSettled(at, "TX1", "lease-a", (Coin("umfx", 4),)),
        LeaseSettled(at, "TX1", "lease-b", (Coin("umfx", 6), Coin("upwr", 1))),
    )
    c, _ = paging(settings(), 1)
    first = WithdrawPage("TX1", (Coin("umfx", 10), Coin("upwr", 1)), 2, True, b"k1", settlements=settled)
    out = c.answered(WithdrawPageAnswered(1, 1, 1, result=first), T0)
    to_ledger = [e.message for e in out if isinstance(e, Send) and e.to == LEDGER]
    assert [type(m) for m in to_ledger] == [WithdrawalRecorded, SettlementsRecorded]
    assert to_ledger[1].settlements == settled  # forwarded as the chain client read them, in one message
    assert all(e.at is None for e in out if isinstance(e, Send) and e.to == LEDGER)
    out = c.answered(WithdrawPageAnswered(1, 2, 1, result=page(2, b"")), T0)
    assert not only(out, SettlementsRecorded)  # a page that carries none sends none


# -- a page of unknown outcome is looked up until the chain says what it applied --------------

def _unknown_page(tx_hash: str = "AB12") -> tuple[ChainDecisions, list]:
    chain = paging_chain()
    chain.handle(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    err = ChainFailure("withdraw", "inclusion timed out", transient=True, may_have_committed=True, tx_hash=tx_hash)
    return chain, chain.handle(WithdrawPageAnswered(1, 2, 1, error=err), T0)


def test_a_page_of_unknown_outcome_is_looked_up_and_reaches_the_books_once_found() -> None:
    chain, out = _unknown_page()
    assert only(out, WithdrawFinished)[0].message.error is not None  # the cycle still ends with the error
    (look,) = only(out, WithdrawTxCall)
    assert look.to == CHAIN_IO and look.at == T0 + LOOKUP_DELAYS[0]
    assert look.message == WithdrawTxCall(1, 2, "AB12", 1)
    (kept,) = only(out, WithdrawLookupOpened)  # the books keep it across a restart
    assert kept.to == LEDGER and kept.message == WithdrawLookupOpened("AB12", 1, 2, T0)
    # Not known yet: the next lookup, later.
    t1 = look.at
    out = chain.handle(WithdrawTxAnswered(1, 2, "AB12", 1), t1)
    (look,) = only(out, WithdrawTxCall)
    assert look.message.attempt == 2 and look.at == t1 + LOOKUP_DELAYS[1]
    # Found: the ledger gets the page and its settlements, as for any page.
    settled = LeaseSettled(T0, "AB12", "lease-1", (Coin("umfx", 20),))
    found = WithdrawPage("AB12", (Coin("umfx", 20),), 1, False, b"", settlements=(settled,))
    out = chain.handle(WithdrawTxAnswered(1, 2, "AB12", 2, result=found), look.at)
    (recorded,) = only(out, WithdrawalRecorded)
    assert (recorded.to, recorded.message.page, recorded.message.tx_hash) == (LEDGER, 2, "AB12")
    assert only(out, SettlementsRecorded)[0].message.settlements == (settled,)
    assert any(isinstance(e, Note) and "applied after all" in e.text for e in out)
    assert only(out, WithdrawLookupClosed)[0].message == WithdrawLookupClosed("AB12")
    # A late duplicate answer changes nothing.
    assert chain.handle(WithdrawTxAnswered(1, 2, "AB12", 2, result=found), look.at) == []


def test_lookups_end_when_the_tx_failed_on_chain_or_after_the_last_delay() -> None:
    chain, out = _unknown_page()
    failed = ChainFailure("withdraw_outcome", "out of gas", "sdk", 11)
    out = chain.handle(WithdrawTxAnswered(1, 2, "AB12", 1, error=failed), T0)
    assert not only(out, WithdrawTxCall) and not only(out, WithdrawalRecorded)
    assert "withdrew nothing" in out[0].text
    chain, out = _unknown_page("CD34")
    at = T0
    for attempt in range(1, len(LOOKUP_DELAYS) + 1):
        unavailable = ChainFailure("withdraw_outcome", "unavailable", transient=True) if attempt % 2 else None
        out = chain.handle(WithdrawTxAnswered(1, 2, "CD34", attempt, error=unavailable), at)
        calls = only(out, WithdrawTxCall)
        if attempt < len(LOOKUP_DELAYS):
            assert [c.message.attempt for c in calls] == [attempt + 1]
            at = calls[0].at
    assert not calls and "taken as never applied" in out[0].text
    assert chain.lookups.pending == {}
    # A lookup that fails to read after the schedule is over decides nothing: asked again.
    chain, out = _unknown_page("EF78")
    for attempt in range(1, len(LOOKUP_DELAYS) + 3):
        down = ChainFailure("withdraw_outcome", "unavailable", transient=True)
        out = chain.handle(WithdrawTxAnswered(1, 2, "EF78", attempt, error=down), T0)
        [call] = only(out, WithdrawTxCall)
        assert call.message.attempt == attempt + 1 and not only(out, WithdrawLookupClosed)
    assert call.at == T0 + LOOKUP_DELAYS[-1] and "EF78" in chain.lookups.pending


def test_lookups_left_open_by_a_previous_run_go_on_from_the_first_delay() -> None:
    chain = ChainDecisions(settings())
    kept = WithdrawLookupOpened("EF56", 7, 3, T0)
    out = chain.handle(WithdrawLookupsRestored((kept, kept)), T0 + timedelta(hours=1))
    (look,) = only(out, WithdrawTxCall)
    assert look.message == WithdrawTxCall(7, 3, "EF56", 1) and look.at == T0 + timedelta(hours=1) + LOOKUP_DELAYS[0]
    assert not only(out, WithdrawLookupOpened)  # already in the books


def test_no_lookup_without_a_tx_hash() -> None:
    chain, out = _unknown_page(tx_hash="")
    assert not only(out, WithdrawTxCall) and only(out, WithdrawFinished)


def _sends_to_ledger(effects) -> list:
    return [e.message for e in effects if isinstance(e, Send) and e.to == LEDGER]


def test_a_signed_tx_is_in_the_books_until_its_answer_settles_it() -> None:
    """Written ahead of the wait for inclusion: a sidecar that dies while waiting looks it up at its next start."""
    chain = paging_chain()
    out = chain.handle(WithdrawTxSigned(1, 1, 1, "TX1"), T0)
    assert _sends_to_ledger(out) == [WithdrawLookupOpened("TX1", 1, 1, T0)]
    assert not only(out, WithdrawTxCall)  # no lookup while the answer is awaited
    assert chain.handle(WithdrawTxSigned(1, 1, 1, "TX1"), T0) == []  # told twice: once in the books
    # Booked: the page and its settlements first, then the fact closes behind them.
    out = chain.handle(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    assert [type(m) for m in _sends_to_ledger(out)] == [WithdrawalRecorded, WithdrawLookupClosed]
    assert only(out, WithdrawLookupClosed)[0].message == WithdrawLookupClosed("TX1")
    # Signed twice (a stale sequence), then refused before inclusion and retried: both hashes close.
    chain.handle(WithdrawTxSigned(1, 2, 1, "TX2a"), T0)
    chain.handle(WithdrawTxSigned(1, 2, 1, "TX2b"), T0)
    refused = ChainFailure("withdraw", "unavailable", transient=True)
    out = chain.handle(WithdrawPageAnswered(1, 2, 1, error=refused), T0)
    assert [m.tx_hash for m in _sends_to_ledger(out)] == ["TX2a", "TX2b"]
    assert only(out, WithdrawLookupClosed) and not only(out, WithdrawLookupOpened)
    assert chain.lookups.unanswered == {}


def test_a_signed_tx_whose_answer_may_have_committed_goes_to_the_lookups_without_a_second_fact() -> None:
    chain = paging_chain()
    chain.handle(WithdrawTxSigned(1, 1, 1, "OLD"), T0)  # refused, signed again
    chain.handle(WithdrawTxSigned(1, 1, 1, "AB12"), T0)
    err = ChainFailure("withdraw", "inclusion timed out", transient=True, may_have_committed=True, tx_hash="AB12")
    out = chain.handle(WithdrawPageAnswered(1, 1, 1, error=err), T0)
    assert _sends_to_ledger(out) == [WithdrawLookupClosed("OLD")]  # AB12 stays open: the lookups have it
    (look,) = only(out, WithdrawTxCall)
    assert look.message == WithdrawTxCall(1, 1, "AB12", 1)
    assert chain.lookups.pending == {"AB12": (1, 1)}


def test_a_page_applied_after_its_cycle_was_aborted_is_booked_all_the_same() -> None:
    """A step of the cycle raised and ``recover`` ended it while a page's call was out: the tx it
    signed applied, and its answer is a fact for the books (its record is closed only behind it)."""
    chain = paging_chain()  # cycle 1, page 1 sent
    chain.handle(WithdrawTxSigned(1, 1, 1, "TX1"), T0)
    chain.recover(WithdrawableAnswered(1, ()), T0)
    assert chain.withdraw.done
    out = chain.handle(WithdrawPageAnswered(1, 1, 1, result=page(1, b"k1")), T0)
    sent = [e.message for e in out if isinstance(e, Send)]
    kinds = [type(m) for m in sent]
    assert WithdrawalRecorded in kinds and kinds.index(WithdrawalRecorded) < kinds.index(WithdrawLookupClosed)
    # One that may have committed is looked up, its record kept open meanwhile.
    chain = paging_chain()
    chain.handle(WithdrawTxSigned(1, 1, 1, "TX2"), T0)
    chain.recover(WithdrawableAnswered(1, ()), T0)
    lost = ChainFailure("withdraw", "timed out", transient=True, may_have_committed=True, tx_hash="TX2")
    out = chain.handle(WithdrawPageAnswered(1, 1, 1, error=lost), T0)
    assert not only(out, WithdrawLookupClosed) and [c.message.tx_hash for c in only(out, WithdrawTxCall)] == ["TX2"]


def test_a_tx_whose_outcome_cannot_be_read_keeps_its_record_for_the_next_start() -> None:
    """Included, but its answer does not decode: it may have withdrawn. The lookups end in this run
    (the same answer would be read again), and the books keep the tx (``run.py periods``)."""
    chain, out = _unknown_page("GH90")
    unreadable = ChainFailure("withdraw_outcome", "amount '7.5' is not an integer", transient=False,
                              may_have_committed=True, tx_hash="GH90")
    out = chain.handle(WithdrawTxAnswered(1, 2, "GH90", 1, error=unreadable), T0)
    assert not only(out, WithdrawTxCall) and not only(out, WithdrawLookupClosed)
    assert "looked up again at the next start" in out[0].text and chain.lookups.pending == {}
