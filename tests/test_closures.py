"""Closure rounds: batches of 100, already-closed leases dropped, a syncing node waits."""

from __future__ import annotations

from datetime import timedelta

from actors.closures import CloseRound, plan_batches
from actors.effects import Send
from actors.schedule import SchedulerDecisions
from chain.errors import BILLING, LEASE_NOT_ACTIVE
from messages.chain import ChainFailure, CloseOutcome, Lease, NodeStatus
from messages.chain_actor import (
    CloseBatchAnswered,
    CloseBatchCall,
    CloseSearchCall,
    LeaseCheckAnswered,
    LeaseCheckCall,
    NodeStatusAnswered,
    NodeStatusCall,
)
from messages.coins import Coin
from messages.credit import CloseFailed, CloseRequested, LeasesClosed
from messages.ledger import CloseLookupClosed, CloseLookupOpened, ClosureRecorded, LeaseSettled, SettlementsRecorded
from messages.scheduler import ClosuresFlushed, LeaseRead
from runtime.clock import utc
from runtime.router import LEDGER
from tests.support import PROVIDER, item, settings

T0 = utc(2026, 3, 1)
S = settings()
FRESH = NodeStatus(100, T0, False)


def msgs(effects, kind):
    return [e.message for e in effects if isinstance(e, Send) and isinstance(e.message, kind)]


def test_batches_hold_at_most_100_and_one_reason() -> None:
    reqs = [CloseRequested(1, f"t{i}", tuple(f"l{i}-{j}" for j in range(30)), "credit depleted", read_height=100) for i in range(7)]
    reqs.append(CloseRequested(1, "tx", ("lx",), "other reason", read_height=100))
    batches = plan_batches(reqs)
    assert [len(b) for _, b in batches] == [100, 100, 10, 1]
    assert {r for r, _ in batches} == {"credit depleted", "other reason"}
    assert sorted(u for _, b in batches for u in b) == sorted(u for r in reqs for u in r.lease_uuids)


def test_batch_with_an_already_closed_lease_still_closes_the_rest() -> None:
    rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a", "b"), "r", read_height=100), CloseRequested(5, "t2", ("c",), "r", read_height=100)])
    rnd.begin()
    (call,) = msgs(rnd.on_status(NodeStatusAnswered(1, FRESH), T0), CloseBatchCall)
    assert call.lease_uuids == ("a", "b", "c")
    gone = ChainFailure("close_leases", "lease b is not active", BILLING, LEASE_NOT_ACTIVE)
    (check,) = msgs(rnd.on_batch(CloseBatchAnswered(1, 1, call.lease_uuids, error=gone), T0), LeaseCheckCall)
    (again,) = msgs(rnd.on_check(LeaseCheckAnswered(1, 1, ("a", "c")), T0), CloseBatchCall)
    assert again.lease_uuids == ("a", "c")
    out = rnd.on_batch(CloseBatchAnswered(1, 1, ("a", "c"), outcome=CloseOutcome(2, ("TX",))), T0)
    closed = msgs(out, LeasesClosed)
    assert LeasesClosed("t1", ("a",), "r", ("TX",)) in closed
    assert LeasesClosed("t1", ("b",), "r", (), already_closed=True) in closed
    assert LeasesClosed("t2", ("c",), "r", ("TX",)) in closed
    (flushed,) = msgs(out, ClosuresFlushed)
    assert (flushed.closed, flushed.already_closed, flushed.failed) == (("a", "c"), ("b",), ())
    assert rnd.finished


def test_a_failed_batch_tells_each_tenant() -> None:
    rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a",), "r", read_height=100)])
    rnd.on_status(NodeStatusAnswered(1, FRESH), T0)
    err = ChainFailure("close_leases", "out of gas", "sdk", 11, transient=True)
    out = rnd.on_batch(CloseBatchAnswered(1, 1, ("a",), error=err), T0)
    assert msgs(out, CloseFailed) == [CloseFailed("t1", ("a",), err, None)]
    assert msgs(out, ClosuresFlushed)[0].failed == ("a",)


