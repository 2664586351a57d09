"""Supervision (issue 13, fault 1): a handler that raises is logged with its message and capture
sequence, counted, and survived by every actor; a nil or malformed chain answer is a failed call;
a crash loop ends the run with a non-zero status."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest

from actors.chain_actor import ChainDecisions
from actors.chain_io import ChainIO
from actors.health import HealthActor
from actors.ledger_writer import LedgerActor, start_ledger_writer
from actors.listener import LeaseEventStream
from actors.listener_settings import ListenerSettings
from actors.readiness import Readiness
from actors.schedule import SchedulerDecisions
from actors.shell import start_actor
from actors.tenant_credit import TenantCredit
from chain.model import CREDIT_EXHAUSTED_REASON
from chain.model_client import ModelChainClient
from ledger.settings import LedgerSettings
from ledger.store import Ledger
from messages.coins import Coin
from messages.chain import CloseOutcome, WithdrawPage
from messages.chain_actor import WithdrawPageAnswered
from messages.credit import CreditRead
from messages.health import HealthCheckDue
from messages.scheduler import TenantChecked, WithdrawFinished
from runtime.clock import ManualClock
from runtime.dispatch import ManualDispatcher
from runtime.supervision import CRASH_LOOP_FAILURES, CRASH_LOOP_WINDOW, EXIT_CRASH_LOOP, Supervisor
from sidecar.app import ModelEventFeed, Sidecar
from tests.support import OTHER, OTHER_ADDRESS, PROVIDER, PROVIDER_ADDRESS, World, addr, chain_model, item, settings

ROOT = Path(__file__).resolve().parent.parent


# -- the supervisor alone ----------------------------------------------------------------------
def test_a_failure_is_logged_with_its_message_and_capture_sequence_and_counted_by_kind(caplog) -> None:
    clock = ManualClock()
    sup = Supervisor(clock.now)
    with caplog.at_level(logging.ERROR, logger="runtime.supervision"):
        try:
            raise KeyError("denom")
        except KeyError as exc:
            assert sup.failed("tenant/manifest1abc", TenantChecked(7, "manifest1abc"), 4242, exc) is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("tenant/manifest1abc could not handle TenantChecked(cycle=7, tenant='manifest1abc'")
    assert "(capture seq 4242): KeyError: 'denom' at test_supervision.py:" in line
    assert "dropped, the actor goes on (1 failure(s) of it in the last 60s)" in line
    assert sup.counts() == {"tenant": 1}


def test_ten_failures_of_one_actor_within_a_minute_are_a_crash_loop_and_fewer_or_slower_are_not() -> None:
    clock = ManualClock()
    loops: list[Any] = []
    sup = Supervisor(clock.now, on_crash_loop=loops.append)
    boom = RuntimeError("boom")
    # Failures spread thinner than the window allows never make one, however many.
    spacing = CRASH_LOOP_WINDOW / (CRASH_LOOP_FAILURES - 1) + timedelta(seconds=1)
    for _ in range(3 * CRASH_LOOP_FAILURES):
        sup.failed("chain", "msg", 1, boom, log=False)
        clock.advance(spacing)
    # Nine of another actor, and nine more of this one within the minute: still none.
    for _ in range(CRASH_LOOP_FAILURES - 1):
        sup.failed("scheduler", "msg", 1, boom, log=False)
        sup.failed("tenant/manifest1x", "msg", 2, boom, log=False)
    assert loops == [] and sup.tripped is None
    loop = sup.failed("tenant/manifest1x", "msg", 99, boom, log=False)
    assert loops == [loop] and sup.tripped is loop and loop.address == "tenant/manifest1x"
    assert loop.line() == (
        "crash loop: tenant/manifest1x failed 10 times within 60s (last: RuntimeError: boom handling 'msg', "
        f"capture seq 99); stopping with exit status {EXIT_CRASH_LOOP} so that the service manager restarts "
        "the sidecar from its ledger"
    )
    sup.failed("tenant/manifest1x", "msg", 100, boom, log=False)
    assert loops == [loop]  # told once


# -- every actor survives a handler that raises, and the sidecar still withdraws and closes --------
#: These run on both chain versions (CHAIN-VERSIONS.md): a withdraw goes by cursor or by name.
on_both_chains = pytest.mark.usefixtures("chain_version")


def supervised_world(clock: ManualClock, tmp_path: Path) -> tuple[World, Any]:
    """The model world of ``tests.support.world`` with a ledger writer and the health actor too."""
    model = chain_model(clock)
    model.register_provider(PROVIDER, PROVIDER_ADDRESS)
    model.register_provider(OTHER, OTHER_ADDRESS)
    client = ModelChainClient(model, PROVIDER, PROVIDER_ADDRESS)
    dispatcher = ManualDispatcher(clock.now)
    ledger = Ledger.open(tmp_path / "books.sqlite", PROVIDER)
    s = settings()

    def health(sc: Sidecar) -> Any:
        core = Readiness(timedelta(seconds=30), s.max_node_lag, websocket=False, ledger=True)
        ref = start_actor(sc.router, HealthActor, sc.dispatcher, sc.router, clock, core)

        class Part:  # stopped without waiting: the manual dispatcher delivers the stop later
            close = staticmethod(lambda: ref.stop(block=False))

        return Part()

    sidecar = Sidecar(
        clock=clock, dispatcher=dispatcher, client=client, settings=s, provider_uuid=PROVIDER,
        extra=[
            lambda sc: ModelEventFeed(model, sc.router, sc.provider_uuid),
            lambda sc: start_ledger_writer(sc.router, clock, ledger, LedgerSettings(), dispatcher=dispatcher),
            health,
        ],
    )
    return World(clock, model, client, dispatcher, sidecar), ledger


def once(kind: type, method: str, when: Callable[..., bool]) -> Callable[..., Any]:
    """A replacement for ``kind.method`` that raises the first time ``when(message)`` holds."""
    original = getattr(kind, method)
    fired: list[bool] = []

    def wrapper(self, message, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not fired and when(message):
            fired.append(True)
            raise RuntimeError(f"injected failure in {kind.__name__}.{method}")
        return original(self, message, *args, **kwargs)

    return wrapper


#: actor kind -> (class, method, the message whose handling raises)
FAULTS: dict[str, tuple[type, str, Callable[[Any], bool]]] = {
    "scheduler": (SchedulerDecisions, "handle", lambda m: isinstance(m, TenantChecked)),
    "chain": (ChainDecisions, "handle", lambda m: isinstance(m, WithdrawPageAnswered)),
    # On its read pool's thread, answered all the same (a failed read of the healthy tenant:
    # one failed read asks for no early re-check, and the poor one must be read to be closed).
    "chain-io": (ChainIO, "_credit", lambda m: m.tenant == addr("rich")),
    "tenant": (TenantCredit, "handle", lambda m: isinstance(m, CreditRead)),
    "ledger": (LedgerActor, "on_receive", lambda m: True),
    "health": (Readiness, "handle", lambda m: isinstance(m, HealthCheckDue)),
}


@on_both_chains
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_an_actor_whose_handler_raises_goes_on_and_the_sidecar_still_withdraws_and_closes(
    clock, tmp_path, monkeypatch, caplog, kind: str
) -> None:
    cls, method, when = FAULTS[kind]
    monkeypatch.setattr(cls, method, once(cls, method, when))
    w, ledger = supervised_world(clock, tmp_path)
    rich, poor = addr("rich"), addr("poor")
    w.model.fund_credit(rich, [Coin("umfx", 10**9)])
    w.model.fund_credit(poor, [Coin("umfx", 1_000)])
    healthy = w.model.create_lease(rich, PROVIDER, [item(2)])
    ours = w.model.create_lease(poor, PROVIDER, [item(1)])
    w.model.create_lease(poor, OTHER, [item(100)])  # uses the poor tenant's credit up within 10 s
    clock.advance(5)
    with caplog.at_level(logging.ERROR, logger="runtime.supervision"):
        w.sidecar.withdraw_once()
        w.sidecar.start()
        w.run_for(20 * 60)  # past the first cycle's deadline, the grace window and two re-checks
    assert w.dispatcher.failures == {kind: 1}
    assert any("(capture seq " in r.getMessage() and "injected failure" in r.getMessage() for r in caplog.records)
    # It closed the tenant whose credit is gone ...
    closed = w.model.lease(ours.uuid)
    assert closed.state == "CLOSED" and closed.closure_reason == w.sidecar.settings.closure_reason
    # ... and withdraws after it: the healthy lease is settled up to the last withdraw.
    settled = w.model.lease(healthy.uuid).last_settled_at
    clock.advance(100)
    w.sidecar.trigger_withdraw("test")
    w.run_for(30)
    assert w.model.lease(healthy.uuid).last_settled_at > settled
    w.sidecar.stop()
    ledger.close()


@on_both_chains
@pytest.mark.parametrize("signed_first", [False, True])
def test_a_withdraw_answered_with_no_page_and_no_error_is_a_failed_call_and_the_next_cycle_withdraws(
    clock, tmp_path, signed_first: bool
) -> None:
    """Fault 1 as reported: the chain actor is not stopped, nor wedged in a cycle that never ends."""
    w, ledger = supervised_world(clock, tmp_path)
    w.model.fund_credit(addr("rich"), [Coin("umfx", 10**9)])
    lease = w.model.create_lease(addr("rich"), PROVIDER, [item(2)])
    clock.advance(100)
    operation = "withdraw_by_provider" if w.model.version.withdraw_cursor else "withdraw_leases"
    real = getattr(w.client, operation)
    answered: list[Any] = []

    def nothing(*args: Any, signed: Any = None) -> Any:
        if answered:
            return real(*args, signed=signed)
        answered.append(None)
        if signed_first:
            signed("AB" * 32)  # a tx went out, and then nothing came back
        return None

    setattr(w.client, operation, nothing)
    seen: list[Any] = []
    w.dispatcher.tap = seen.append
    w.sidecar.withdraw_once()
    w.run_for(10)  # the retry's backoff
    (finished,) = [d.message for d in seen if isinstance(d.message, WithdrawFinished)]
    if signed_first:
        # It may have been applied: never sent again, looked up by its hash; the cycle ends with it.
        assert finished.error is not None and finished.error.may_have_committed
        assert finished.error.tx_hash == "AB" * 32 and "no answer and no error" in finished.error.message
    else:
        # Nothing went out: retried, and the retry withdraws.
        assert finished.error is None and finished.withdrawal_count == 1
    assert w.dispatcher.failures == {}  # a failed call, not a crash
    clock.advance(100)
    w.sidecar.trigger_withdraw("test")
    w.run_for(30)
    assert w.model.lease(lease.uuid).last_settled_at == clock.now() - timedelta(seconds=30)
    w.sidecar.stop()
    ledger.close()


@on_both_chains
def test_a_withdraw_page_missing_what_the_sidecar_reads_is_a_failed_call_naming_it(clock, tmp_path) -> None:
    w, ledger = supervised_world(clock, tmp_path)
    w.model.fund_credit(addr("rich"), [Coin("umfx", 10**9)])
    w.model.create_lease(addr("rich"), PROVIDER, [item(2)])
    clock.advance(100)
    operation = "withdraw_by_provider" if w.model.version.withdraw_cursor else "withdraw_leases"
    setattr(w.client, operation, lambda *a, signed=None: WithdrawPage("", None, 1, False, b""))  # type: ignore[arg-type]
    seen: list[Any] = []
    w.dispatcher.tap = seen.append
    w.sidecar.withdraw_once()
    answers = [d.message for d in seen if isinstance(d.message, WithdrawPageAnswered)]
    assert answers and all(a.result is None for a in answers)
    assert answers[0].error.message.endswith("malformed answer: a withdraw page with no tx hash")
    assert w.dispatcher.failures == {}
    w.sidecar.stop()
    ledger.close()


# -- the listener --------------------------------------------------------------------------------
def test_a_frame_the_listener_cannot_handle_is_supervised_and_the_stream_goes_on(monkeypatch) -> None:
    import actors.listener as listener

    failures: list[tuple[Any, BaseException]] = []
    stream = LeaseEventStream(
        "ws://127.0.0.1:1/websocket", ("tm.event='Tx'",), ListenerSettings(), lambda events: None, lambda: None,
        on_failure=lambda what, exc: failures.append((what, exc)),
    )
    real = listener.decode_frame
    monkeypatch.setattr(listener, "decode_frame", lambda raw: (_ for _ in ()).throw(ZeroDivisionError("bug")))
    assert stream._on_frame('{"jsonrpc": "2.0", "id": 1, "result": {}}') is None
    (what, exc), = failures
    assert what.startswith("a frame '{\"jsonrpc\"") and isinstance(exc, ZeroDivisionError)
    monkeypatch.setattr(listener, "decode_frame", real)
    assert stream._on_frame('{"jsonrpc": "2.0", "id": 1, "result": {}}') is not None  # the next frame is read
    assert stream.stats.frames == 2 and stream.stats.malformed_frames == 0
    stream.stop()


def test_an_error_escaping_the_listeners_reconnect_loop_is_supervised_and_the_loop_restarts(monkeypatch) -> None:
    failures: list[Any] = []
    stream = LeaseEventStream(
        "ws://127.0.0.1:1/websocket", ("tm.event='Tx'",), ListenerSettings(backoff_initial=timedelta(milliseconds=1)),
        lambda events: None, lambda: None, on_failure=lambda what, exc: failures.append(what),
    )
    runs: list[int] = []

    async def run() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(stream, "_run", run)
    stream._run_thread()  # in this thread: the first run fails, the second ends normally
    assert runs == [1, 1] and failures == ["its reconnect loop"]


# -- a crash loop ends run.py run ------------------------------------------------------------------
def test_a_crash_loop_ends_the_run_with_its_exit_status_and_a_last_line_saying_why(tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[chain]\nmode = "model"\n[demo]\nspeed = 300.0\nhealthy_tenants = 12\n'
        f'[capture]\nenabled = false\n[ledger]\npath = "{tmp_path / "books.sqlite"}"\n[metrics]\nlisten = ""\n'
    )
    # The scheduler fails on every verdict: a dozen within the first cycle.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from actors.schedule import SchedulerDecisions
        from messages.scheduler import TenantChecked
        def broken(self, message, now):
            raise RuntimeError("broken scheduler")
        SchedulerDecisions._handlers = {{**SchedulerDecisions._handlers, TenantChecked: broken}}
        import run
        sys.exit(run.main(["--config", {str(config)!r}, "run", "--duration", "6h"]))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == EXIT_CRASH_LOOP, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stopped: crash loop")
    assert "stopped: crash loop: scheduler failed 10 times within 60s (last: RuntimeError: broken scheduler" in last
    assert "so that the service manager restarts the sidecar from its ledger" in last
    assert "Traceback" not in out.stdout + out.stderr


def test_a_crash_loop_that_trips_while_the_sidecar_is_built_still_ends_the_run(tmp_path) -> None:
    """The run's hook was set after ``build`` had started the actors, and a supervisor says "crash loop"
    only once: tripped in between, the run logged "stopping with exit status 3" and went on."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[chain]\nmode = "model"\n[demo]\nspeed = 300.0\nhealthy_tenants = 2\n'
        '[capture]\nenabled = false\n[ledger]\npath = ""\n[metrics]\nlisten = ""\n'
    )
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import sidecar.runner
        built = sidecar.runner.build
        def build(*args, **kwargs):
            running = built(*args, **kwargs)
            for _ in range(10):
                running.supervisor.failed("scheduler", "a message", 0, RuntimeError("broken at start"))
            return running
        sidecar.runner.build = build
        import run
        sys.exit(run.main(["--config", {str(config)!r}, "run", "--duration", "1000h"]))
    """)
    # 1000 h at 300x is over three real hours: the run must end at once, not at its duration.
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == EXIT_CRASH_LOOP, out.stderr[-2000:]
    assert "stopped: crash loop: scheduler failed 10 times" in out.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "operation,answer,problem",
    [
        ("node_status", None, "node_status: malformed answer: no answer and no error"),
        ("close_leases", None, "no answer and no error"),
        ("credit_account", "nope", "a str, not a credit account"),
        ("leases_by_tenant", (), "a tuple, not a listing of leases at a height"),
        ("withdraw", WithdrawPage("AB", (Coin("umfx", 5),), -1, False, b""), "withdrawal_count is -1, not a whole number"),
        ("close_leases", CloseOutcome(1, ()), "tx_hashes is empty"),
    ],
)
def test_an_answer_that_is_not_what_its_call_answers_is_refused_naming_the_call_and_the_problem(operation, answer, problem):
    from chain.answers import MalformedAnswer, check_answer

    with pytest.raises(MalformedAnswer, match=problem):
        check_answer(operation, answer)
    for fine in (("withdraw_outcome", None), ("close_outcome", None), ("provider_withdrawable", None)):
        check_answer(*fine)  # "not known yet" / "cannot tell" are answers
