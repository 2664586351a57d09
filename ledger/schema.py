"""The ledger's SQLite schema, its version, and the migrations between versions.

Every change to the schema is a new migration appended to ``MIGRATIONS``; a
shipped migration never changes, so a database is at version N exactly when
migrations 1..N have run on it. The pending migrations run in one
transaction together with the rows that record them in ``schema_version``,
so a crash mid-migration leaves the database at the version it had, never
between two (and a new ledger costs one commit, not one per migration).

A database written by a newer build (a version this build has no migration
for) is refused with an error naming the file and both versions: reading
tables whose meaning changed would bill the wrong amounts.

Conventions of the tables:

- instants are ``*_us`` integers, microseconds since the epoch (``periods.to_us``);
- amounts are decimal text: a Cosmos ``Int`` is 256-bit and SQLite's integers
  are 64-bit, so an amount is never stored where it could overflow or round;
- facts from the chain are deduplicated by a natural key, so recording the
  same fact twice (a replayed capture, a websocket event seen again after a
  reconcile) changes nothing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = [
    "Migration",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "NewerSchemaError",
    "NotALedgerError",
    "current_version",
    "migrate",
]


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]
    #: The migration rebuilds a table that a foreign key points at (SQLite
    #: cannot change a CHECK in place): it runs with foreign keys off, SQLite's
    #: own procedure for that, and checks every key before it commits.
    rebuilds: bool = False


_V1 = (
    # -- what the chain told us -------------------------------------------------
    # One row per lease of this provider. active_from_us is the chain's
    # acknowledged_at (accrual starts there); closed_at_us where it ended.
    # *_rank says how good a time is (see store.Precision): a better source
    # overwrites a worse one, never the reverse.
    """
    CREATE TABLE leases (
        uuid TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        provider_uuid TEXT NOT NULL,
        items TEXT NOT NULL DEFAULT '[]',
        priced INTEGER NOT NULL DEFAULT 0,
        active_from_us INTEGER,
        active_from_rank INTEGER NOT NULL DEFAULT 0,
        closed_at_us INTEGER,
        closed_at_rank INTEGER NOT NULL DEFAULT 0,
        closure_reason TEXT NOT NULL DEFAULT '',
        first_seen_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    "CREATE INDEX leases_tenant ON leases (tenant)",
    # Each kind of lease event happens at most once per lease on chain
    # (created, acknowledged, then one of closed/expired/auto_closed), so
    # (kind, lease_uuid) is the event's natural key: the same event arriving
    # twice (a replay, a resubscribe) is the same row, whatever its arrival time.
    """
    CREATE TABLE lease_events (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        lease_uuid TEXT NOT NULL,
        tenant TEXT NOT NULL,
        provider_uuid TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        height INTEGER NOT NULL DEFAULT 0,
        at_us INTEGER NOT NULL,
        UNIQUE (kind, lease_uuid)
    )
    """,
    # What one settlement moved to us from one lease, per denom. A lease is
    # settled at most once per transaction: (tx_hash, lease_uuid, denom) is
    # the natural key. The table is clustered by (period, lease, denom), where
    # period is YYYY-MM of at_us, so a month's settlements are one range of
    # the table in lease order: metering sums them per lease in SQLite
    # without a sort or an index lookup per row.
    """
    CREATE TABLE settlements (
        period TEXT NOT NULL,
        lease_uuid TEXT NOT NULL,
        denom TEXT NOT NULL,
        tx_hash TEXT NOT NULL,
        amount TEXT NOT NULL,
        kind TEXT NOT NULL,
        tenant TEXT NOT NULL DEFAULT '',
        at_us INTEGER NOT NULL,
        PRIMARY KEY (period, lease_uuid, denom, tx_hash),
        UNIQUE (tx_hash, lease_uuid, denom)
    ) WITHOUT ROWID
    """,
    # Provider-wide MsgWithdraw pages, one row per transaction.
    """
    CREATE TABLE withdrawals (
        tx_hash TEXT PRIMARY KEY,
        cycle INTEGER NOT NULL,
        page INTEGER NOT NULL,
        amounts TEXT NOT NULL,
        withdrawal_count INTEGER NOT NULL,
        at_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    # Closures we sent (MsgCloseLease). ``key`` is a hash of the whole record.
    """
    CREATE TABLE closures (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        at_us INTEGER NOT NULL,
        tenant TEXT NOT NULL,
        lease_uuids TEXT NOT NULL,
        reason TEXT NOT NULL,
        tx_hashes TEXT NOT NULL
    )
    """,
    # What each tenant actor learned (messages.credit.TenantSnapshot, msgpack).
    """
    CREATE TABLE tenant_state (
        tenant TEXT PRIMARY KEY,
        snapshot BLOB NOT NULL,
        updated_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    # -- closing the books ------------------------------------------------------
    """
    CREATE TABLE billing_periods (
        period TEXT PRIMARY KEY,
        period_from_us INTEGER NOT NULL,
        period_to_us INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('open', 'grace', 'finalized')),
        finalized_run TEXT,
        created_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    # seq orders a month's runs (two runs of one tick share the same ``now``).
    """
    CREATE TABLE runs (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        period TEXT NOT NULL REFERENCES billing_periods (period),
        status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'finalized')),
        started_us INTEGER NOT NULL,
        completed_us INTEGER,
        error TEXT NOT NULL DEFAULT '',
        owner TEXT NOT NULL DEFAULT '',
        leases INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX runs_period ON runs (period, seq)",
    # Who is metering a month right now: at most one row per month. The owner
    # is host + pid + a per-process token; heartbeat is wall-clock seconds,
    # refreshed as the run commits its lines (see runs.LOCK_TTL).
    """
    CREATE TABLE run_locks (
        period TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        token TEXT NOT NULL,
        heartbeat REAL NOT NULL
    ) WITHOUT ROWID
    """,
    # One row per lease per denom. The key puts a run's lines in tenant order,
    # so per-tenant totals and statements stream out of the index.
    """
    CREATE TABLE statement_lines (
        run_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        lease_uuid TEXT NOT NULL,
        denom TEXT NOT NULL,
        seconds INTEGER NOT NULL,
        accrued TEXT NOT NULL,
        withdrawn TEXT NOT NULL,
        PRIMARY KEY (run_id, tenant, lease_uuid, denom)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE statement_totals (
        run_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        denom TEXT NOT NULL,
        leases INTEGER NOT NULL,
        accrued TEXT NOT NULL,
        withdrawn TEXT NOT NULL,
        difference TEXT NOT NULL,
        PRIMARY KEY (run_id, tenant, denom)
    ) WITHOUT ROWID
    """,
)

