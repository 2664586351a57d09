"""End to end: capture a sidecar run on the chain model, replay it through the same cores.

The run (manual clock and dispatcher, the real actors, lease events through
the real websocket listener on the devnet's websocket) holds a tenant whose
credit runs out and whose leases are closed after the grace window, a close
that fails once and is retried, a tenant whose credit reads fail in a
streak, and a websocket drop that the listener rides out and reconciles.
Replayed, every decision matches; with the error threshold changed from 3
to 2 the replay reports a divergence at the second failed read.
"""

from __future__ import annotations

import argparse
import json
import io
import time
from datetime import timedelta

import pytest

from actors.cores import billing_tick_interval, build_core
from actors.listener import ListenerActor
from actors.listener_settings import ListenerSettings
from capture import CaptureReader, CaptureWriter
from capture.settings import CaptureSettings
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from devnet.websocket_server import WebsocketServer
from messages.chain import LeaseItem, NodeStatus
from messages.chain_actor import CloseBatchAnswered, WithdrawPageAnswered, WithdrawTxAnswered
from messages.coins import Coin
from messages.credit import CreditReadFailed
from messages.scheduler import Reconcile
from replay.cli import run_replay
from replay.engine import Divergence, Replayer, RunEnds
from replay.parallel import owner
from runtime.clock import ManualClock, utc
from runtime.config import load_config
from runtime.dispatch import ManualDispatcher
from sidecar.app import Sidecar
from tests.support import addr, chain_model, withdraw_operation

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"  # [provider] uuid's default: the captured config names it
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"
MS = timedelta(milliseconds=1)
LISTENER = ListenerSettings(
    ping_interval=100 * MS, ping_timeout=500 * MS, close_timeout=200 * MS, open_timeout=timedelta(seconds=3),
    backoff_initial=20 * MS, backoff_max=100 * MS, stable_after=timedelta(0),
)
SETTINGS = {"withdraw_interval": "10m", "credit_check_interval": "2m"}


def item(price: int) -> list[LeaseItem]:
    return [LeaseItem("sku-1", 1, Coin("umfx", price))]


class Live:
    """The sidecar on the model, captured, with lease events through the websocket listener."""

    def __init__(self, directory: str) -> None:
        self.clock = ManualClock(utc(2026, 3, 1))
        # No ledger: the books are not what this test replays (the ledger is an I/O endpoint).
        self.config = load_config(overrides={"scheduler": SETTINGS, "ledger": {"path": ""}})
        self.model = chain_model(self.clock)
        self.model.register_provider(PROVIDER, addr("provider"))
        self.model.register_provider(OTHER, addr("other"))
        self.client = ModelChainClient(self.model, PROVIDER, addr("provider"))
        self.writer = CaptureWriter(
            CaptureSettings(directory=directory), clock_now=self.clock.now, config=self.config
        ).open()
        self.dispatcher = ManualDispatcher(self.clock.now, tap=self.writer)
        self.sidecar = Sidecar(
            clock=self.clock, dispatcher=self.dispatcher, client=self.client,
            settings=self.config.scheduler, provider_uuid=PROVIDER,
            billing_tick_interval=billing_tick_interval(self.config),
        )
        self.server = WebsocketServer(self.model, lambda: NodeStatus(1, self.clock.now(), False))
        self.server.start()
        self.listener = ListenerActor.start(self.dispatcher, self.sidecar.router, self.server.url, PROVIDER, LISTENER)
        self.reconciles = 0

    def settle_until(self, predicate, timeout: float = 10.0) -> None:
        """Deliver mail until ``predicate()`` holds (the listener's thread delivers in its own time)."""
        deadline = time.monotonic() + timeout
        while True:
            self.sidecar.settle()
            if predicate():
                return
            assert time.monotonic() < deadline, "the listener's message never came"
            time.sleep(0.005)

    def connected(self, sessions: int) -> None:
        stream = self.listener.actor_inbox.actor.stream
        self.settle_until(lambda: stream.stats.subscribed_sessions >= sessions)

    def run_for(self, seconds: float) -> None:
        end = self.clock.now() + timedelta(seconds=seconds)
        self.sidecar.settle()
        while (nxt := self.clock.next_timer()) is not None and nxt <= end:
            self.clock.advance_to(nxt)
            self.sidecar.settle()
        self.clock.advance_to(end)
        self.sidecar.settle()

    def close(self) -> list[str]:
        self.listener.stop(block=False)  # delivered by the settle in sidecar.stop()
        self.sidecar.stop()
        self.server.stop()
        self.writer.close()
        return self.writer.paths


