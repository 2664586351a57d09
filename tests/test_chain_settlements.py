"""Per-lease settlements of our own withdraws and closes, from the chain to the ledger.

Over real gRPC to the devnet (manual clock, blocks cut only when a tx
waits, so amounts are exact) and on the in-process model: each
``WithdrawPage``/``CloseOutcome`` carries what its tx moved from each lease,
equal to what the chain model booked (``BillingModel.lease_totals``), and
the withdraw cycle and closure round hand them to the ledger writer. In
model mode the ledger's model feed reports the same settlements from the
model's events: the ledger must hold each once.
"""

from __future__ import annotations

import pytest

from collections import defaultdict

from actors.chain_actor import ChainActor
from actors.chain_io import ChainIO, InlineExecutor
from actors.ledger_writer import start_ledger_writer
from actors.shell import start_actor
from chain.cosmpy_client import IncludedTx, parse_block_time
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from chain.settlements import settlements_in_tx
from ledger.model_feed import ModelLedgerFeed
from ledger.settings import LedgerSettings
from ledger.store import Ledger
from messages.chain import LeaseItem
from messages.chain_actor import FlushClosures, WithdrawRequested
from messages.coins import Coin
from messages.credit import CloseRequested
from messages.ledger import LeaseSettled
from messages.scheduler import ClosuresFlushed, WithdrawFinished
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import CHAIN, SCHEDULER, Router
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, World
from tests.support import addr, chain_model, probe, settings

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")


def by_lease(settlements) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for s in settlements:
        for c in s.amounts:
            out[s.lease_uuid][c.denom] = out[s.lease_uuid].get(c.denom, 0) + c.amount
    return dict(out)


def paid(model: BillingModel, leases) -> dict[str, dict[str, int]]:
    return {u: model.lease_totals(u)[1] for u in leases if model.lease_totals(u)[1]}


def two_denom_lease(model: BillingModel, tenant: str) -> str:
    items = [LeaseItem("cpu", 2, Coin("umfx", 3)), LeaseItem("gpu", 1, Coin("upwr", 5))]
    return model.create_lease(tenant, PROVIDER, items).uuid


def populate(model: BillingModel, fund, lease) -> dict[str, str]:
    """Our leases: a plain one, a two-denom one, one whose tenant runs dry; and another provider's."""
    rich = fund("rich", 10**9)
    model.fund_credit(rich, [Coin("upwr", 10**9)])
    poor = fund("poor", 600)
    return {
        "plain": lease(rich, 10, PROVIDER),
        "two_denoms": two_denom_lease(model, rich),
        "runs_dry": lease(poor, 10, PROVIDER),
        "other": lease(rich, 10, OTHER_PROVIDER),
    }


def devnet_leases(world: World) -> dict[str, str]:
    return populate(world.model, world.tenant, lambda t, price, p: world.lease(t, price=price, provider=p))


def test_a_withdraw_over_grpc_carries_each_lease_settlement(world: World) -> None:
    """Provider-wide pages on the current chain; named withdraws on v2.1.0, whose auto-close event
    says amount 0 (2.5): the tx's total books what it moved."""
    leases = devnet_leases(world)
    ours = [leases["plain"], leases["two_denoms"], leases["runs_dry"]]
    world.clock.advance(100)
    client = world.client(withdraw_limit=2)

    if world.model.version.withdraw_cursor:
        first = client.withdraw_by_provider(PROVIDER, b"")
        second = client.withdraw_by_provider(PROVIDER, first.next_key)
        assert first.has_more and not second.has_more
    else:
        first = client.withdraw_leases(sorted(ours)[:2])
        second = client.withdraw_leases(sorted(ours)[2:])
    settled = first.settlements + second.settlements
    assert sorted(s.lease_uuid for s in settled) == sorted(ours)  # never the other provider's lease
    assert by_lease(settled) == paid(world.model, ours)
    assert by_lease(settled)[leases["runs_dry"]] == {"umfx": 600}  # all the credit there was; auto-closed
    assert world.model.lease(leases["runs_dry"]).state == "CLOSED"
    assert set(by_lease(settled)[leases["two_denoms"]]) == {"umfx", "upwr"}
    for page in (first, second):
        assert {s.tx_hash for s in page.settlements} == {page.tx_hash}
        assert all(s.kind == "withdraw" for s in page.settlements)
        page_total = defaultdict(int)
        for s in page.settlements:
            for c in s.amounts:
                page_total[c.denom] += c.amount
        assert tuple(Coin(d, a) for d, a in sorted(page_total.items())) == page.total_amounts
        included = world.node.get_tx(page.tx_hash)
        assert all(s.at == parse_block_time(included.timestamp) for s in page.settlements)


