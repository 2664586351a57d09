#!/usr/bin/env python3
"""A day of a 10,000-tenant sidecar's capture, replayed whole and for one tenant.

Run from the repository root:  python bench/replay_day.py  (a few minutes)

It first captures a day: the sidecar's actors on the chain model (manual
clock and dispatcher, the capture tap on, the shipped configuration's
intervals: a withdrawal and a credit check every hour, with the wakes,
re-checks and closures they lead to), ``--tenants`` tenants with
``--leases-per-tenant`` leases each, 1% of them with their credit used up by
another provider (so that grace windows open and leases close), 1% of
credit reads failing. The ledger is a sink that takes its mail (a sidecar
has one; its facts are part of a capture) and writes nothing.

Then, over that capture, ``--rounds`` rounds of:

1. baseline: the reader alone (framing, CRC, every record decoded typed);
2. the reader alone, lazily, as ``--tenant`` reads (framing, CRC, every
   frame's records and leases, no message decoded);
3. ``run.py replay`` of the whole day (reader, cores, matching);
4. ``run.py replay --tenant`` of one tenant (its monitor, the scheduler
   and the chain actor replayed; every record read, only theirs decoded).

Times are CPU seconds of this process, best and median of the rounds; the
replays' ratios are to the reader of the same round. Targets (issue 16):
the day in under 30 s, one tenant of it in under 2 s. Both must find no
divergence.

    python bench/replay_day.py [--tenants 10000] [--leases-per-tenant 5] [--hours 24] [--rounds 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.cores import build_core  # noqa: E402
from capture import CaptureReader, CaptureWriter  # noqa: E402
from capture.settings import CaptureSettings  # noqa: E402
from chain.model import BillingModel  # noqa: E402
from chain.model_client import ModelChainClient  # noqa: E402
from devnet.demo import demo_address  # noqa: E402  (the chain refuses addresses that are not bech32)
from messages.chain import LeaseItem  # noqa: E402
from messages.coins import Coin  # noqa: E402
from replay.engine import Divergence, Replayer, replayed_for  # noqa: E402
from runtime.clock import ManualClock, utc  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.dispatch import ManualDispatcher, PooledActor  # noqa: E402
from runtime.router import LEDGER  # noqa: E402
from sidecar.app import Sidecar  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before load_config)

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER = "019bbef3-b000-7002-bef5-ba743a73a80e"
DAY_TARGET_S = 30.0
TENANT_TARGET_S = 2.0


class LedgerSink(PooledActor):
    """Takes the ledger's mail (so that it is delivered, and captured, as with a ledger) and keeps none of it."""

    def on_receive(self, message: Any) -> None:
        return None


def make_day(directory: str, tenants: int, per_tenant: int, hours: int) -> tuple[list[str], str, float]:
    clock = ManualClock(utc(2026, 3, 1))
    config = load_config(overrides={"ledger": {"path": ""}})
    model = BillingModel(clock)
    model.register_provider(PROVIDER, demo_address("bench/provider"))
    model.register_provider(OTHER, demo_address("bench/other"))
    item = [LeaseItem("sku", 1, Coin("umfx", 1))]
    names = [demo_address(f"bench/tenant{i:06d}") for i in range(tenants)]
    for i, t in enumerate(names):
        drained = i % 100 == 0  # 1%: another provider's lease uses their credit up within the day
        model.fund_credit(t, [Coin("umfx", 10**12 if not drained else 3 * 3600 * 10**3)])
        for _ in range(per_tenant):
            model.create_lease(t, PROVIDER, item)
        if drained:
            model.create_lease(t, OTHER, [LeaseItem("sku", 1, Coin("umfx", 10**3))])
    client = ModelChainClient(model, PROVIDER, demo_address("bench/provider"), withdraw_limit=config.node.withdraw_limit)
    client.faults.fail_rate("credit_account", 0.01)
    writer = CaptureWriter(CaptureSettings(directory=directory, max_total_bytes=0), clock_now=clock.now,
                           config=config).open()
    dispatcher = ManualDispatcher(clock.now, tap=writer)
    side = Sidecar(clock=clock, dispatcher=dispatcher, client=client, settings=config.scheduler, provider_uuid=PROVIDER)
    sink = LedgerSink.start(dispatcher, LEDGER)
    side.router.add(LEDGER, sink)
    started = time.perf_counter()
    side.withdraw_once()
    side.start()
    end = clock.now() + timedelta(hours=hours)
    side.settle()
    while (nxt := clock.next_timer()) is not None and nxt <= end:
        clock.advance_to(nxt)
        side.settle()
    sink.stop(block=False)  # delivered by the settle in side.stop() (the manual dispatcher runs nothing else)
    side.stop()
    writer.close()
    return writer.paths, names[1], time.perf_counter() - started  # names[1]: a tenant with credit to spare


