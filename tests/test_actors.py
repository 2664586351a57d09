"""Each actor alone, its peers replaced by probes (manual clock and dispatcher)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from actors.chain_actor import ChainActor
from actors.chain_io import ChainIO, InlineExecutor
from actors.credit_monitor import CreditMonitorActor
from actors.scheduler import SchedulerActor
from actors.shell import start_actor
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from messages.chain import ChainFailure, CreditAccount, Lease, NodeStatus, WithdrawPage
from messages.chain_actor import (
    ActiveLeasesCall,
    CloseBatchAnswered,
    CloseBatchCall,
    CreditCall,
    CreditReadsCall,
    FlushClosures,
    NodeStatusAnswered,
    NodeStatusCall,
    WithdrawableAnswered,
    WithdrawableCall,
    WithdrawPageAnswered,
    WithdrawTxSigned,
    WithdrawPageCall,
    WithdrawRequested,
)
from messages.coins import Coin
from messages.credit import CloseRequested, CreditRead, CreditReadFailed, LeasesClosed, LeasesSynced
from messages.chain import CloseOutcome
from messages.ledger import TenantStateChanged, WithdrawalRecorded
from messages.scheduler import (
    ActiveLeasesRead,
    ClosuresFlushed,
    RunCycle,
    StartSchedule,
    TenantChecked,

    WithdrawFinished,
)
from runtime.clock import ManualClock, utc
from runtime.dispatch import ManualDispatcher
from runtime.router import CHAIN, CHAIN_IO, HEALTH, LEDGER, SCHEDULER, Router, tenant_address
from tests.support import PROVIDER, PROVIDER_ADDRESS, addr, chain_model, item, probe, settings

T0 = utc(2026, 3, 1)


def setup():
    clock = ManualClock(T0)
    d = ManualDispatcher(clock.now)
    return clock, d, Router()


def test_chain_actor_pages_through_chain_io_and_reports_to_the_scheduler() -> None:
    clock, d, router = setup()
    io, sched, ledger = probe(router, d, CHAIN_IO), probe(router, d, SCHEDULER), probe(router, d, LEDGER)
    chain = start_actor(router, ChainActor, d, router, clock, settings())
    chain.tell(WithdrawRequested(1))
    d.run_until_idle()
    assert io.received == [WithdrawableCall(1)]  # anything due? then the leases, to tell the chain's version
    chain.tell(WithdrawableAnswered(1, (Coin("umfx", 5),)))
    d.run_until_idle()
    assert io.received[-1] == ActiveLeasesCall(1, CHAIN)
    current = Lease("l1", "t1", PROVIDER, (item(1),), reservation=())  # field 16: the current chain
    chain.tell(ActiveLeasesRead(1, (current,)))
    d.run_until_idle()
    assert io.received[-1] == WithdrawPageCall(1, 1, 1, b"")
    chain.tell(WithdrawPageAnswered(1, 1, 1, result=WithdrawPage("TX1", (Coin("umfx", 5),), 1, True, b"k")))
    d.run_until_idle()
    assert io.received[-1] == WithdrawPageCall(1, 2, 1, b"k")
    chain.tell(WithdrawPageAnswered(1, 2, 1, result=WithdrawPage("TX2", (Coin("umfx", 7),), 1, False, b"")))
    d.run_until_idle()
    (done,) = sched.received
    assert isinstance(done, WithdrawFinished) and done.total_amounts == (Coin("umfx", 12),) and done.pages == 2
    assert [m.tx_hash for m in ledger.received if isinstance(m, WithdrawalRecorded)] == ["TX1", "TX2"]


def test_chain_actor_coalesces_the_closures_of_a_check_into_one_batch() -> None:
    clock, d, router = setup()
    io, sched = probe(router, d, CHAIN_IO), probe(router, d, SCHEDULER)
    t1, t2 = probe(router, d, tenant_address("t1")), probe(router, d, tenant_address("t2"))
    probe(router, d, LEDGER)
    chain = start_actor(router, ChainActor, d, router, clock, settings())
    chain.tell(CloseRequested(3, "t1", ("a", "b"), "credit depleted", read_height=9))
    chain.tell(CloseRequested(3, "t2", ("c",), "credit depleted", read_height=9))
    chain.tell(FlushClosures(3))
    d.run_until_idle()
    assert io.received == [NodeStatusCall(1, heights=(9,))]
    chain.tell(NodeStatusAnswered(1, NodeStatus(9, T0, False)))
    d.run_until_idle()
    assert io.received[-1] == CloseBatchCall(1, 1, ("a", "b", "c"), "credit depleted")
    chain.tell(CloseBatchAnswered(1, 1, ("a", "b", "c"), outcome=CloseOutcome(3, ("TX",))))
    d.run_until_idle()
    assert t1.received == [LeasesClosed("t1", ("a", "b"), "credit depleted", ("TX",))]
    assert t2.received == [LeasesClosed("t2", ("c",), "credit depleted", ("TX",))]
    assert sched.received == [ClosuresFlushed(3, closed=("a", "b", "c"), tx_hashes=("TX",))]


def test_credit_monitor_answers_the_scheduler_and_persists_its_state() -> None:
    clock, d, router = setup()
    sched, ledger, chain = probe(router, d, SCHEDULER), probe(router, d, LEDGER), probe(router, d, CHAIN)
    mon = start_actor(router, CreditMonitorActor, d, router, clock, "t1", settings())
    mon.tell(LeasesSynced((Lease("l1", "t1", PROVIDER, (item(1),)),)))
    mon.tell(CreditRead(1, CreditAccount("t1", (Coin("umfx", 100),))))
    d.run_until_idle()
    (verdict,) = sched.received
    assert isinstance(verdict, TenantChecked) and verdict.tenant == "t1" and verdict.cycle == 1
    assert any(isinstance(m, TenantStateChanged) for m in ledger.received)
    for n in range(3):
        mon.tell(CreditReadFailed(2 + n, ChainFailure("x", "down")))
    d.run_until_idle()
    assert sched.received[-1].recheck_at == T0 + settings().credit_check_retry_interval
    assert chain.received == []  # never a closure on failed reads


def test_chain_io_answers_each_call_to_the_right_actor() -> None:
    clock, d, router = setup()
    T1 = addr("t1")
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.fund_credit(T1, [Coin("umfx", 50)])
    model.create_lease(T1, PROVIDER, [item(1)])
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    tenant, sched, chain = probe(router, d, tenant_address(T1)), probe(router, d, SCHEDULER), probe(router, d, CHAIN)
    io = start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    io.tell(CreditReadsCall(4, (T1,)))
    io.tell(ActiveLeasesCall(4, SCHEDULER))
    io.tell(WithdrawPageCall(4, 1, 1, b""))
    d.run_until_idle()
    (read,) = tenant.received
    assert isinstance(read, CreditRead) and read.account.balances == (Coin("umfx", 50),) and len(read.leases) == 1
    (leases,) = sched.received
    assert isinstance(leases, ActiveLeasesRead) and len(leases.leases) == 1
    signed, page = chain.received  # the tx's hash first, for the books, then the answer
    assert isinstance(page, WithdrawPageAnswered) and page.result is not None and page.error is None
    assert signed == WithdrawTxSigned(4, 1, 1, page.result.tx_hash)
    client.faults.fail("credit_account")
    io.tell(CreditCall(5, T1))
    d.run_until_idle()
    assert isinstance(tenant.received[-1], CreditReadFailed) and tenant.received[-1].error.transient


def test_chain_io_says_whether_the_node_keeps_a_tx_index_only_when_asked() -> None:
    clock, d, router = setup()
    client = ModelChainClient(chain_model(clock), PROVIDER, PROVIDER_ADDRESS)
    health = probe(router, d, HEALTH)
    io = start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    io.tell(NodeStatusCall(1, reply_to=HEALTH, tx_index=True))
    io.tell(NodeStatusCall(2, reply_to=HEALTH))
    d.run_until_idle()
    client.tx_index_mode = "null"
    io.tell(NodeStatusCall(3, reply_to=HEALTH, tx_index=True))
    d.run_until_idle()
    client.faults.fail("keeps_tx_index")
    io.tell(NodeStatusCall(4, reply_to=HEALTH, tx_index=True))
    d.run_until_idle()
    answers = {m.round: m for m in health.received}
    assert answers[1].tx_index is True and answers[2].tx_index is None and answers[3].tx_index is False
    assert answers[4].tx_index is None and answers[4].status is not None  # the probe failed: not known, the status stands
    assert answers[4].tx_index_error is not None and answers[3].tx_index_error is None


def test_chain_io_keeps_the_node_status_when_its_client_cannot_say_about_a_tx_index() -> None:
    """A client without ``keeps_tx_index`` (another implementation): the status still answers, the index unknown."""

    class Older:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            if name == "keeps_tx_index":
                raise AttributeError(name)
            return getattr(self._inner, name)

    clock, d, router = setup()
    health = probe(router, d, HEALTH)
    client = Older(ModelChainClient(chain_model(clock), PROVIDER, PROVIDER_ADDRESS))
    io = start_actor(router, ChainIO, d, router, client, PROVIDER, InlineExecutor(), InlineExecutor())
    io.tell(NodeStatusCall(1, reply_to=HEALTH, tx_index=True))
    d.run_until_idle()
    (answer,) = health.received
    assert answer.status is not None and answer.error is None
    assert answer.tx_index is None and answer.tx_index_error is not None


def test_scheduler_actor_spawns_monitors_and_sets_its_wake_timer() -> None:
    clock, d, router = setup()
    chain, io = probe(router, d, CHAIN), probe(router, d, CHAIN_IO)
    probe(router, d, LEDGER)
    sched = start_actor(router, SchedulerActor, d, router, clock, settings(), PROVIDER)
    sched.tell(StartSchedule())
    sched.tell(RunCycle())
    d.run_until_idle()
    assert chain.received == [WithdrawRequested(1)]
    sched.tell(WithdrawFinished(1, 1, (), 0, ()))
    d.run_until_idle()
    assert io.received == [ActiveLeasesCall(1, SCHEDULER)]
    sched.tell(ActiveLeasesRead(1, (Lease("l1", "t1", PROVIDER, (item(1),)),)))
    d.run_until_idle()
    assert router.get(tenant_address("t1")) is not None  # a real monitor, started by the scheduler
    assert io.received[-1] == CreditReadsCall(1, ("t1",))
    router.tell(tenant_address("t1"), CreditRead(1, CreditAccount("t1", (Coin("umfx", 10**6),))))
    d.run_until_idle()
    assert sched.actor_inbox.actor.core.cycle is None  # type: ignore[attr-defined]
    # the wake timer fires through the clock as a Wake message
    clock.advance(timedelta(hours=1))
    d.run_until_idle()
    assert chain.received[-1] == WithdrawRequested(2)
    sched.stop(block=False)
    d.run_until_idle()
    assert router.get(tenant_address("t1")) is None  # the monitors go with the scheduler


def test_monitors_retired_together_leave_the_router_in_order_and_stop_once_all_are_applied(monkeypatch) -> None:
    import pykka

    from actors.effects import Retire, Send

    clock, d, router = setup()
    ref = start_actor(router, SchedulerActor, d, router, clock, settings(), PROVIDER)
    scheduler = ref.actor_inbox.actor
    tenants = [addr(f"retired{i}") for i in range(3)] + [addr("kept")]
    monitors = [scheduler._start_monitor(t) for t in tenants]
    d.run_until_idle()
    scans: list = []
    unregister = pykka.ActorRegistry.unregister
    monkeypatch.setattr(pykka.ActorRegistry, "unregister", lambda r: (scans.append(r), unregister(r)))
    retired = tenants[:3]
    # Mail for a retired monitor after its Retire is dropped, as for a stopped one.
    late = Lease("lease-late", retired[0], PROVIDER, (item(1),))
    scheduler.apply([Retire(t) for t in retired] + [Send(tenant_address(retired[0]), LeasesSynced((late,)))])
    assert [router.get(tenant_address(t)) for t in tenants] == [None, None, None, monitors[3]]
    d.run_until_idle()
    assert [m.is_alive() for m in monitors] == [False, False, False, True]
    assert scans == []  # out of pykka's registry in one pass, not a scan each
    assert not any(m in pykka.ActorRegistry.get_all() for m in monitors[:3])
    assert "lease-late" not in monitors[0].actor_inbox.actor.core.leases  # the LeasesSynced never reached it
    ref.stop(block=False)
    d.run_until_idle()
    assert not monitors[3].is_alive()  # the rest go with the scheduler
