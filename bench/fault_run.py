#!/usr/bin/env python3
"""Fault run: the sidecar in its own process against the embedded devnet, killed, cut off and lied to.

Issue 13's "Done when". The devnet runs here, in-process, on an accelerated
clock it shares with the sidecar through a clock file (``[node]
devnet_clock``); the sidecar is ``run.py run`` in node mode in a process of
its own, so that ``kill -9`` is real and the chain outlives it. Over
``--days`` simulated days, on ``audit.world.Scenario``'s tenants (healthy,
draining, drained by another provider's lease, split between denoms, closed
by their tenants, opened late, never acknowledged, payouts blocked for an
hour) scaled to the run, it:

- fails 20% of every gRPC query (every method but ``BroadcastTx``), serves
  stale and zero credit reads from a node that says it is synced, and has
  the node report it is catching up for one hour;
- kills the sidecar with SIGKILL ``--kills`` times at seeded instants and
  starts it again at once, on the same ledger;
- drops every websocket client ``--cuts`` times.

At the end (the world's own timers stopped first, a quiet stretch, then a
SIGTERM so that every fact the sidecar took is written) it compares the
sidecar's ledger and logs with the chain model and prints, per chain
version::

    wrong closures                                   0
    depleted leases open past grace + one check      0   (chain closed first: n)
    units lost / doubled in the books, per denom     0 / 0
    closes missing from the books                    0
    tracebacks                                       0

"Grace + one check" is ``credit_check_zero_grace_period`` + one check
interval (``[scheduler] check_interval``, the regular credit check's
cadence) + one block (a close is included at the next block) + one second
(the chain's unit of accrual), measured from the instant the chain's own
auto-close test says the lease is exhausted (``audit.world.ExhaustionWatch``),
not counting the time the sidecar was down (from a kill until the restarted
process logged its schedule) or the node said it was catching up: nothing
may close then, by design. The row below it, shown but not judged, reads
"one check" as one early re-check (``credit_check_retry_interval``), as the
model-mode audit does with no transport at all: here every read crosses
gRPC on a clock running ``--speed`` times the wall clock, so each
millisecond of wall time the sidecar takes to notice is a third of a
simulated second, and a read failed by the injected errors costs a re-check.

    python bench/fault_run.py                    # 3 days, 80 tenants, current chain
    python bench/fault_run.py --chain-version both
    python bench/fault_run.py --quick            # six hours, 40 tenants: a minute or two

Nothing imports this module; it imports the devnet and the audit (its world,
its judge) and reads the ledger file with sqlite3, never the sidecar (it runs in the other
process).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sidecar.settings  # noqa: E402,F401  (every section registered before the configuration is loaded)
from audit.world import (  # noqa: E402
    FUNDED,
    LATE,
    MIN_LEASE_DURATION,
    PENDING_TIMEOUT,
    RUNWAY_STEP,
    SLACK,
    START,
    TENANT_CLOSES,
    CloseJudge,
    ExhaustionWatch,
    Scenario,
)
from audit.faults import Interval, compare_books, count_tracebacks, fault_times, landed_closes, lateness, merge, when  # noqa: E402
from chain.model import BillingModel  # noqa: E402
from devnet.demo import PROVIDER_ADDRESS  # noqa: E402
from devnet.embedded import Devnet, shared_clock, start_devnet  # noqa: E402
from devnet.model import new_model  # noqa: E402
from runtime.clock import ManualClock, RealClock, write_clock_anchor  # noqa: E402
from runtime.config import Config, load_config  # noqa: E402

#: Every gRPC method the sidecar may call but the one that sends txs: "20% errors on every query".
QUERY_METHODS = (
    "Account", "Config", "CreditAccount", "CreditAddress", "CreditEstimate", "GetBlockByHeight", "GetLatestBlock",
    "GetNodeInfo", "GetSyncing", "GetTx", "GetTxsEvent", "Lease", "LeasesByProvider", "LeasesByTenant", "Params",
    "Provider", "ProviderWithdrawable", "Simulate", "WithdrawableAmount",
)
#: The line the sidecar logs once it is built and about to start: the end of a restart's downtime.
READY_MARK = "withdraw every "
#: Simulated time left without kills, cuts or tenants' own moves before the end: the sidecar's
#: last cycles and re-checks catch up on what the faults delayed.
QUIET = timedelta(hours=2)


# -- the world ------------------------------------------------------------------------------------
class _Gate:
    """The scenario's clock, whose timers do nothing once ``shut``: at the end the world stands
    still (no tenant closes, no other provider's settlement) while the sidecar's last facts land."""

    def __init__(self, clock: RealClock) -> None:
        self.clock = clock
        self.shut = False

    def now(self) -> datetime:
        return self.clock.now()

    def call_at(self, when: datetime, callback: Callable[[], None]) -> Any:
        def gated() -> None:
            if not self.shut:
                callback()

        return self.clock.call_at(when, gated)


class StretchedScenario(Scenario):
    """``audit.world.Scenario`` with its draining tenants' runways scaled to the run's length, so that
    depletions fall across the days rather than in the audit's six hours."""

    def __init__(self, *args: Any, stretch: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stretch = max(1, stretch)

    def _runway(self, first: int, last: int) -> int:
        return int(RUNWAY_STEP.total_seconds()) * self.stretch * self.rng.randrange(first, last + 1)


def leases_for(tenants: int, seed: int, config: Config) -> int:
    """How many leases of ours give ``Scenario`` about ``tenants`` tenants (the late and the pending
    one included): its kinds are fixed shares of the leases, so the nearest count is searched."""
    best, best_gap = 30, None
    for leases in range(max(30, tenants), 30 + 6 * tenants):
        clock = ManualClock(START)
        model = new_model(config, clock)
        model.register_provider(config.provider.uuid, PROVIDER_ADDRESS)
        scenario = Scenario(model, clock, config.provider.uuid, leases, seed)
        scenario.seed()
        total = scenario._tenants + 1 + scenario.counts[LATE]
        gap = abs(total - tenants)
        if best_gap is None or gap < best_gap:
            best, best_gap = leases, gap
        if total > tenants:
            break
    return best


def devnet_config(version: str, args: argparse.Namespace) -> Config:
    return load_config(
        overrides={
            "chain": {"mode": "devnet"},
            "devnet": {
                "chain_version": version,
                "min_lease_duration": f"{int(MIN_LEASE_DURATION.total_seconds())}s",
                "pending_timeout": f"{int(PENDING_TIMEOUT.total_seconds())}s",
                "block_time": f"{round(args.block_time * 1000)}ms",
                "error_rates": [f"{m}={args.error_rate}" for m in QUERY_METHODS],
                "error_seed": args.seed,
                "stale_read_rate": args.stale_rate,
                "stale_read_lag": "10m",
                "zero_read_rate": args.zero_rate,
            },
            "capture": {"enabled": False},
        }
    )


def sidecar_toml(devnet: Devnet, config: Config, clock_file: Path, ledger: Path) -> str:
    """The sidecar's config.toml: node mode on this devnet and its clock, the ledger at ``ledger``;
    every [scheduler] setting the shipped default."""
    return (
        f'[provider]\nuuid = "{config.provider.uuid}"\n'
        f'[chain]\nmode = "node"\nchain_id = "{devnet.chain_id}"\n'
        f'[node]\ngrpc_url = "{devnet.grpc_url}"\nwebsocket_url = "{devnet.websocket_url}"\n'
        f'key_file = "{devnet.provider_key_file}"\ndevnet_clock = "{clock_file}"\n'
        f'[ledger]\npath = "{ledger}"\n'
        f'[metrics]\nlisten = ""\n'
        f"[capture]\nenabled = false\n"
    )


class Sidecar:
    """``run.py run`` in a process of its own; its stdout and stderr appended to one log file."""

    def __init__(self, conf: Path, log_path: Path, now: Callable[[], datetime], log_level: str = "info") -> None:
        self.conf = conf
        self.log_level = log_level
        self.log_path = log_path
        self.now = now
        self.proc: subprocess.Popen[str] | None = None
        self.ready = threading.Event()
        self.tracebacks = 0
        self.starts = 0
        #: Per start: when the sidecar went down (killed, or the first start) and when the new process
        #: logged its schedule (None: never, before the next kill or the end).
        self.down: list[list[datetime | None]] = []
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []

    def start(self, down_since: datetime) -> None:
        self.ready = threading.Event()
        self.starts += 1
        self.down.append([down_since, None])
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), "--config", str(self.conf), "run", "--log-level", self.log_level],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1, cwd=str(ROOT),
        )
        for stream, tag in ((self.proc.stdout, ""), (self.proc.stderr, "stderr: ")):
            t = threading.Thread(target=self._copy, args=(stream, tag, self.ready, self.starts), daemon=True)
            t.start()
            self._readers.append(t)

    def _copy(self, stream: Any, tag: str, ready: threading.Event, start: int) -> None:
        with open(self.log_path, "a", encoding="utf-8") as out:
            for line in stream:
                with self._lock:
                    out.write(f"[{start}] {tag}{line}")
                    out.flush()
                    self.tracebacks += count_tracebacks([line])
                if READY_MARK in line and not ready.is_set():
                    self.down[start - 1][1] = self.now()
                    ready.set()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, as a service manager stops it; its exit status."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        for t in self._readers:
            t.join(5)
        return code


