"""The metrics tap: each metric moved by the message that says so, in integers of each denom."""

from __future__ import annotations

from datetime import timedelta

from messages.chain import ChainFailure, WithdrawPage
from messages.chain_actor import WithdrawPageAnswered, WithdrawTxAnswered, WithdrawTxSigned
from messages.coins import Coin
from messages.health import BooksTicked, LedgerWriteFailed, LedgerWritesResumed, MonthStage, WebsocketLost, WebsocketSubscribed
from messages.lease_events import LeaseEvent
from messages.scheduler import LeaseEventReceived, WithdrawFinished
from messages.tx_cost import TxCost
from monitoring.metrics import SidecarMetrics
from runtime.clock import utc
from runtime.dispatch import Delivery

P = "0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10"
T0 = utc(2026, 3, 1)
BIG = 10**24  # more than a float holds exactly: what is added is still an int


def deliver(m: SidecarMetrics, message, at=T0, to: str = "chain") -> None:  # type: ignore[no-untyped-def]
    m(Delivery(1, at, "chain-io", to, 0, message))


def value(m: SidecarMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_withdrawn_fees_and_retries_come_from_included_pages_and_pages_found_by_a_lookup() -> None:
    m = SidecarMetrics(P, version="9.9")
    page = WithdrawPage("TX1", (Coin("umfx", 1234), Coin("upwr", BIG)), 3, False, b"",
                        cost=TxCost((Coin("umfx", 50),), 120_000, 80_000, sequence_retries=1))
    deliver(m, WithdrawTxSigned(1, 1, 1, "TX1"))
    deliver(m, WithdrawPageAnswered(1, 1, 1, result=page))
    deliver(m, WithdrawPageAnswered(2, 1, 1, error=ChainFailure("withdraw", "timeout", transient=True, may_have_committed=True)))
    deliver(m, WithdrawTxAnswered(2, 1, "TX2", 1))  # not known yet
    deliver(m, WithdrawTxAnswered(2, 1, "TX2", 2, result=WithdrawPage("TX2", (Coin("umfx", 6),), 1, False, b"")))
    assert value(m, "leasewarden_withdrawn_total", denom="umfx") == 1240
    assert value(m, "leasewarden_withdrawn_total", denom="upwr") == float(BIG)
    assert value(m, "leasewarden_withdraw_pages_total", outcome="included") == 1
    assert value(m, "leasewarden_withdraw_pages_total", outcome="unknown") == 1
    assert value(m, "leasewarden_withdraw_lookups_total", outcome="pending") == 1
    assert value(m, "leasewarden_withdraw_lookups_total", outcome="found") == 1
    assert value(m, "leasewarden_withdraw_txs_signed_total") == 1
    assert value(m, "leasewarden_tx_fees_total", denom="umfx") == 50
    assert (value(m, "leasewarden_tx_gas_used_total"), value(m, "leasewarden_tx_sequence_retries_total")) == (80_000, 1)
    assert value(m, "leasewarden_txs_included_total", kind="withdraw") == 2
    assert value(m, "leasewarden_build_info", version="9.9") == 1


def test_the_last_withdraw_time_moves_only_on_a_cycle_that_ended_well() -> None:
    m = SidecarMetrics(P)
    deliver(m, WithdrawFinished(1, 1, (), 0, ()), at=T0, to="scheduler")
    deliver(m, WithdrawFinished(2, 0, (), 0, (), error=ChainFailure("withdraw", "down")), at=T0 + timedelta(hours=1), to="scheduler")
    assert value(m, "leasewarden_last_withdraw_timestamp_seconds") == T0.timestamp()
    assert value(m, "leasewarden_withdraw_cycles_total", outcome="error") == 1


def test_leases_whose_withdraw_keeps_failing_and_cycles_with_nothing_due_are_counted() -> None:
    m = SidecarMetrics(P)
    deliver(m, WithdrawFinished(1, 1, (), 0, (), failing=(("L1", 2), ("L2", 1))), to="scheduler")
    assert value(m, "leasewarden_leases_failing_withdraw") == 2
    deliver(m, WithdrawFinished(2, 0, (), 0, (), nothing_due=True, failing=(("L1", 3),)), to="scheduler")
    assert value(m, "leasewarden_leases_failing_withdraw") == 1
    assert value(m, "leasewarden_withdraw_cycles_total", outcome="nothing_due") == 1
    assert value(m, "leasewarden_withdraw_cycles_total", outcome="drained") == 1


def test_websocket_events_latency_books_and_ledger() -> None:
    m = SidecarMetrics(P, clock_speed=60.0)
    deliver(m, WebsocketSubscribed("ws://n", 5), to="health")
    deliver(m, WebsocketLost("dropped", was_subscribed=True), to="health")
    deliver(m, WebsocketLost("refused"), to="health")
    deliver(m, WebsocketSubscribed("ws://n", 5), to="health")
    assert (value(m, "leasewarden_websocket_connected"), value(m, "leasewarden_websocket_reconnects_total"),
            value(m, "leasewarden_websocket_failed_attempts_total")) == (1, 1, 1)
    event = LeaseEvent("closed", "l1", "manifest1t", P)
    # 3 clock seconds on a 60x clock: 50 ms of real time
    deliver(m, LeaseEventReceived(event, received_at=T0), at=T0 + timedelta(seconds=3), to="scheduler")
    assert value(m, "leasewarden_lease_events_total", kind="closed", provider="ours") == 1
    assert value(m, "leasewarden_lease_event_latency_seconds_bucket", le="0.025") == 0
    assert value(m, "leasewarden_lease_event_latency_seconds_bucket", le="0.05") == 1
    deliver(m, BooksTicked(T0, (MonthStage("2026-01", "finalized"), MonthStage("2026-02", "metered"))), to="health")
    assert [value(m, "leasewarden_billing_months", stage=s) for s in ("open", "grace", "metered", "finalized")] == [0, 0, 1, 1]
    deliver(m, LedgerWriteFailed("disk full", 40), to="health")
    assert (value(m, "leasewarden_ledger_write_errors_total"), value(m, "leasewarden_ledger_facts_held")) == (1, 40)
    deliver(m, LedgerWritesResumed(40), to="health")
    assert value(m, "leasewarden_ledger_facts_held") == 0
