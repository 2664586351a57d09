"""``run.py replay LOG...``: replay captured logs and print why each decision was made.

Wiring (``run.py``)::

    from replay.cli import add_command as add_replay
    add_replay(sub, load_config)     # load_config(path, overrides) -> Config, for --with-config

There is no ``python -m replay.cli``: a replay rebuilds the captured
configuration from every section of the sidecar, and only the wiring, which
``run.py`` imports, registers them all.

Output is a timeline (one line per decision: the cores' notes, and the
inputs from outside that explain them), then per run the divergences and
the totals. ``--json`` prints the same as JSON Lines. Nothing in the output
depends on the machine, the wall clock or the order of a hash, so two
replays of the same logs print identical bytes.

Exit status: 0 when every decision matched; 1 when a decision diverged;
2 when the logs are bad (a bad record stops the replay; with ``--skip-bad``
the replay goes on and the status still says records were skipped); 3 for
both. A configuration that cannot be used is 2 as well, and so is a LOG
that does not exist or a folder with no capture in it: replaying nothing
is not "no divergence". Quitting ``--step`` with ``q`` is a stop the user
asked for: its own line, and the status of what was replayed until then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable, Iterable

from capture.errors import CaptureError
from capture.format import FILE_SUFFIX
from capture.reader import CaptureReader, capture_files
from replay import describe
from replay.config import merge_overrides, node_files_left_out, without_node_files
from replay.engine import Divergence, ReplayError, Replayer, RunBegins, RunEnds, Step, is_replayed, replayed_for
from replay.parallel import PARALLEL_FROM_BYTES, ParallelReplayer, jobs_for
from runtime.cli import error_line
from runtime.config import Config, ConfigError, parse_duration

__all__ = ["add_command", "run_replay", "EXIT_DIVERGED", "EXIT_BAD_LOGS"]

EXIT_DIVERGED = 1
EXIT_BAD_LOGS = 2

#: More replay workers than this is a typing mistake (each reads every record).
MAX_JOBS = 64

#: The progress bar appears only after this long (short replays stay quiet)
#: and redraws at most this often.
PROGRESS_AFTER_S = 0.5
PROGRESS_EVERY_S = 0.2


def _time(text: str) -> datetime:
    """``2026-03-01T12:00:00Z`` or ``2026-03-01 12:00``; a time without a zone is UTC."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a time like 2026-03-01T12:00:00Z, got {text!r}") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _duration(text: str) -> Any:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _NoCapture(Exception):
    """A LOG that names nothing to replay."""


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"--jobs must be a whole number from 1 to {MAX_JOBS}, not {text!r}")
    return n


def _check_logs(logs: list[str]) -> None:
    """Each LOG exists, and together they hold a capture file: replaying nothing is an error, not a clean result."""
    for log in logs:
        path = Path(log)
        if not path.exists():
            raise _NoCapture(f"{log}: no such file or folder (expected capture files, *{FILE_SUFFIX}, or their folder)")
        if path.is_dir() and not capture_files([path]):
            raise _NoCapture(
                f"{log}: no capture file (*{FILE_SUFFIX}) in this folder; is [capture] directory another one, "
                f"or was capture off ([capture] enabled)?"
            )


def add_command(subparsers: Any, load_config: Callable[..., Config]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "replay",
        help="replay captured logs through today's decision code and show where it decides differently",
        description=(
            "Feed the inputs captured in LOG files (or directories of them) through the decision code, "
            "offline (no network, no chain), on a manual clock set to each record's time, and print a "
            "timeline of decisions: withdraw pages, depletion estimates, early re-checks, closures, "
            "billing ticks. Each decision is compared with the captured one; divergences are listed with "
            "the input record that led to them. Exit status: 0 all decisions match, 1 divergence, "
            "2 bad logs or configuration, 3 both."
        ),
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="capture files or directories (files are ordered by run and part)")
    p.add_argument("--until", type=_time, metavar="TIME",
                   help="stop feeding inputs after this clock time (ISO 8601, UTC unless a zone is given)")
    p.add_argument("--tenant", metavar="ADDR",
                   help="replay only what decides for this tenant (its credit monitor, the scheduler and the "
                        "chain actor; the other monitors' captured messages are taken as they are) and show only "
                        "its lines and divergences; the counts at the end are of what was replayed")
    p.add_argument("--step", action="store_true",
                   help="pause after each timeline line: Enter for the next, c to run on, q to quit")
    p.add_argument("--json", action="store_true", help="print JSON Lines instead of text")
    p.add_argument("--skip-bad", action="store_true",
                   help="go on past truncated/corrupt records, unknown types and newer schemas, and count them")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="replay with a setting changed (e.g. scheduler.credit_check_error_threshold=2); repeatable")
    p.add_argument("--with-config", metavar="PATH",
                   help="replay with this configuration file instead of the captured configuration")
    p.add_argument("--jobs", type=_jobs, metavar="N",
                   help="replay in N worker processes, the decision cores split between them; the output is the "
                        "same whatever N (default: 2 on a machine with two cores or more, for logs of "
                        f"{PARALLEL_FROM_BYTES // 2**20} MiB or more; 1 replays in this process). --tenant, --until "
                        "and --step replay in this process")
    p.add_argument("--timer-slack", type=_duration, metavar="DURATION",
                   help="how late a captured timer may fire and still match (default: 0 on a manual clock, "
                        "2 s of real time on a real one)")
    p.set_defaults(func=lambda args: run_replay(args, load_config))
    return p