def cpu(fn: Any) -> float:
    gc.collect()
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tenants", type=int, default=10_000)
    p.add_argument("--leases-per-tenant", type=int, default=5)
    p.add_argument("--hours", type=int, default=24)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", help="keep the day's capture in this folder (made if missing)")
    args = p.parse_args()
    logging.disable(logging.WARNING)  # the day's warnings (failed reads) are not what is measured
    directory = args.keep or tempfile.mkdtemp(prefix="lw-replay-day-")
    os.makedirs(directory, exist_ok=True)
    try:
        paths, tenant, took = make_day(directory, args.tenants, args.leases_per_tenant, args.hours)
        records = sum(1 for _ in CaptureReader(paths))
        size = sum(os.path.getsize(p) for p in paths)
        print(f"capture: {records:,} records, {size / 1e6:.1f} MB in {len(paths)} file(s): {args.tenants:,} tenants, "
              f"{args.tenants * args.leases_per_tenant:,} leases, {args.hours} h (made in {took:.0f} s)")
        divergences: list[Any] = []

        def reader() -> None:
            for _ in CaptureReader(paths).batches():
                pass

        def lazy_reader() -> None:
            for _ in CaptureReader(paths).batches(lazy=True):
                pass

        def replay() -> None:
            for event in Replayer(build_core).replay(CaptureReader(paths, file_parts=True)):
                if isinstance(event, Divergence):
                    divergences.append(event)

        def replay_tenant() -> None:
            focus = replayed_for(tenant)
            for event in Replayer(build_core, replayed=focus).replay(CaptureReader(paths, file_parts=True)):
                if isinstance(event, Divergence):
                    divergences.append(event)

        stages = {"reader alone (baseline)": reader, "reader alone, lazily": lazy_reader,
                  "replay, the whole day": replay, "replay --tenant (one tenant)": replay_tenant}
        times: dict[str, list[float]] = {name: [] for name in stages}
        for _ in range(args.rounds):
            for name, fn in stages.items():
                times[name].append(cpu(fn))
        base = times["reader alone (baseline)"]
        print(f"{'':32}{'best (s)':>10}{'median (s)':>12}{'records/s (best)':>18}{'x reader (median)':>19}")
        for name, ts in times.items():
            ratio = statistics.median(t / b for t, b in zip(ts, base))
            print(f"{name:32}{min(ts):>10.2f}{statistics.median(ts):>12.2f}{records / min(ts):>18,.0f}{ratio:>19.2f}")
        day, one = statistics.median(times["replay, the whole day"]), statistics.median(times["replay --tenant (one tenant)"])
        print(f"the day replays in {day:.1f} s (median): {'meets' if day < DAY_TARGET_S else 'MISSES'} the target "
              f"of {DAY_TARGET_S:g} s; one tenant in {one:.2f} s: {'meets' if one < TENANT_TARGET_S else 'MISSES'} "
              f"the target of {TENANT_TARGET_S:g} s; divergences: {len(divergences)}")
        return 0 if not divergences else 1
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
