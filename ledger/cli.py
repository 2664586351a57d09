"""The ledger's commands: ``tick``, ``meter``, ``periods``, ``finalize``, ``statement``.

``add_commands(subparsers, load_config)`` adds them to ``run.py``'s parser;
each sets ``func`` to a handler taking the parsed arguments and returning the
exit status. ``load_config(path)`` is the wiring's loader (``run.py`` passes
it, every section registered): it is called with the parser's global
``--config`` (``args.config``). The ledger does not import the wiring, so
it cannot load a whole ``config.toml`` by itself; ``python run.py tick`` is
how an operator runs these commands.

``main(argv, load_config)`` runs the same commands on their own (with a
``--config`` option), which is how the tests drive them.

A command that writes (``tick``, ``meter``, ``finalize``) takes ``--now``
in the past, but in the future of this machine's clock only with
``--dry-run``: a tick dated next month would meter this month before it has
ended and let it be finalized. ``--dry-run`` runs the command on a copy of
the ledger in memory and prints what it would do; the file is not written.

Exit status: 0 done; 1 a month failed (``tick``: the report says which,
stderr says why); 2 the command was refused or could not be done (one line
on stderr says why and what would be right; a malformed month or timestamp
shows the expected form); 130 stopped by Ctrl-C between months.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from ledger.metering import meter_month
from ledger.identity import IdentityMismatch
from ledger.periods import INSTANT_FORM, MONTH_FORM, Month, PeriodError, iso, parse_instant, parse_month
from ledger.runs import Periods
from ledger.schema import NewerSchemaError, NotALedgerError
from ledger.settings import LedgerSettings, embedded_ledger_path, ledger_path
from ledger.statements import statement, write_csv, write_json
from ledger.store import Ledger, LedgerError
from ledger.tick import AlreadyMetered, MonthBusy, Options, Report, RunFailed, finalize_refusal, tick
from runtime.cli import Parser, print_error
from runtime.key_material import looks_like_key, shown

__all__ = ["add_commands", "main", "format_report", "open_ledger", "command_time"]

LoadConfig = Callable[[Any], Any]
#: A command: its arguments, the ledger, the configuration and the time it runs at.
Handler = Callable[[argparse.Namespace, Ledger, Any, datetime], int]


def _month_arg(text: str) -> Month:
    try:
        return parse_month(text)
    except PeriodError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _instant_arg(text: str) -> datetime:
    try:
        return parse_instant(text)
    except PeriodError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _reason_arg(text: str) -> str:
    reason = text.strip()
    if not reason:
        raise argparse.ArgumentTypeError("expected a reason, e.g. \"books reviewed, tenant asked for the invoice\"")
    if looks_like_key(reason) or not reason.isprintable() or len(reason.encode()) > 256:
        raise argparse.ArgumentTypeError(
            f"expected one line of printable text of at most 256 bytes (and no key), got {shown(reason)}"
        )
    return reason


def add_commands(subparsers: Any, load_config: LoadConfig) -> None:
    """Add the ledger's subcommands to ``subparsers`` (from ``parser.add_subparsers()``)."""

    def command(name: str, help: str, handler: Handler) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help, description=help)
        p.set_defaults(func=lambda args: _run(handler, args, load_config))
        return p

    def writes(p: argparse.ArgumentParser, now_help: str) -> None:
        p.add_argument("--now", type=_instant_arg, metavar="ISO-8601", help=now_help)
        p.add_argument("--dry-run", action="store_true",
                       help="do it on a copy of the ledger in memory and print what it would do; nothing is "
                            "written (needed for a --now after this machine's clock)")

    p = command("tick", "walk the billing months that have ended and move each one step", _tick)
    writes(p, f"the time to tick at ({INSTANT_FORM}); default: now; later than now only with --dry-run")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")

    p = command("meter", "meter one billing month now (writes its period row if missing)", _meter)
    p.add_argument("--period", type=_month_arg, required=True, metavar="YYYY-MM", help=f"the month ({MONTH_FORM})")
    writes(p, argparse.SUPPRESS)

    command("periods", "list the stored billing months, their status and latest run", _periods)

    p = command("finalize", "finalize a month over its latest completed run; it never changes again", _finalize)
    p.add_argument("--period", type=_month_arg, required=True, metavar="YYYY-MM", help=f"the month ({MONTH_FORM})")
    p.add_argument("--force", type=_reason_arg, metavar="REASON",
                   help="finalize a month that has ended before its grace window has passed; the reason is kept "
                        "in the ledger (at most 256 bytes of printable text)")
    writes(p, argparse.SUPPRESS)

    p = command("statement", "print a month's statement per tenant (the month under way: its figures so far, "
                             "marked provisional)", _statement)
    p.add_argument("--period", type=_month_arg, metavar="YYYY-MM",
                   help=f"the month ({MONTH_FORM}); default: the month under way")
    p.add_argument("--tenant", metavar="ADDR", help="only this tenant (manifest1...)")
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="output format (default csv)")


