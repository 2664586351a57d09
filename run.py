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
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runtime.cli import Parser, UsageError, closed_output_guard, error_line, run_guarded  # noqa: E402
from runtime.clock import RealClock  # noqa: E402
from logs.output import LogOutput, start_log  # noqa: E402
from logs.settings import LOG_LEVELS  # noqa: E402
from runtime.config import Config, convert_setting, format_duration, load_config, parse_duration  # noqa: E402
from runtime.key_material import shown  # noqa: E402
from runtime.stop_signals import stopped_by_signals  # noqa: E402
from runtime.supervision import EXIT_CRASH_LOOP  # noqa: E402
from runtime.version import sidecar_version  # noqa: E402
import sidecar.settings  # noqa: E402,F401  (every section registered, before any load_config)

if TYPE_CHECKING:
    from sidecar.runner import Running
    from sidecar.summary import RunSummary

#: The shipped configuration, beside run.py in a checkout. An installed package or the binary
#: has none: it runs on the built-in defaults, which are the same (tests/test_config.py).
DEFAULT_CONFIG = ROOT / "config.toml"


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _speed(text: str) -> float:
    """``--speed``, bounded as ``[demo] speed`` is: its error names the flag, not config.toml."""
    from devnet.demo_settings import DemoSettings

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of simulated seconds per real second, got {text!r}") from None
    try:
        return convert_setting(DemoSettings, "speed", value, "")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _real_seconds(duration: timedelta | None, speed: float) -> float | None:
    """How long to wait for ``--duration`` of simulated time; None: until Ctrl-C.

    Ten years at the slowest speed is longer than a wait can be (an
    OverflowError): past ``threading.TIMEOUT_MAX`` (292 years) it is waited for
    as if unbounded.
    """
    if duration is None:
        return None
    seconds = duration.total_seconds() / speed
    return None if seconds > threading.TIMEOUT_MAX else seconds


