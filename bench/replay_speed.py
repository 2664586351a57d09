"""Replay speed: records/s through ``run.py replay``'s engine, against msgpack alone.

Run from the repository root:  python bench/replay_speed.py  (well under two minutes)

It first captures a real run: the sidecar's actors on the chain model
(manual clock and dispatcher, the capture tap on), ``TENANTS`` tenants with
two leases each, a credit check every minute for ``MINUTES`` minutes, 5% of
credit reads failing. Then, over the same capture files, ``REPEATS``
rounds, each round running every stage once (so that a burst of the shared
machine's load falls on all of them alike); each stage's best round and
its median round are printed:

1. baseline: ``msgpack.unpackb`` of every frame body alone (no framing, no
   CRC, no message objects built: plain arrays, each ext left as its bytes):
   what msgpack itself costs. (Left to msgpack's default, every ext becomes
   an ``ExtType`` named tuple, built in Python: that doubles the time, and
   is no part of decoding a record);
2. reader: ``CaptureReader`` (framing, CRC-32, typed messages, checks);
3. cores alone: the records already read, every input handed straight to
   its decision core, nothing compared: the floor of any replay, set by the
   decision code itself;
4. replay: reader plus ``Replayer`` feeding every input to the cores and
   checking every decision against the capture (``run.py replay`` without
   printing);
5. replay of records already read: the same without the reader, so that
   the replay machinery's own cost is (5) minus (3); and once more with
   the comparison of decisions left out, which splits that machinery into
   its bookkeeping (feeding inputs, holding decisions) and the comparison;
6. replay for one tenant (``run.py replay --tenant``): the whole capture
   read, but only that tenant's monitor, the scheduler and the chain actor
   replayed: what an operator looking into one tenant waits for;
7. the replay (4) in two worker processes (``--jobs 2``, what ``run.py
   replay`` does by default on a machine of two cores for logs of 16 MiB
   or more: ``replay.parallel``), timed on the wall clock against (4) timed
   the same way in the same round, since its work is done in the workers;
   its events must be the one process's; beside it, what two processes at
   once get of this machine's cores in the same run
   (``bench/parallel_capacity.py``), the most the workers could give.

It then prints the cost of a record stage by stage: decode (the reader),
dispatch (the cores), the replay's bookkeeping, the comparison.

Target (issues 5 and 16): replay >= 100,000 records/s, judged on the best round
(of the one process, in CPU time; of the two workers, on the wall clock).
It prints each rate, its cost per record and its ratio to the baseline
(best to best, median to median), the replay machinery's own
share (replay minus reader minus cores), and checks the replay found no
divergence. Times are CPU time of this process (the machine is shared).
Every stage runs with the collector set as a replay sets it
(``replay.engine.REPLAY_GC_THRESHOLD``), so that the shares compare.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gc  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402

import msgpack  # noqa: E402

from actors.cores import build_core  # noqa: E402
from capture import CaptureReader, CaptureWriter  # noqa: E402
from capture.format import FILE_HEADER, FRAME_HEADER, DeliveryRecord, RunStart  # noqa: E402
from capture.settings import CaptureSettings  # noqa: E402
from chain.model import BillingModel  # noqa: E402
from chain.model_client import ModelChainClient  # noqa: E402
from messages.chain import LeaseItem  # noqa: E402
from messages.coins import Coin  # noqa: E402
from devnet.demo import demo_address  # noqa: E402  (the chain refuses addresses that are not bech32)
from replay.config import replay_config  # noqa: E402
from replay import engine  # noqa: E402
from replay.engine import Divergence, Replayer, _collect_less, is_replayed, replayed_for  # noqa: E402
from replay.parallel import ParallelReplayer  # noqa: E402
from parallel_capacity import capacity_line  # noqa: E402  (bench/, beside this file)
from runtime.clock import ManualClock, utc  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.dispatch import ManualDispatcher  # noqa: E402
from sidecar.app import Sidecar  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before load_config)

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
TENANTS = 300
MINUTES = 40
REPEATS = 7
TARGET = 100_000


def make_capture(directory: str) -> tuple[list[str], float]:
    clock = ManualClock(utc(2026, 3, 1))
    config = load_config(overrides={"scheduler": {"withdraw_interval": "10m", "credit_check_interval": "1m"},
                                    "ledger": {"path": ""}})
    model = BillingModel(clock)
    model.register_provider(PROVIDER, demo_address("bench/provider"))
    for i in range(TENANTS):
        tenant = demo_address(f"bench/tenant{i:05d}")
        model.fund_credit(tenant, [Coin("umfx", 10**12 + i), Coin("upwr", 10**9)])
        for price in (1 + i % 7, 3):
            model.create_lease(tenant, PROVIDER, [LeaseItem("sku-1", 1, Coin("umfx", price))])
    client = ModelChainClient(model, PROVIDER, demo_address("bench/provider"))
    client.faults.fail_rate("credit_account", 0.05)
    writer = CaptureWriter(CaptureSettings(directory=directory), clock_now=clock.now, config=config).open()
    dispatcher = ManualDispatcher(clock.now, tap=writer)
    sidecar = Sidecar(clock=clock, dispatcher=dispatcher, client=client, settings=config.scheduler,
                      provider_uuid=PROVIDER)
    started = time.perf_counter()
    # The injected failures' warnings (a line per failed read) are the run's, not the bench's output.
    logging.disable(logging.WARNING)
    try:
        sidecar.withdraw_once()
        sidecar.start()
        end = clock.now() + timedelta(minutes=MINUTES)
        sidecar.settle()
        while (nxt := clock.next_timer()) is not None and nxt <= end:
            clock.advance_to(nxt)
            sidecar.settle()
        sidecar.stop()
    finally:
        logging.disable(logging.NOTSET)
    writer.close()
    return writer.paths, time.perf_counter() - started


def _ext_bytes(code: int, data: bytes) -> bytes:
    return data


def msgpack_alone(frame_bodies: list[bytes]) -> None:
    """The baseline: msgpack decoding every body, each ext left as its bytes, nothing built."""
    unpackb = msgpack.unpackb
    for b in frame_bodies:
        unpackb(b, timestamp=3, ext_hook=_ext_bytes)


def bodies(paths: list[str]) -> list[bytes]:
    out = []
    for p in paths:
        data = open(p, "rb").read()
        pos = FILE_HEADER.size
        while pos < len(data):
            _, length, _ = FRAME_HEADER.unpack_from(data, pos)
            out.append(data[pos + FRAME_HEADER.size : pos + FRAME_HEADER.size + length])
            pos += FRAME_HEADER.size + length
    return out


def rounds(stages: dict) -> tuple[dict, dict]:
    """The CPU times and the wall times of each stage over ``REPEATS`` rounds of all of them."""
    times: dict = {name: [] for name in stages}
    walls: dict = {name: [] for name in stages}
    for _ in range(REPEATS):
        for name, fn in stages.items():
            with _collect_less():
                t, w = time.process_time(), time.perf_counter()
                fn()
                times[name].append(time.process_time() - t)
                walls[name].append(time.perf_counter() - w)
    return times, walls


def main() -> int:
    # No options: --help says what it measures (the module's doc) instead of running it.
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    directory = tempfile.mkdtemp(prefix="lw-replay-bench-")
    try:
        paths, took = make_capture(directory)
        recs = bodies(paths)  # frame bodies: a frame holds a batch of deliveries
        n = sum(1 for _ in CaptureReader(paths))
        size = sum(os.path.getsize(p) for p in paths)
        print(f"capture: {n:,} records in {len(recs):,} frames, {size / 1e6:.1f} MB in {len(paths)} file(s), "
              f"{TENANTS} tenants x {MINUTES} one-minute checks (made in {took:.1f} s)")

        def baseline() -> None:
            msgpack_alone(recs)

        def reader() -> None:
            for _ in CaptureReader(paths):
                pass

        entries: list = []

        def cores_alone() -> None:
            if not entries:  # read once, outside the timing, and kept out of the collector's way
                entries.extend(CaptureReader(paths, file_parts=True))
                gc.collect()
                gc.freeze()
            start = next(e.record for e in entries if isinstance(e.record, RunStart))
            config, _ = replay_config(start.config)
            cores: dict[str, object] = {}
            for e in entries:
                r = e.record
                if type(r) is DeliveryRecord and is_replayed(r.recipient):
                    core = cores.get(r.recipient)
                    if core is None:
                        core = cores[r.recipient] = build_core(r.recipient, config)
                    core.handle(r.message, r.at)  # type: ignore[attr-defined]

        divergences = []

        def replay_read() -> None:
            for _ in Replayer(build_core).replay(entries):
                pass

        def replay_read_uncompared() -> None:
            # The same, with the comparison of each decision to its captured delivery
            # taken as a match: every decision is still found and taken off the books
            # (leaving them unmatched instead would pile them up and report each one at
            # the end, which is no part of a replay), only never compared.
            same = engine._same
            engine._same = lambda expected, record: True
            try:
                for _ in Replayer(build_core).replay(entries):
                    pass
            finally:
                engine._same = same

        one_process: list = []
        in_workers: list = []

        def replay() -> None:
            divergences.clear()
            one_process.clear()
            for event in Replayer(build_core).replay(CaptureReader(paths, file_parts=True)):
                one_process.append(event)
                if isinstance(event, Divergence):
                    divergences.append(event)

        def replay_in_workers() -> None:
            in_workers.clear()
            for event in ParallelReplayer(paths, 2, build_core).replay():
                in_workers.append(event)
                if isinstance(event, Divergence):
                    divergences.append(event)

        def replay_one_tenant() -> None:
            focus = replayed_for(demo_address("bench/tenant00007"))
            for event in Replayer(build_core, replayed=focus).replay(CaptureReader(paths, file_parts=True)):
                if isinstance(event, Divergence):
                    divergences.append(event)

        cores_alone()  # the first call reads the records
        stages = {"msgpack alone (baseline)": baseline, "reader": reader, "replay": replay, "cores alone": cores_alone,
                  "replay of read records": replay_read, "  the same, uncompared": replay_read_uncompared,
                  f"replay --tenant (1 of {TENANTS})": replay_one_tenant}
        parallel = {"replay in 2 workers (wall)": replay_in_workers}
        times, walls = rounds({**stages, **parallel})
        for name in parallel:
            del times[name]
        cost = {name: min(ts) / n for name, ts in times.items()}
        median = {name: statistics.median(ts) / n for name, ts in times.items()}
        base, base_median = cost["msgpack alone (baseline)"], median["msgpack alone (baseline)"]
        print(f"{'':<26} {'best of ' + str(REPEATS):>46}   {'median':>34}")
        for name, c in cost.items():
            m = median[name]
            print(f"{name:<26} {1 / c:>10,.0f} records/s  {c * 1e6:7.1f} us/record  {base / c:6.2f}x baseline"
                  f"   {1 / m:>10,.0f}/s {m * 1e6:7.1f} us  {base_median / m:6.2f}x")
        machinery = cost["replay of read records"] - cost["cores alone"]
        print(f"replay machinery (replay of read records - cores alone): {machinery * 1e6:.1f} us/record")
        # Stage by stage, per record (best rounds): what a whole replay's time is made of.
        decode = cost["reader"]
        dispatch = cost["cores alone"]
        books = max(0.0, cost["  the same, uncompared"] - cost["cores alone"])
        compare = max(0.0, cost["replay of read records"] - cost["  the same, uncompared"])
        print(f"per record: decode (reader) {decode * 1e6:.1f} us + dispatch (cores) {dispatch * 1e6:.1f} us + "
              f"the replay's own bookkeeping {books * 1e6:.1f} us + comparison {compare * 1e6:.1f} us "
              f"= {(decode + dispatch + books + compare) * 1e6:.1f} us; the replay took {cost['replay'] * 1e6:.1f} us")
        serial, workers = walls["replay"], walls["replay in 2 workers (wall)"]
        ratio = statistics.median(s / w for s, w in zip(serial, workers))
        print(f"replay in 2 workers, wall: {n / min(workers):,.0f} records/s best, {n / statistics.median(workers):,.0f} "
              f"median; the one-process replay on the wall clock in the same rounds {n / min(serial):,.0f} best, "
              f"{n / statistics.median(serial):,.0f} median: {ratio:.2f}x as fast (median of the rounds' ratios); "
              f"the workers' events {'are' if in_workers == one_process else 'ARE NOT'} the one process's")
        print(capacity_line())
        best = max(1 / cost["replay"], n / min(workers))
        verdict = "meets" if best >= TARGET else "MISSES"
        print(f"replay {verdict} the target of {TARGET:,} records/s (best: {best:,.0f}); divergences: {len(divergences)}")
        return 0 if not divergences and in_workers == one_process else 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
