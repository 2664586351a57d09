"""Event intake: lease events from the devnet websocket to an actor, at a rising rate.

Run from the repository root:  python bench/event_intake.py  (under two minutes, loopback only)

The devnet's ``WebsocketServer`` runs in a child process, as a node would
(its JSON encoding does not share the sidecar's interpreter), fed directly
with synthetic ``TxEvents`` in a realistic mix: single creates and
acknowledgements, 10-lease batch closes, another provider's withdraw that
auto-closes a shared tenant's lease, and a close of ours that is also an
auto-close (it matches two subscriptions, so the listener must deduplicate).
The sidecar side is the production path: ``ListenerActor`` subscribed to the
provider's five queries, parsing every frame, delivering each lease event as
``LeaseEventReceived`` through the ``Router`` to a counting actor at
``scheduler`` on a two-worker ``ThreadedDispatcher``.

It reports:

1. a ramp of offered rates: per step, the lease events/s delivered to the
   actor and the p50/p99 delay from emission by the node ("block") to the
   actor; a step is *sustained* when everything emitted arrived within
   ``DRAIN_GRACE`` of the step's end (no backlog building up);
2. a flood (as fast as the node can emit), three times each for
   - the baseline: a raw websocket client on the same five subscriptions that
     only counts frames (no JSON parsing, no actors), and
   - the listener: parsing, deduplication and delivery to the actor;
   the medians and the listener/baseline ratio (what parsing and delivery
   cost relative to just receiving the bytes).

Delays use CLOCK_MONOTONIC, which is system-wide on Linux, so times taken in
the node process and in the sidecar process compare directly.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import asyncio  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import multiprocessing  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

from websockets.asyncio.client import connect  # noqa: E402

from actors.listener import ListenerActor  # noqa: E402
from actors.listener_settings import ListenerSettings  # noqa: E402
from chain.model import ChainEvent, TxEvents  # noqa: E402
from chain.ws_query import provider_queries  # noqa: E402
from messages.scheduler import LeaseEventReceived, Reconcile  # noqa: E402
from runtime.dispatch import PooledActor, ThreadedDispatcher  # noqa: E402
from runtime.router import SCHEDULER, Router  # noqa: E402

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-73ca-8297-85d4d17d0ec4"
#: Offered lease events/s of the ramp, and how long each step lasts.
RAMP = (1_000, 2_500, 5_000, 7_500, 10_000, 15_000, 20_000, 30_000)
STEP_SECONDS = 3.0
#: A step is sustained when its last event arrives within this long of its end.
DRAIN_GRACE = 0.5
#: Lease events per flood, and floods per side.
FLOOD_EVENTS = 30_000
FLOOD_RUNS = 3
TARGET = 5_000
#: Wall-clock budget of the whole run: every wait is cut to what is left of it.
BUDGET_SECONDS = 110.0
_deadline = float("inf")  # main() sets it; a module that borrows wait_for waits its own timeout


def mono() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# -- the node side (child process) --------------------------------------------------------------
def _lease(n: int, i: int) -> str:
    return f"{n:08x}-0000-4000-8000-{i:012x}"


def make_tx(n: int, height: int) -> tuple[TxEvents, int, int]:
    """Tx number ``n`` of the mix -> (tx, distinct lease events in it, frames it matches)."""
    now = datetime.now(timezone.utc)
    tenant = f"manifest1tenant{n % 997}"
    kind = n % 5
    if kind == 0:
        events = (ChainEvent("lease_created", (("lease_uuid", _lease(n, 0)), ("tenant", tenant),
                                               ("provider_uuid", PROVIDER), ("item_count", "1"),
                                               ("total_rate_per_second", "3upwr"), ("created_by", tenant))),)
        lease_events, frames = 1, 1
    elif kind == 1:
        events = (ChainEvent("lease_acknowledged", (("lease_uuid", _lease(n, 0)), ("tenant", tenant),
                                                    ("provider_uuid", PROVIDER),
                                                    ("acknowledged_by", "manifest1prov"))),)
        lease_events, frames = 1, 1
    elif kind == 2:  # a batch close of 10 leases
        events = tuple(
            ChainEvent("lease_closed", (("lease_uuid", _lease(n, i)), ("tenant", tenant), ("provider_uuid", PROVIDER),
                                        ("settled_amounts", "120upwr"), ("closed_by", "manifest1prov"),
                                        ("duration_seconds", "3600"), ("closure_reason", "credit depleted")))
            for i in range(10)
        ) + (ChainEvent("batch_closed", (("lease_count", "10"), ("provider_uuid", PROVIDER),
                                         ("settled_amounts", "1200upwr"))),)
        lease_events, frames = 10, 1
    elif kind == 3:  # another provider's withdraw exhausts a shared tenant
        events = tuple(
            ChainEvent("provider_withdraw", (("lease_uuid", _lease(n, i)), ("provider_uuid", OTHER),
                                             ("payout_address", "manifest1other"), ("amount", "40upwr"),
                                             ("auto_closed", "true" if i == 0 else "false")))
            for i in range(5)
        ) + (
            ChainEvent("lease_auto_closed", (("lease_uuid", _lease(n, 0)), ("tenant", tenant),
                                             ("provider_uuid", OTHER), ("reason", "credit_exhausted"))),
            ChainEvent("batch_withdraw", (("lease_count", "5"), ("provider_uuid", OTHER), ("amount", "200upwr"))),
        )
        lease_events, frames = 1, 1
    else:  # our lease closed by the chain itself: lease_closed + lease_auto_closed
        events = (
            ChainEvent("lease_closed", (("lease_uuid", _lease(n, 0)), ("tenant", tenant), ("provider_uuid", PROVIDER),
                                        ("settled_amounts", "7upwr"), ("closed_by", "manifest1prov"),
                                        ("duration_seconds", "60"), ("closure_reason", "credit_exhausted"))),
            ChainEvent("lease_auto_closed", (("lease_uuid", _lease(n, 0)), ("tenant", tenant),
                                             ("provider_uuid", PROVIDER), ("reason", "credit_exhausted"))),
        )
        # One frame: the subscriptions are a firehose of every tx (``chain.ws_query``), so a tx
        # matches one query whatever its events (waiting for two made every flood time out).
        lease_events, frames = 2, 1
    return TxEvents(height, f"{n:064X}", now, events), lease_events, frames


def node_process(conn) -> None:  # the child's main: commands from the pipe
    from chain.model import BillingModel
    from devnet.websocket_server import WebsocketServer
    from messages.chain import NodeStatus
    from runtime.clock import RealClock

    logging.basicConfig(level=logging.WARNING)
    clock = RealClock()
    model = BillingModel(clock)
    # The floods queue far more than a real node ever would; the bench measures
    # throughput, not the slow-client limit (tests cover that).
    server = WebsocketServer(model, lambda: NodeStatus(1, clock.now(), False), slow_client_queue=10_000_000)
    conn.send(server.start())
    n = 0
    while True:
        cmd = conn.recv()
        if cmd[0] == "stop":
            server.stop()
            clock.close()
            conn.send("stopped")
            return
        if cmd[0] == "emit":  # ("emit", events per second or 0 for a flood, seconds or event budget)
            rate, budget = cmd[1], cmd[2]
            emitted: list[tuple[int, float]] = []
            lease_events = frames = 0
            start = mono()
            while True:
                now = mono()
                if rate:
                    if now - start >= budget:
                        break
                    due = rate * (now - start)
                    if lease_events >= due:
                        time.sleep(0.002)
                        continue
                elif lease_events >= budget:
                    break
                n += 1
                tx, le, fr = make_tx(n, n)
                emitted.append((n, mono()))
                server.publish(tx)
                lease_events += le
                frames += fr
            conn.send((emitted, lease_events, frames, mono() - start))


class NodeProcess:
    """The devnet websocket in a process of its own (``node_process``), driven over a pipe."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=node_process, args=(child,), daemon=True)
        self._process.start()
        self.url = f"ws://127.0.0.1:{self._conn.recv()}/websocket"

    def emit(self, rate: float, budget: float):
        """Lease events at ``rate`` per second (0: as fast as it can) for ``budget`` s or events; what it sent."""
        self._conn.send(("emit", rate, budget))
        return self._conn.recv()

    def stop(self) -> None:
        self._conn.send(("stop",))
        self._conn.recv()
        self._process.join(10)