class _Progress:
    """A progress bar on stderr, only when stderr is a terminal and the replay is long."""

    def __init__(self, stream: IO[str], reader: Any, enabled: bool) -> None:
        """``reader``: what tells ``bytes_done`` of ``total_bytes`` (a ``CaptureReader``, a ``ParallelReplayer``)."""
        self.stream = stream
        self.reader = reader
        self.enabled = enabled and _isatty(stream)
        self.started = time.monotonic()
        self.last = 0.0
        self.shown = False

    def tick(self, records: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < PROGRESS_AFTER_S or now - self.last < PROGRESS_EVERY_S or self.reader.total_bytes <= 0:
            return
        self.last = now
        frac = min(1.0, self.reader.bytes_done / self.reader.total_bytes)
        width = 30
        filled = int(frac * width)
        rate = records / max(now - self.started, 1e-9)
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {frac:6.1%} {records:,} records {rate:,.0f}/s ")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 79 + "\r")
            self.stream.flush()
            self.shown = False


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _wanted(event: Any, tenant: str | None) -> bool:
    if tenant is None:
        return True
    if isinstance(event, (Step, Divergence)):
        return event.tenant == tenant or event.address == f"tenant/{tenant}"
    return True


class _Text:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.run_divergences: list[Divergence] = []

    def event(self, e: Any) -> None:
        w = self.out.write
        if isinstance(e, Step):
            mark = {"note": " ", "input": "<", "decision": ">", "error": "!"}.get(e.kind, " ")
            w(f"{describe.when(e.at):<26} #{e.seq:<7} {mark} {e.address:<24} {e.text}\n")
        elif isinstance(e, RunBegins):
            w(f"== run {e.run_id}: started {describe.when(e.started_at)}, leasewarden {e.version}, clock {e.clock} ({e.where})\n")
            for n in e.notices:
                w(f"   note: {n}\n")
        elif isinstance(e, Divergence):
            self.run_divergences.append(e)
        elif isinstance(e, RunEnds):
            if self.run_divergences:
                w(f"-- divergences in run {e.run_id}: {len(self.run_divergences)} shown\n")
                for d in self.run_divergences:
                    root = "" if d.first_seq == d.input_seq else f" (first divergence of {d.address}: input #{d.first_seq})"
                    w(
                        f"   DIVERGENCE {d.kind} at input #{d.input_seq} {d.input_type} to {d.address}, "
                        f"{describe.when(d.input_at)} [{d.input_where}]{root}\n      {d.detail}\n"
                    )
            self.run_divergences = []
            excused = ", ".join(f"{n} {reason}" for reason, n in e.excused) or "none"
            end = "clean stop" if e.clean_end else "no clean stop recorded (crash, or still running)"
            w(
                f"-- run {e.run_id}: {e.records} records, {e.inputs} inputs replayed, {e.matched} decisions matched, "
                f"{e.divergences} divergence(s); excused: {excused}; {end}; last record {describe.when(e.last_at)}\n"
            )

    def summary(self, d: dict[str, Any]) -> None:
        w = self.out.write
        verdict = "no divergence" if not d["divergences"] else f"{d['divergences']} divergence(s)"
        w(
            f"== replayed {d['runs']} run(s), {d['records']} records, {d['inputs']} inputs: {verdict}; "
            f"{d['skipped_summary']}\n"
        )
        for p in d["skipped_problems"]:
            w(f"   skipped: {p}\n")
        if d.get("tenant") is not None and not d["tenant_lines"] and not d.get("error"):  # a whole replay, nothing of it
            w(f"== no line concerns tenant {d['tenant']} in these logs: is that the tenant's address?\n")
        if d.get("error"):
            w(f"== stopped: {d['error']}\n")
        if d.get("quit"):
            w("== stopped at your request (q): the counts above are of what was replayed until then\n")


class _Json:
    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, sort_keys=True, ensure_ascii=True, separators=(",", ":")) + "\n")

    def event(self, e: Any) -> None:
        self._line(e.to_json())

    def summary(self, d: dict[str, Any]) -> None:
        self._line({"type": "summary", **d})