def open_ledger(config: Any) -> Ledger:
    """The ledger the sidecar of this configuration writes.

    An embedded chain (``model``, ``devnet``) keeps its books in a file of its
    own beside ``[ledger] path`` (``embedded_ledger_path``), so the commands
    read that one in those modes.
    """
    settings: LedgerSettings = config.ledger
    path = ledger_path(settings)
    if path is None:
        raise LedgerError("[ledger] path is empty: no ledger is kept, so there is nothing to bill")
    if config.chain.mode in ("model", "devnet"):
        path = embedded_ledger_path(path)
    # No key is loaded here: the chain and the provider are compared, the signer is not.
    return Ledger.open(
        path, config.provider.uuid, synchronous=settings.synchronous, chain_id=config.chain.chain_id, create=False
    )


def _run(handler: Handler, args: argparse.Namespace, load_config: LoadConfig) -> int:
    dry_run = getattr(args, "dry_run", False)
    try:
        # The edge of the program: the one place the wall clock is read.
        now = command_time(getattr(args, "now", None), datetime.now(timezone.utc), dry_run)
        config = load_config(getattr(args, "config", None))
        ledger = open_ledger(config)
    except (LedgerError, NewerSchemaError, NotALedgerError, IdentityMismatch, ValueError) as exc:
        return print_error(exc)
    path = ledger.path
    if dry_run:
        ledger = ledger.copied_into_memory()
    try:
        return handler(args, ledger, config, now)
    except (LedgerError, MonthBusy, AlreadyMetered, RunFailed) as exc:
        return print_error(exc)
    finally:
        ledger.close()
        if dry_run:
            print(f"dry run at {iso(now)}: nothing was written to {path}", file=sys.stderr)


def command_time(asked: datetime | None, wall: datetime, dry_run: bool) -> datetime:
    """The time a command runs at: ``--now`` (``asked``) or the wall clock.

    A ``--now`` after the wall clock is refused unless nothing is written.
    """
    if asked is None:
        return wall
    if asked > wall and not dry_run:
        raise LedgerError(
            f"--now {iso(asked)} is after this machine's clock ({iso(wall.replace(microsecond=0))}): at that time "
            f"months that have not ended yet would be billed; add --dry-run to see what it would do (nothing is written)"
        )
    return asked


_COLUMNS = ("month", "status", "transition", "run", "finalized", "held leases", "retry after", "failures", "skipped before",
            "warning", "error")


def format_report(report: Report) -> str:
    """The tick report as an aligned text table."""
    rows = [
        (
            m.month,
            m.status,
            m.transition,
            m.run_id,
            "yes" if m.finalized else "",
            str(m.held or ""),
            iso(m.retry_after),
            str(m.failures or ""),
            str(m.skipped_before or ""),
            m.warning,
            m.error,
        )
        for m in report
    ]
    # Drop columns empty in every row (keep month and status), so the table fits.
    keep = [i for i in range(len(_COLUMNS)) if i < 2 or any(r[i] for r in rows)]
    widths = {i: max(len(_COLUMNS[i]), *(len(r[i]) for r in rows)) if rows else len(_COLUMNS[i]) for i in keep}
    lines = ["  ".join(_COLUMNS[i].ljust(widths[i]) for i in keep).rstrip()]
    for r in rows:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in keep).rstrip())
    if not rows:
        lines.append("(no month to walk: none has ended since the first fact of the books)")
    if report.stopped:
        lines.append("stopped before every month was walked")
    return "\n".join(lines)


def _tick(args: argparse.Namespace, ledger: Ledger, config: Any, now: datetime) -> int:
    settings: LedgerSettings = config.ledger
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        options = Options(
            grace_hours=settings.grace_hours,
            auto_finalize=settings.auto_finalize,
            execute=lambda month, at: meter_month(ledger, month, at, only_if_unmetered=True),
        )
        report = tick(Periods(ledger), now, options, stop)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if args.json:
        print(json.dumps({"now": iso(now), **report.as_dict()}, indent=2))
    else:
        print(f"tick at {iso(now)}")
        print(format_report(report))
    if report.failed:
        print_error(report.error)
        return 1
    return 130 if report.stopped else 0


def _meter(args: argparse.Namespace, ledger: Ledger, config: Any, now: datetime) -> int:
    result = meter_month(ledger, args.period, now)
    print(f"metered {args.period}: run {result.run_id}, {result.leases} leases, {result.tenants} tenants")
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)
    early = finalize_refusal(args.period, now, _grace(config))
    if early:
        print(f"warning: {early}; meter it again after that to bill them", file=sys.stderr)
    return 0


def _grace(config: Any) -> timedelta:
    return timedelta(hours=config.ledger.grace_hours)


