"""Benchmark: meter one month of 100,000 leases with 1,000,000 events in the ledger.

    python bench/meter_month.py                 # 100,000 leases, 1,000,000 events
    python bench/meter_month.py --leases 10000 --events 100000

Target: the month metered in <= 10 s, memory bounded (streamed, not loaded
whole). It builds a ledger file in a temporary folder (leases of ~20,000
tenants in two denoms, some opened and closed mid-month, their lease events,
and per-lease settlements of paged withdrawals making up the rest of the
events), then measures, each in a fresh process so that peak RSS belongs to
what is measured:

- ``meter``: ``ledger.metering.meter_month`` for the month (reads, computes and
  writes every statement line and per-tenant total);
- ``baseline``: a plain full scan of the same rows (every lease, every
  settlement of the month) fetched into Python and counted, doing nothing else.

It prints time, rows/s and peak RSS of both, and the ratio meter/baseline:
the price of the arithmetic and the writes over merely reading the month.
The data are built with bulk SQL inserts (what the ledger writer would have
written over a month, in a few seconds instead of a month).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger.periods import Month, to_us  # noqa: E402
from ledger.store import Ledger  # noqa: E402

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
MONTH = Month(2026, 3)
TARGET_S = 10.0


def peak_rss_mb() -> float:
    """Peak RSS of this process image. VmHWM, not ru_maxrss: Linux carries ru_maxrss
    across exec, so a child would report the parent's peak (the data builder's)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def build(path: Path, leases: int, events: int, seed: int = 7) -> dict[str, int]:
    """Write the month into a fresh ledger at ``path``; returns what was written."""
    rng = random.Random(seed)
    lg = Ledger.open(path, PROVIDER)
    start, end = to_us(MONTH.start), to_us(MONTH.end)
    span = end - start
    lease_rows, event_rows = [], []
    for i in range(leases):
        uuid = f"{i:08x}-0000-4000-8000-{rng.getrandbits(48):012x}"
        tenant = f"manifest1tenant{i % 20_000:05d}"
        items = [["sku-cpu", rng.randint(1, 8), "umfx", str(rng.randint(1, 50))]]
        if i % 3 == 0:
            items.append(["sku-gpu", 1, "upwr", str(rng.randint(100, 10_000))])
        # A third began before the month; the rest during it. A fifth closed in it.
        active_from = start - rng.randint(1, 30 * 86400) * 1_000_000 if i % 3 else start + rng.randrange(span)
        closed = None
        if i % 5 == 0:
            closed = active_from + rng.randrange(max(1, end - active_from))
        lease_rows.append(
            (uuid, tenant, PROVIDER, json.dumps(items), 1, active_from, 4, closed, 4 if closed else 0,
             "tenant left" if closed else "", active_from, active_from)
        )
        event_rows.append(("created", uuid, tenant, PROVIDER, "", i, active_from))
        event_rows.append(("acknowledged", uuid, tenant, PROVIDER, "", i, active_from))
        if closed:
            event_rows.append(("closed", uuid, tenant, PROVIDER, "tenant left", i, closed))
    settlements = max(0, events - len(event_rows))
    settle_rows = []
    period = str(MONTH)
    for j in range(settlements):
        lease = lease_rows[j % leases]
        at = start + rng.randrange(span)
        settle_rows.append((f"TX{j // 50:07d}", lease[0], "umfx", str(rng.randint(1, 10**9)), "withdraw", lease[1], at, period))
    with lg.transaction() as c:
        c.executemany(
            "INSERT INTO leases (uuid, tenant, provider_uuid, items, priced, active_from_us, active_from_rank, "
            "closed_at_us, closed_at_rank, closure_reason, first_seen_us, updated_us) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            lease_rows,
        )
        c.executemany(
            "INSERT INTO lease_events (kind, lease_uuid, tenant, provider_uuid, reason, height, at_us) "
            "VALUES (?,?,?,?,?,?,?)",
            event_rows,
        )
        c.executemany(
            "INSERT OR IGNORE INTO settlements (tx_hash, lease_uuid, denom, amount, kind, tenant, at_us, period) "
            "VALUES (?,?,?,?,?,?,?,?)",
            settle_rows,
        )
    counts = {
        "leases": lg.count("leases"),
        "lease_events": lg.count("lease_events"),
        "settlements": lg.count("settlements"),
    }
    lg.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    lg.close()
    return counts


def measure_meter(path: Path) -> dict[str, float]:
    from ledger.metering import meter_month

    lg = Ledger.open(path, PROVIDER)
    rss_before = peak_rss_mb()
    t0 = time.perf_counter()
    result = meter_month(lg, MONTH, MONTH.end)
    seconds = time.perf_counter() - t0
    lines = lg.count("statement_lines")
    lg.close()
    return {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before,
            "leases": result.leases, "tenants": result.tenants, "lines": lines}


def measure_baseline(path: Path) -> dict[str, float]:
    lg = Ledger.open(path, PROVIDER)
    rss_before = peak_rss_mb()
    t0 = time.perf_counter()
    rows = 0
    with lg.reader() as r:
        for _ in r.execute("SELECT * FROM leases"):
            rows += 1
        for _ in r.execute("SELECT * FROM settlements WHERE period = ?", (str(MONTH),)):
            rows += 1
    seconds = time.perf_counter() - t0
    lg.close()
    return {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": rss_before, "rows": rows}


def child(what: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", what, "--db", str(path)],
        capture_output=True, text=True, timeout=600, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000, help="lease events + per-lease settlements")
    parser.add_argument("--measure", choices=("meter", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        fn = measure_meter if args.measure == "meter" else measure_baseline
        print(json.dumps(fn(Path(args.db))))
        return 0

    with tempfile.TemporaryDirectory(prefix="leasewarden-bench-") as tmp:
        path = Path(tmp) / "ledger.sqlite"
        t0 = time.perf_counter()
        counts = build(path, args.leases, args.events)
        built = time.perf_counter() - t0
        events = counts["lease_events"] + counts["settlements"]
        print(f"ledger: {counts['leases']:,} leases, {events:,} events "
              f"({counts['lease_events']:,} lease events + {counts['settlements']:,} settlements) "
              f"built in {built:.1f} s, {path.stat().st_size / 2**20:.0f} MiB")
        base = child("baseline", path)
        meter = child("meter", path)
    rows = counts["leases"] + counts["settlements"]
    print(f"{'':10} {'time':>8} {'rows/s':>12} {'peak RSS':>10} {'RSS at start':>13}")
    for name, m in (("baseline", base), ("meter", meter)):
        print(f"{name:10} {m['seconds']:7.2f}s {rows / m['seconds']:12,.0f} {m['peak_rss_mb']:8.1f}MB "
              f"{m['rss_before_mb']:11.1f}MB")
    print(f"meter: {meter['leases']:,} leases of {meter['tenants']:,} tenants -> {meter['lines']:,} statement lines")
    ratio = meter["seconds"] / base["seconds"]
    print(f"ratio meter/baseline: {ratio:.1f}x; memory above start: "
          f"{meter['peak_rss_mb'] - meter['rss_before_mb']:.1f} MB (baseline {base['peak_rss_mb'] - base['rss_before_mb']:.1f} MB)")
    ok = meter["seconds"] <= TARGET_S
    print(f"target <= {TARGET_S:.0f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