_V2 = (
    # Withdraw txs of unknown outcome being looked up (actors/withdraw_lookup.py),
    # so that a restart goes on looking: what such a tx withdrew reaches the
    # books only through its lookup.
    """
    CREATE TABLE withdraw_lookups (
        tx_hash TEXT PRIMARY KEY,
        cycle INTEGER NOT NULL,
        page INTEGER NOT NULL,
        opened_at_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
)

_V3 = (
    # ``metered`` becomes a status of its own (open -> grace -> metered ->
    # finalized), so that ``periods`` shows what the tick did; a month that
    # already has a completed run is metered.
    """
    CREATE TABLE billing_periods_v3 (
        period TEXT PRIMARY KEY,
        period_from_us INTEGER NOT NULL,
        period_to_us INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('open', 'grace', 'metered', 'finalized')),
        finalized_run TEXT,
        created_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
    "INSERT INTO billing_periods_v3 SELECT period, period_from_us, period_to_us, status, finalized_run, created_us, "
    "updated_us FROM billing_periods",
    "DROP TABLE billing_periods",
    "ALTER TABLE billing_periods_v3 RENAME TO billing_periods",
    "UPDATE billing_periods SET status = 'metered' WHERE status IN ('open', 'grace') AND EXISTS "
    "(SELECT 1 FROM runs WHERE runs.period = billing_periods.period AND runs.status = 'completed')",
)

_V4 = (
    # Whose books these are (ledger/identity.py): one row, written at the
    # first sidecar start, compared at every later one.
    """
    CREATE TABLE ledger_identity (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        chain_id TEXT NOT NULL,
        provider_uuid TEXT NOT NULL,
        signer TEXT NOT NULL,
        created_us INTEGER NOT NULL
    )
    """,
)

