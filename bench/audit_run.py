#!/usr/bin/env python3
"""Benchmark: the system audit (``tests/test_system_audit.py``) at 10,000 leases, with its time.

    python bench/audit_run.py                          # 10,000 leases, both chain versions
    python bench/audit_run.py --leases 2000 --version v2.1

For each chain version it builds ``audit.world.AuditWorld`` (the sidecar as
``run.py`` builds it in model mode, its ledger in a temporary folder, the
chain seeded with ``--leases`` leases of ours and tenants of every kind),
runs it through the last six simulated hours of March on a manual clock,
has it withdraw at the month's end, meters March and audits the books
against the chain. It prints the audit table and the wall time of each
phase:

- ``build``: the configuration, ``sidecar.runner.build``, the seeded chain;
- ``run``: six simulated hours, timer by timer, every message delivered
  (the audit's own watch of the chain is timed apart and included);
- ``month end``: the sidecar's withdraw at the end of March;
- ``meter``: ``ledger.metering.meter_month`` for March;
- ``audit``: ``audit.report.audit``.

Baseline, measured in the same process on the same world: the **bare
withdraw loop**, the least any provider runs. The same seeded chain, the
same events through the same six hours (the other provider's settlements,
the blocked payouts, the tenants' closes, the late and pending leases, the
expiry), with, instead of the sidecar, a withdraw of every lease of ours by
name (100 a tx) every ``withdraw_interval``: no credit checks, no closures,
no ledger, no actors. The ratio is the sidecar's run time per simulated
hour over the loop's: what watching the credit, closing on time and
keeping books to the unit cost on top of collecting the money.

The exit status is 0 when every audit passed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from audit.report import audit  # noqa: E402
from audit.world import END, START, AuditWorld, Scenario, audit_config  # noqa: E402
from chain.errors import ChainError  # noqa: E402
from devnet.demo import PROVIDER_ADDRESS  # noqa: E402
from devnet.model import new_model  # noqa: E402
from runtime.clock import ManualClock  # noqa: E402
from runtime.memory import tune_gc  # noqa: E402

HOURS = (END - START) / timedelta(hours=1)


def audited(version: str, leases: int, seed: int) -> dict[str, float]:
    """One audit run; prints its table, returns the wall time of each phase and what the run did."""
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="leasewarden-audit-") as tmp:
        t = time.perf_counter()
        world = AuditWorld(version, leases, Path(tmp), seed=seed)
        try:
            times["build"] = time.perf_counter() - t
            t = time.perf_counter()
            world.run()
            times["run"] = time.perf_counter() - t
            times["watch"] = world.watch.seconds
            t = time.perf_counter()
            world.end_month()
            times["month end"] = time.perf_counter() - t
            t = time.perf_counter()
            world.meter()
            times["meter"] = time.perf_counter() - t
            t = time.perf_counter()
            result = audit(world)
            times["audit"] = time.perf_counter() - t
        finally:
            world.close()
    print(result)
    times["ok"] = float(result.ok)
    times["cycles"] = float(world.running.sidecar.scheduler_core.cycles_started)
    times["withdraws"] = float(len(world.finished))
    times["txs"] = float(sum(f.pages for _, f in world.finished))
    return times


def bare_loop(version: str, leases: int, seed: int) -> float:
    """The baseline: the same world through the same hours with only a bare hourly withdraw. Its wall time."""
    config = audit_config(version, Path(tempfile.gettempdir()))  # only its chain and scheduler are read
    clock = ManualClock(START)
    model = new_model(config, clock)
    provider = config.provider.uuid
    model.register_provider(provider, PROVIDER_ADDRESS)
    scenario = Scenario(model, clock, provider, leases, seed)
    scenario.seed()
    scenario.schedule(END)
    interval = config.scheduler.withdraw_interval

    def withdraw() -> None:
        uuids = [lease.uuid for lease in model.active_leases_by_provider(provider)]
        for i in range(0, len(uuids), 100):
            try:
                model.withdraw(PROVIDER_ADDRESS, lease_uuids=uuids[i : i + 100])
            except ChainError:
                pass  # nothing due, or a blocked payout failing its batch: the loop does not care
        clock.call_at(clock.now() + interval, withdraw)

    withdraw()
    t = time.perf_counter()
    clock.advance_to(END)
    return time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=10_000, help="leases of ours in the world")
    parser.add_argument("--version", choices=("current", "v2.1", "both"), default="both", help="chain version")
    parser.add_argument("--seed", type=int, default=7, help="the world's random seed")
    args = parser.parse_args()
    tune_gc()  # as run.py does
    versions = ("current", "v2.1") if args.version == "both" else (args.version,)
    ok = True
    summary = []
    for version in versions:
        print(f"== {version}: {args.leases:,} leases, {HOURS:.2f} simulated hours", flush=True)
        times = audited(version, args.leases, args.seed)
        base = bare_loop(version, args.leases, args.seed)
        ok = ok and bool(times["ok"])
        summary.append((version, times, base))
    print()
    print(f"{'version':8} {'build':>7} {'run':>8} {'(watch)':>8} {'month end':>10} {'meter':>7} {'audit':>7} "
          f"{'bare loop':>10} {'run/h':>7} {'loop/h':>7} {'ratio':>6}  cycles, withdraws, txs")
    for version, t, base in summary:
        sidecar = t["run"] - t["watch"]
        print(f"{version:8} {t['build']:6.2f}s {t['run']:7.2f}s {t['watch']:7.2f}s {t['month end']:9.2f}s "
              f"{t['meter']:6.2f}s {t['audit']:6.2f}s {base:9.2f}s {sidecar / HOURS:6.2f}s {base / HOURS:6.3f}s "
              f"{sidecar / base:5.1f}x  {t['cycles']:.0f}, {t['withdraws']:.0f}, {t['txs']:.0f}")
    print("ratio: the sidecar's run (its watch by the audit left out) per simulated hour over the bare withdraw loop's")
    print(f"audit: {'every check passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