def _periods(args: argparse.Namespace, ledger: Ledger, config: Any, now: datetime) -> int:
    rows = [("month", "status", "runs", "latest run", "latest status", "at", "held back", "error", "note")]
    periods = Periods(ledger)
    held: list[tuple[str, str, str, str]] = []
    for p in periods.list():
        latest = p.latest_run
        forced = periods.forced_reason(parse_month(p.period)) if p.status == "finalized" else ""
        run_held = _held(ledger, latest.id) if latest is not None and latest.status in ("completed", "finalized") else []
        held += [(p.period, lease, tenant, why) for lease, tenant, why in run_held]
        rows.append(
            (
                p.period,
                p.status,
                str(p.runs),
                latest.id if latest else "",
                latest.status if latest else "",
                iso(latest.completed or latest.started) if latest else "",
                f"{len(run_held)} lease(s)" if run_held else "",
                latest.error if latest else "",
                f"finalized before its grace had passed: {forced}" if forced else "",
            )
        )
    if len(rows) == 1:
        print("no billing period stored yet (the first tick after a month ends writes one)")
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    _print_lease_notes(held, ledger.lease_issues())
    _print_open_lookups(ledger)
    return 0


def _print_open_lookups(ledger: Ledger) -> None:
    """The txs signed whose outcome the books do not hold yet: being looked up, or unreadable."""
    withdraws, closes = ledger.withdraw_lookups(), ledger.close_lookups()
    if not withdraws and not closes:
        return
    print()
    print("txs whose outcome is not in the books yet (looked up while the sidecar runs, and at each start):")
    for w in withdraws:
        print(f"  withdraw tx {w.tx_hash} (cycle {w.cycle}, page {w.page}), signed {iso(w.at)}")
    for c in closes:
        leases = sum(len(u) for _, u in c.by_tenant)
        print(f"  close tx {c.tx_hash} ({leases} lease(s) of {len(c.by_tenant)} tenant(s)), signed {iso(c.at)}")


def _held(ledger: Ledger, run_id: str) -> list[tuple[str, str, str]]:
    with ledger.read() as c:
        return c.execute(
            "SELECT lease_uuid, tenant, reason FROM run_held_leases WHERE run_id = ? ORDER BY lease_uuid", (run_id,)
        ).fetchall()


#: How each kind of lease issue reads in ``periods``.
_ISSUE_WORDS = {
    "unread": "cannot be read from the chain (read again with backoff; only its own billing waits)",
    "close_not_found": "ended while unheard, and the node's tx search finds no tx that ended it (or one that names no amount for it): its last settlement is not in the books",
    "no_tx_index": "ended while unheard, and the node keeps no tx index: its last settlement is not in the books",
    "close_sought": "ended; the tx that ended it is being looked for (again at the next start): its last settlement is not in the books yet",
    "settlement_refused": "a settlement was refused (more than it could have accrued, or negative)",
}


def _print_lease_notes(held: list[tuple[str, str, str, str]], issues: list[Any]) -> None:
    """Per lease, what the books lack of it: held back from a metered month, or an open issue."""
    if not held and not issues:
        return
    print()
    print("leases the books cannot say everything of:")
    for period, lease, tenant, why in held:
        print(f"  {period}  lease {lease} of {tenant or '?'}: held back from the month's run ({why})")
    for i in issues:
        print(f"  {i.period}  lease {i.lease_uuid} of {i.tenant or '?'}: {_ISSUE_WORDS.get(i.kind, i.kind)}; "
              f"since {iso(i.since)}: {i.detail}")


def _finalize(args: argparse.Namespace, ledger: Ledger, config: Any, now: datetime) -> int:
    month = args.period
    refusal = finalize_refusal(month, now, _grace(config))
    if refusal and now < month.end:
        raise LedgerError(f"{refusal}; it can be finalized once it has ended and been metered")
    if refusal and not args.force:
        raise LedgerError(
            f"{refusal}; finalize it after that, or now with --force REASON (the reason is kept in the ledger)"
        )
    forced = args.force if refusal else ""
    run_id = Periods(ledger).finalize(month, now, forced_reason=forced)
    print(f"finalized {month} over run {run_id}" + (f", before its grace had passed: {forced}" if forced else ""))
    if args.force and not refusal:
        print(f"note: {month}'s grace window had passed: --force was not needed, no reason kept", file=sys.stderr)
    return 0


def _statement(args: argparse.Namespace, ledger: Ledger, config: Any, now: datetime) -> int:
    writer = write_json if args.format == "json" else write_csv
    month = args.period or Month.of(now)
    st = statement(ledger, month, now, args.tenant)  # refuses before anything is written
    writer(st, sys.stdout)
    until = st.provisional_until
    if until is not None:
        print(
            f"provisional: {month} has not ended; its figures up to {iso(until.replace(microsecond=0))}, metered by "
            f"no run (the tick meters it once it has ended and its grace has passed)",
            file=sys.stderr,
        )
    return 0


def main(argv: Sequence[str], load_config: LoadConfig) -> int:
    """``[--config FILE] COMMAND ...`` with the given loader: the commands without the rest of ``run.py``."""
    parser = Parser(prog="ledger", description="leasewarden ledger commands")
    parser.add_argument("--config", metavar="FILE", help="config.toml to read (default: built-in defaults)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_commands(sub, load_config)
    args = parser.parse_args(argv)
    return args.func(args)