_V5 = (
    # A month finalized before its grace window had passed (run.py finalize
    # --force): the operator's reason, when, and by which process.
    """
    CREATE TABLE forced_finalizations (
        period TEXT PRIMARY KEY REFERENCES billing_periods (period),
        reason TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        owner TEXT NOT NULL
    ) WITHOUT ROWID
    """,
)

_V6 = (
    # 1 for a lease of a chain that drops the fraction of a second at every
    # settlement (v2.1.0: its leases carry no reservation field), 0 for one
    # that carries it (the current chain): the month's accrual is counted
    # the way that chain counts it (ledger.metering).
    "ALTER TABLE leases ADD COLUMN settles_whole_seconds INTEGER NOT NULL DEFAULT 0",
    # The instants a lease was settled at, for those leases.
    "CREATE INDEX settlements_lease_at ON settlements (lease_uuid, at_us)",
)

_V7 = (
    # Close txs written ahead (actors/close_lookup.py): signed and awaiting
    # their answer, or of unknown outcome and being looked up. by_tenant is
    # JSON [[tenant, [lease uuid, ...]], ...]: whose leases the tx closes,
    # so that a restart books each tenant's closure as the answer would have.
    """
    CREATE TABLE close_lookups (
        tx_hash TEXT PRIMARY KEY,
        reason TEXT NOT NULL,
        by_tenant TEXT NOT NULL,
        opened_at_us INTEGER NOT NULL
    ) WITHOUT ROWID
    """,
)

_V8 = (
    # What the books cannot yet say of a lease (messages.ledger.LeaseIssue):
    # a lease that cannot be read, a close found after the fact whose tx the
    # node cannot find or search, a settlement refused. period is YYYY-MM of
    # the instant it is about, for run.py periods; since_us is when it was
    # first seen (a repeat updates detail and updated_us only).
    """
    CREATE TABLE lease_issues (
        lease_uuid TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('unread', 'close_not_found', 'no_tx_index', 'settlement_refused')),
        tenant TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        since_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        PRIMARY KEY (lease_uuid, kind)
    ) WITHOUT ROWID
    """,
)

_V9 = (
    # Leases a run left out of its month, and why (ledger.metering): one the
    # books cannot price (never read from the chain) holds back only itself,
    # and the statement says so.
    """
    CREATE TABLE run_held_leases (
        run_id TEXT NOT NULL,
        lease_uuid TEXT NOT NULL,
        tenant TEXT NOT NULL DEFAULT '',
        reason TEXT NOT NULL,
        PRIMARY KEY (run_id, lease_uuid)
    ) WITHOUT ROWID
    """,
)

_V10 = (
    # A lease may also be ``close_sought``: it ended and the search for its
    # closing tx has not finished (actors/close_search.py), written ahead so
    # that a restart searches again. SQLite cannot change a CHECK: the table
    # is copied into one that allows it (no key points at it).
    """
    CREATE TABLE lease_issues_v10 (
        lease_uuid TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('unread', 'close_not_found', 'no_tx_index', 'settlement_refused',
                                           'close_sought')),
        tenant TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        since_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        PRIMARY KEY (lease_uuid, kind)
    ) WITHOUT ROWID
    """,
    "INSERT INTO lease_issues_v10 SELECT lease_uuid, kind, tenant, period, detail, since_us, updated_us FROM lease_issues",
    "DROP TABLE lease_issues",
    "ALTER TABLE lease_issues_v10 RENAME TO lease_issues",
)

_V11 = (
    # A settlement refused is noted under the month of its settlement: a lease refused in
    # March and again in April has a row in each (keyed by period too), so neither month's
    # statement loses its own or shows the other's. The other kinds keep one row per lease.
    """
    CREATE TABLE lease_issues_v11 (
        lease_uuid TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('unread', 'close_not_found', 'no_tx_index', 'settlement_refused',
                                           'close_sought')),
        tenant TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        since_us INTEGER NOT NULL,
        updated_us INTEGER NOT NULL,
        PRIMARY KEY (lease_uuid, kind, period)
    ) WITHOUT ROWID
    """,
    "INSERT INTO lease_issues_v11 SELECT lease_uuid, kind, tenant, period, detail, since_us, updated_us FROM lease_issues",
    "DROP TABLE lease_issues",
    "ALTER TABLE lease_issues_v11 RENAME TO lease_issues",
)

