#!/usr/bin/env python3
"""Credit check of 2,000 tenants with 5 ms of injected latency per chain query.

Baseline, measured in the same run: the seed's loop, one tenant at a time
(``GetCreditAccount``, then decide). Against it: leasewarden's check cycle
through its actors, with chain reads on a pool capped at
``max_queries_in_flight``, and every read the real-chain credit rule needs:
the provider's active leases (``LeasesByProvider``, by page), then, read in
bulk (``actors.credit_bulk``), the ACTIVE leases of the other provider the
tenants share, every credit account (``CreditAccounts``) and the holders of
each denom the leases charge (bank ``DenomOwners``), all by page; a tenant
those do not hold whole, or whose monitor asks for a full read (credit gone,
a grace window), is read on its own (``CreditAccount``, ``LeasesByTenant``).
The first cycle, which also starts the monitors and learns which provider
the tenants share (and, on the current chain, that their credit addresses
are plain accounts: ``account_kind``, once each), is not timed. Both decide
with the same core; the calls of a timed cycle are counted.

    python bench/credit_check.py [--tenants 2000] [--latency-ms 5] [--in-flight 32] [--rounds 3] [--via model|grpc]

``--via model`` (default): the chain model in this process, latency injected
in the client. ``--via grpc``: the devnet in a separate process (like a
node), latency injected in its gRPC server, reached through the production
cosmpy client.

Target (issues 3 and 16): leasewarden >= 10x faster than the one-at-a-time loop. ``--via grpc``
also counts the gRPC requests of a timed cycle (every page of a listing is one).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.tenant_credit import TenantCredit  # noqa: E402
from chain.model import BillingModel  # noqa: E402
from chain.model_client import ModelChainClient  # noqa: E402
from messages.chain import LeaseItem  # noqa: E402
from messages.coins import Coin  # noqa: E402
from devnet.demo import demo_address  # noqa: E402  (the chain refuses addresses that are not bech32)
from messages.credit import CreditRead, LeasesSynced  # noqa: E402
from runtime.clock import ManualClock, utc  # noqa: E402
from runtime.config import load_config  # noqa: E402
from runtime.dispatch import ThreadedDispatcher  # noqa: E402
from sidecar.app import Sidecar  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before load_config)
from runtime.memory import tune_gc  # noqa: E402

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tenants", type=int, default=2000)
    p.add_argument("--latency-ms", type=float, default=5.0)
    p.add_argument("--in-flight", type=int, default=32, help="max_queries_in_flight for leasewarden")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--via", choices=("model", "grpc"), default="model")
    args = p.parse_args()
    tune_gc()  # as run.py does
    if args.via == "grpc":
        return via_grpc(args)

    clock = ManualClock(utc(2026, 3, 1))
    model = BillingModel(clock)
    model.register_provider(PROVIDER, demo_address("bench/provider"))
    tenants = [demo_address(f"bench/tenant{i:05d}") for i in range(args.tenants)]
    for t in tenants:
        model.fund_credit(t, [Coin("umfx", 10**9)])
        model.create_lease(t, PROVIDER, [LeaseItem("sku", 1, Coin("umfx", 1))])
    client = ModelChainClient(model, PROVIDER, demo_address("bench/provider"))
    latency = args.latency_ms / 1000
    for op in Counting.READS:
        client.faults.latency(op, latency)
    settings = load_config(overrides={"scheduler": {"max_queries_in_flight": args.in_flight}}).scheduler

    seed_times, ours = measure(client, settings, clock, args.rounds, tick=lambda: clock.advance(1))
    report(f"credit check of {args.tenants} tenants, {args.latency_ms:g} ms per chain query", args, seed_times, ours)
    return 0


class Counting:
    """The chain client, counting the read calls a check makes."""

    READS = ("credit_account", "leases_by_tenant", "active_leases_by_provider", "leases_by_provider",
             "credit_accounts", "denom_owners", "account_kind")

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._client, name)
        if name not in self.READS:
            return value

        def call(*args: Any, **kw: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return value(*args, **kw)

        return call


CALLS: dict[str, float] = {}
#: gRPC requests per timed cycle, by method (``--via grpc``): a listing's every page is one.
REQUESTS: dict[str, float] = {}


class RequestCounter:
    """A gRPC client interceptor counting requests by method while ``on``."""

    def __init__(self) -> None:
        import threading

        self.on = False
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if self.on:
            with self._lock:
                name = details.method.rsplit("/", 1)[-1]
                self.counts[name] = self.counts.get(name, 0) + 1
        return continuation(details, request)


def count_requests(client: Any) -> RequestCounter:
    """Route the cosmpy client's query stubs through a ``RequestCounter`` (bench only)."""
    import grpc

    from chain.billing_pb import query_pb2_grpc
    from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2_grpc as auth_grpc
    from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2_grpc as bank_grpc

    counter = RequestCounter()
    interceptor = type("Interceptor", (grpc.UnaryUnaryClientInterceptor,), {
        "intercept_unary_unary": lambda self, c, d, r: counter.intercept_unary_unary(c, d, r)})()
    channel = grpc.intercept_channel(client._channel, interceptor)
    client._billing = query_pb2_grpc.QueryStub(channel)
    client._bank = bank_grpc.QueryStub(channel)
    client._auth = auth_grpc.QueryStub(channel)
    return counter


