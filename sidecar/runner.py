"""Assembling a runnable sidecar from the configuration, for each chain mode.

- ``model``: the in-process billing model seeded with the demo world; lease
  events come straight from the model.
- ``devnet``: the embedded devnet (gRPC + CometBFT websocket on loopback)
  around the same model, reached through the production client code.
- ``node``: a real node's endpoints from ``[node]``.

Whatever the mode, the optional parts come from their sections: the ledger
(``[ledger] path``; tenant state is restored from it at start), capture
(``[capture] enabled``). The ``health`` actor (``HealthPart``) always runs;
with ``serve``, the metrics tap counts every delivery and the HTTP server
of ``/metrics``, ``/healthz`` and ``/readyz`` listens on ``[metrics] listen``.

``build`` returns a ``Running`` whose ``sidecar`` is ready for
``withdraw_once()``/``start()`` and whose ``close()`` undoes everything, in
the order that loses nothing: actors first, then the ledger writer (which
writes what it holds), then the capture (which writes what it holds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

from typing import Any

from actors.chain_io import InlineExecutor
from actors.cores import billing_tick_interval
from actors.write_ahead import WriteAhead
from chain.faults import Faults
from chain.model import BillingModel
from chain.model_client import ModelChainClient
from devnet.demo import PROVIDER_ADDRESS, DemoWorld
from devnet.model import new_model
from runtime.clock import Clock, RealClock
from runtime.config import Config, ConfigError
from runtime.dispatch import Dispatcher, DeliveryTap, ManualDispatcher, ThreadedDispatcher, fan_out
from runtime.supervision import Supervisor
from runtime.urls import shown_url
from sidecar.app import ModelEventFeed, Sidecar

__all__ = ["Running", "build", "sidecar_clock"]

logger = logging.getLogger(__name__)


@dataclass
class Running:
    sidecar: Sidecar
    dispatcher: Dispatcher
    model: BillingModel | None = None
    world: DemoWorld | None = None
    faults: Faults | None = None
    ledger: Any = None
    capture: Any = None
    #: tenants whose state was restored from the ledger at start
    restored: int = 0
    #: where the chain is, for the operator
    endpoint: str = ""
    closers: list[Callable[[], None]] = field(default_factory=list)
    #: the health actor (readiness), the metrics tap and their HTTP server (with ``serve``)
    health: "HealthPart | None" = None
    metrics: Any = None
    server: Any = None
    #: the embedded devnet (mode devnet)
    devnet: Any = None
    #: sees every actor's failures (both dispatchers'); its ``on_crash_loop`` is the caller's to set
    supervisor: Supervisor | None = None

    def close(self) -> None:
        if self.server is not None:
            self.server.close()  # first: no scrape asks an actor that is stopping
        self.sidecar.stop()
        if self.world is not None:
            self.world.stop()
        for close in reversed(self.closers):
            try:
                close()
            except Exception:
                logger.exception("error while shutting down")


def _open_ledger(config: Config, signer: str) -> Any:
    """The ledger named by ``[ledger] path`` (None when it is empty).

    An embedded chain (model, devnet) lives only as long as this process, so
    books kept for the previous one describe leases that no longer exist:
    restored, they would be metered as if still running. Its ledger is a file
    of its own, and the previous run's is set aside under a timestamped name,
    the last ``[ledger] embedded_keep`` kept (``ledger.embedded_books``).

    The ledger is the books of this chain, provider and ``signer``: a ledger
    of another is refused (``ledger.identity``).
    """
    from ledger.settings import embedded_ledger_path, ledger_path
    from ledger.store import Ledger

    path = ledger_path(config.ledger)
    if path is None:
        return None
    if config.chain.mode in ("model", "devnet"):
        from ledger.embedded_books import set_aside

        path = embedded_ledger_path(path)
        set_aside(path, config.ledger.embedded_keep)
    return Ledger.open(
        path, config.provider.uuid, synchronous=config.ledger.synchronous, chain_id=config.chain.chain_id,
        signer=signer,
    )


def _open_capture(config: Config, clock: Clock) -> Any:
    if not config.capture.enabled:
        return None
    from capture.writer import CaptureWriter

    return CaptureWriter(config.capture, clock_now=clock.now, config=config).open()


@dataclass
class _Chain:
    """The chain side of a build: the client, how lease events arrive, what to close."""

    client: Any
    events: Callable[[Sidecar], Any]
    endpoint: str
    #: The provider's account, which signs for it: whose books the ledger holds.
    signer: str
    model: BillingModel | None = None
    world: DemoWorld | None = None
    faults: Faults | None = None
    reads: Any = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    #: lease events arrive over a websocket (the listener)
    websocket: bool = False
    #: the embedded devnet, when it is the chain (tests cut its websocket, cut its blocks)
    devnet: Any = None


class HealthPart:
    """The ``health`` actor as a part of the sidecar; ``ask`` is what ``/healthz`` and ``/readyz`` call."""

    def __init__(self, sidecar: Sidecar, config: Config, chain: _Chain, ledger: bool) -> None:
        from actors.health import HealthActor
        from actors.readiness import Readiness
        from actors.shell import start_actor

        core = Readiness(
            config.health.node_check_interval, config.scheduler.max_node_lag,
            websocket=chain.websocket, ledger=ledger, signer=chain.signer,
        )
        self.ref = start_actor(sidecar.router, HealthActor, sidecar.dispatcher, sidecar.router, sidecar.clock, core)

    def ask(self, timeout: float) -> Any:
        """The readiness report, or None when the actor system did not answer in ``timeout`` seconds."""
        import pykka

        from messages.health import ReadinessAsked

        try:
            return self.ref.ask(ReadinessAsked(), timeout=timeout)
        except (pykka.Timeout, pykka.ActorDeadError):
            return None

    def close(self) -> None:
        import pykka

        try:
            self.ref.stop(block=False)
        except pykka.ActorDeadError:
            pass


class ListenerPart:
    """The websocket listener as a part of the sidecar: started with it, stopped with it."""

    def __init__(self, sidecar: Sidecar, websocket_url: str, config: Config) -> None:
        from actors.listener import ListenerActor
        from actors.shell import start_actor

        self.ref = start_actor(
            sidecar.router, ListenerActor, sidecar.dispatcher, sidecar.router, websocket_url,
            config.provider.uuid, config.listener,
        )
        self.manual = isinstance(sidecar.dispatcher, ManualDispatcher)

    def close(self) -> None:
        import pykka

        try:
            if self.manual:
                self.ref.stop(block=False)
            else:
                self.ref.stop(timeout=10)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass


def _model_chain(config: Config, clock: Clock, demo: bool) -> _Chain:
    provider = config.provider.uuid
    model = new_model(config, clock)
    world = DemoWorld(model, clock, config.demo, provider, PROVIDER_ADDRESS)
    if demo:
        world.seed()
    else:
        model.register_provider(provider, PROVIDER_ADDRESS)
    faults = Faults(config.demo.seed)
    world.install_faults(faults)
    client = ModelChainClient(model, provider, PROVIDER_ADDRESS, faults)
    return _Chain(
        client,
        lambda s: ModelEventFeed(model, s.router, s.provider_uuid),
        "in-process chain model",
        PROVIDER_ADDRESS,
        model,
        world,
        faults,
        # The chain is in this process: a read never waits on I/O, so a
        # thread pool would only add switching.
        reads=InlineExecutor(),
        closers=[client.close],
    )


def demo_devnet(config: Config, clock: Clock, seed: bool = True) -> tuple[BillingModel, Any, DemoWorld]:
    """A chain model behind the embedded devnet, and its demo world (seeded unless ``seed`` is false).

    The world's failing tenants get their credit reads failed by the devnet.
    On an error the devnet is stopped again.
    """
    from devnet.embedded import start_devnet

    model = new_model(config, clock)
    devnet = start_devnet(config, clock, model)
    try:
        world = DemoWorld(model, clock, config.demo, config.provider.uuid, devnet.provider_address)
        if seed:
            world.seed()
            if world.tenants.failing:
                devnet.faults.fail_for("CreditAccount", frozenset(world.tenants.failing))
    except BaseException:
        devnet.stop()
        raise
    return model, devnet, world


def _inclusion_poll(config: Config, block_time: timedelta, speed: float) -> float:
    """Seconds between GetTx polls while a tx waits for its block.

    The client waits for inclusion in real time; on an accelerated clock a
    block is block_time / speed of real time, so it polls a few times per
    block rather than every tx_poll_interval (200 ms is a minute of chain
    time at 300x).
    """
    block_real = block_time.total_seconds() / speed
    return min(config.node.tx_poll_interval.total_seconds(), max(block_real / 4, 0.005))


def sidecar_clock(config: Config) -> tuple[RealClock, str | None]:
    """The clock ``run`` runs on, and, for a devnet's clock, the warning line that says so.

    The embedded chains (model, devnet) run on ``[demo] speed``; a node on
    the wall clock, unless ``[node] devnet_clock`` names the clock file of an
    embedded devnet in another process (benchmarks and fault runs): then on
    that devnet's accelerated clock. That setting is refused in the other
    modes, and for a file written by a devnet of another chain id, so it
    cannot put a sidecar on a fast clock against a chain it was not made for.
    """
    anchor = config.node.clock_anchor()
    if anchor is None:
        return RealClock(speed=config.demo.speed if config.chain.mode != "node" else 1.0), None
    where = f"{config.source}: [node] devnet_clock {config.node.devnet_clock!r}"
    if config.chain.mode != "node":
        raise ConfigError(f"{where}: only for [chain] mode = \"node\" (the embedded chains run on [demo] speed)")
    if anchor.chain_id != config.chain.chain_id:
        raise ConfigError(
            f"{where}: written by a devnet of chain {anchor.chain_id!r}, but [chain] chain_id is "
            f"{config.chain.chain_id!r}"
        )
    return RealClock.anchored(anchor), (
        f"clock: the devnet's accelerated clock ({anchor.speed:g}x, block time {anchor.block_time.total_seconds():g}s) "
        f"from {config.node.devnet_clock}: for benchmarks and fault runs only"
    )


def _devnet_chain(config: Config, clock: Clock, demo: bool) -> _Chain:
    model, devnet, world = demo_devnet(config, clock, seed=demo)
    closers: list[Callable[[], None]] = [devnet.stop]
    try:
        poll = _inclusion_poll(config, config.devnet.block_time, getattr(clock, "speed", 1.0))
        client = devnet.client(config, tx_poll_interval=poll)
    except BaseException:
        devnet.stop()
        raise
    closers.append(client.close)
    return _Chain(
        client,
        lambda s: ListenerPart(s, devnet.websocket_url, config),
        f"embedded devnet: gRPC {devnet.grpc_url}, websocket {shown_url(devnet.websocket_url)}, chain {devnet.chain_id}",
        devnet.provider_address,
        model,
        world,
        closers=closers,
        websocket=True,
        devnet=devnet,
    )


def _node_chain(config: Config, clock: Clock) -> _Chain:
    from chain.cosmpy_client import CosmpyChainClient
    from chain.keys import load_configured_key

    key = load_configured_key(config.node, config.source)
    client = CosmpyChainClient.from_settings(config.node, config.chain.chain_id, key=key)
    anchor = getattr(clock, "anchor", None)
    if anchor is not None:  # a devnet's accelerated clock (benchmarks, fault runs: sidecar_clock)
        client.tx_poll_interval = _inclusion_poll(config, anchor.block_time, anchor.speed)
    return _Chain(
        client,
        lambda s: ListenerPart(s, config.node.websocket_url, config),
        f"node: gRPC {shown_url(config.node.grpc_url)}, websocket {shown_url(config.node.websocket_url)}, "
        f"chain {config.chain.chain_id}, "
        f"signing as {client.address}",
        client.address,
        closers=[client.close],
        websocket=True,
    )


def build(
    config: Config,
    clock: Clock,
    *,
    manual: bool = False,
    taps: tuple[DeliveryTap, ...] = (),
    demo: bool = True,
    serve: bool = False,
) -> Running:
    """Everything ``config`` asks for, built on ``clock``; nothing runs until ``start()``.

    ``manual``: a ``ManualDispatcher`` (tests, replay checks); otherwise two
    worker threads shared by every actor. ``serve``: the metrics and the
    HTTP server of ``[metrics] listen`` too (unless it is empty).
    """
    mode = config.chain.mode
    if mode == "model":
        chain = _model_chain(config, clock, demo)
    elif mode == "devnet":
        chain = _devnet_chain(config, clock, demo)
    else:
        chain = _node_chain(config, clock)
    closers: list[Callable[[], None]] = list(chain.closers)
    ledger = None
    try:
        # The ledger before the capture: a ledger of another chain is refused
        # before a capture of this run is started.
        ledger = _open_ledger(config, chain.signer)
        capture = _open_capture(config, clock)
    except BaseException:
        if ledger is not None:
            ledger.close()
        for close in reversed(closers):
            close()
        raise
    metrics = None
    if serve and config.metrics.listen:
        from monitoring.metrics import SidecarMetrics
        from runtime.version import sidecar_version

        metrics = SidecarMetrics(config.provider.uuid, getattr(clock, "speed", 1.0), sidecar_version())
    tap = fan_out(*taps, metrics, capture)
    supervisor = Supervisor(clock.now)
    dispatcher: Dispatcher = ManualDispatcher(clock.now, tap=tap, supervisor=supervisor) if manual else ThreadedDispatcher(
        clock.now, workers=2, tap=tap, supervisor=supervisor
    )
    if capture is not None:
        closers.insert(0, capture.close)
    if not manual:
        closers.insert(0, dispatcher.shutdown)
    health: list[HealthPart] = []

    def start_health(s: Sidecar) -> HealthPart:
        health.append(HealthPart(s, config, chain, ledger is not None))
        return health[0]

    # Health first: what the listener and the ledger writer tell it from their start must find it.
    parts: list[Callable[[Sidecar], Any]] = [start_health, chain.events]
    restored: list[Any] = []
    lookups: list[Any] = []
    close_lookups: list[Any] = []
    to_read: list[str] = []
    if ledger is not None:
        from actors.ledger_writer import start_ledger_writer

        restored = ledger.tenant_snapshots()
        lookups = ledger.withdraw_lookups()
        close_lookups = ledger.close_lookups()
        to_read = ledger.leases_to_read()
        closers.append(ledger.close)
        parts.append(
            lambda s: start_ledger_writer(
                s.router, clock, ledger, config.ledger, dispatcher=dispatcher if manual else None, tap=tap,
                supervisor=supervisor,
            )
        )
        if mode == "model" and chain.model is not None:
            # The in-process chain tells the ledger what each settlement moved
            # per lease (after the writer: the ledger address must exist).
            from ledger.model_feed import ModelLedgerFeed

            model = chain.model
            parts.append(lambda s: ModelLedgerFeed(model, s.router, config.provider.uuid, ledger))
    client = chain.client
    if config.scheduler.dry_run:
        from chain.read_only import ReadOnlyClient

        client = ReadOnlyClient(client)
    sidecar = Sidecar(
        clock=clock,
        dispatcher=dispatcher,
        client=client,
        settings=config.scheduler,
        provider_uuid=config.provider.uuid,
        billing_tick_interval=billing_tick_interval(config),
        reads=chain.reads,
        restored=restored,
        restored_lookups=lookups,
        restored_close_lookups=close_lookups,
        leases_to_read=to_read,
        extra=parts,
        on_stop=[chain.client.close],
        # A signed tx's hash is in the books before its broadcast, from the thread that sends it.
        write_ahead=WriteAhead(ledger.record, clock) if ledger is not None else None,
    )
    running = Running(
        sidecar, dispatcher, chain.model, chain.world, chain.faults, ledger, capture, len(restored),
        endpoint=chain.endpoint, closers=closers, health=health[0], metrics=metrics, devnet=chain.devnet,
        supervisor=supervisor,
    )
    if metrics is not None:
        try:
            _serve(running, config, metrics)
        except BaseException:
            running.close()
            raise
    return running


def _serve(running: Running, config: Config, metrics: Any) -> None:
    """The runtime's own counts for the metrics, and the HTTP server of ``[metrics] listen``."""
    from monitoring.server import MonitoringServer

    sidecar = running.sidecar
    supervisor = running.supervisor or running.dispatcher.supervisor

    def failures() -> dict[str, int]:
        # One supervisor sees both dispatchers' actors (the ledger writer's own too).
        return supervisor.counts()

    metrics.watch(sidecar.router.deepest_mailboxes, failures, running.capture)
    health = running.health
    assert health is not None
    try:
        running.server = MonitoringServer(config.metrics.listen, metrics.registry, health.ask)
    except OSError as exc:
        raise ConfigError(f"{config.source}: [metrics] listen {config.metrics.listen!r}: cannot listen: {exc}") from None



def describe(running: Running) -> list[str]:
    out = [f"chain: {running.endpoint}"]
    if running.model is not None:
        out[0] += f", behaving as the {running.model.version.label} chain"
    if running.sidecar.settings.dry_run:
        out.append("DRY RUN ([scheduler] dry_run): every read and decision, and no tx sent")
    if running.ledger is not None:
        out.append(f"ledger: {running.ledger.path} ({running.restored} tenant(s) restored)")
    if running.capture is not None:
        out.append(f"capture: {running.capture.settings.directory}/ (replay with: python run.py replay {running.capture.settings.directory})")
    if running.server is not None:
        out.append(f"metrics: {running.server.url}/metrics; health: {running.server.url}/healthz, {running.server.url}/readyz")
    if running.world is not None:
        t = running.world.tenants
        out.append(
            f"demo tenants: {len(t.healthy)} healthy, {len(t.draining)} draining, "
            f"{len(t.failing)} with failing reads, {len(t.reserved)} exhausted while a pending lease elsewhere "
            "keeps credit reserved; one more opens two leases 3 simulated minutes in, one never acknowledged"
        )
    return out


__all__.append("describe")