@dataclass
class Row:
    what: str
    found: str
    ok: bool


@dataclass
class Outcome:
    version: str
    rows: list[Row]
    details: list[str]
    wall: float
    facts: list[str]

    def render(self) -> str:
        width = max(len(r.what) for r in self.rows)
        lines = [f"fault run, {self.version} chain: {'ok' if all(r.ok for r in self.rows) else 'NOT OK'} "
                 f"({self.wall / 60:.1f} min wall)"]
        lines += [f"  {f}" for f in self.facts]
        lines += [f"  {r.what:<{width}}  {r.found}" for r in self.rows]
        if self.details:
            lines.append("  details:")
            lines += [f"    {d}" for d in self.details]
        return "\n".join(lines)


def run_version(version: str, args: argparse.Namespace, out: Path) -> Outcome:
    wall0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    ledger = out / "ledger.sqlite"
    for stale in out.glob("ledger.sqlite*"):
        stale.unlink()
    log_path = out / "sidecar.log"
    log_path.write_text("")
    config = devnet_config(version, args)
    clock = shared_clock(config, args.speed, start=START)
    model = new_model(config, clock)
    devnet = start_devnet(config, clock, model)
    clock_file = out / "clock.json"
    assert clock.anchor is not None
    write_clock_anchor(clock_file, clock.anchor)
    conf = out / "sidecar.toml"
    conf.write_text(sidecar_toml(devnet, config, clock_file, ledger))

    end = START + timedelta(days=args.days)
    gate = _Gate(clock)
    leases = leases_for(args.tenants, args.seed, config)
    stretch = max(1, round(timedelta(days=args.days) / timedelta(hours=6)))
    scenario = StretchedScenario(model, gate, config.provider.uuid, leases, args.seed, stretch=stretch)  # type: ignore[arg-type]
    cast = scenario.seed()
    scenario.schedule(end - QUIET)
    judge = CloseJudge(model, devnet.provider_address)
    watch = ExhaustionWatch(model, config.provider.uuid, judge)
    watch_errors: list[str] = []
    stop_watch = threading.Event()

    def looking() -> None:
        # The watch opens an episode at the exact instant its lease becomes exhausted (computed, not
        # sampled), so a look every few wall milliseconds loses no precision.
        while not stop_watch.wait(0.01):
            now = clock.now()
            try:
                watch.look(now, now)
            except AssertionError as exc:
                watch_errors.append(str(exc))

    watcher = threading.Thread(target=looking, name="exhaustion-watch", daemon=True)
    watcher.start()

    rng = random.Random(args.seed)
    first, last = START + timedelta(minutes=20), end - QUIET
    events: list[tuple[datetime, str]] = [(t, "kill") for t in fault_times(rng, args.kills, first, last)]
    events += [(t, "cut") for t in fault_times(rng, args.cuts, first, last)]
    syncing_from = fault_times(rng, 1, first, last - timedelta(hours=1))[0]
    events += [(syncing_from, "syncing on"), (syncing_from + timedelta(hours=1), "syncing off"), (end, "end")]
    events.sort()

    sidecar = Sidecar(conf, log_path, clock.now, args.log_level)
    kill_lines: list[str] = []
    cut_clients = 0
    sidecar.start(START)
    if not sidecar.ready.wait(60):
        raise RuntimeError(f"the sidecar did not start in 60 s: see {log_path}")
    try:
        for at, what in events:
            while clock.now() < at:
                time.sleep(min(0.05, max(0.001, (at - clock.now()).total_seconds() / args.speed)))
            if sidecar.proc is not None and sidecar.proc.poll() is not None:
                raise RuntimeError(f"the sidecar exited by itself ({sidecar.proc.returncode}): see {log_path}")
            if what == "kill":
                # Wherever it is: booting after the previous kill, mid-cycle, mid-close.
                sidecar.kill9()
                killed = clock.now()
                kill_lines.append(when(killed))
                sidecar.start(killed)
            elif what == "cut":
                cut_clients += devnet.websocket_server.drop_all()
            elif what == "syncing on":
                devnet.node.set_catching_up(True)
            elif what == "syncing off":
                devnet.node.set_catching_up(False)
        gate.shut = True
        code = sidecar.stop()
        stopped = clock.now()
    finally:
        stop_watch.set()
        watcher.join(5)
        if sidecar.proc is not None and sidecar.proc.poll() is None:
            sidecar.proc.kill()
        devnet.stop()
        clock.close()
    down = [(a, b or stopped) for a, b in sidecar.down if a is not None]
    paused = merge(down + [(syncing_from, syncing_from + timedelta(hours=1))])
    outcome = judge_run(version, model, cast, judge, watch, config, args, ledger, sidecar, paused, stopped)
    outcome.facts = [
        f"{args.days:g} simulated days at {args.speed:g}x, {len(set(model.lease(u).tenant for u in cast.kind))} tenants, "
        f"{len(cast.kind)} leases of ours, seed {args.seed}",
        f"{args.error_rate:.0%} errors on every query, {args.stale_rate:.0%} stale and {args.zero_rate:.0%} zero "
        f"credit reads, node catching up {when(syncing_from)} +1h",
        f"{len(kill_lines)} kill -9 restarts ({sidecar.starts} starts), {args.cuts} websocket cuts "
        f"({cut_clients} connections cut); "
        f"sidecar exit status at the end {code}",
        f"gRPC calls: {sum(devnet.faults.calls.values()):,}; stale reads served {devnet.faults.stale_served:,}, "
        f"zero reads {devnet.faults.zero_served:,}",
        f"ledger {ledger}, log {log_path}",
    ] + [f"watch: {e}" for e in watch_errors[:3]]
    outcome.wall = time.monotonic() - wall0
    return outcome