def test_a_close_over_grpc_carries_each_lease_settlement(world: World) -> None:
    leases = devnet_leases(world)
    world.clock.advance(40)
    client = world.client()
    client.withdraw_by_provider(PROVIDER, b"")  # the close settles only what accrued since
    world.clock.advance(30)
    before = paid(world.model, [leases["plain"], leases["two_denoms"]])

    outcome = client.close_leases([leases["plain"], leases["two_denoms"]], "tenant asked")

    after = paid(world.model, [leases["plain"], leases["two_denoms"]])
    expected = {u: {d: a - before[u].get(d, 0) for d, a in totals.items()} for u, totals in after.items()}
    assert by_lease(outcome.settlements) == expected
    assert expected[leases["plain"]]["umfx"] >= 300  # 30 s and a block at 10/s: something was settled
    assert all(s.kind == "close" and s.tx_hash == outcome.tx_hashes[0] for s in outcome.settlements)
    assert {s.tenant for s in outcome.settlements} == {world.model.lease(leases["plain"]).tenant}


def wire(clock, client, ledger: Ledger, provider_uuid: str = PROVIDER):
    """chain-io + chain actor + ledger writer on one manual dispatcher, a probe as the scheduler."""
    dispatcher = ManualDispatcher(clock.now)
    router = Router()
    start_actor(router, ChainIO, dispatcher, router, client, provider_uuid, InlineExecutor(), InlineExecutor())
    start_actor(router, ChainActor, dispatcher, router, clock, settings())
    writer = start_ledger_writer(router, clock, ledger, LedgerSettings(), dispatcher=dispatcher)
    scheduler = probe(router, dispatcher, SCHEDULER)
    return dispatcher, router, writer, scheduler


def withdraw_then_close(dispatcher, router, scheduler, clock, close: list[str], tenant: str) -> None:
    router.tell(CHAIN, WithdrawRequested(1))
    dispatcher.run_until_idle()
    (finished,) = [m for m in scheduler.received if isinstance(m, WithdrawFinished)]
    assert finished.error is None and finished.withdrawal_count == 3
    clock.advance(20)  # so that the close settles something of its own
    # Decided on a read at the chain's latest height (one at or past the node's latest is fresh).
    router.tell(CHAIN, CloseRequested(1, tenant, tuple(close), "tenant asked", read_height=10**9))
    router.tell(CHAIN, FlushClosures(1))
    dispatcher.run_until_idle()
    (flushed,) = [m for m in scheduler.received if isinstance(m, ClosuresFlushed)]
    assert flushed.closed == tuple(sorted(close)) and flushed.error is None


def ledger_settlements(ledger: Ledger) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for lease, denom, amount in ledger.conn.execute("SELECT lease_uuid, denom, amount FROM settlements"):
        out[lease][denom] = out[lease].get(denom, 0) + int(amount)
    return dict(out)


def test_devnet_settlements_reach_the_ledger_through_the_actors(world: World, tmp_path) -> None:
    leases = devnet_leases(world)
    ours = [leases["plain"], leases["two_denoms"], leases["runs_dry"]]
    world.clock.advance(100)
    ledger = Ledger.open(tmp_path / "l.sqlite", PROVIDER)
    dispatcher, router, writer, scheduler = wire(world.clock, world.client(withdraw_limit=2), ledger)
    try:
        rich = world.model.lease(leases["plain"]).tenant
        withdraw_then_close(dispatcher, router, scheduler, world.clock, [leases["plain"], leases["two_denoms"]], rich)
        assert ledger_settlements(ledger) == paid(world.model, ours)
        kinds = dict(ledger.conn.execute("SELECT kind, COUNT(*) FROM settlements GROUP BY kind").fetchall())
        assert kinds == {"withdraw": 4, "close": 3}  # 4 (lease, denom) withdrawn, 3 closed
    finally:
        writer.close()  # the writer closes the ledger when the dispatcher delivers its stop
        dispatcher.run_until_idle()


