"""A signed tx's hash is durable in the books before the client broadcasts it (``actors.write_ahead``).

The ledger address here is a probe: nothing but chain-io's own write-ahead
reaches the database, as after a kill -9 that came before the ledger
writer's next commit.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from actors.chain_io import ChainIO, InlineExecutor
from actors.shell import start_actor
from actors.write_ahead import WRITE_AHEAD, WriteAhead
from ledger.store import Ledger
from messages.chain import CloseOutcome, Lease, WithdrawPage
from messages.chain_actor import (
    CloseBatchAnswered,
    CloseBatchCall,
    CloseTxSigned,
    WithdrawLeasesCall,
    WithdrawPageAnswered,
    WithdrawTxSigned,
)
from messages.coins import Coin
from messages.ledger import CloseLookupOpened, LeasesObserved
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import CHAIN, LEDGER, Router
from tests.support import PROVIDER, addr, item, probe

T0 = utc(2026, 5, 1)
LEASE_A = "019d0000-0000-7000-8000-00000000000a"
LEASE_B = "019d0000-0000-7000-8000-00000000000b"


class Broadcasting:
    """A client that signs one tx, then broadcasts it: what the books held at the broadcast is kept."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.broadcasts = 0
        #: the withdraw / close lookup hashes committed in the file when the tx went out
        self.durable_at_broadcast: list[str] = []

    def _broadcast(self, tx_hash: str, signed) -> None:
        signed(tx_hash)
        reader = sqlite3.connect(self.path)
        try:
            self.durable_at_broadcast = [
                row[0] for row in reader.execute(
                    "SELECT tx_hash FROM withdraw_lookups UNION ALL SELECT tx_hash FROM close_lookups"
                )
            ]
        finally:
            reader.close()
        self.broadcasts += 1

    def withdraw_leases(self, lease_uuids, signed=None) -> WithdrawPage:
        self._broadcast("AA" * 32, signed)
        return WithdrawPage("AA" * 32, (Coin("umfx", 7),), 1, False, b"")

    def close_leases(self, lease_uuids, reason, signed=None) -> CloseOutcome:
        self._broadcast("BB" * 32, signed)
        return CloseOutcome(closed_count=len(lease_uuids), tx_hashes=("BB" * 32,))


def wire(tmp_path, record=None):
    clock = ManualClock(T0)
    d = ManualDispatcher(clock.now)
    router = Router()
    ledger = Ledger.open(tmp_path / "ledger.sqlite", PROVIDER)
    client = Broadcasting(str(tmp_path / "ledger.sqlite"))
    chain, books = probe(router, d, CHAIN), probe(router, d, LEDGER)
    io = start_actor(
        router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor(),
        WriteAhead(record or ledger.record, clock),
    )
    return clock, d, ledger, client, io, chain, books


def test_a_withdraw_tx_is_in_the_ledger_file_before_it_is_broadcast(tmp_path) -> None:
    _, d, ledger, client, io, chain, books = wire(tmp_path)
    io.tell(WithdrawLeasesCall(3, 2, 1, (LEASE_A,)))
    d.run_until_idle()
    assert client.durable_at_broadcast == ["AA" * 32]
    assert books.received == []  # the ledger writer was told nothing: the row is chain-io's own
    signed, answered = chain.received
    assert signed == WithdrawTxSigned(3, 2, 1, "AA" * 32)
    assert isinstance(answered, WithdrawPageAnswered) and answered.error is None
    # What a restart looks up: the page, under its cycle and number.
    (lookup,) = ledger.withdraw_lookups()
    assert (lookup.tx_hash, lookup.cycle, lookup.page, lookup.at) == ("AA" * 32, 3, 2, T0)


