#!/usr/bin/env python3
"""leasewarden: the provider sidecar's command line.

    python run.py                  run the sidecar (embedded chain by default)
    python run.py --duration 30m   ... and stop after 30 simulated minutes, with a summary
    python run.py check-config     validate config.toml and print what is in force

``python run.py COMMAND --help`` explains each command.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.clock import RealClock  # noqa: E402
from logs.output import start_log  # noqa: E402
from logs.settings import LOG_LEVELS  # noqa: E402
from runtime.config import Config, ConfigError, format_duration, load_config, parse_duration  # noqa: E402
from runtime.version import sidecar_version  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before any load_config)

#: The shipped configuration, beside run.py in a checkout. An installed package or the binary
#: has none: it runs on the built-in defaults, which are the same (tests/test_config.py).
DEFAULT_CONFIG = ROOT / "config.toml"


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def load(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, object]] = {}
    if getattr(args, "speed", None) is not None:
        overrides.setdefault("demo", {})["speed"] = args.speed
    if getattr(args, "dry_run", False):
        overrides.setdefault("scheduler", {})["dry_run"] = True
    return load_config(args.config, overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from sidecar.runner import build, describe
    from sidecar.summary import RunSummary

    from runtime.memory import freeze_startup_objects, tune_gc

    tune_gc()
    config = load(args)
    speed = config.demo.speed if config.chain.mode != "node" else 1.0
    clock = RealClock(speed=speed)
    output = start_log(config.log, clock.now, args.log_level)
    log = logging.getLogger("leasewarden")
    summary = RunSummary()
    running = build(config, clock, taps=(summary,), serve=True)
    for line in describe(running):
        log.info(line)
    s = config.scheduler
    log.info(
        f"withdraw every {format_duration(s.withdraw_interval)}, check every "
        f"{format_duration(s.check_interval)}, zero-balance grace {format_duration(s.credit_check_zero_grace_period)}; "
        f"clock runs {speed:g}x"
    )
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    started = clock.now()
    try:
        running.sidecar.withdraw_once()
        freeze_startup_objects()
        running.sidecar.start()
        if running.world is not None:
            running.world.start()
        wait = None if args.duration is None else args.duration.total_seconds() / speed
        done.wait(wait)
    finally:
        watched = len(running.sidecar.scheduler_core.tenants)
        running.close()
        clock.close()
    log.info(f"stopped after {format_duration((clock.now() - started) // timedelta(seconds=1) * timedelta(seconds=1))} of chain time")
    for line in summary.lines():
        log.info(line)
    log.info(f"tenants watched at the end: {watched}")
    output.close()
    return 0


def cmd_devnet(args: argparse.Namespace) -> int:
    """The embedded devnet alone, for a sidecar in another process to be pointed at."""
    from sidecar.runner import demo_devnet

    config = load(args)
    clock = RealClock(speed=config.demo.speed)
    start_log(config.log, clock.now, args.log_level)
    _, devnet, world = demo_devnet(config, clock)
    world.start()
    print(f"devnet up, chain id {devnet.chain_id}, clock {config.demo.speed:g}x")
    print(f"  gRPC:              {devnet.grpc_url}")
    print(f"  websocket:         {devnet.websocket_url}")
    print(f"  provider:          {config.provider.uuid} ({devnet.provider_address})")
    print(f"  provider key file: {devnet.provider_key_file}  (deleted when the devnet stops)")
    print("Point a sidecar at it with, in its config.toml:")
    print('  [chain]\n  mode = "node"')
    print(f'  chain_id = "{devnet.chain_id}"')
    print(f'  [node]\n  grpc_url = "{devnet.grpc_url}"\n  websocket_url = "{devnet.websocket_url}"')
    print(f'  key_file = "{devnet.provider_key_file}"')
    print("Ctrl-C stops it.", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait(None if args.duration is None else args.duration.total_seconds() / config.demo.speed)
    finally:
        world.stop()
        devnet.stop()
        clock.close()
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    config = load(args)
    print(f"{config.source}: ok")
    for name, values in config.effective().items():
        print(f"[{name}]")
        for key, value in values.items():
            print(f"  {key} = {value!r}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # prog: run.py, or leasewarden as the console script and the binary
        description=(
            "leasewarden: withdraws a Manifest provider's lease fees on a schedule, watches every "
            "tenant's credit and closes the leases of tenants whose credit is gone, and keeps the books."
        ),
    )
    p.add_argument("--config", default=str(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else None,
                   help="configuration file (default: %(default)s; without one, the built-in defaults: the embedded devnet)")
    p.add_argument("--version", action="version", version=f"leasewarden {sidecar_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the sidecar (the default command)", description=(
        "Run the sidecar. With the shipped config.toml it runs on the embedded chain seeded with demo "
        "tenants, on an accelerated clock, printing one line per decision."))
    run.add_argument("--duration", type=_duration, default=None,
                     help="stop after this much simulated time (e.g. 30m, 2h) and print a summary; "
                          "default: run until Ctrl-C")
    run.add_argument("--speed", type=float, default=None,
                     help="simulated seconds per real second (overrides [demo] speed; ignored for a real node)")
    run.add_argument("--dry-run", action="store_true",
                     help="read and decide as usual, log what would be withdrawn and closed, send no tx "
                          "([scheduler] dry_run)")
    run.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                     help="detail of the decision log (default: [log] level, info)")
    run.set_defaults(func=cmd_run)

    devnet = sub.add_parser("devnet", help="run the embedded devnet alone and print its endpoints",
                            description="Run the embedded devnet (gRPC and CometBFT websocket on loopback) with the "
                                        "demo world, print its endpoints and a funded provider key file, and wait "
                                        "for Ctrl-C, so a sidecar in another process can be pointed at it.")
    devnet.add_argument("--duration", type=_duration, default=None, help="stop after this much simulated time")
    devnet.add_argument("--log-level", default="warning", choices=LOG_LEVELS,
                        help="detail of the log (default: %(default)s)")
    devnet.set_defaults(func=cmd_devnet)

    check = sub.add_parser("check-config", help="validate the configuration and print what is in force",
                           description="Validate the configuration file and print every setting in force "
                                       "(secrets left out). Exit status 2 on a bad value.")
    check.set_defaults(func=cmd_check_config)

    from ledger.cli import add_commands as add_ledger_commands
    from replay.cli import add_command as add_replay_command
    from sidecar.doctor_command import add_command as add_doctor_command

    add_ledger_commands(sub, load_config)
    add_replay_command(sub, load_config)
    add_doctor_command(sub, load_config)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = _config_first(list(sys.argv[1:] if argv is None else argv))
    p = parser()
    commands = p._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    # `run` is the default command: `python run.py --duration 5m` means `run --duration 5m`.
    if not any(a in commands for a in argv) and not {"-h", "--help", "--version"} & set(argv):
        argv = _insert_run(argv)
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _config_first(argv: list[str]) -> list[str]:
    """``--config`` is global, but may be typed after the command: move it to the front."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--config" and i + 1 < len(argv):
            front += argv[i : i + 2]
            i += 2
            continue
        if argv[i].startswith("--config="):
            front.append(argv[i])
        else:
            rest.append(argv[i])
        i += 1
    return front + rest


def _insert_run(argv: list[str]) -> list[str]:
    """Put `run` after the global options (only --config takes a value)."""
    out = list(argv)
    i = 0
    while i < len(out) and (out[i] == "--config" or out[i].startswith("--config=")):
        i += 2 if out[i] == "--config" else 1
    return out[:i] + ["run"] + out[i:]


if __name__ == "__main__":
    sys.exit(main())