def _prog() -> str:
    """The name errors and --help use: leasewarden as the console script and the binary, else run.py."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "leasewarden" if name.startswith("leasewarden") else "run.py"


def load(args: argparse.Namespace) -> Config:
    overrides: dict[str, dict[str, object]] = {}
    if getattr(args, "speed", None) is not None:
        overrides.setdefault("demo", {})["speed"] = args.speed
    if getattr(args, "chain_version", None) is not None:
        overrides.setdefault("devnet", {})["chain_version"] = args.chain_version
    if getattr(args, "dry_run", False):
        overrides.setdefault("scheduler", {})["dry_run"] = True
    return load_config(args.config, overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from sidecar.runner import sidecar_clock

    from runtime.memory import tune_gc

    tune_gc()
    config = load(args)
    clock, devnet_clock = sidecar_clock(config)
    output = start_log(config.log, clock.now, args.log_level)
    try:
        return _run_logged(args, config, clock, devnet_clock, output)
    finally:
        output.close()  # on every way out, a start that failed included


def _run_logged(args: argparse.Namespace, config: Config, clock: RealClock, devnet_clock: str | None, output: LogOutput) -> int:
    """``run``, its log started: the sidecar up for ``--duration``, then its summary."""
    from sidecar.runner import build, describe
    from sidecar.summary import RunSummary

    speed = clock.speed
    log = logging.getLogger("leasewarden")
    if devnet_clock is not None:
        log.warning(devnet_clock)
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
    # Held until the summary is out: a second Ctrl-C (or a late SIGTERM) while the sidecar stops
    # must not cut it off, nor turn a crash loop's exit status into an interrupt's.
    with stopped_by_signals(threading.Event(), put_back=_in_process(args)) as done:
        return _served(args, running, clock, summary, output, done)


def _served(
    args: argparse.Namespace, running: Running, clock: RealClock, summary: RunSummary, output: LogOutput,
    done: threading.Event,
) -> int:
    """The built sidecar up until ``--duration`` or ``done`` (a stop signal, a crash loop), closed, then its summary."""
    from runtime.memory import freeze_startup_objects

    log = logging.getLogger("leasewarden")
    # A crash loop (runtime.supervision) stops the run like a SIGTERM, and the exit status says so.
    supervisor = running.supervisor
    if supervisor is not None:
        supervisor.on_crash_loop = lambda loop: done.set()
        if supervisor.tripped is not None:
            done.set()  # tripped while ``build`` started the actors, before the hook: it says so only once
    started = clock.now()
    try:
        running.sidecar.withdraw_once()
        freeze_startup_objects()
        running.sidecar.start()
        if running.world is not None:
            running.world.start()
        done.wait(_real_seconds(args.duration, clock.speed))
    finally:
        watched = len(running.sidecar.scheduler_core.tenants)
        running.close()
        clock.close()
    log.info(f"stopped after {format_duration((clock.now() - started) // timedelta(seconds=1) * timedelta(seconds=1))} of chain time")
    for line in summary.lines():
        log.info(line)
    log.info(f"tenants watched at the end: {watched}")
    loop = supervisor.tripped if supervisor is not None else None
    if loop is not None:
        log.error(f"stopped: {loop.line()}")
    output.close()
    if loop is not None:
        # The last line, after the log's own (its folded repeats): why the service manager restarts it.
        sys.stderr.write(error_line(f"stopped: {loop.line()}") + "\n")
        return EXIT_CRASH_LOOP
    return 0


def cmd_devnet(args: argparse.Namespace) -> int:
    """The embedded devnet alone, for a sidecar in another process to be pointed at."""
    config = load(args)
    clock_file = Path(args.clock_file).resolve() if args.clock_file else None
    if clock_file is not None:
        from devnet.embedded import shared_clock

        clock = shared_clock(config, config.demo.speed)
    else:
        clock = RealClock(speed=config.demo.speed)
    output = start_log(config.log, clock.now, args.log_level)
    try:
        return _devnet_logged(args, config, clock, clock_file)
    finally:
        output.close()


def _devnet_logged(args: argparse.Namespace, config: Config, clock: RealClock, clock_file: Path | None) -> int:
    """``devnet``, its log started: the devnet up until Ctrl-C or ``--duration``."""
    from chain.versions import chain_version
    from sidecar.runner import demo_devnet

    _, devnet, world = demo_devnet(config, clock)
    try:
        if clock_file is not None:
            from runtime.clock import write_clock_anchor

            assert clock.anchor is not None
            write_clock_anchor(clock_file, clock.anchor)
    except OSError as exc:
        devnet.stop()
        raise UsageError(f"run.py devnet: --clock-file {str(clock_file)!r}: cannot be written: {exc.strerror or exc}") from None
    world.start()
    version = chain_version(config.devnet.chain_version)
    print(f"devnet up, chain id {devnet.chain_id}, behaving as the {version.label} chain, clock {config.demo.speed:g}x")
    print(f"  gRPC:              {devnet.grpc_url}")
    print(f"  websocket:         {devnet.websocket_url}")
    print(f"  provider:          {config.provider.uuid} ({devnet.provider_address})")
    print(f"  provider key file: {devnet.provider_key_file}  (deleted when the devnet stops)")
    if clock_file is not None:
        print(f"  clock file:        {clock_file}  (deleted when the devnet stops)")
    print("Point a sidecar at it with, in its config.toml:")
    print('  [chain]\n  mode = "node"')
    print(f'  chain_id = "{devnet.chain_id}"')
    print(f'  [node]\n  grpc_url = "{devnet.grpc_url}"\n  websocket_url = "{devnet.websocket_url}"')
    print(f'  key_file = "{devnet.provider_key_file}"')
    if clock_file is not None:
        print(f'  devnet_clock = "{clock_file}"  # benchmarks and fault runs only: the sidecar runs on this clock')
    print("Ctrl-C stops it.", flush=True)
    with stopped_by_signals(threading.Event(), put_back=_in_process(args)) as done:
        try:
            done.wait(_real_seconds(args.duration, config.demo.speed))
        finally:
            world.stop()
            devnet.stop()
            clock.close()
            if clock_file is not None:
                clock_file.unlink(missing_ok=True)
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from sidecar.check_config import check_config

    return check_config(load(args), sys.stdout)


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=_prog(),
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
    run.add_argument("--speed", type=_speed, default=None,
                     help="simulated seconds per real second (overrides [demo] speed; ignored for a real node)")
    run.add_argument("--dry-run", action="store_true",
                     help="read and decide as usual, log what would be withdrawn and closed, send no tx "
                          "([scheduler] dry_run)")
    run.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                     help="detail of the decision log (default: [log] level, info)")
    run.add_argument("--chain-version", choices=("current", "v2.1"), default=None,
                     help="which chain the embedded chain behaves as (overrides [devnet] chain_version; "
                          "ignored for a real node)")
    run.set_defaults(func=cmd_run)

    devnet = sub.add_parser("devnet", help="run the embedded devnet alone and print its endpoints",
                            description="Run the embedded devnet (gRPC and CometBFT websocket on loopback) with the "
                                        "demo world, print its endpoints and a funded provider key file, and wait "
                                        "for Ctrl-C, so a sidecar in another process can be pointed at it.")
    devnet.add_argument("--duration", type=_duration, default=None, help="stop after this much simulated time")
    devnet.add_argument("--chain-version", choices=("current", "v2.1"), default=None,
                        help="which chain the devnet behaves as (overrides [devnet] chain_version): current, the "
                             "newest chain source, or v2.1, tag v2.1.0 (no withdraw cursor, no credit isolation)")
    devnet.add_argument("--log-level", default="warning", choices=LOG_LEVELS,
                        help="detail of the log (default: %(default)s)")
    devnet.add_argument("--clock-file", default=None, metavar="PATH",
                        help="for benchmarks and fault runs: write the devnet's clock (its [demo] speed) to PATH, "
                             "for a sidecar in another process to run on with [node] devnet_clock = PATH")
    devnet.set_defaults(func=cmd_devnet)

    check = sub.add_parser("check-config", help="validate the configuration and print what is in force",
                           description="Validate the configuration file, load the provider key the way run does "
                                       "(permissions, format, BIP-39 checksum), and print every setting in force and "
                                       "the address the key signs as (never the key). Exit status 2 on a bad value.")
    check.set_defaults(func=cmd_check_config)

    from ledger.cli import add_commands as add_ledger_commands
    from replay.cli import add_command as add_replay_command
    from sidecar.doctor_command import add_command as add_doctor_command

    add_ledger_commands(sub, load_config)
    add_replay_command(sub, load_config)
    add_doctor_command(sub, load_config)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; every error is one line on stderr (``runtime.cli``).

    ``argv`` given: called in-process (a test, a bench), which keeps its own state once it returns.
    """
    from sidecar.errors import OPERATOR_ERRORS

    with closed_output_guard():
        return run_guarded(
            lambda: _dispatch(list(sys.argv[1:] if argv is None else argv), in_process=argv is not None),
            OPERATOR_ERRORS,
        )