# -- the sidecar side ------------------------------------------------------------------------------
class Sink(PooledActor):
    """Stands in for the scheduler: counts lease events, notes when each arrived."""

    def __init__(self, dispatcher) -> None:
        super().__init__(dispatcher, SCHEDULER)
        self.count = 0
        self.reconciles = 0
        self.arrivals: list[tuple[int, float]] = []

    def on_receive(self, message) -> None:
        if isinstance(message, LeaseEventReceived):
            self.count += 1
            self.arrivals.append((message.event.height, mono()))
        elif isinstance(message, Reconcile):
            self.reconciles += 1


class RawClient:
    """The baseline: the same subscriptions, frames counted, nothing parsed or delivered."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.frames = 0
        self.ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        self.ready.wait(10)

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with connect(self.url, compression=None, max_size=None) as ws:
            for i, q in enumerate(provider_queries(PROVIDER), 1):
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": "subscribe", "params": {"query": q}}))
            for _ in range(5):
                await ws.recv()
            self.ready.set()
            reader = asyncio.ensure_future(self._read(ws))
            await self._stop.wait()
            reader.cancel()

    async def _read(self, ws) -> None:
        async for _ in ws:
            self.frames += 1

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)


class Listening:
    """The production ``ListenerActor`` on ``url``, delivering to a ``Sink`` on a two-worker dispatcher
    (tapped by ``tap``, a capture, when given); subscribed once constructed."""

    def __init__(self, url: str, tap=None) -> None:
        self.dispatcher = ThreadedDispatcher(capture_clock, workers=2, tap=tap)
        router = Router()
        self.sink_ref = Sink.start(self.dispatcher)
        router.add(SCHEDULER, self.sink_ref)
        self.sink: Sink = self.sink_ref.actor_inbox.actor  # type: ignore[attr-defined]
        self.listener = ListenerActor.start(self.dispatcher, router, url, PROVIDER, ListenerSettings())
        if not wait_for(lambda: self.sink.reconciles >= 1, 10):
            self.stop()
            raise RuntimeError("the listener did not subscribe within 10 s")

    def stop(self) -> None:
        self.listener.stop(timeout=10)
        self.sink_ref.stop(timeout=10)
        self.dispatcher.shutdown()


def wait_for(predicate, timeout: float) -> bool:
    deadline = min(mono() + timeout, _deadline)
    while mono() < deadline:
        if predicate():
            return True
        time.sleep(0.001)
    return predicate()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    # No options: --help says what it measures (the module's doc) instead of running it.
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    global _deadline
    _deadline = mono() + BUDGET_SECONDS
    logging.basicConfig(level=logging.WARNING)
    node = NodeProcess()
    url, emit = node.url, node.emit
    print(f"event intake: devnet websocket at {url} (separate process), {os.cpu_count()} CPUs")

    # Baseline floods: raw frames, nothing parsed.
    baseline = []
    raw = RawClient(url)
    for _ in range(FLOOD_RUNS):
        before = raw.frames
        start = mono()
        emitted, lease_events, frames, _ = emit(0, FLOOD_EVENTS)
        wait_for(lambda: raw.frames - before >= frames, 60)
        elapsed = mono() - start
        baseline.append(lease_events / elapsed)
    raw.close()

    try:
        listening = Listening(url)
    except RuntimeError as exc:
        print(exc)
        return 1
    sink, listener = listening.sink, listening.listener

    print(f"\nramp: offered lease events/s for {STEP_SECONDS:.0f} s each; delay = node emission -> actor")
    print(f"{'offered/s':>10} {'emitted/s':>10} {'delivered/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
          "  sustained")
    sustained_best = 0.0
    #: the highest offered rate that was kept up with
    sustained_offered = 0
    backlogged = 0
    for rate in RAMP:
        if backlogged >= 2 or mono() + STEP_SECONDS + DRAIN_GRACE > _deadline:
            print(f"{rate:>10,}  (skipped: {'saturated' if backlogged >= 2 else 'out of time'})")
            continue
        count_before = sink.count
        arrivals_before = len(sink.arrivals)
        start = mono()
        emitted, lease_events, frames, took = emit(rate, STEP_SECONDS)
        end = mono()
        drained = wait_for(lambda: sink.count - count_before >= lease_events, DRAIN_GRACE)
        wait_for(lambda: sink.count - count_before >= lease_events, 30)
        emitted_at = dict(emitted)
        arrivals = sink.arrivals[arrivals_before:]
        delays = [(t - emitted_at[h]) * 1000 for h, t in arrivals if h in emitted_at]
        last = max((t for _, t in arrivals), default=end)
        delivered_rate = (sink.count - count_before) / (max(last, end) - start)
        ok = drained and sink.count - count_before == lease_events
        if ok:
            sustained_best = max(sustained_best, delivered_rate)
            sustained_offered = max(sustained_offered, rate)
        else:
            backlogged += 1
        worst = max(delays, default=float("nan"))
        print(
            f"{rate:>10,} {lease_events / took:>10,.0f} {delivered_rate:>12,.0f} "
            f"{percentile(delays, .5):>8.1f} {percentile(delays, .99):>8.1f} {worst:>8.1f}"
            f"  {'yes' if ok else 'NO (backlog)'}"
        )

    flood = []
    flood_delays = []
    #: flood runs whose events had not all arrived when the wait (60 s, or the bench's budget) ended:
    #: a count of what came so far over that time is no rate (on a slow machine it read 0 events/s)
    cut = 0
    for _ in range(FLOOD_RUNS):
        if mono() >= _deadline:
            cut += 1
            continue
        count_before = sink.count
        arrivals_before = len(sink.arrivals)
        start = mono()
        emitted, lease_events, frames, _ = emit(0, FLOOD_EVENTS)
        if not wait_for(lambda: sink.count - count_before >= lease_events, 60):
            cut += 1
            continue
        elapsed = mono() - start
        flood.append((sink.count - count_before) / elapsed)
        emitted_at = dict(emitted)
        flood_delays.extend((t - emitted_at[h]) * 1000 for h, t in sink.arrivals[arrivals_before:] if h in emitted_at)

    stats = listener.proxy().stats().get(timeout=5)
    listening.stop()
    node.stop()

    base_median = statistics.median(baseline)
    flood_median = statistics.median(flood) if flood else float("nan")
    print(f"\nflood of {FLOOD_EVENTS:,} lease events (~{FLOOD_EVENTS // 3:,} txs), {FLOOD_RUNS} runs each:")
    print(f"  baseline, raw frames received (no parsing, no actors): "
          f"{', '.join(f'{r:,.0f}' for r in baseline)} events/s; median {base_median:,.0f}/s")
    print(f"  listener, parsed + deduplicated + delivered to the actor: "
          f"{', '.join(f'{r:,.0f}' for r in flood) or 'no run'} events/s; median {flood_median:,.0f}/s"
          + (f"; {cut} run(s) left out, their events not all in within 60 s or the bench's "
             f"{BUDGET_SECONDS:.0f} s" if cut else ""))
    print(f"  ratio listener/baseline (medians): {flood_median / base_median:.2f}")
    print(f"  flood delay node -> actor: p50 {percentile(flood_delays, .5):,.0f} ms, "
          f"p99 {percentile(flood_delays, .99):,.0f} ms (queueing: the node emits faster than anyone reads)")
    print(f"  listener counters: {stats.tx_frames:,} tx frames, {stats.events_delivered:,} events delivered, "
          f"{stats.duplicates:,} duplicates dropped, {stats.malformed_frames} malformed, "
          f"{stats.subscribed_sessions} session(s)")
    # The verdict is the ramp's: a rate counts only if it was kept up with, backlog-free.
    print(f"\nsustained (ramp, no backlog): {sustained_best:,.0f} lease events/s at {sustained_offered:,}/s offered "
          f"(flood median {flood_median:,.0f}/s); target >= {TARGET:,}/s: "
          f"{'met' if sustained_offered >= TARGET else 'NOT met'}"
          f"{'' if os.getloadavg()[0] < 1.5 else f' (load average {os.getloadavg()[0]:.1f}: the machine is busy)'}")
    return 0


def capture_clock() -> datetime:
    """The dispatcher's capture clock; this bench captures nothing, any aware time will do."""
    return datetime.now(timezone.utc)


if __name__ == "__main__":
    sys.exit(main())
