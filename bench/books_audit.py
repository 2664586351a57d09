"""The books against the chain: closes missing from the books, units lost or doubled per denom.

For a fault run on the embedded chain (issue 13's: errors on every query,
kill -9 restarts, websocket cuts), which ends by comparing what the ledger
holds with what the chain model did. The chain is the record:

- **units**: for every lease of the provider, what the chain moved from it
  to the provider over its life (``BillingModel.lease_totals``: its paid
  total, per denom) against what the ledger booked as its settlements (every
  kind, every tx). More in the books is *doubled*, less is *lost*; a lease
  the books report they lack (``lease_issues``: a close whose tx the node
  cannot find or search, a refused settlement, a lease never read) is
  counted apart as *reported*, since the books say so instead of silently
  under-booking;
- **closes**: every lease the chain closed after it was active must be in
  the books closed at the chain's own ``closed_at`` (the lease read), else
  it is *missing* (again, unless the books report it).

Use it at the end of a run, with the sidecar stopped (or its ledger writer
idle) so that every fact it took is written::

    from bench.books_audit import audit
    result = audit(ledger, model, provider_uuid)
    print(result.table())

Run as a script, it makes such a run and prints the table: the demo world
on the embedded devnet, the sidecar built as ``run.py run`` builds it,
under faults (``--error-rate`` on every query, ``--stale-reads`` and
``--zero-reads``, a websocket cut every ``--ws-cuts``, the node's
``--tx-index``), once, without restarts::

    python bench/books_audit.py --duration 2h

Nothing here writes to the ledger or the model.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script from anywhere: the project's packages are beside bench/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chain.model import BillingModel  # noqa: E402
from ledger.periods import to_us  # noqa: E402
from ledger.store import Ledger  # noqa: E402
from runtime.config import parse_duration  # noqa: E402

__all__ = ["BooksAudit", "audit", "fault_run", "main"]


@dataclass
class BooksAudit:
    """What the books lack or hold twice, against the chain."""

    #: denom -> units the chain moved that the books do not hold (unreported)
    lost: dict[str, int] = field(default_factory=dict)
    #: denom -> units the books hold beyond what the chain moved
    doubled: dict[str, int] = field(default_factory=dict)
    #: denom -> units missing from leases the books report they lack
    reported: dict[str, int] = field(default_factory=dict)
    #: leases the chain closed that the books do not hold closed at the chain's time (unreported)
    closes_missing: list[str] = field(default_factory=list)
    #: the same, for leases the books report
    closes_reported: list[str] = field(default_factory=list)
    #: leases the chain closed after they were active
    closes: int = 0
    #: per lease, denom -> (chain, books), where they differ
    differences: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.lost and not self.doubled and not self.closes_missing

    def table(self) -> str:
        denoms = sorted(set(self.lost) | set(self.doubled) | set(self.reported)) or ["-"]
        lines = [f"{'denom':<8} {'lost':>12} {'doubled':>12} {'reported':>12}"]
        for d in denoms:
            lines.append(f"{d:<8} {self.lost.get(d, 0):>12} {self.doubled.get(d, 0):>12} {self.reported.get(d, 0):>12}")
        lines.append(f"closes: {self.closes}, missing from the books: {len(self.closes_missing)}, "
                     f"reported by the books: {len(self.closes_reported)}")
        return "\n".join(lines)


def _add(into: dict[str, int], denom: str, amount: int) -> None:
    into[denom] = into.get(denom, 0) + amount


def audit(ledger: Ledger, model: BillingModel, provider_uuid: str) -> BooksAudit:
    """Compare ``ledger``'s books of ``provider_uuid`` with what ``model`` (the chain) did."""
    result = BooksAudit()
    with ledger.read() as c:
        booked: dict[str, dict[str, int]] = {}
        for lease, denom, amount in c.execute("SELECT lease_uuid, denom, amount FROM settlements"):
            _add(booked.setdefault(lease, {}), denom, int(amount))
        closed_at = dict(c.execute("SELECT uuid, closed_at_us FROM leases WHERE closed_at_us IS NOT NULL"))
        reported = {u for (u,) in c.execute("SELECT DISTINCT lease_uuid FROM lease_issues")}
        reported |= {u for (u,) in c.execute("SELECT DISTINCT lease_uuid FROM run_held_leases")}
    for lease in model.all_leases():
        if lease.provider_uuid != provider_uuid:
            continue
        paid = model.lease_totals(lease.uuid)[1]
        books = booked.get(lease.uuid, {})
        for denom in sorted(set(paid) | set(books)):
            chain, held = paid.get(denom, 0), books.get(denom, 0)
            if chain == held:
                continue
            result.differences.setdefault(lease.uuid, {})[denom] = (chain, held)
            if held > chain:
                _add(result.doubled, denom, held - chain)
            elif lease.uuid in reported:
                _add(result.reported, denom, chain - held)
            else:
                _add(result.lost, denom, chain - held)
        if lease.state == "CLOSED" and lease.acknowledged_at is not None and lease.closed_at is not None:
            result.closes += 1
            if closed_at.get(lease.uuid) != to_us(lease.closed_at):
                (result.closes_reported if lease.uuid in reported else result.closes_missing).append(lease.uuid)
    return result