def judge_run(
    version: str, model: BillingModel, cast: Any, judge: CloseJudge, watch: ExhaustionWatch, config: Config,
    args: argparse.Namespace, ledger: Path, sidecar: Sidecar, paused: list[Interval], stopped: datetime,
) -> Outcome:
    from ledger.periods import to_us

    details: list[str] = []
    kind = cast.kind
    s = config.scheduler
    grace, slack = s.credit_check_zero_grace_period, config.devnet.block_time + SLACK
    # Wrong closures: ours of a lease with credit (by the chain's test, or counting the tenant's other
    # leases' dues, the sidecar's rule), or of a lease whose tenant had credit all along.
    chain_closed_at = {
        lease.uuid: lease.closed_at for lease in model.all_leases()
        if lease.uuid in kind and lease.state == "CLOSED" and lease.closed_at is not None
    }
    # Within three blocks: the block's run of a close is judged when the block is cut, a little after
    # its block time on an accelerated clock.
    landed = landed_closes(judge, chain_closed_at, 3 * config.devnet.block_time)
    closed_by_us = set(landed)
    wrong = [c for c in landed.values() if not c.exhausted and not c.gone_counting_others]
    for c in wrong:
        details.append(f"closed with credit: {c.lease_uuid} ({kind.get(c.lease_uuid)}, tenant "
                       f"{model.lease(c.lease_uuid).tenant}) at {when(c.at)}: {c.detail}")
    funded = {u for u, k in kind.items() if k in FUNDED + (TENANT_CLOSES,)}
    wrong_funded = sorted(u for u in funded & closed_by_us if u not in {c.lease_uuid for c in wrong})
    for u in wrong_funded:
        details.append(f"funded lease closed by us: {u} ({kind[u]})")
    # Depleted leases open past the deadline, for the two readings of "one check".
    regular = lateness(watch, closed_by_us, kind, grace + s.check_interval + slack, paused, stopped)
    strict = lateness(watch, closed_by_us, kind, grace + s.credit_check_retry_interval + slack, paused, stopped)
    details += regular.details
    details += [d.replace("late:", "late (strict):", 1) for d in strict.details if d not in regular.details][:12]
    # The books against the chain.
    ours = [lease for lease in model.all_leases() if lease.provider_uuid == config.provider.uuid]
    chain_paid = {lease.uuid: {d: v for d, v in model.lease_totals(lease.uuid)[1].items() if v} for lease in ours}
    chain_closed = {
        lease.uuid: to_us(lease.closed_at)
        for lease in ours
        if lease.state == "CLOSED" and lease.acknowledged_at is not None and lease.closed_at is not None
    }
    db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        booked: dict[str, dict[str, int]] = {}
        for lease, denom, amount in db.execute("SELECT lease_uuid, denom, amount FROM settlements"):
            booked.setdefault(lease, {})[denom] = booked.get(lease, {}).get(denom, 0) + int(amount)
        books_closed = dict(db.execute("SELECT uuid, closed_at_us FROM leases WHERE closed_at_us IS NOT NULL"))
    finally:
        db.close()
    books = compare_books(chain_paid, booked, chain_closed, books_closed)
    for lease, diff in list(books.differences.items())[:12]:
        details.append(f"books differ: {lease} ({kind.get(lease)}): " + ", ".join(
            f"{d} chain {c} books {b}" for d, (c, b) in diff.items()))
    for lease in (books.closes_missing + books.closes_wrong_time)[:12]:
        details.append(f"close not in the books at the chain's instant: {lease} ({kind.get(lease)}), chain "
                       f"{chain_closed[lease]}, books {books_closed.get(lease)}")
    denoms = sorted({d for paid in chain_paid.values() for d in paid} | set(books.lost) | set(books.doubled))
    units = ", ".join(f"{d} {books.lost.get(d, 0):,} / {books.doubled.get(d, 0):,}" for d in denoms)
    rows = [
        Row("wrong closures", f"{len(wrong) + len(wrong_funded)}   (of {len(closed_by_us)} leases closed by us)",
            not wrong and not wrong_funded),
        Row("depleted leases open past grace + one check", regular.summary(), not regular.late),
        Row("  shown, not judged: past grace + one re-check", strict.summary(), True),
        Row("units lost / doubled in the books, per denom", units, not books.lost and not books.doubled),
        Row("closes missing from the books",
            f"{len(books.closes_missing)}   (of {books.closes}; at another instant: {len(books.closes_wrong_time)})",
            not books.closes_missing and not books.closes_wrong_time),
        Row("tracebacks", f"{sidecar.tracebacks}   (sidecar stdout and stderr, {sidecar.starts} starts)",
            sidecar.tracebacks == 0),
    ]
    if watch.unforeseen:
        details.append(f"watch: {len(watch.unforeseen)} exhausted closes it did not foresee: {watch.unforeseen[:3]}")
    return Outcome(version, rows, details, 0.0, [])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench/fault_run.py",
        description="Issue 13's fault run: the sidecar (run.py run, node mode, its own process) against the "
                    "embedded devnet on a shared accelerated clock, under query errors, stale and zero reads, a "
                    "catching-up hour, kill -9 restarts and websocket cuts; then its books and logs against the "
                    "chain model.",
    )
    p.add_argument("--days", type=float, default=3.0, help="simulated days (default: %(default)s)")
    p.add_argument("--tenants", type=int, default=80, help="tenants, about (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="seed of the world and the faults (default: %(default)s)")
    p.add_argument("--chain-version", choices=("current", "v2.1", "both"), default="current",
                   help="which chain the devnet behaves as (default: %(default)s)")
    p.add_argument("--kills", type=int, default=10, help="kill -9 restarts (default: %(default)s)")
    p.add_argument("--cuts", type=int, default=30, help="websocket cuts (default: %(default)s)")
    p.add_argument("--error-rate", type=float, default=0.2, help="failed fraction of every query (default: %(default)s)")
    p.add_argument("--stale-rate", type=float, default=0.1, help="stale credit reads (default: %(default)s)")
    p.add_argument("--zero-rate", type=float, default=0.05, help="zero credit reads (default: %(default)s)")
    p.add_argument("--speed", type=float, default=330.0,
                   help="simulated seconds per real second (default: %(default)s: three days in 13 minutes)")
    p.add_argument("--block-time", type=float, default=5.0, help="devnet block time, seconds (default: %(default)s)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="the sidecar's log level (default: %(default)s; debug shows every re-check of a grace window)")
    p.add_argument("--quick", action="store_true",
                   help="six hours, 40 tenants, 3 kills, 6 cuts: a minute or two, to try the bench itself")
    p.add_argument("--out", default=None,
                   help="folder for each version's ledger, sidecar log and config (default: a new one under /tmp)")
    args = p.parse_args(argv)
    if args.quick:
        args.days, args.tenants, args.kills, args.cuts = 0.25, 40, 3, 6
    out = Path(args.out) if args.out else Path(f"/tmp/leasewarden-fault-run-{os.getpid()}")
    versions = ("current", "v2.1") if args.chain_version == "both" else (args.chain_version,)
    ok = True
    for version in versions:
        outcome = run_version(version, args, out / version)
        print(outcome.render(), flush=True)
        ok = ok and all(r.ok for r in outcome.rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