def measure(client: Any, settings: Any, clock: Any, rounds: int, tick: Any = lambda: None,
            requests: RequestCounter | None = None) -> tuple[list[float], list[float]]:
    """Seconds per round: the seed's one-at-a-time loop, then leasewarden's check cycle.

    Both decide with the same core; ``tick`` moves the clock between rounds.
    """
    leases = client.active_leases_by_provider(PROVIDER)
    tenants = sorted({lease.tenant for lease in leases})
    monitors = {t: TenantCredit(t, settings) for t in tenants}
    for lease in leases:
        monitors[lease.tenant].handle(LeasesSynced((lease,)), clock.now())
    seed_times = []
    for r in range(rounds):
        tick()
        start = time.perf_counter()
        for t in tenants:
            monitors[t].handle(CreditRead(r, client.credit_account(t)), clock.now())
        seed_times.append(time.perf_counter() - start)

    dispatcher = ThreadedDispatcher(clock.now, workers=2)
    counting = Counting(client)
    sidecar = Sidecar(clock=clock, dispatcher=dispatcher, client=counting, settings=settings, provider_uuid=PROVIDER)
    ours = []
    try:
        for r in range(rounds + 1):
            tick()
            before = sidecar.scheduler_core.cycles_started
            if r == 1:
                counting.calls.clear()  # the first cycle also starts the monitors
                if requests is not None:
                    requests.counts.clear()
                    requests.on = True
            start = time.perf_counter()
            sidecar.reconcile("bench")
            assert sidecar.wait_cycles_after(before, timeout=600)
            ours.append(time.perf_counter() - start)
        CALLS.update({k: v / rounds for k, v in counting.calls.items()})
        if requests is not None:
            requests.on = False
            REQUESTS.update({k: v / rounds for k, v in requests.counts.items()})
    finally:
        sidecar.stop()
        dispatcher.shutdown()
    return seed_times, ours[1:]  # the first cycle also starts the monitors


def report(title: str, args: argparse.Namespace, seed_times: list[float], ours: list[float]) -> None:
    seed, mine = statistics.median(seed_times), statistics.median(ours)
    print(title)
    print(f"  seed loop, one at a time (1 query/tenant):      median {seed:7.3f} s  {[round(x, 3) for x in seed_times]}")
    per_cycle = sum(CALLS.values())
    per_tenant = sum((REQUESTS or CALLS).values()) / args.tenants
    calls = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(CALLS.items()))
    print(f"  leasewarden, {args.in_flight} in flight ({per_tenant:.3f} queries/tenant): "
          f"median {mine:7.3f} s  {[round(x, 3) for x in ours]}")
    print(f"  calls per check cycle: {per_cycle:,.0f} ({calls})")
    if REQUESTS:
        pages = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(REQUESTS.items()))
        print(f"  gRPC requests per check cycle (every page): {sum(REQUESTS.values()):,.0f} ({pages})")
    print(f"  ratio: {seed / mine:.1f}x faster (target >= 10x)")


def via_grpc(args: argparse.Namespace) -> int:
    """The same comparison against a devnet running in its own process."""
    from devnet_process import devnet_process

    from chain.cosmpy_client import CosmpyChainClient
    from chain.keys import load_provider_key
    from runtime.clock import RealClock

    with devnet_process(PROVIDER, args.tenants, latency_ms=args.latency_ms) as info:
        config = load_config(info["config"], {"scheduler": {"max_queries_in_flight": args.in_flight}})
        client = CosmpyChainClient.from_settings(
            config.node, config.chain.chain_id, key=load_provider_key(info["provider key file"]),
            grpc_url=info["gRPC"],
        )
        clock = RealClock()
        requests = count_requests(client)
        try:
            seed_times, ours = measure(client, config.scheduler, clock, args.rounds, requests=requests)
        finally:
            client.close()
            clock.close()
    report(
        f"credit check of {args.tenants} tenants over gRPC to a devnet in another process, "
        f"{args.latency_ms:g} ms injected per call",
        args, seed_times, ours,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