#: Every migration, in order. Append only.
_V12 = (
    # A lease of v2.1.0 (settles_whole_seconds = 1) read again after the chain's upgrade (its read
    # carries field 16): the time of that read. Its settlements before it dropped their fraction of a
    # second, those after it carry it (ledger.metering); NULL while it is only known from v2.1.0.
    "ALTER TABLE leases ADD COLUMN whole_seconds_until_us INTEGER",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "leases, events, settlements, withdrawals, closures, tenant state, periods, runs, statements", _V1),
    Migration(2, "withdraw txs of unknown outcome being looked up", _V2),
    Migration(3, "a billing period's status may be metered", _V3, rebuilds=True),
    Migration(4, "the chain, provider and signer whose books these are", _V4),
    Migration(5, "the reasons of months finalized before their grace had passed", _V5),
    Migration(6, "leases of a chain that drops the fraction of a second at each settlement", _V6),
    Migration(7, "close txs written ahead of their broadcast, looked up after a restart", _V7),
    Migration(8, "what the books cannot yet say of a lease: unread, its close not found or not searchable", _V8),
    Migration(9, "the leases a run held back from its month, and why", _V9),
    Migration(10, "a lease whose closing tx is still being looked for", _V10),
    Migration(11, "a settlement refused noted under its own month, each refusal kept", _V11),
    Migration(12, "when a lease first read from v2.1.0 was first read from the current chain", _V12),
)

#: The version this build writes.
SCHEMA_VERSION = MIGRATIONS[-1].version


class NewerSchemaError(RuntimeError):
    """The database was written by a newer build than this one."""

    def __init__(self, path: str, found: int, known: int) -> None:
        super().__init__(
            f"{path}: ledger schema version {found} is newer than version {known}, the newest this "
            f"build knows; run a leasewarden at least as new as the one that wrote it, or point "
            f"[ledger] path at another file"
        )
        self.path = path
        self.found = found
        self.known = known


class NotALedgerError(RuntimeError):
    """The file is not a SQLite database, or not one this program wrote."""


def current_version(conn: sqlite3.Connection) -> int:
    """The version recorded in the database; 0 for an empty one."""
    has = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not has:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(
    conn: sqlite3.Connection,
    path: str,
    now_text: Callable[[], str],
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Bring the database at ``conn`` to the newest version in ``migrations``.

    ``conn`` must be in autocommit mode (``isolation_level=None``): each
    migration is its own ``BEGIN IMMEDIATE`` transaction. Returns the version
    the database is at afterwards.
    """
    try:
        tables = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    except sqlite3.DatabaseError as exc:
        raise NotALedgerError(f"{path}: not a SQLite database ({exc})") from None
    if tables and "schema_version" not in tables:
        raise NotALedgerError(
            f"{path}: a SQLite database without a schema_version table is not a leasewarden ledger "
            f"(tables: {', '.join(sorted(tables)[:5])})"
        )
    known = migrations[-1].version if migrations else 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        found = current_version(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a Ctrl-C just after COMMIT has nothing to roll back
            conn.execute("ROLLBACK")
        raise
    if found > known:
        raise NewerSchemaError(path, found, known)
    pending = [m for m in migrations if m.version > found]
    if not pending:
        return found
    rebuilds = any(m.rebuilds for m in pending)
    keys_on = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    if rebuilds:
        conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: before BEGIN
    try:
        _apply(conn, pending, path, now_text)
    finally:
        if rebuilds and keys_on:
            conn.execute("PRAGMA foreign_keys = ON")
    return current_version(conn)


def _apply(conn: sqlite3.Connection, pending: list[Migration], path: str, now_text: Callable[[], str]) -> None:
    """The pending migrations in one transaction: one commit (one fsync) however many there are."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for migration in pending:
            # Another process may have migrated while we waited for the lock.
            if current_version(conn) >= migration.version:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            if migration.rebuilds:
                broken = conn.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise NotALedgerError(
                        f"{path}: migration {migration.version} would break {len(broken)} reference(s), e.g. "
                        f"{broken[0][0]} row {broken[0][1]} -> {broken[0][2]}; the ledger is left at version "
                        f"{pending[0].version - 1}"
                    )
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, now_text()),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a Ctrl-C just after COMMIT has nothing to roll back
            conn.execute("ROLLBACK")
        raise