def test_model_mode_counts_each_settlement_once_with_the_feed_attached(tmp_path) -> None:
    clock = ManualClock(utc(2026, 3, 1))
    model = chain_model(clock)
    model.register_provider(PROVIDER, addr("provider"))
    model.register_provider(OTHER_PROVIDER, addr("other"))

    def fund(name: str, umfx: int) -> str:
        model.fund_credit(addr(f"{name}"), [Coin("umfx", umfx)])
        return addr(f"{name}")

    def lease(tenant: str, price: int, provider: str) -> str:
        return model.create_lease(tenant, provider, [LeaseItem("sku-1", 1, Coin("umfx", price))]).uuid

    leases = populate(model, fund, lease)
    ours = [leases["plain"], leases["two_denoms"], leases["runs_dry"]]
    clock.advance(100)
    client = ModelChainClient(model, PROVIDER, addr("provider"), withdraw_limit=2)
    ledger = Ledger.open(tmp_path / "l.sqlite", PROVIDER)
    dispatcher, router, writer, scheduler = wire(clock, client, ledger)
    feed_saw: list[str] = []
    model.subscribe(lambda tx: feed_saw.append(tx.tx_hash))
    ModelLedgerFeed(model, router, PROVIDER, ledger)
    try:
        rich = model.lease(leases["plain"]).tenant
        sent: list[LeaseSettled] = []
        by_provider, by_name = client.withdraw_by_provider, client.withdraw_leases

        def spy(page):  # type: ignore[no-untyped-def]
            sent.extend(page.settlements)
            return page

        client.withdraw_by_provider = lambda p, k, signed=None: spy(by_provider(p, k, signed=signed))  # type: ignore[method-assign]
        client.withdraw_leases = lambda u, signed=None: spy(by_name(u, signed=signed))  # type: ignore[method-assign]
        withdraw_then_close(dispatcher, router, scheduler, clock, [leases["plain"], leases["two_denoms"]], rich)
        # The client reported the model's own tx hashes: the feed's settlements coincide with them.
        assert sent and {s.tx_hash for s in sent} <= set(feed_saw)
        assert ledger_settlements(ledger) == paid(model, ours)
        rows = ledger.conn.execute("SELECT COUNT(*) FROM settlements").fetchone()[0]
        assert rows == 7
    finally:
        writer.close()
        dispatcher.run_until_idle()


def test_settlements_in_tx_filters_and_skips_bad_events() -> None:
    at = utc(2026, 3, 1)
    events = [
        ("provider_withdraw", {"lease_uuid": "a", "provider_uuid": PROVIDER, "amount": "5umfx,2upwr"}),
        ("provider_withdraw", {"lease_uuid": "b", "provider_uuid": OTHER_PROVIDER, "amount": "9umfx"}),
        ("provider_withdraw", {"lease_uuid": "", "provider_uuid": PROVIDER, "amount": "1umfx"}),
        ("provider_withdraw", {"lease_uuid": "c", "provider_uuid": PROVIDER, "amount": "1.5umfx"}),
        ("lease_closed", {"lease_uuid": "d", "provider_uuid": PROVIDER, "settled_amounts": "7umfx", "tenant": "t"}),
        ("batch_withdraw", {"provider_uuid": PROVIDER, "amount": "14umfx"}),
    ]
    mine = settlements_in_tx("TX", at, events, provider_uuid=PROVIDER)
    assert [(s.lease_uuid, s.kind, s.amounts) for s in mine] == [
        ("a", "withdraw", (Coin("umfx", 5), Coin("upwr", 2))),
        ("d", "close", (Coin("umfx", 7),)),
    ]
    assert mine[1].tenant == "t" and all(s.at == at and s.tx_hash == "TX" for s in mine)
    assert [s.lease_uuid for s in settlements_in_tx("TX", at, events, lease_uuids={"b", "d"})] == ["b", "d"]


