#!/usr/bin/env python3
"""Scale: 10,000 tenant actors and 50,000 leases on the chain model.

Measures, for leasewarden's pooled actors and for a thread-per-actor
baseline (pykka ``ThreadingActor``, one thread per tenant) in the same run:

- start: starting N tenants' ``CreditMonitorActor`` as the scheduler starts
  them, until each has handled its first message, on a sidecar that watches
  no tenant yet (those monitors are stopped before the tenants' own start);
  pooled, the median of ``--start-rounds`` such starts (each round's shown),
  the thread-per-actor baseline once;
- cycle: one full check cycle (read leases, sample every tenant's credit,
  decide), median of several; the first cycle, which starts the tenants'
  monitors, also batches the closures of the 1% whose credit is gone and
  closes them on the model (shown, not timed);
- stop: the sidecar stopped, until every monitor has (shown, no target);
- RSS: the process's peak resident memory, model included; the sidecar's
  own is that less the RSS of the built model (its lease answers made).

Each mode runs in its own subprocess so their memory does not mix. Targets
(issue 2): start <= 1 s, cycle <= 1 s, RSS < 150 MB, with every tenant a
pykka actor with its own mailbox handling one message at a time.

    python bench/scale_tenants.py [--tenants 10000] [--leases-per-tenant 5] [--cycles 5] [--start-rounds 5]
    python bench/scale_tenants.py --growth [--factor 10]   # pooled only: N and factor x N tenants, and the ratios

Targets (issue 16), pooled, at 10,000 tenants / 50,000 leases: start <= 0.25 s,
the sidecar's own share of a check cycle <= 0.2 s, its own RSS <= 100 MB; with
``--growth``, each of the three at 100,000 tenants within 12x of its
10,000-tenant figure (the cost grows linearly). ``--growth`` ends with the
same run's baseline for those ratios: a walk over ten small objects a tenant
in a heap filled to each row's peak RSS (``memory_walk``, no sidecar code),
what a visit costs at each size on this machine's caches and memory, in the
order the objects were made and in a random order: a synthetic baseline, a
range for what the memory alone can add to the growth, not a bound (the
random visit moves between runs).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pykka  # noqa: E402

from actors.chain_io import InlineExecutor  # noqa: E402
from actors.shell import CoreShell  # noqa: E402
from actors.tenant_credit import TenantCredit  # noqa: E402
from chain.model import BillingModel, GenesisAccount, GenesisLease  # noqa: E402
from chain.model_client import ModelChainClient  # noqa: E402
from messages.chain import LeaseItem  # noqa: E402
from messages.coins import Coin  # noqa: E402
from messages.credit import LeasesSynced  # noqa: E402
from devnet.demo import demo_address  # noqa: E402  (the chain refuses addresses that are not bech32)
from runtime.clock import ManualClock, utc  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.dispatch import ThreadedDispatcher, stop_pooled  # noqa: E402
from runtime.router import Router, tenant_address  # noqa: E402
from sidecar.app import Sidecar  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before load_config)
from runtime.memory import freeze_startup_objects, tune_gc  # noqa: E402

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"


class ThreadPerTenantMonitor(CoreShell, pykka.ThreadingActor):
    """The baseline: the same core and shell, but pykka's thread-per-actor runtime."""

    def __init__(self, router: Router, clock: Any, tenant: str, settings: Any) -> None:
        pykka.ThreadingActor.__init__(self)
        self.address = tenant_address(tenant)
        self.core = TenantCredit(tenant, settings)
        self.router = router
        self.clock = clock
        self._timers = []