@pytest.fixture(scope="module")
def capture(tmp_path_factory, chain_version):
    """One captured run, shared by the tests below (it takes a few seconds to make)."""
    live = Live(str(tmp_path_factory.mktemp("capture")))
    m, faults = live.model, live.client.faults
    try:
        live.connected(1)
        m.fund_credit(addr("healthy"), [Coin("umfx", 10**9)])
        m.create_lease(addr("healthy"), PROVIDER, item(2))
        m.fund_credit(addr("flaky"), [Coin("umfx", 10**9)])
        m.create_lease(addr("flaky"), PROVIDER, item(1))
        m.fund_credit(addr("drain"), [Coin("umfx", 1_000)])
        live.drain_lease = m.create_lease(addr("drain"), PROVIDER, item(1)).uuid
        m.create_lease(addr("drain"), OTHER, item(100))  # uses the credit up, unsettled
        live.sidecar.withdraw_once()
        live.sidecar.start()
        faults.fail_rate("credit_account", 1.0, only=frozenset({addr("flaky")}))
        live.run_for(15)
        assert live.server.drop_all() == 1  # the websocket drops; the listener reconnects and reconciles
        live.connected(2)
        faults.fail("close_leases", times=1)  # the first closure attempt fails
        faults.lose_answer(withdraw_operation())  # the next withdraw applies, its answer is lost
        live.run_for(12 * 60)
        faults.fail_rate("credit_account", 0.0)
        live.run_for(5 * 60)
    finally:
        paths = live.close()
    return paths, live


def _records(paths):
    return [e.record for e in CaptureReader(paths) if hasattr(e.record, "recipient")]


def test_the_capture_holds_the_scenario(capture):
    paths, live = capture
    records = _records(paths)
    failed_reads = [r for r in records if isinstance(r.message, CreditReadFailed)]
    assert len(failed_reads) >= 4 and {r.recipient for r in failed_reads} == {f"tenant/{addr('flaky')}"}
    batches = [r.message for r in records if isinstance(r.message, CloseBatchAnswered)]
    assert batches[0].error is not None and any(b.outcome and b.outcome.closed_count for b in batches[1:])
    reconciles = [r for r in records if isinstance(r.message, Reconcile) and r.sender == "listener"]
    assert len(reconciles) == 2
    closed = live.model.lease(live.drain_lease)
    assert closed.state == "CLOSED" and closed.closure_reason == "credit depleted"


def test_the_capture_holds_a_withdraw_of_unknown_outcome_found_by_its_lookup(capture):
    paths, _ = capture
    records = _records(paths)
    [lost] = [r for r in records if isinstance(r.message, WithdrawPageAnswered) and r.message.error is not None]
    assert lost.message.error.may_have_committed and lost.message.error.tx_hash
    found = [r.message for r in records if isinstance(r.message, WithdrawTxAnswered)]
    assert found and found[0].tx_hash == lost.message.error.tx_hash and found[0].result is not None


def test_replay_reproduces_every_decision(capture):
    paths, _ = capture
    events = list(Replayer(build_core).replay(CaptureReader(paths, file_parts=True)))
    divergences = [e for e in events if isinstance(e, Divergence)]
    assert divergences == []
    [end] = [e for e in events if isinstance(e, RunEnds)]
    assert end.clean_end and end.matched > 100 and end.inputs > 100


def test_entries_one_by_one_replay_as_the_reader_frame_by_frame(capture):
    """Replay reads a CaptureReader frame by frame; any other iterable of entries one by one."""
    paths, _ = capture
    by_frame = [e.to_json() for e in Replayer(build_core).replay(CaptureReader(paths, file_parts=True))]
    entries = list(CaptureReader(paths, file_parts=True))
    assert any(e.index > 0 for e in entries)  # frames of several records were read
    one_by_one = [e.to_json() for e in Replayer(build_core).replay(iter(entries))]
    assert one_by_one == by_frame


def test_a_changed_error_threshold_diverges_at_the_second_failed_read(capture):
    paths, _ = capture
    replayer = Replayer(build_core, overrides={"scheduler": {"credit_check_error_threshold": 2}})
    divergences = [e for e in replayer.replay(CaptureReader(paths, file_parts=True)) if isinstance(e, Divergence)]
    second = [r.seq for r in _records(paths) if isinstance(r.message, CreditReadFailed)][1]
    first = divergences[0]
    assert (first.kind, first.address, first.input_seq, first.first_seq) == (
        "changed", f"tenant/{addr('flaky')}", second, second)
    assert "recheck_at: None -> " in first.detail


def _cli(paths, **extra):
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(logs=list(paths), until=None, tenant=None, step=False, json=False, skip_bad=False,
                              set=[], with_config=None, timer_slack=None)
    for k, v in extra.items():
        setattr(args, k, v)
    status = run_replay(args, None, stdout=out, stderr=err, build_core=build_core)
    return status, out.getvalue(), err.getvalue()


