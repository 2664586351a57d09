"""Closes found after the fact: a lease read as ended has the tx that ended it found, and what it settled booked."""

from __future__ import annotations

import msgspec
from datetime import timedelta

from actors.close_search import CLOSE_SOUGHT, NOT_FOUND_RETRIES, CloseSearches
from actors.effects import Send
from actors.lease_reads import retry_delay
from actors.schedule import SchedulerDecisions
from chain.errors import NO_TX_INDEX, TX_INDEX
from messages.chain import ChainFailure, CloseOutcome, Lease
from messages.chain_actor import CloseSearchAnswered, CloseSearchCall
from messages.coins import Coin
from messages.lease_events import LeaseEvent
from messages.ledger import LeaseIssue, LeaseIssueResolved, LeaseSettled, SettlementsRecorded
from messages.scheduler import ClosuresFlushed, LeaseEventReceived, LeaseRead
from runtime.clock import utc
from runtime.router import LEDGER
from tests.support import PROVIDER, item, settings

T0 = utc(2026, 3, 1)
CLOSED_AT = T0 - timedelta(hours=2)
ENDED = Lease("l1", "t1", PROVIDER, (item(3),), state="CLOSED", acknowledged_at=T0 - timedelta(days=1),
              closed_at=CLOSED_AT, closure_reason="tenant left")


def sent(out, kind):
    return [e for e in out if isinstance(e, Send) and isinstance(e.message, kind)]


def answer(call: CloseSearchCall, outcome=None, error=None) -> CloseSearchAnswered:
    return CloseSearchAnswered(call.lease_uuid, call.tenant, call.closed_at, call.attempt, outcome, error)


def test_a_lease_read_as_closed_has_its_closing_tx_found_and_booked_with_the_hint_an_event_gave() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(LeaseEventReceived(LeaseEvent("closed", "l1", "t1", PROVIDER, tx_hash="AB" * 32)), T0)
    read = core.handle(LeaseRead("l1", ENDED), T0)
    (call,) = sent(read, CloseSearchCall)
    assert call.message == CloseSearchCall("l1", "t1", CLOSED_AT, "AB" * 32)
    # Written ahead: the search is in the books before the read that ended the lease.
    to_books = [type(e.message).__name__ for e in read if isinstance(e, Send) and e.to == LEDGER]
    assert to_books == ["LeaseIssue", "LeaseObserved"]
    (sought,) = [e.message for e in sent(read, LeaseIssue)]
    assert (sought.lease_uuid, sought.kind, sought.at, sought.tenant) == ("l1", CLOSE_SOUGHT, CLOSED_AT, "t1")
    settled = (LeaseSettled(CLOSED_AT, "AB" * 32, "l1", (Coin("umfx", 42),), kind="close", tenant="t1"),)
    out = core.handle(answer(call.message, CloseOutcome(1, ("AB" * 32,), settled)), T0)
    assert [e.message for e in sent(out, SettlementsRecorded)] == [SettlementsRecorded(settled)]
    assert {e.message.kind for e in sent(out, LeaseIssueResolved)} == {"close_not_found", "no_tx_index", CLOSE_SOUGHT}
    books = [e.message for e in out if isinstance(e, Send) and e.to == LEDGER]
    assert isinstance(books[0], SettlementsRecorded)  # booked before the search is marked over
    assert not sent(core.handle(LeaseRead("l1", ENDED), T0), CloseSearchCall)  # read again: its close is in the books already


def test_nothing_is_sought_for_a_lease_that_never_accrued_or_whose_close_we_booked() -> None:
    searches = CloseSearches()
    for state in ("EXPIRED", "REJECTED"):
        assert searches.ended(msgspec.structs.replace(ENDED, state=state, acknowledged_at=None, closed_at=None), T0) == []
    assert searches.ended(msgspec.structs.replace(ENDED, state="ACTIVE", closed_at=None), T0) == []
    searches.booked_by_us(["l1"])
    assert searches.ended(ENDED, T0) == []
    core = SchedulerDecisions(settings(), PROVIDER)
    core.handle(ClosuresFlushed(cycle=1, closed=("l1",), already_closed=("l2",)), T0)  # l2: someone else's close
    assert not sent(core.handle(LeaseRead("l1", ENDED), T0), CloseSearchCall)
    assert sent(core.handle(LeaseRead("l2", msgspec.structs.replace(ENDED, uuid="l2")), T0), CloseSearchCall)


def test_a_close_not_found_is_reported_sought_again_a_few_times_and_then_left_reported() -> None:
    searches = CloseSearches()
    (call,) = sent(searches.ended(ENDED, T0), CloseSearchCall)
    now = T0
    for delay in NOT_FOUND_RETRIES:
        out = searches.answered(answer(call.message), now)
        (issue,) = [e.message for e in sent(out, LeaseIssue)]
        assert (issue.kind, issue.at, issue.tenant) == ("close_not_found", CLOSED_AT, "t1")  # in the month it closed
        (call,) = sent(out, CloseSearchCall)
        assert call.at == now + delay
        now = call.at
        assert not sent(out, LeaseIssueResolved)  # still sought: a restart now searches again
    out = searches.answered(answer(call.message), now)
    assert sent(out, LeaseIssue) and not sent(out, CloseSearchCall) and searches.pending == {}
    assert [e.message.kind for e in sent(out, LeaseIssueResolved)] == [CLOSE_SOUGHT]  # over; close_not_found stays