class TimedClient(ModelChainClient):
    """The model client, adding up the time spent inside chain calls (the chain's share of a cycle)."""

    chain_seconds = 0.0
    #: CPU seconds inside chain calls (the calling thread's: the model runs in it)
    chain_cpu = 0.0

    def _call(self, operation: str, subject: Any, fn: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return super()._call(operation, subject, fn)
        finally:
            self.chain_seconds += time.perf_counter() - t  # reads run inline: one thread at a time
            self.chain_cpu += time.thread_time() - c


class _CollectorTime:
    """Seconds the cyclic collector ran from now until ``stop`` (its passes stop every thread)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began

    def stop(self) -> float:
        gc.callbacks.remove(self._on)
        return self.seconds


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(mode: str, tenants: int, per_tenant: int, cycles: int, start_rounds: int = 5) -> dict[str, Any]:
    tune_gc()  # as run.py does; the same for both modes
    clock = ManualClock(utc(2026, 3, 1))
    model = BillingModel(clock)
    model.register_provider(PROVIDER, demo_address("bench/provider"))
    model.register_provider(OTHER, demo_address("bench/other"))
    ours = (GenesisLease(PROVIDER, (LeaseItem("sku", 1, Coin("umfx", 1)),)),) * per_tenant
    elsewhere = GenesisLease(OTHER, (LeaseItem("sku", 1, Coin("umfx", 10**6)),))
    exhausted = set(range(0, tenants, 100))  # 1%: credit used up by another provider
    # The chain reserves rate x min_lease_duration at creation: an exhausted tenant
    # has exactly its leases' reservations, so its credit is gone once our leases
    # have run for min_lease_duration (the clock is moved past it below).
    hold = model.params.min_lease_duration
    short = per_tenant * hold + 10**6 * hold
    built = time.perf_counter()
    # Loaded whole: created lease by lease, the model's journal makes the world
    # cost the square of its leases (500,000 did not finish in 8 CPU minutes).
    model.load_genesis(
        GenesisAccount(demo_address(f"bench/tenant{i:06d}"), (Coin("umfx", short),), ours + (elsewhere,))
        if i in exhausted
        else GenesisAccount(demo_address(f"bench/tenant{i:06d}"), (Coin("umfx", 10**12),), ours)
        for i in range(tenants)
    )
    build_seconds = time.perf_counter() - built
    # The model makes each lease's answer once and keeps it (``_Lease.snapshot``): made
    # here, that memory is counted as the model's, not as the sidecar's first listing's.
    model.all_leases()
    # The model stands in for a chain, which runs in another process: its objects are
    # kept out of the collector's sight, or every full collection the sidecar's work
    # sets off walks 500,000 leases the sidecar does not hold (at 100,000 tenants the
    # start cost 14 times the 10,000-tenant one, not 10).
    gc.collect()
    gc.freeze()
    model_rss = rss_mb()
    settings = load_config(
        overrides={"scheduler": {"credit_check_zero_grace_period": "0s", "cycle_timeout": "1h"}}
    ).scheduler
    client = TimedClient(model, PROVIDER, demo_address("bench/provider"), withdraw_limit=100)
    dispatcher = ThreadedDispatcher(clock.now, workers=2)
    router_holder: dict[str, Router] = {}

    def start_threaded(tenant: str) -> Any:
        router = router_holder["router"]
        ref = ThreadPerTenantMonitor.start(router, clock, tenant, settings)
        router.add(tenant_address(tenant), ref)
        return ref

    sidecar = Sidecar(
        clock=clock,
        dispatcher=dispatcher,
        client=client,
        settings=settings,
        provider_uuid=PROVIDER,
        start_monitor=start_threaded if mode == "threaded" else None,
        # The chain is in this process: a read never waits on I/O, so there is
        # nothing for a thread pool to overlap (bench/credit_check.py measures
        # the pool against a chain with latency).
        reads=InlineExecutor(),
    )
    router_holder["router"] = sidecar.router

    # start: N monitors started as the scheduler starts them, until each has handled
    # one message. Measured first, on a sidecar that watches no tenant yet (as at
    # its start), and those monitors stopped and let go before the tenants' own are
    # started: measured after them, the peak RSS held 2 N monitors, which no sidecar
    # of N tenants ever does. One start is a fraction of a second, which a burst of the
    # machine's other work moves by nearly three times (0.18-0.52 s over 14 runs of
    # 10,000): pooled, it is measured ``start_rounds`` times, and the median is the
    # figure (the CPU figure is the median of the rounds' CPU times, maybe another round's).
    spawn_tenants = [demo_address(f"bench/spawn{i:06d}") for i in range(tenants)]  # made before the clock starts

    def start_round() -> tuple[float, float]:
        spawn_started, spawn_cpu = time.perf_counter(), time.process_time()
        refs = []
        for tenant in spawn_tenants:
            if mode == "threaded":
                ref = start_threaded(tenant)
            else:
                ref = sidecar.scheduler.actor_inbox.actor._start_monitor(tenant)  # type: ignore[attr-defined]
            refs.append(ref)
        futures = [r.ask(LeasesSynced(()), block=False) for r in refs]
        for f in futures:
            f.get(timeout=600)
        took = (time.perf_counter() - spawn_started, time.process_time() - spawn_cpu)
        for tenant in spawn_tenants:
            sidecar.router.remove(tenant_address(tenant))
        stop_pooled(refs)  # as the scheduler stops its monitors
        deadline = time.monotonic() + 600
        while any(r.is_alive() for r in refs) or len(pykka.ActorRegistry.get_all()) > 10:
            if time.monotonic() > deadline:
                raise RuntimeError("the start-up measurement's actors did not stop within 600 s")
            time.sleep(0.01)
        del refs, futures
        gc.collect()  # a stopped actor and its mailbox refer to each other: freed by the collector, now
        return took

    starts = [start_round() for _ in range(start_rounds if mode == "pooled" else 1)]
    start_seconds = statistics.median(wall for wall, _ in starts)
    start_cpu = statistics.median(cpu for _, cpu in starts)
    del spawn_tenants

    clock.advance(timedelta(seconds=hold + 5))  # the 1%'s leases have used up their reservations
    # A tx at the new time, so that the chain's latest block is now: a read is judged
    # by its block's time against max_node_lag, and an hour-old block closes nothing.
    model.fund_credit(demo_address("bench/clock"), [Coin("umfx", 1)])

    # the first (check-only) cycle spawns every tenant's monitor, and closes the 1%
    core = sidecar.scheduler_core
    t0 = time.perf_counter()
    sidecar.reconcile("bench")
    assert sidecar.wait_cycles_after(0, timeout=600)
    first_cycle = time.perf_counter() - t0
    first_closes = client.calls.get("close_leases", 0)
    # As run.py does after its first cycle: what start-up built (the world here, the
    # monitors) lives as long as the process, and the collector need not walk it again.
    freeze_startup_objects()
    collecting = _CollectorTime()

    times = []
    chain_times = []
    # The same in CPU seconds (the process's, and the calling thread's inside chain calls):
    # on a machine shared with other work, wall time also counts the others' turns.
    cpu_times: list[float] = []
    chain_cpu_times: list[float] = []
    closed_total = 0
    for _ in range(cycles):
        before = core.cycles_started
        closes_before = client.calls.get("close_leases", 0)
        clock.advance(timedelta(seconds=1))
        chain_before, chain_cpu_before = client.chain_seconds, client.chain_cpu
        t, cpu = time.perf_counter(), time.process_time()
        sidecar.reconcile("bench")
        assert sidecar.wait_cycles_after(before, timeout=600)
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - cpu)
        chain_times.append(client.chain_seconds - chain_before)
        chain_cpu_times.append(client.chain_cpu - chain_cpu_before)
        closed_total += client.calls.get("close_leases", 0) - closes_before
    # Closed by our MsgCloseLease: the chain stores "credit exhausted" for a lease it finds so.
    closed_leases = sum(1 for lease in model.all_leases() if lease.provider_uuid == PROVIDER and lease.state == "CLOSED")
    result = {
        "mode": mode,
        "tenants": tenants,
        "leases": tenants * per_tenant,
        "start_s": round(start_seconds, 3),
        "start_rounds_s": [round(wall, 3) for wall, _ in starts],
        "first_cycle_s": round(first_cycle, 3),
        "cycle_median_s": round(statistics.median(times), 3),
        "cycle_times_s": [round(x, 3) for x in times],
        "cycle_in_chain_median_s": round(statistics.median(chain_times), 3),
        "cycle_sidecar_median_s": round(statistics.median(t - c for t, c in zip(times, chain_times)), 3),
        "start_cpu_s": round(start_cpu, 3),
        "cycle_cpu_sidecar_median_s": round(statistics.median(t - c for t, c in zip(cpu_times, chain_cpu_times)), 3),
        "cycle_cpu_in_chain_median_s": round(statistics.median(chain_cpu_times), 3),
        "gc_in_cycles_s": round(collecting.stop(), 3),
        "close_batches": closed_total,
        "close_batches_first_cycle": first_closes,
        "leases_closed_by_us": closed_leases,
        "rss_mb": round(rss_mb(), 1),
        "rss_model_mb": round(model_rss, 1),
        "world_build_s": round(build_seconds, 1),
        "threads": __import__("threading").active_count(),
    }
    # stop: the sidecar stopped, until every tenant's monitor has (they go with the scheduler).
    monitors = [sidecar.router.get(a) for a in sidecar.router.addresses() if a.startswith("tenant/")]
    stop_started = time.perf_counter()
    sidecar.stop(timeout=600)
    while any(r is not None and r.is_alive() for r in monitors):
        if time.perf_counter() - stop_started > 600:
            raise RuntimeError("the monitors did not stop within 600 s of the sidecar's stop")
        time.sleep(0.01)
    result["stop_s"] = round(time.perf_counter() - stop_started, 3)
    dispatcher.shutdown()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tenants", type=int, default=10_000)
    p.add_argument("--leases-per-tenant", type=int, default=5)
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--start-rounds", type=int, default=5,
                   help="pooled: starts of N monitors measured, the median the figure (default 5)")
    p.add_argument("--mode", choices=("pooled", "threaded"), help=argparse.SUPPRESS)
    p.add_argument("--growth", action="store_true",
                   help="pooled only, at --tenants and at --factor times as many: both rows and their ratios")
    p.add_argument("--factor", type=int, default=10)
    p.add_argument("--memory-walk", nargs=2, type=float, metavar=("TENANTS", "MB"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.memory_walk:
        print(*memory_walk(int(args.memory_walk[0]), args.memory_walk[1]))
        return 0
    if args.mode:
        print(json.dumps(run(args.mode, args.tenants, args.leases_per_tenant, args.cycles, args.start_rounds)))
        return 0
    if args.growth:
        return growth(args)
    results = {}
    for mode in ("pooled", "threaded"):
        out = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--tenants", str(args.tenants),
             "--leases-per-tenant", str(args.leases_per_tenant), "--cycles", str(args.cycles),
             "--start-rounds", str(args.start_rounds)],
            capture_output=True, text=True, timeout=1800,
        )
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return 1
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    pooled, threaded = results["pooled"], results["threaded"]
    print(f"{args.tenants} tenants, {args.tenants * args.leases_per_tenant} leases, 1% closable, on the chain model")
    print(f"{'':28}{'pooled':>12}{'thread/actor':>14}{'ratio':>9}")
    for key, label in (
        ("start_s", "start N monitors, median (s)"),
        ("first_cycle_s", "first cycle, spawning (s)"),
        ("cycle_median_s", "check cycle, median (s)"),
        ("cycle_in_chain_median_s", "  of it in the chain model"),
        ("cycle_sidecar_median_s", "  the sidecar's own share"),
        ("start_cpu_s", "start, CPU (s)"),
        ("cycle_cpu_sidecar_median_s", "own share of a cycle, CPU"),
        ("stop_s", "stop, until every monitor (s)"),
        ("rss_mb", "peak RSS, model incl. (MB)"),
    ):
        a, b = pooled[key], threaded[key]
        ratio = f"{b / a:.1f}x" if a else "-"
        print(f"{label:28}{a:>12}{b:>14}{ratio:>9}")
    print(f"{'RSS of the model alone (MB)':28}{pooled['rss_model_mb']:>12}{threaded['rss_model_mb']:>14}")
    print(f"{'world built in (s)':28}{pooled['world_build_s']:>12}{threaded['world_build_s']:>14}")
    print(f"{'threads':28}{pooled['threads']:>12}{threaded['threads']:>14}")
    print(f"starts pooled (the median above): {pooled['start_rounds_s']}; thread-per-actor: {threaded['start_rounds_s']}")
    print(f"cycle times pooled: {pooled['cycle_times_s']}; thread-per-actor: {threaded['cycle_times_s']}")
    print(f"leases closed by us over the cycles: pooled {pooled['leases_closed_by_us']}, "
          f"thread-per-actor {threaded['leases_closed_by_us']}")
    own_rss = pooled["rss_mb"] - pooled["rss_model_mb"]
    print(f"sidecar's own RSS (peak minus the model's): {own_rss:.1f} MB pooled, "
          f"{threaded['rss_mb'] - threaded['rss_model_mb']:.1f} MB thread-per-actor")
    print(f"targets (issue 16): start <= 0.25 s: {'met' if pooled['start_s'] <= 0.25 else 'NOT met'}; "
          f"the sidecar's own share of a cycle <= 0.2 s: {'met' if pooled['cycle_sidecar_median_s'] <= 0.2 else 'NOT met'}; "
          f"its own RSS <= 100 MB: {'met' if own_rss <= 100 else 'NOT met'}")
    return 0


def _child(mode: str, tenants: int, per_tenant: int, cycles: int, start_rounds: int) -> dict[str, Any] | None:
    out = subprocess.run(
        [sys.executable, __file__, "--mode", mode, "--tenants", str(tenants),
         "--leases-per-tenant", str(per_tenant), "--cycles", str(cycles), "--start-rounds", str(start_rounds)],
        capture_output=True, text=True, timeout=7200,
    )
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


#: Objects a memory walk visits per tenant, and the pymalloc-sized filler allocated between two of
#: them (below 512 B: from the same arenas as the sidecar's small objects, which it spreads).
WALK_OBJECTS_PER_TENANT = 10
WALK_FILLER_ITEMS = 40


def memory_walk(tenants: int, megabytes: float, rounds: int = 3) -> tuple[float, float]:
    """Nanoseconds a visit to one of ``tenants`` x 10 small dicts costs, with the process's heap filled
    out to ``megabytes`` between them: in the order they were made, and in a random order (best of
    ``rounds`` each).

    No sidecar code: what the machine's caches and memory alone make of a heap that size, for the
    growth rows to be read against. A check cycle visits every tenant's objects, mostly in the order
    they were made (its dicts keep insertion order) and partly not (a tenant's monitor, leases and
    reads were made at different times): the two orders give a range, not a bound, for what the
    memory can cost it.
    """
    import random

    gc.disable()
    objects = tenants * WALK_OBJECTS_PER_TENANT
    # What each object walked and each filler take, their list slots included (rss_mb is in MiB).
    walked_bytes = sys.getsizeof({"n": 0, "items": [0, 1], "name": ""}) + sys.getsizeof([0, 1]) + \
        sys.getsizeof(str(objects)) + 2 * 8
    filler_bytes = sys.getsizeof((0,) * WALK_FILLER_ITEMS) + 8
    room = (megabytes - rss_mb()) * 2**20 - objects * walked_bytes
    fillers = max(0, int(room / objects / filler_bytes))
    world: list[dict[str, Any]] = []
    kept: list[tuple[int, ...]] = []
    for i in range(objects):
        world.append({"n": i, "items": [i, i + 1], "name": str(i)})
        kept.extend((i,) * WALK_FILLER_ITEMS for _ in range(fillers))
    shuffled = list(range(objects))
    random.Random(16).shuffle(shuffled)
    costs = []
    for order in (range(objects), shuffled):
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            total = 0
            for i in order:
                o = world[i]
                total += o["n"] + o["items"][1] + len(o["name"])
            best = min(best, time.perf_counter() - started)
        costs.append(best / objects * 1e9)
    return costs[0], costs[1]


def _walk_child(tenants: int, megabytes: float) -> tuple[float, float] | None:
    out = subprocess.run([sys.executable, __file__, "--memory-walk", str(tenants), str(megabytes)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return None
    in_order, shuffled = out.stdout.strip().splitlines()[-1].split()
    return float(in_order), float(shuffled)


def growth(args: argparse.Namespace) -> int:
    """The pooled sidecar at N and factor x N tenants: start, its own share of a cycle, its own RSS."""
    small = _child("pooled", args.tenants, args.leases_per_tenant, args.cycles, args.start_rounds)
    large = _child("pooled", args.tenants * args.factor, args.leases_per_tenant, args.cycles, args.start_rounds)
    if small is None or large is None:
        return 1
    rows = (("start_s", "start N monitors, median (s)"), ("cycle_sidecar_median_s", "own share of a cycle (s)"),
            ("own_rss_mb", "own RSS (MB)"), ("cycle_median_s", "whole cycle, model incl. (s)"),
            ("start_cpu_s", "start, CPU (s)"), ("cycle_cpu_sidecar_median_s", "own share of a cycle, CPU (s)"),
            ("cycle_in_chain_median_s", "the chain model's share (s)"), ("gc_in_cycles_s", "collector, all cycles (s)"),
            ("stop_s", "stop, until every monitor (s)"))
    for r in (small, large):
        r["own_rss_mb"] = round(r["rss_mb"] - r["rss_model_mb"], 1)
    print(f"pooled, {args.leases_per_tenant} leases per tenant, 1% closable, on the chain model")
    print(f"{'':30}{small['tenants']:>12,}{large['tenants']:>12,}{'ratio':>9}{'limit':>8}")
    for key, label in rows:
        a, b = small[key], large[key]
        print(f"{label:30}{a:>12}{b:>12}{(b / a if a else float('nan')):>8.1f}x{args.factor * 1.2:>7.0f}x")
    print(f"starts (the median above): {small['start_rounds_s']} / {large['start_rounds_s']}")
    print(f"cycle times: {small['cycle_times_s']} / {large['cycle_times_s']}")
    print(f"world built in {small['world_build_s']} s / {large['world_build_s']} s")
    # The same run's baseline for the ratios: what a visit to an object costs on this machine in a heap
    # of each row's size (model included: the cycle walks the model's answers too), no sidecar code.
    walks = [_walk_child(r["tenants"], r["rss_mb"]) for r in (small, large)]
    if walks[0] is None or walks[1] is None:
        return 1
    (a_seq, a_rand), (b_seq, b_rand) = walks
    low, high = args.factor * b_seq / a_seq, args.factor * b_rand / a_rand
    print(f"this machine's memory, the same run's baseline (no sidecar code: a walk over {WALK_OBJECTS_PER_TENANT} "
          f"small objects a tenant, the heap filled to each row's peak RSS, {small['rss_mb']:.0f} / "
          f"{large['rss_mb']:.0f} MB): a visit in the order they were made {a_seq:.0f} / {b_seq:.0f} ns "
          f"({b_seq / a_seq:.2f}x), in a random order {a_rand:.0f} / {b_rand:.0f} ns ({b_rand / a_rand:.2f}x); "
          f"work that visits every object as often per tenant grows {low:.1f}x to {high:.1f}x from the caches "
          "and memory alone, by how much of it goes in the order the objects were made")
    return 0


if __name__ == "__main__":
    sys.exit(main())