def test_two_replays_print_identical_bytes_and_the_timeline_tells_the_story(capture):
    paths, _ = capture
    first, second = _cli(paths), _cli(paths)
    assert first == second
    status, text, err = first
    assert status == 0 and err == ""
    for words in ("withdraw page", "runs dry at", "failed credit reads in a row", "grace window",
                  "close batch 1 of 1 lease(s) failed", "closing 1 lease(s)", "reconcile after listener"):
        assert words in text, words
    status, text, _ = _cli(paths, set=["scheduler.credit_check_error_threshold=2"])
    assert status == 1 and "DIVERGENCE changed" in text


def test_a_production_config_given_in_the_captures_place_replays_without_its_ca_file(capture, tmp_path):
    """--with-config: the file names a CA file that is on the production machine only; a replay reaches no node."""
    paths, _ = capture
    prod = tmp_path / "prod.toml"
    prod.write_text('[node]\ngrpc_url = "grpc+https://node.example:443"\n'
                    'tls_ca_file = "/etc/leasewarden/no-such-ca.pem"\n')
    for extra in ([], ["node.page_size=250"]):
        out, err = io.StringIO(), io.StringIO()
        args = argparse.Namespace(logs=list(paths), until=None, tenant=None, step=False, json=False, skip_bad=False,
                                  set=extra, with_config=str(prod), timer_slack=None)
        status = run_replay(args, load_config, stdout=out, stderr=err, build_core=build_core)
        assert status in (0, 1), err.getvalue()  # replayed (the file's other settings may decide otherwise)
        assert err.getvalue() == ""
        assert f"replaying with the configuration from {prod}" in out.getvalue()
        # Left out as a captured CA file is, and told so once a run, as a capture's is.
        notice = ("configured setting [node] tls_ca_file = '/etc/leasewarden/no-such-ca.pem' left out: "
                  "a replay reaches no node")
        assert out.getvalue().count(notice) == out.getvalue().count(f"replaying with the configuration from {prod}")
    # A --set of the CA file is still applied, and still checked: the error names the file it is set on.
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(logs=list(paths), until=None, tenant=None, step=False, json=False, skip_bad=False,
                              set=["node.tls_ca_file='/no/such-ca.pem'"], with_config=str(prod), timer_slack=None)
    status = run_replay(args, load_config, stdout=out, stderr=err, build_core=build_core)
    assert status not in (0, 1)
    assert f"{prod}: [node] tls_ca_file '/no/such-ca.pem': no such file" in err.getvalue() + out.getvalue()


def _json_lines(text):
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("tenant, changes", [
    (addr("drain"), []),  # depletion, grace, a failed close and its retry
    (addr("flaky"), ["scheduler.credit_check_error_threshold=2"]),  # a divergence
])
def test_a_replay_for_one_tenant_shows_what_the_whole_replay_shows_of_it(capture, tenant, changes):
    """--tenant leaves the other monitors out, and tells that tenant's story as the whole replay does."""
    paths, _ = capture
    status, whole, _ = _cli(paths, json=True, set=changes)
    focused_status, focused, _ = _cli(paths, json=True, set=changes, tenant=tenant)
    whole_lines, focused_lines = _json_lines(whole), _json_lines(focused)

    def story(lines):
        return [x for x in lines if x["type"] not in ("run", "run_end", "summary")]

    expected = [x for x in story(whole_lines) if x["tenant"] == tenant or x["address"] == f"tenant/{tenant}"]
    assert len(expected) > 3 and story(focused_lines) == expected
    assert focused_status == status == (1 if changes else 0)
    assert any(x["type"] == "divergence" for x in expected) == bool(changes)
    assert focused_lines[-1]["inputs"] < whole_lines[-1]["inputs"]  # the other monitors were not replayed


@pytest.mark.parametrize("changes", [[], ["scheduler.credit_check_error_threshold=2"]])
def test_a_replay_in_worker_processes_prints_what_one_process_prints(capture, changes):
    """``--jobs``: the cores split between processes (``replay.parallel``), the same bytes out."""
    paths, _ = capture
    monitors = {owner(f"tenant/{addr(t)}", 2) for t in ("healthy", "flaky", "drain")}
    assert monitors == {0, 1}  # each worker replays some of the monitors
    one = _cli(paths, json=True, set=changes, jobs=1)
    assert one[0] == (1 if changes else 0)
    assert _cli(paths, json=True, set=changes, jobs=2) == one
    assert _cli(paths, json=True, set=changes, jobs=3) == one