def test_a_syncing_or_lagging_node_closes_nothing() -> None:
    for status in (NodeStatus(100, T0, True), NodeStatus(100, T0 - S.max_node_lag - timedelta(seconds=1), False)):
        rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a",), "r", read_height=100)])
        out = rnd.on_status(NodeStatusAnswered(1, status), T0)
        assert not msgs(out, CloseBatchCall)
        (failed,) = msgs(out, CloseFailed)
        assert failed.retry_at == T0 + S.credit_check_retry_interval
        assert "balances may be stale" in failed.error.message


def test_each_batchs_lease_settlements_go_to_the_ledger() -> None:
    rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a", "b"), "r", read_height=100)])
    rnd.on_status(NodeStatusAnswered(1, FRESH), T0)
    settled = (
        LeaseSettled(T0, "TX", "a", (Coin("umfx", 3),), kind="close", tenant="t1"),
        LeaseSettled(T0, "TX", "b", (Coin("umfx", 5),), kind="close", tenant="t1"),
    )
    out = rnd.on_batch(CloseBatchAnswered(1, 1, ("a", "b"), outcome=CloseOutcome(2, ("TX",), settled)), T0)
    to_ledger = [e.message for e in out if isinstance(e, Send) and e.to == LEDGER]
    (recorded,) = [m for m in to_ledger if isinstance(m, SettlementsRecorded)]
    assert recorded.settlements == settled
    assert [m for m in to_ledger if isinstance(m, ClosureRecorded)][0].lease_uuids == ("a", "b")
    # A failed batch settled nothing: nothing of the kind goes to the ledger.
    rnd = CloseRound(2, 5, S, [CloseRequested(5, "t1", ("c",), "r", read_height=100)])
    rnd.on_status(NodeStatusAnswered(2, FRESH), T0)
    err = ChainFailure("close_leases", "out of gas", "sdk", 11, transient=True)
    assert not msgs(rnd.on_batch(CloseBatchAnswered(2, 1, ("c",), error=err), T0), SettlementsRecorded)