def test_a_found_tx_that_names_no_amount_for_the_lease_leaves_it_reported_with_the_reason_at_once() -> None:
    """``chain.lease_end``: v2.1.0's provider-wide auto-close is found, but what it settled is not known."""
    searches = CloseSearches()
    (call,) = sent(searches.ended(ENDED, T0), CloseSearchCall)
    unknown = ChainFailure("lease_end_tx", "tx AB12 ended lease l1 (...), but names no amount for it", transient=False)
    out = searches.answered(answer(call.message, error=unknown), T0)
    (issue,) = sent(out, LeaseIssue)
    assert issue.message.kind == "close_not_found" and "AB12" in issue.message.detail
    assert not sent(out, CloseSearchCall) and not sent(out, SettlementsRecorded)  # the same tx would be found again
    assert [e.message.kind for e in sent(out, LeaseIssueResolved)] == [CLOSE_SOUGHT] and searches.pending == {}


def test_a_node_without_a_tx_index_is_reported_once_and_a_passing_failure_is_sought_again_with_backoff() -> None:
    searches = CloseSearches()
    (call,) = sent(searches.ended(ENDED, T0), CloseSearchCall)
    down = ChainFailure("lease_end_tx", "UNAVAILABLE", transient=True)
    now = T0
    for n in (1, 2, 3):
        out = searches.answered(answer(call.message, error=down), now)
        (call,) = sent(out, CloseSearchCall)
        assert call.at == now + retry_delay(n) and not sent(out, LeaseIssueResolved)
        now = call.at
    none = ChainFailure("lease_end_tx", "transaction indexing is disabled", codespace=TX_INDEX, code=NO_TX_INDEX)
    out = searches.answered(answer(call.message, error=none), now)
    assert [e.message.kind for e in sent(out, LeaseIssue)] == ["no_tx_index"] and not sent(out, CloseSearchCall)
    assert [e.message.kind for e in sent(out, LeaseIssueResolved)] == [CLOSE_SOUGHT]
    assert searches.answered(answer(call.message, error=none), now) == []  # over


def test_a_search_already_out_when_our_own_close_is_heard_booked_ends_and_leaves_no_issue() -> None:
    """The round said the close failed, a re-check found the lease closed and the search began; then the
    close's late answer (or its lookup) booked it: the search's 'not found' must not stand beside it."""
    core = SchedulerDecisions(settings(), PROVIDER)
    (call,) = sent(core.handle(LeaseRead("l1", ENDED), T0), CloseSearchCall)
    out = core.handle(ClosuresFlushed(cycle=0, closed=("l1",), tx_hashes=("AB" * 32,)), T0)
    assert {e.message.kind for e in sent(out, LeaseIssueResolved)} == {"close_not_found", "no_tx_index", CLOSE_SOUGHT}
    assert core.handle(answer(call.message), T0) == []  # its "not found": nothing more in the books
    assert not sent(core.handle(LeaseRead("l1", ENDED), T0), CloseSearchCall)


def test_a_search_that_ended_not_found_before_our_own_close_was_heard_booked_has_its_issue_resolved() -> None:
    core = SchedulerDecisions(settings(), PROVIDER)
    (call,) = sent(core.handle(LeaseRead("l1", ENDED), T0), CloseSearchCall)
    failed = ChainFailure("close_search", "the query was refused", transient=False)
    ended = core.handle(answer(call.message, error=failed), T0)  # not transient: the search ends at once
    assert [e.message.kind for e in sent(ended, LeaseIssue)] == ["close_not_found"]
    out = core.handle(ClosuresFlushed(cycle=0, closed=("l1",), tx_hashes=("AB" * 32,)), T0)
    assert "close_not_found" in {e.message.kind for e in sent(out, LeaseIssueResolved)}
    # and a lease whose close was never searched for costs the books nothing
    assert not sent(core.handle(ClosuresFlushed(cycle=2, closed=("l9",)), T0), LeaseIssueResolved)


def test_a_close_a_lookup_found_resolves_the_books_notes_of_its_leases_even_from_before_a_restart() -> None:
    """A lookup restored at start finds the close: this run never saw the search that noted 'not found'."""
    core = SchedulerDecisions(settings(), PROVIDER)
    out = core.handle(ClosuresFlushed(cycle=0, closed=("l1",), tx_hashes=("AB" * 32,)), T0)
    assert {e.message.kind for e in sent(out, LeaseIssueResolved)} == {"close_not_found", "no_tx_index", CLOSE_SOUGHT}
    assert not sent(core.handle(ClosuresFlushed(cycle=3, closed=("l2",)), T0), LeaseIssueResolved)  # a round's own