def run_replay(
    args: argparse.Namespace,
    load_config: Callable[..., Config] | None = None,
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    stdin: IO[str] | None = None,
    build_core: Callable[[str, Config], Any] | None = None,
) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    stdin = stdin or sys.stdin
    try:
        overrides = merge_overrides(args.set)
        config = None
        config_notices: tuple[str, ...] = ()
        if args.with_config:
            if load_config is None:
                raise ConfigError("--with-config needs a configuration loader")
            config = load_config(args.with_config, without_node_files())  # a replay reaches no node
            config_notices = tuple(node_files_left_out(args.with_config, overrides))
        _check_logs(args.logs)
    except ConfigError as exc:
        stderr.write(error_line(exc) + "\n")
        return EXIT_BAD_LOGS
    except _NoCapture as exc:
        stderr.write(error_line(exc) + "\n")
        return EXIT_BAD_LOGS
    out = _Json(stdout) if args.json else _Text(stdout)
    in_process = [flag for flag, given in (("--tenant", args.tenant), ("--until", args.until), ("--step", args.step))
                  if given]
    jobs = getattr(args, "jobs", None)
    if jobs is not None and jobs > 1 and in_process:
        stderr.write(error_line(f"--jobs {jobs}: {' and '.join(in_process)} replay in this process; leave --jobs out")
                     + "\n")
        return EXIT_BAD_LOGS
    replayer: Replayer | ParallelReplayer = Replayer(
        build_core, config=config, overrides=overrides, until=args.until, timer_slack=args.timer_slack,
        replayed=replayed_for(args.tenant) if args.tenant else is_replayed, config_notices=config_notices,
    )
    error: str | None = None
    quit_at: int | None = None  # timeline lines shown when the user quit --step
    reader: CaptureReader | None = None
    shown = 0  # timeline lines and divergences shown (with --tenant: that tenant's)
    stepping = args.step
    try:
        reader = CaptureReader(args.logs, skip_bad=args.skip_bad, file_parts=True)
        if jobs is None:
            jobs = 1 if in_process else jobs_for(reader.total_bytes)
        events: Iterable[Any]
        if jobs > 1:
            replayer = ParallelReplayer(
                args.logs, jobs, build_core, config=config, overrides=overrides, timer_slack=args.timer_slack,
                skip_bad=args.skip_bad, probed=reader, config_notices=config_notices,
            )
            events = replayer.replay()
            progress = _Progress(stderr, replayer, enabled=True)
        else:
            events = replayer.replay(reader)
            progress = _Progress(stderr, reader, enabled=not args.step)
        n = 0
        for event in events:
            n += 1
            if n & 255 == 0:
                progress.tick(replayer.records_so_far)
            if not _wanted(event, args.tenant):
                continue
            if isinstance(event, (Step, Divergence)):
                shown += 1
            if stepping and isinstance(event, Step):
                progress.clear()
            out.event(event)
            if stepping and isinstance(event, Step):
                stdout.flush()
                stderr.write("[step] Enter: next, c: continue, q: quit > ")
                stderr.flush()
                answer = stdin.readline()
                if answer == "" or answer.strip().lower() == "c":
                    stepping = False
                elif answer.strip().lower() == "q":
                    quit_at = shown
                    break
        progress.clear()
    except CaptureError as exc:
        error = str(exc)
    except (ReplayError, ConfigError) as exc:
        error = str(exc)
    skipped = replayer.skipped if isinstance(replayer, ParallelReplayer) else reader.skipped if reader is not None else None
    bad = bool(skipped and skipped.total) or error is not None
    summary = {
        "runs": replayer.runs,
        "records": replayer.records,
        "inputs": replayer.inputs,
        "matched": replayer.matched,
        "excused": replayer.excused,
        "divergences": replayer.divergences,
        "skipped": dict(sorted(skipped.by_kind.items())) if skipped else {},
        "skipped_summary": skipped.summary() if skipped else "nothing skipped",
        "skipped_problems": [str(p) for p in skipped.problems] if skipped else [],
        "error": error,
        "until_reached": replayer.stopped_early,
        "quit": quit_at is not None,
    }
    if args.tenant is not None:
        summary.update(tenant=args.tenant, tenant_lines=shown)
    out.summary(summary)
    stdout.flush()
    fallback = getattr(replayer, "fallback_reason", None)
    if fallback is not None:
        # Said on stderr only: what the replay prints is the same however it ran.
        stderr.write(f"replay: the worker processes stopped ({fallback}); the replay went on in this process "
                     "from the start, which is why it took longer\n")
    if error is not None and not args.json:
        stderr.write(error_line(error) + "\n")
    return (EXIT_DIVERGED if replayer.divergences else 0) | (EXIT_BAD_LOGS if bad else 0)
