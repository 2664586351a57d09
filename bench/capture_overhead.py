"""Capture overhead: events/s through the running sidecar with capture on vs off.

Run from the repository root:  python bench/capture_overhead.py  (about a minute)

The sidecar as ``python run.py`` assembles it (``sidecar.runner.build``: its
actors on a two-worker ``ThreadedDispatcher``, the in-process chain model;
the collector tuned as ``run.py`` tunes it, ``runtime.memory.tune_gc``),
without the demo world and without a ledger, with ``TENANTS`` tenants of two
leases each. Each trial runs full cycles back to back (``withdraw_once``:
withdraw, read the active leases, read and judge every tenant's credit) for
``TRIAL_S`` seconds and counts the messages the dispatcher delivered. Trials
alternate capture off / on (``[capture] enabled``, the default settings
otherwise: background writer, interval flush) so that the machine's other
load falls on both alike; the medians and their ratio are printed, with what
the capture wrote.

Two measures, both as medians over the trials:

- events/s of wall time: what the target speaks of, and what the other load
  on a shared machine shakes most (a trial that loses the CPU for a second
  loses a sixth of its events);
- events per CPU second of this process (all its threads, the capture
  writer's included): with the actors bound by one interpreter lock, this is
  the throughput the process would have on a CPU of its own, and it moves
  far less with the machine's load.

Three parts (``--part model|events|node`` runs one of them):

- ``model``: as above, the chain model in this process. A chain read costs
  it a few microseconds, so the capture's cost per delivery weighs the most
  here: the worst case, not the production one;
- ``events``: lease events from the devnet websocket (a child process, as
  in ``bench/event_intake.py``) through the production ``ListenerActor`` to
  an actor, as fast as the node emits them, ``EVENT_FLOODS`` floods each
  way, alternating, capture off and on. There a delivery is one lease event;
- ``node``: the sidecar as ``run.py`` runs it against a node (``[chain]
  mode = "node"``: the cosmpy client over gRPC, the websocket listener),
  with a devnet of ``NODE_TENANTS`` tenants in a process of its own
  (``bench/devnet_process.py``), as a node would be; check cycles
  (``Reconcile``: the active leases, then every tenant's credit) back to
  back for ``TRIAL_S`` seconds per trial.

``--encode-floor`` runs the model part once more with, in place of the
capture, a tap that only encodes each delivery as it is handed to its actor
(msgspec, the capture's encoder, one C call per delivery: no queue, no
interning, nothing kept or written). Any capture must at least encode what
it captures (the writer encodes its batches with their leases interned, in a
thread of its own, which can cost somewhat less or more), so this is about
what the barest capture costs in this process: the yardstick for the model
part's 10%.

Target (issue 5): capture on costs at most 10% of the events/s.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from typing import Any  # noqa: E402

from messages.chain import LeaseItem  # noqa: E402
from messages.coins import Coin  # noqa: E402
from devnet.demo import demo_address  # noqa: E402  (the chain refuses addresses that are not bech32)
from runtime.clock import ManualClock, RealClock, utc  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.memory import tune_gc  # noqa: E402
from sidecar.runner import build  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before load_config)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import event_intake  # noqa: E402  (the devnet websocket process, and the listener to a counting actor)
from devnet_process import devnet_process  # noqa: E402

from capture.settings import CaptureSettings  # noqa: E402
from capture.typed import TypedEncoder  # noqa: E402
from capture.writer import CaptureWriter  # noqa: E402

TENANTS = 500
TRIAL_S = 5.0
TRIALS = 5  # of each kind
TARGET_LOSS = 0.10
#: Lease events per flood, and floods each way, on the event path.
EVENT_FLOOD = 20_000
EVENT_FLOODS = 5
#: Tenants (two leases each) of the devnet in the node part.
NODE_TENANTS = 200
PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"


Trial = Any  # (events/s, events per CPU second, the capture writer or None)


def _cycles(running: Any, cycle: Any) -> tuple[float, float, Any]:
    """Run ``cycle()`` back to back for ``TRIAL_S`` s on a built sidecar; its events/s and events per CPU s."""
    dispatcher = running.dispatcher
    try:
        cycle()  # warm up: the tenant monitors start
        before = dispatcher.delivered
        started, cpu_started = time.perf_counter(), time.process_time()
        while time.perf_counter() - started < TRIAL_S:
            cycle()
        if running.capture is not None:
            running.capture.flush()  # what the cycles tapped is written, and its CPU counted
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        events = dispatcher.delivered - before
    finally:
        running.close()
    return events / elapsed, events / cpu, running.capture


def _capture(capture_dir: str | None) -> dict[str, Any]:
    return {"enabled": capture_dir is not None, "directory": capture_dir or "unused"}


def model_trial(capture_dir: str | None, encode_only: bool = False) -> Trial:
    """One trial of full cycles on the in-process chain model; with ``capture_dir`` the capture is on
    (``encode_only``: the capture off, and each delivery only encoded, as ``--encode-floor`` says)."""
    clock = ManualClock(utc(2026, 3, 1))
    capture = _capture(None if encode_only else capture_dir)
    config = load_config(overrides={"chain": {"mode": "model"}, "ledger": {"path": ""}, "capture": capture})
    running = build(config, clock, demo=False)
    if encode_only and capture_dir is not None:
        assert running.dispatcher.tap is None, "the sidecar was built with a tap of its own"
        running.dispatcher.tap = TypedEncoder().encode
    model = running.model
    assert model is not None
    for i in range(TENANTS):
        tenant = demo_address(f"bench/tenant{i:05d}")
        model.fund_credit(tenant, [Coin("umfx", 10**12 + i)])
        for price in (1 + i % 7, 3):
            model.create_lease(tenant, config.provider.uuid, [LeaseItem("sku-1", 1, Coin("umfx", price))])
    sidecar = running.sidecar

    def cycle() -> None:
        if not sidecar.withdraw_once(timeout=60):
            raise RuntimeError("a cycle did not finish")

    return _cycles(running, cycle)


def node_trial(node: dict[str, str], capture_dir: str | None) -> Trial:
    """One trial of check cycles against the devnet process over gRPC; with ``capture_dir`` the capture is on."""
    clock = RealClock()
    config = load_config(node["config"], overrides={
        "chain": {"mode": "node"},
        "node": {"grpc_url": node["gRPC"], "websocket_url": node["websocket"], "key_file": node["provider key file"]},
        "ledger": {"path": ""},
        "capture": _capture(capture_dir),
    })
    try:
        running = build(config, clock, demo=False)
        sidecar = running.sidecar

        def cycle() -> None:
            before = sidecar.scheduler_core.cycles_started
            sidecar.reconcile("bench")
            if not sidecar.wait_cycles_after(before, timeout=120):
                raise RuntimeError("a check cycle did not finish")

        return _cycles(running, cycle)
    finally:
        clock.close()


def event_flood(node: Any, capture_dir: str | None) -> Trial:
    """Lease events/s and lease events per CPU second through the listener; with ``capture_dir``, captured."""
    writer = None
    if capture_dir is not None:
        writer = CaptureWriter(CaptureSettings(directory=capture_dir), clock_now=event_intake.capture_clock).open()
    try:
        listening = event_intake.Listening(node.url, tap=writer)
    except RuntimeError:
        if writer is not None:
            writer.close()
        raise
    sink = listening.sink
    try:
        before = sink.count
        start, cpu_start = time.perf_counter(), time.process_time()
        _, lease_events, _, _ = node.emit(0, EVENT_FLOOD)
        if not event_intake.wait_for(lambda: sink.count - before >= lease_events, 60):
            raise RuntimeError("the flood was not delivered within 60 s")
        if writer is not None:
            writer.flush()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        delivered = sink.count - before
    finally:
        listening.stop()
        if writer is not None:
            writer.close()
    return delivered / elapsed, delivered / cpu, writer


def alternate(title: str, unit: str, n: int, run: Any, root: str, what: str = "capture") -> float:
    """``n`` trials each way, capture off then on, alternating; print both medians; return the loss of events/s.

    ``what`` is on in the "on" trials: the capture, which the target judges, or what ``--encode-floor`` runs.
    """
    off: list[float] = []
    on: list[float] = []
    off_cpu: list[float] = []
    on_cpu: list[float] = []
    writer = None
    for i in range(n):
        rate, per_cpu, _ = run(None)
        off.append(rate)
        off_cpu.append(per_cpu)
        rate, per_cpu, writer = run(os.path.join(root, f"{title[:8]}-{i}"))
        on.append(rate)
        on_cpu.append(per_cpu)
        print(f"  {i + 1}: off {off[-1]:,.0f} {unit}/s ({off_cpu[-1]:,.0f}/CPU s), "
              f"on {on[-1]:,.0f} {unit}/s ({on_cpu[-1]:,.0f}/CPU s)", flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    c_off, c_on = statistics.median(off_cpu), statistics.median(on_cpu)
    loss, cpu_loss = 1 - m_on / m_off, 1 - c_on / c_off
    # Each "on" trial against the "off" trial just before it: a drift of the
    # shared machine's speed over the run falls on both of a pair alike.
    paired = statistics.median(b / a for a, b in zip(off, on))
    print(f"{title}: {n} trials each way (medians)")
    print(f"  {what} off: {m_off:,.0f} {unit}/s   {c_off:,.0f} {unit}/CPU s")
    print(f"  {what} on:  {m_on:,.0f} {unit}/s   {c_on:,.0f} {unit}/CPU s")
    print(f"  ratio on/off: {m_on / m_off:.3f} of {unit}/s, {c_on / c_off:.3f} per CPU second; "
          f"median of the {n} paired trials' ratios {paired:.3f}")
    if writer is not None:
        print(f"  last capture: {writer.records:,} records ({writer.bytes_written / 1e6:.1f} MB, "
              f"{writer.bytes_written / max(writer.records, 1):.0f} B/record), longest queue {writer.max_queue:,}, "
              f"dropped {writer.dropped}")
    verdict = "meets" if loss <= TARGET_LOSS else "MISSES"
    judged = f": {verdict} the target of at most {TARGET_LOSS:.0%}" if what == "capture" else ""
    print(f"  {what} costs {loss:.1%} of the {unit}/s ({cpu_loss:.1%} per CPU second){judged}", flush=True)
    return loss


def model_part(root: str) -> float:
    return alternate(f"full cycles on the chain model in this process, {TENANTS} tenants, {TRIAL_S:g} s trials",
                     "events", TRIALS, model_trial, root)


def encode_floor(root: str) -> float:
    """The model part with each delivery only encoded ("on") against no tap at all ("off")."""
    return alternate("the same, with each delivery only encoded in place of the capture (--encode-floor)",
                     "events", TRIALS, lambda d: model_trial(d, encode_only=True), root, what="encoding alone")


def events_part(root: str) -> float:
    """The lease-event path, capture off vs on; returns the loss of events/s."""
    node = event_intake.NodeProcess()
    try:
        return alternate(f"lease events through the websocket listener, floods of {EVENT_FLOOD:,}",
                         "lease events", EVENT_FLOODS, lambda d: event_flood(node, d), root)
    finally:
        node.stop()


def node_part(root: str) -> float:
    with devnet_process(PROVIDER, NODE_TENANTS, leases_per_tenant=2) as node:
        return alternate(f"check cycles over gRPC to a devnet process, {NODE_TENANTS} tenants, {TRIAL_S:g} s trials",
                         "events", TRIALS, lambda d: node_trial(node, d), root)


PARTS = {"model": model_part, "events": events_part, "node": node_part}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(PARTS), action="append",
                        help="run only this part (repeatable; default: all three)")
    parser.add_argument("--encode-floor", action="store_true",
                        help="also run the model part with a tap that only encodes each delivery, in place of the "
                             "capture: what encoding alone costs there")
    args = parser.parse_args()
    tune_gc()  # as run.py does before it starts the sidecar
    root = tempfile.mkdtemp(prefix="lw-capture-bench-")
    try:
        losses = {}
        for name in args.part or PARTS:
            losses[name] = PARTS[name](root)
            print()
        if args.encode_floor:
            floor = encode_floor(root)
            print()
        print("capture cost of the events/s: " + ", ".join(f"{name} {loss:.1%}" for name, loss in losses.items()))
        if args.encode_floor:
            print(f"encoding alone costs the model part {floor:.1%} of its events/s, against the target's "
                  f"{TARGET_LOSS:.0%} for the whole capture")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