def test_a_close_written_ahead_is_restored_with_each_leases_tenant_from_the_books(tmp_path) -> None:
    _, d, ledger, client, io, chain, _ = wire(tmp_path)
    ledger.record(LeasesObserved(T0, (
        Lease(LEASE_A, addr("t1"), PROVIDER, (item(1),), state="ACTIVE"),
        Lease(LEASE_B, addr("t2"), PROVIDER, (item(1),), state="ACTIVE"),
    )))
    io.tell(CloseBatchCall(1, 1, (LEASE_A, LEASE_B), "credit exhausted"))
    d.run_until_idle()
    assert client.durable_at_broadcast == ["BB" * 32]
    assert chain.received[0] == CloseTxSigned(1, 1, "BB" * 32)
    assert isinstance(chain.received[1], CloseBatchAnswered)
    (restored,) = ledger.close_lookups()
    assert restored.by_tenant == ((addr("t1"), (LEASE_A,)), (addr("t2"), (LEASE_B,)))
    assert restored.reason == "credit exhausted"


def test_the_chain_actors_fact_of_the_same_close_gives_its_tenants_and_keeps_the_first_time(tmp_path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite", PROVIDER)
    ledger.record(CloseLookupOpened("CC" * 32, "gone", (("", (LEASE_A,)),), T0))  # written ahead
    later = T0 + timedelta(seconds=1)
    ledger.record(CloseLookupOpened("CC" * 32, "gone", ((addr("t9"), (LEASE_A,)),), later))
    (restored,) = ledger.close_lookups()
    assert restored.by_tenant == ((addr("t9"), (LEASE_A,)),) and restored.at == T0
    # The other order (the chain actor's first): the tenants stay.
    ledger.record(CloseLookupOpened("DD" * 32, "gone", ((addr("t9"), (LEASE_B,)),), T0))
    ledger.record(CloseLookupOpened("DD" * 32, "gone", (("", (LEASE_B,)),), later))
    assert ledger.close_lookups()[1].by_tenant == ((addr("t9"), (LEASE_B,)),)


def test_a_tx_whose_hash_the_books_cannot_take_is_not_broadcast(tmp_path) -> None:
    def refuse(fact) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    _, d, ledger, client, io, chain, _ = wire(tmp_path, record=refuse)
    io.tell(WithdrawLeasesCall(3, 2, 1, (LEASE_A,)))
    d.run_until_idle()
    assert client.broadcasts == 0
    (answered,) = chain.received  # no WithdrawTxSigned: nothing went out to be looked up
    assert isinstance(answered, WithdrawPageAnswered) and answered.result is None
    error = answered.error
    assert error is not None and error.codespace == WRITE_AHEAD
    assert error.transient and not error.may_have_committed  # the page is simply withdrawn again
    assert "disk I/O error" in error.message and "AA" * 32 in error.message
    assert ledger.withdraw_lookups() == []


def test_restored_lookups_reach_the_chain_actor_only_once_the_ledger_writer_is_there() -> None:
    """A restored lookup's first call fires 10 s of clock after the restore: on an accelerated
    clock, milliseconds. What it finds goes to the ledger writer, a part of the sidecar; told
    before the parts started, its facts found no writer and were dropped."""
    from chain.model_client import ModelChainClient
    from messages.ledger import WithdrawLookupOpened
    from sidecar.app import Sidecar
    from tests.support import PROVIDER_ADDRESS, chain_model, settings

    clock = ManualClock(T0)
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    inbox_empty_at_parts: list[bool] = []
    sidecar = Sidecar(
        clock=clock,
        dispatcher=ManualDispatcher(clock.now),
        client=ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS),
        settings=settings(),
        provider_uuid=PROVIDER,
        restored_lookups=(WithdrawLookupOpened("EE" * 32, 4, 1, T0),),
        extra=[lambda s: inbox_empty_at_parts.append(s.chain.actor_inbox.empty())],
    )
    try:
        assert inbox_empty_at_parts == [True]  # nothing told to the chain actor before the parts
        assert not sidecar.chain.actor_inbox.empty()  # and the restore told after them
    finally:
        sidecar.stop()