#: The devnet's query methods (every gRPC call but the two that send a tx): the fault run fails each at ``--error-rate``.
QUERIES = (
    "Account", "CreditAccount", "CreditAddress", "CreditEstimate", "GetBlockByHeight", "GetLatestBlock", "GetNodeInfo",
    "GetSyncing", "GetTx", "GetTxsEvent", "Lease", "LeasesByProvider", "LeasesByTenant", "Params",
    "ProviderWithdrawable", "WithdrawableAmount",
)


def fault_run(args: argparse.Namespace) -> BooksAudit:
    """The demo world on the embedded devnet under faults for ``args.duration``, then its books against its chain.

    The sidecar is built as ``run.py run`` builds it (``sidecar.runner.build``), on an accelerated clock;
    its ledger is a temporary file, audited once the sidecar has stopped and written all it held.
    """
    import sidecar.settings  # noqa: F401  (every section registered, before load_config)
    from runtime.clock import RealClock
    from runtime.config import load_config
    from sidecar.runner import build

    with tempfile.TemporaryDirectory(prefix="books-audit-") as folder:
        config = load_config(overrides={
            "chain": {"mode": "devnet"},
            "devnet": {
                "chain_version": args.chain_version,
                "error_rates": [f"{m}={args.error_rate}" for m in QUERIES] if args.error_rate else [],
                "error_seed": args.seed,
                "ws_drop_interval": args.ws_cuts,
                "tx_index": args.tx_index,
                "stale_read_rate": args.stale_reads,
                "zero_read_rate": args.zero_reads,
            },
            "demo": {"speed": args.speed},
            "ledger": {"path": str(Path(folder) / "books.sqlite")},
            "capture": {"enabled": False},
            "metrics": {"listen": ""},
        })
        clock = RealClock(speed=args.speed)
        running = build(config, clock)
        try:
            running.sidecar.withdraw_once()
            running.sidecar.start()
            if running.world is not None:
                running.world.start()
            time.sleep(parse_duration(args.duration).total_seconds() / args.speed)
        finally:
            path, model = running.ledger.path, running.model
            running.close()  # the ledger writer writes what it holds before the ledger closes
            clock.close()
        ledger = Ledger.open(path, config.provider.uuid)
        try:
            return audit(ledger, model, config.provider.uuid)
        finally:
            ledger.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/books_audit.py",
        description="Run the demo world on the embedded devnet under faults (errors on every query, stale and zero "
        "reads, websocket cuts, a node's tx index), then print the books against the chain: units lost, doubled or reported per denom, "
        "closes missing from the books. No restarts: the sidecar runs once. Exit status 0 when the books are clean.",
    )
    parser.add_argument("--duration", default="2h", help="simulated time to run (default 2h)")
    parser.add_argument("--speed", type=float, default=120.0, help="simulated seconds per real second (default 120)")
    parser.add_argument("--error-rate", type=float, default=0.2, help="fraction of every query failing (default 0.2)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the failures (default 1)")
    parser.add_argument("--ws-cuts", default="10m", help="cut the websocket this often, 0 for never (default 10m)")
    parser.add_argument("--tx-index", choices=("kv", "hash_only", "null"), default="kv",
                        help="the node's tx indexer (default kv)")
    parser.add_argument("--stale-reads", type=float, default=0.0,
                        help="fraction of credit reads a synced node answers from 10 min back (default 0)")
    parser.add_argument("--zero-reads", type=float, default=0.0,
                        help="fraction of credit account reads answered with every balance zero (default 0)")
    parser.add_argument("--chain-version", choices=("current", "v2.1"), default="current")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")  # the faults' warnings are expected
    started = time.monotonic()
    result = fault_run(args)
    print(f"books audit: {args.duration} on the devnet ({args.chain_version}), {args.error_rate:g} errors on every query, "
          f"{args.stale_reads:g} stale and {args.zero_reads:g} zero reads, websocket cut every {args.ws_cuts}, "
          f"tx index {args.tx_index}; {time.monotonic() - started:.0f} s")
    print(result.table())
    print("clean" if result.clean else "NOT clean")
    return 0 if result.clean else 1


if __name__ == "__main__":
    sys.exit(main())