def test_a_v2_1_named_withdraws_auto_close_books_the_rest_of_the_total_to_the_lease_alone_in_its_tx() -> None:
    from chain.settlements import settlements_in_withdraw

    at = utc(2026, 3, 1)
    closing = ("provider_withdraw", {"lease_uuid": "a", "provider_uuid": PROVIDER, "amount": "0", "auto_closed": "true"})
    settling = ("provider_withdraw", {"lease_uuid": "b", "provider_uuid": PROVIDER, "amount": "4umfx"})
    # v2.1.0 writes amount "0" on the auto-closed lease; the tx's total says what it moved.
    out = settlements_in_withdraw("TX", at, [closing, settling], (Coin("umfx", 11),), provider_uuid=PROVIDER)
    assert {s.lease_uuid: s.amounts for s in out} == {"a": (Coin("umfx", 7),), "b": (Coin("umfx", 4),)}
    # Two auto-closed leases in one tx: the split cannot be known, so nothing is guessed, and
    # neither is booked as having settled nothing (their "0" is not what they settled).
    other = ("provider_withdraw", {"lease_uuid": "c", "provider_uuid": PROVIDER, "amount": "0", "auto_closed": "true"})
    out = settlements_in_withdraw("TX", at, [closing, other, settling], (Coin("umfx", 11),), provider_uuid=PROVIDER)
    assert {s.lease_uuid: s.amounts for s in out} == {"b": (Coin("umfx", 4),)}
    # The tx's answer unread: the one auto-close's share is not known either.
    out = settlements_in_withdraw("TX", at, [closing, settling], None, provider_uuid=PROVIDER)
    assert {s.lease_uuid: s.amounts for s in out} == {"b": (Coin("umfx", 4),)}
    # All of the total accounted for by the other leases: the auto-close did settle nothing.
    out = settlements_in_withdraw("TX", at, [closing, settling], (Coin("umfx", 4),), provider_uuid=PROVIDER)
    assert {s.lease_uuid: s.amounts for s in out} == {"a": (), "b": (Coin("umfx", 4),)}
    # The current chain's events carry the real amounts: nothing is left to attribute.
    exact = ("provider_withdraw", {"lease_uuid": "a", "provider_uuid": PROVIDER, "amount": "7umfx", "auto_closed": "true"})
    out = settlements_in_withdraw("TX", at, [exact, settling], (Coin("umfx", 11),), provider_uuid=PROVIDER)
    assert {s.lease_uuid: s.amounts for s in out} == {"a": (Coin("umfx", 7),), "b": (Coin("umfx", 4),)}


def test_parse_block_time_reads_a_nodes_timestamps() -> None:
    assert parse_block_time("2026-03-01T00:00:05Z") == utc(2026, 3, 1, 0, 0, 5)
    assert parse_block_time("2026-03-01T00:00:05.123456789Z") == utc(2026, 3, 1, 0, 0, 5, 123456)
    assert parse_block_time("2026-03-01T02:00:05.5+02:00") == utc(2026, 3, 1, 0, 0, 5, 500000)
    for bad in ("", "yesterday", "2026-13-01T00:00:00Z", "2026-03-01 00:00:05"):
        assert parse_block_time(bad) is None


def test_a_tx_without_a_block_time_keeps_its_answer_and_says_what_was_not_recorded(world: World, caplog) -> None:
    client = world.client()
    events = (("provider_withdraw", {"lease_uuid": "a", "provider_uuid": PROVIDER, "amount": "5umfx"}),)
    stamped = IncludedTx("TXA", 7, (), 1, events, "2026-03-01T00:00:05Z")
    assert [s.at for s in client._settlements("withdraw", stamped, provider_uuid=PROVIDER)] == [utc(2026, 3, 1, 0, 0, 5)]
    # No timestamp: the block's header time is asked for; this devnet has no
    # GetBlockByHeight, so the settlements are left out with a warning.
    unstamped = IncludedTx("TXB", 7, (), 1, events, "")
    with caplog.at_level("WARNING", logger="chain.cosmpy_client"):
        assert client._settlements("withdraw", unstamped, provider_uuid=PROVIDER) == ()
    assert "tx TXB at height 7: no block time" in caplog.text


def test_a_listing_cut_short_between_pages_is_walked_again_never_taken_for_the_whole_set() -> None:
    import pytest

    from chain.errors import ChainError
    from chain.listing import MAX_RELISTS, walk_pages

    pages = {b"": (["l1", "l2"], b"l3"), b"l3": (["l3", "l4"], b"")}
    cut = {"times": 1}

    def fetch(key: bytes):  # type: ignore[no-untyped-def]
        if key == b"l3" and cut["times"]:
            cut["times"] -= 1
            return [], b""  # l3 closed between the pages: the page after it comes back empty
        return pages[key]

    assert walk_pages("leases", fetch) == ("l1", "l2", "l3", "l4")
    cut["times"] = MAX_RELISTS + 1
    with pytest.raises(ChainError, match="cut short 4 times") as info:
        walk_pages("leases", fetch)
    assert info.value.transient  # a failed read, asked again later; never a short set
    # An empty first page is a real end (an empty set), not a cut.
    assert walk_pages("leases", lambda key: ([], b"")) == ()
    # A node that repeats a key is an error, not a hang.
    with pytest.raises(ChainError, match="repeated page key"):
        walk_pages("leases", lambda key: (["x"], b"k"))