def _in_process(args: argparse.Namespace) -> bool:
    """Whether the command runs inside a caller (``main(argv)``), not as the program."""
    return bool(getattr(args, "in_process", True))


def _dispatch(argv: list[str], in_process: bool = True) -> int:
    argv = _config_first(argv)
    p = parser()
    commands = p._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    argv = _with_command(argv, commands)
    args = p.parse_args(argv)
    args.in_process = in_process
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    return args.func(args)


def _config_first(argv: list[str]) -> list[str]:
    """``--config`` is global, but may be typed after the command: move it to the front."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--config":
            if i + 1 == len(argv) or argv[i + 1].startswith("-"):
                raise UsageError("run.py: --config needs a value: the path of a configuration file, e.g. --config config.toml")
            front += argv[i : i + 2]
            i += 2
            continue
        if argv[i].startswith("--config="):
            front.append(argv[i])
        else:
            rest.append(argv[i])
        i += 1
    return front + rest


def _with_command(argv: list[str], commands: dict[str, object]) -> list[str]:
    """``argv`` with its command: `run` where only options are given (it is the default command)."""
    i = 0
    while i < len(argv) and (argv[i] == "--config" or argv[i].startswith("--config=")):
        i += 2 if argv[i] == "--config" else 1
    if i < len(argv) and argv[i] in ("-h", "--help", "--version"):
        return argv
    if i == len(argv) or argv[i].startswith("-"):
        return argv[:i] + ["run"] + argv[i:]
    if argv[i] not in commands:
        raise UsageError(f"run.py: unknown command {shown(argv[i])} (commands: {', '.join(commands)}; see run.py --help)")
    return argv


if __name__ == "__main__":
    sys.exit(main())