def test_a_close_batch_of_unknown_outcome_is_looked_up_and_what_it_settled_reaches_the_books() -> None:
    """Its answer lost, the batch fails here; the chain may have applied it: the tx is looked up."""
    from actors.chain_actor import ChainDecisions
    from actors.withdraw_lookup import LOOKUP_DELAYS
    from messages.chain_actor import CloseTxAnswered, CloseTxCall, FlushClosures

    chain = ChainDecisions(S)
    chain.handle(CloseRequested(1, "manifest1a", ("la",), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(1, "manifest1b", ("lb",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(1), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True,
                        tx_hash="AB" * 32)
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, None, lost), T0)
    assert {m.tenant for m in msgs(out, CloseFailed)} == {"manifest1a", "manifest1b"}  # they ask again
    (look,) = [e for e in out if isinstance(e, Send) and isinstance(e.message, CloseTxCall)]
    assert look.at == T0 + LOOKUP_DELAYS[0] and look.message.lease_uuids == ("la", "lb")
    # Not known yet: the next lookup; then found applied.
    later = T0 + LOOKUP_DELAYS[0]
    out = chain.handle(CloseTxAnswered("AB" * 32, ("la", "lb"), 1), later)
    (again,) = [e for e in out if isinstance(e, Send) and isinstance(e.message, CloseTxCall)]
    assert again.message.attempt == 2 and again.at == later + LOOKUP_DELAYS[1]
    settled = tuple(LeaseSettled(T0, "AB" * 32, u, (Coin("umfx", 7),), kind="close") for u in ("la", "lb"))
    outcome = CloseOutcome(2, ("AB" * 32,), settled)
    out = chain.handle(CloseTxAnswered("AB" * 32, ("la", "lb"), 2, outcome), later)
    assert msgs(out, SettlementsRecorded) == [SettlementsRecorded(settled)]
    # Closed at the tx's block time (T0, its settlements say), not when the lookup found it.
    assert [(c.at, c.tenant, c.lease_uuids, c.tx_hashes) for c in msgs(out, ClosureRecorded)] == [
        (T0, "manifest1a", ("la",), ("AB" * 32,)), (T0, "manifest1b", ("lb",), ("AB" * 32,))]
    assert msgs(out, CloseLookupClosed) == [CloseLookupClosed("AB" * 32)]
    # The scheduler hears the close is booked (the round told it they failed): no search for its tx later;
    # and so do the tenants, whose monitors this run's round told of the failure.
    assert msgs(out, ClosuresFlushed) == [ClosuresFlushed(0, closed=("la", "lb"), tx_hashes=("AB" * 32,))]
    assert [(m.tenant, m.lease_uuids) for m in msgs(out, LeasesClosed)] == [("manifest1a", ("la",)), ("manifest1b", ("lb",))]
    assert chain.handle(CloseTxAnswered("AB" * 32, ("la", "lb"), 3, outcome), later) == []  # already settled


def test_a_close_looked_up_and_found_included_and_failed_closed_nothing() -> None:
    from actors.close_lookup import CloseLookups
    from messages.chain_actor import CloseTxAnswered

    lookups = CloseLookups()
    lookups.begin("CD" * 32, (("manifest1a", ("la",)),), "credit depleted", T0)
    failed = ChainFailure("close_outcome", "out of gas", codespace="sdk", code=11, transient=False)
    note, ended = lookups.answered(CloseTxAnswered("CD" * 32, ("la",), 1, None, failed), T0)
    assert "was included and failed" in note.text and "it closed nothing" in note.text
    assert ended.message == CloseLookupClosed("CD" * 32)  # the write-ahead entry ends in the books too
    assert lookups.pending == {}
    # One whose outcome cannot be read may have closed: its entry stays for the next start.
    lookups.begin("EF" * 32, (("manifest1a", ("la",)),), "credit depleted", T0)
    unreadable = ChainFailure("close_outcome", "undecodable", transient=False, may_have_committed=True)
    [note] = lookups.answered(CloseTxAnswered("EF" * 32, ("la",), 1, None, unreadable), T0)
    assert "looked up again at the next start" in note.text and lookups.pending == {}
    # So does one asked of a node that keeps no tx index (GetTx: it may have closed, none can say).
    from chain.errors import NO_TX_INDEX, TX_INDEX

    lookups.begin("AB" * 32, (("manifest1a", ("la",)),), "credit depleted", T0)
    unindexed = ChainFailure("close_outcome", "transaction indexing is disabled", codespace=TX_INDEX, code=NO_TX_INDEX,
                             transient=False, may_have_committed=True)
    [note] = lookups.answered(CloseTxAnswered("AB" * 32, ("la",), 1, None, unindexed), T0)
    assert "keeps no tx index" in note.text and "looked up again at the next start" in note.text


def test_a_close_tx_is_written_ahead_when_signed_and_its_entry_closed_behind_what_its_answer_booked() -> None:
    from actors.chain_actor import ChainDecisions
    from messages.chain_actor import CloseTxCall, CloseTxSigned, FlushClosures

    chain = ChainDecisions(S)
    chain.handle(CloseRequested(1, "manifest1a", ("la", "lc"), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(1, "manifest1b", ("lb",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(1), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    out = chain.handle(CloseTxSigned(batch.round, batch.batch, "EF" * 32), T0)
    assert msgs(out, CloseLookupOpened) == [
        CloseLookupOpened("EF" * 32, "credit depleted", (("manifest1a", ("la", "lc")), ("manifest1b", ("lb",))), T0)
    ]
    assert chain.handle(CloseTxSigned(batch.round, batch.batch, "EF" * 32), T0) == []  # told twice: once in the books
    block = T0 + timedelta(seconds=5)
    settled = tuple(LeaseSettled(block, "EF" * 32, u, (Coin("umfx", 3),), kind="close") for u in ("la", "lc", "lb"))
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, CloseOutcome(3, ("EF" * 32,), settled)),
                       block + timedelta(seconds=2))
    ledger = [e.message for e in out if isinstance(e, Send) and e.to == "ledger"]
    assert [type(m).__name__ for m in ledger] == ["SettlementsRecorded", "ClosureRecorded", "ClosureRecorded", "CloseLookupClosed"]
    assert {c.at for c in ledger if isinstance(c, ClosureRecorded)} == {block}  # the block's time, not the answer's

    # An answer that may have committed keeps the entry and hands the tx to the lookups, not written twice.
    chain.handle(CloseRequested(2, "manifest1a", ("ld",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(2), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    chain.handle(CloseTxSigned(batch.round, batch.batch, "CD" * 32), T0)
    lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True, tx_hash="CD" * 32)
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, None, lost), T0)
    assert not msgs(out, CloseLookupOpened) and not msgs(out, CloseLookupClosed)
    assert [e.message.tx_hash for e in out if isinstance(e, Send) and isinstance(e.message, CloseTxCall)] == ["CD" * 32]


def test_a_batch_that_answers_after_its_round_was_ended_by_a_failure_is_still_booked() -> None:
    """Handling a step of the round raised and ``recover`` ended it while a batch's tx was out:
    its tenants re-check on their own, but the tx's facts still reach the books, its record closed
    behind them; and a batch that may have committed is looked up."""
    from actors.chain_actor import ChainDecisions
    from messages.chain_actor import CloseTxCall, CloseTxSigned, FlushClosures

    chain = ChainDecisions(S)
    chain.handle(CloseRequested(1, "manifest1a", ("la",), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(1, "manifest1b", ("lb",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(1), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    chain.recover(NodeStatusAnswered(status.round, FRESH), T0)  # a later step raised: the round is over
    assert batch.round not in chain.rounds
    out = chain.handle(CloseTxSigned(batch.round, batch.batch, "EF" * 32), T0)
    assert [m.tx_hash for m in msgs(out, CloseLookupOpened)] == ["EF" * 32]
    settled = tuple(LeaseSettled(T0, "EF" * 32, u, (Coin("umfx", 3),), kind="close") for u in ("la", "lb"))
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, CloseOutcome(2, ("EF" * 32,), settled)), T0)
    ledger = [type(e.message).__name__ for e in out if isinstance(e, Send) and e.to == "ledger"]
    assert ledger == ["SettlementsRecorded", "ClosureRecorded", "ClosureRecorded", "CloseLookupClosed"]
    assert chain.aborted == {}  # every batch answered: nothing more is awaited
    # The round's end told the tenants and the scheduler these failed: now they hear they closed.
    assert [(m.tenant, m.lease_uuids) for m in msgs(out, LeasesClosed)] == [("manifest1a", ("la",)), ("manifest1b", ("lb",))]
    (flushed,) = msgs(out, ClosuresFlushed)
    assert flushed.closed == ("la", "lb") and flushed.cycle == 1
    scheduler = SchedulerDecisions(S, PROVIDER)
    scheduler.handle(flushed, T0)
    ended = Lease("la", "manifest1a", PROVIDER, (item(3),), state="CLOSED", acknowledged_at=T0 - timedelta(days=1), closed_at=T0)
    assert not msgs(scheduler.handle(LeaseRead("la", ended), T0), CloseSearchCall)  # its close is booked: not sought
    # One that may have committed: looked up, its record kept.
    chain.handle(CloseRequested(2, "manifest1a", ("lc",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(2), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    chain.recover(NodeStatusAnswered(status.round, FRESH), T0)
    chain.handle(CloseTxSigned(batch.round, batch.batch, "CD" * 32), T0)
    lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True, tx_hash="CD" * 32)
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, None, lost), T0)
    assert not msgs(out, CloseLookupClosed)
    assert [e.message.tx_hash for e in out if isinstance(e, Send) and isinstance(e.message, CloseTxCall)] == ["CD" * 32]


def test_close_txs_left_open_by_a_previous_run_are_looked_up_at_start() -> None:
    from actors.chain_actor import ChainDecisions
    from actors.withdraw_lookup import LOOKUP_DELAYS
    from messages.chain_actor import CloseLookupsRestored, CloseTxCall

    chain = ChainDecisions(S)
    left = CloseLookupOpened("AB" * 32, "credit depleted", (("manifest1a", ("la",)),), T0 - timedelta(hours=1))
    out = chain.handle(CloseLookupsRestored((left,)), T0)
    (look,) = [e for e in out if isinstance(e, Send) and isinstance(e.message, CloseTxCall)]
    assert look.at == T0 + LOOKUP_DELAYS[0] and look.message.lease_uuids == ("la",)
    assert chain.handle(CloseLookupsRestored((left,)), T0) == []  # already being looked up
    # Found applied: the scheduler hears it, and so does its tenant. A monitor restored at start and
    # not told kept its leases and its saved grace window when the scheduler stopped it: the next
    # start restored that window onto the tenant's next lease, which its first read then closed.
    # (Mail to a tenant this run does not watch is dropped.)
    from messages.chain_actor import CloseTxAnswered

    settled = (LeaseSettled(T0, "AB" * 32, "la", (Coin("umfx", 2),), kind="close"),)
    out = chain.handle(CloseTxAnswered("AB" * 32, ("la",), 1, CloseOutcome(1, ("AB" * 32,), settled)), T0)
    assert msgs(out, ClosuresFlushed) == [ClosuresFlushed(0, closed=("la",), tx_hashes=("AB" * 32,))]
    assert msgs(out, LeasesClosed) == [LeasesClosed("manifest1a", ("la",), "credit depleted", ("AB" * 32,))]


def test_a_lookup_on_a_node_without_a_tx_index_ends_saying_the_outcome_is_unknown_not_failed() -> None:
    from actors.withdraw_lookup import not_applied_yet
    from chain.errors import NO_TX_INDEX, TX_INDEX

    none = ChainFailure("close_outcome", "transaction indexing is disabled", codespace=TX_INDEX, code=NO_TX_INDEX)
    text, delay = not_applied_yet("close tx CD", 1, none, "it closed nothing")
    assert delay is None and "was included and failed" not in text and "it closed nothing" not in text
    assert "keeps no tx index" in text and "missing from the books" in text


def test_a_lookup_that_finds_a_batch_applied_before_its_round_ends_has_the_round_report_it_closed() -> None:
    """Two batches: the first's answer is lost and its lookup finds it applied while the second is still
    out. The round's end then says those leases closed, once, not failed (and no one hears both)."""
    from actors.chain_actor import ChainDecisions
    from messages.chain_actor import CloseTxAnswered, FlushClosures

    chain = ChainDecisions(S)
    chain.handle(CloseRequested(1, "manifest1a", ("la",), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(1, "manifest1b", ("lb",), "tenant asked", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(1), T0), NodeStatusCall)
    first, second = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True, tx_hash="AB" * 32)
    out = chain.handle(CloseBatchAnswered(first.round, first.batch, first.lease_uuids, None, lost), T0)
    assert not msgs(out, ClosuresFlushed)  # the round goes on: its second batch is out
    settled = (LeaseSettled(T0, "AB" * 32, first.lease_uuids[0], (Coin("umfx", 4),), kind="close"),)
    out = chain.handle(CloseTxAnswered("AB" * 32, first.lease_uuids, 1, CloseOutcome(1, ("AB" * 32,), settled)), T0)
    assert msgs(out, SettlementsRecorded) and not msgs(out, LeasesClosed)  # the round's end tells the tenant
    assert [f.cycle for f in msgs(out, ClosuresFlushed)] == [0]  # the scheduler at once: the books' notes resolved
    done = CloseOutcome(1, ("CD" * 32,), ())
    out = chain.handle(CloseBatchAnswered(second.round, second.batch, second.lease_uuids, done), T0)
    (flushed,) = msgs(out, ClosuresFlushed)
    assert flushed.closed == ("la", "lb") and flushed.failed == ()
    assert not msgs(out, CloseFailed)
    assert sorted((m.tenant, m.lease_uuids) for m in msgs(out, LeasesClosed)) == [("manifest1a", ("la",)), ("manifest1b", ("lb",))]


def test_a_lookup_of_two_leases_one_of_which_a_later_round_holds_failed_tells_each_tenant_once() -> None:
    """Round 1 lost its batch of la and lb (looked up); round 2 asked for la again and lost it too, with
    another batch still out. The lookup finds the first tx applied: lb's tenant hears it now, la's
    from round 2's end, which reports la closed, not failed."""
    from actors.chain_actor import ChainDecisions
    from messages.chain_actor import CloseTxAnswered, FlushClosures

    chain = ChainDecisions(S)
    lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True, tx_hash="AB" * 32)
    chain.handle(CloseRequested(1, "manifest1a", ("la",), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(1, "manifest1b", ("lb",), "credit depleted", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(1), T0), NodeStatusCall)
    (batch,) = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    out = chain.handle(CloseBatchAnswered(batch.round, batch.batch, batch.lease_uuids, None, lost), T0)
    assert {m.tenant for m in msgs(out, CloseFailed)} == {"manifest1a", "manifest1b"}  # round 1 over
    chain.handle(CloseRequested(2, "manifest1a", ("la",), "credit depleted", read_height=100), T0)
    chain.handle(CloseRequested(2, "manifest1c", ("lc",), "tenant asked", read_height=100), T0)
    (status,) = msgs(chain.handle(FlushClosures(2), T0), NodeStatusCall)
    batches = msgs(chain.handle(NodeStatusAnswered(status.round, FRESH), T0), CloseBatchCall)
    (again,) = [b for b in batches if b.lease_uuids == ("la",)]
    (other,) = [b for b in batches if b.lease_uuids == ("lc",)]
    again_lost = ChainFailure("close_leases", "not included in time", transient=True, may_have_committed=True,
                              tx_hash="EF" * 32)
    chain.handle(CloseBatchAnswered(again.round, again.batch, again.lease_uuids, None, again_lost), T0)
    settled = tuple(LeaseSettled(T0, "AB" * 32, u, (Coin("umfx", 4),), kind="close") for u in ("la", "lb"))
    out = chain.handle(CloseTxAnswered("AB" * 32, ("la", "lb"), 1, CloseOutcome(2, ("AB" * 32,), settled)), T0)
    assert [(m.tenant, m.lease_uuids) for m in msgs(out, LeasesClosed)] == [("manifest1b", ("lb",))]
    assert [f.closed for f in msgs(out, ClosuresFlushed)] == [("la", "lb")]
    out = chain.handle(CloseBatchAnswered(other.round, other.batch, other.lease_uuids, CloseOutcome(1, ("CD" * 32,), ())), T0)
    (flushed,) = msgs(out, ClosuresFlushed)
    assert flushed.closed == ("la", "lc") and flushed.failed == () and not msgs(out, CloseFailed)


def test_a_batch_refused_for_one_lease_is_split_until_only_that_lease_fails() -> None:
    """The message is atomic: one lease that cannot be closed with the others (the provider's own lease,
    whose sender role is tenant, in a batch of its tenants'; a payout the bank blocks) failed the whole
    batch, and its tenants were batched together again at every re-check, all kept open."""
    reqs = [CloseRequested(5, f"t{i}", (f"l{i}",), "r", read_height=100) for i in range(5)]
    rnd = CloseRound(1, 5, S, reqs)
    (call,) = msgs(rnd.on_status(NodeStatusAnswered(1, FRESH), T0), CloseBatchCall)
    refused = ChainFailure("close_leases", "sender has inconsistent authorization: lease l3 requires tenant role", BILLING, 6)

    answer_all(rnd, call, refused)
    # ErrInvalidLease (9) too: one lease the chain cannot settle (its last settlement after the block time).
    rnd = CloseRound(1, 5, S, reqs)
    (call,) = msgs(rnd.on_status(NodeStatusAnswered(1, FRESH), T0), CloseBatchCall)
    answer_all(rnd, call, ChainFailure("close_leases", "failed to settle lease l3", BILLING, 9))


def answer_all(rnd: CloseRound, call: CloseBatchCall, refused: ChainFailure) -> None:
    """Answer ``call`` and every batch it is split into: refused where l3 is in it, closed elsewhere."""

    def answer(c: CloseBatchCall) -> list:
        if "l3" in c.lease_uuids:
            return rnd.on_batch(CloseBatchAnswered(1, c.batch, c.lease_uuids, error=refused), T0)
        return rnd.on_batch(CloseBatchAnswered(1, c.batch, c.lease_uuids, outcome=CloseOutcome(len(c.lease_uuids), (f"TX{c.batch}",))), T0)

    calls, out, sent = [call], [], 0
    while calls:
        c = calls.pop(0)
        sent += 1
        effects = answer(c)
        out += effects
        calls += msgs(effects, CloseBatchCall)
    (flushed,) = msgs(out, ClosuresFlushed)
    assert flushed.closed == ("l0", "l1", "l2", "l4") and flushed.failed == ("l3",)
    assert msgs(out, CloseFailed) == [CloseFailed("t3", ("l3",), refused, None)]
    assert sent <= 1 + 2 * 3  # halves: a few txs more, not one per lease


def test_a_batch_that_may_have_applied_is_worth_the_same_try_again_or_is_refused_whole_is_not_split() -> None:
    for error in (
        ChainFailure("close_leases", "inclusion timed out", transient=True, may_have_committed=True, tx_hash="AB"),
        ChainFailure("close_leases", "node unavailable", "transport", transient=True),
        # refusals of the whole: every half would be refused too
        ChainFailure("close_leases", "insufficient fee", "sdk", 13),
        ChainFailure("close_leases", "sender x is not authorized to close leases for provider p", BILLING, 6),
    ):
        rnd = CloseRound(1, 5, S, [CloseRequested(5, "t1", ("a", "b"), "r", read_height=100)])
        (call,) = msgs(rnd.on_status(NodeStatusAnswered(1, FRESH), T0), CloseBatchCall)
        out = rnd.on_batch(CloseBatchAnswered(1, 1, call.lease_uuids, error=error), T0)
        assert not msgs(out, CloseBatchCall) and msgs(out, ClosuresFlushed)[0].failed == ("a", "b")


def test_a_round_splits_at_most_max_splits_times_when_every_lease_is_refused() -> None:
    """Every lease of 250 refused alike: split down to single leases, a round sent ~500 txs, again at every
    re-check. The splits stop at MAX_SPLITS; what is left fails, to be tried at the re-check."""
    from actors.closures import MAX_SPLITS

    reqs = [CloseRequested(5, f"t{i}", (f"l{i}",), "r", read_height=100) for i in range(250)]
    rnd = CloseRound(1, 5, S, reqs)
    calls = msgs(rnd.on_status(NodeStatusAnswered(1, FRESH), T0), CloseBatchCall)
    blocked = ChainFailure("close_leases", "failed to transfer: payout not allowed to receive funds", BILLING, 19)
    sent, out = 0, []
    while calls:
        c = calls.pop(0)
        sent += 1
        effects = rnd.on_batch(CloseBatchAnswered(1, c.batch, c.lease_uuids, error=blocked), T0)
        out += effects
        calls += msgs(effects, CloseBatchCall)
    assert rnd.splits == MAX_SPLITS and sent == 3 + 2 * MAX_SPLITS
    (flushed,) = msgs(out, ClosuresFlushed)
    assert len(flushed.failed) == 250
