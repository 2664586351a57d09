"""The ledger: one SQLite file holding what the chain told the sidecar.

``Ledger`` opens (and migrates) the database and records each fact of
``messages/ledger.py``: the provider's leases with their price and the times
they were active, lease events, per-lease settlements, withdrawal pages, our
closures, and each tenant actor's persisted state. Billing months, runs and
statements are kept in the same file (``ledger.runs``, ``ledger.metering``).

One writer: inside the sidecar only the ``LedgerActor`` writes, on a thread
of its own. The CLI (``run.py meter`` and friends) may write from another
process; SQLite serialises writers (``BEGIN IMMEDIATE`` with a busy timeout)
and WAL mode lets readers go on while one writes.

Times of a lease come from several sources of different quality, and the
best one wins whatever order they arrive in (``Precision``): a statement must
match the chain's accrual to the second, so the chain's own
``acknowledged_at``/``closed_at`` always overwrite the times at which a
closure was recorded (or, in older ledgers, an event), and never the
reverse. A read that finds the lease ACTIVE after an end it was only
guessed to have (missing from a listing, or, in older ledgers, an event's)
reopens it: only the chain's own ``closed_at``, or our own close tx's
answer, ends a lease for good.
Lease events are hints (``_event``): nothing of the books comes from one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import IntEnum
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import sqlite_utils

from ledger.periods import Month, from_us, iso, to_us
from ledger.identity import LedgerIdentity, check_identity
from ledger.schema import MIGRATIONS, Migration, NotALedgerError, migrate
from ledger.settlement_bounds import refusal
from messages.chain import Lease
from messages.codec import CodecError, decode, encode
from messages.credit import TenantSnapshot
from messages.lease_events import LeaseEvent
from messages.ledger import (
    LeaseIssue,
    LeaseIssueResolved,
    CloseLookupClosed,
    CloseLookupOpened,
    ClosureRecorded,
    LeaseEventRecorded,
    LeaseObserved,
    LeasesObserved,
    LeasesReconciled,
    LeaseSettled,
    SettlementsRecorded,
    TenantForgotten,
    TenantStateChanged,
    WithdrawalRecorded,
    WithdrawLookupClosed,
    WithdrawLookupOpened,
)

__all__ = ["Ledger", "Precision", "LedgerError", "FACT_TYPES", "Issue"]

logger = logging.getLogger(__name__)

#: How long a write waits for another process's write to finish before it
#: fails. Metering a month commits in batches well under a second each, so a
#: wait this long only runs out when another process is stuck holding the lock.
BUSY_TIMEOUT_S = 30.0

_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}

#: A lease issue's detail is cut here: a tx's events are untrusted text, and a lease refused
#: at every withdraw must not grow its month's row without bound.
ISSUE_DETAIL_CHARS = 1000

#: The ``LeaseIssue.kind`` of a settlement the books would not take (``_settled``).
SETTLEMENT_REFUSED = "settlement_refused"

#: Lease states after which a lease no longer accrues.
_ENDED_STATES = ("CLOSED", "EXPIRED", "REJECTED")


class LedgerError(RuntimeError):
    """A ledger operation that cannot be done; the message says why and what to do."""


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on an autocommit connection (before the ``Ledger`` around it exists)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@dataclass(frozen=True)
class Issue:
    """One lease the books cannot yet say everything of (``messages.ledger.LeaseIssue``)."""

    lease_uuid: str
    kind: str
    tenant: str
    period: str
    detail: str
    since: datetime
    updated: datetime


class Precision(IntEnum):
    """How good a lease's start or end time is. A better one overwrites a worse one."""

    NONE = 0
    #: The lease was missing from a reconcile read at this time: it closed
    #: somewhere before (bills at most one reconcile interval too much).
    RECONCILE = 1
    #: When the chain actor saw our MsgCloseLease included.
    CLOSURE = 2
    #: When the listener recorded the lease event (seconds after the block).
    #: Only ledgers of older builds hold these: an event is a hint now, and
    #: books nothing (``Ledger._event``).
    EVENT = 3
    #: The chain's own Lease.acknowledged_at / closed_at.
    CHAIN = 4


#: Every message the ledger records (BillingTickDue is the actor's, not a fact).
FACT_TYPES = (
    LeasesObserved,
    LeasesReconciled,
    LeaseObserved,
    LeaseEventRecorded,
    LeaseSettled,
    SettlementsRecorded,
    WithdrawalRecorded,
    ClosureRecorded,
    TenantStateChanged,
    TenantForgotten,
    WithdrawLookupOpened,
    WithdrawLookupClosed,
    CloseLookupOpened,
    CloseLookupClosed,
    LeaseIssue,
    LeaseIssueResolved,
)

_UPSERT_LEASE = """
INSERT INTO leases (uuid, tenant, provider_uuid, items, priced, active_from_us, active_from_rank,
                    closed_at_us, closed_at_rank, closure_reason, first_seen_us, updated_us, settles_whole_seconds)
VALUES (:uuid, :tenant, :provider, :items, 1, :af, :af_rank, :ca, :ca_rank, :reason, :at, :at, :whole)
ON CONFLICT (uuid) DO UPDATE SET
    tenant = excluded.tenant,
    items = excluded.items,
    -- The rule a lease's settlements followed is the first read's (a row no read made takes the
    -- read's); a v2.1.0 lease read from the current chain, upgraded, keeps it for its settlements
    -- until then (whole_seconds_until_us). The chain never goes back: a later read without field
    -- 16 (a node that lags behind the upgrade) changes neither.
    settles_whole_seconds = CASE WHEN leases.priced = 0 THEN excluded.settles_whole_seconds
                                 ELSE leases.settles_whole_seconds END,
    whole_seconds_until_us = CASE
        WHEN leases.priced = 1 AND leases.settles_whole_seconds = 1 AND excluded.settles_whole_seconds = 0
        THEN COALESCE(leases.whole_seconds_until_us, excluded.updated_us)
        ELSE leases.whole_seconds_until_us END,
    priced = 1,
    active_from_us = CASE WHEN excluded.active_from_us IS NOT NULL
                          AND excluded.active_from_rank >= leases.active_from_rank
                     THEN excluded.active_from_us ELSE leases.active_from_us END,
    active_from_rank = CASE WHEN excluded.active_from_us IS NOT NULL
                            AND excluded.active_from_rank >= leases.active_from_rank
                       THEN excluded.active_from_rank ELSE leases.active_from_rank END,
    closed_at_us = CASE
        WHEN excluded.closed_at_us IS NOT NULL THEN excluded.closed_at_us
        WHEN :reopen AND leases.closed_at_rank IN (1, 3) AND excluded.updated_us > leases.closed_at_us THEN NULL
        ELSE leases.closed_at_us END,
    closure_reason = CASE
        WHEN excluded.closed_at_us IS NOT NULL THEN excluded.closure_reason
        WHEN :reopen AND leases.closed_at_rank IN (1, 3) AND excluded.updated_us > leases.closed_at_us THEN ''
        ELSE leases.closure_reason END,
    closed_at_rank = CASE
        WHEN excluded.closed_at_us IS NOT NULL THEN excluded.closed_at_rank
        WHEN :reopen AND leases.closed_at_rank IN (1, 3) AND excluded.updated_us > leases.closed_at_us THEN 0
        ELSE leases.closed_at_rank END,
    updated_us = MAX(leases.updated_us, excluded.updated_us)
"""

_CLOSE_LEASE = """
INSERT INTO leases (uuid, tenant, provider_uuid, closed_at_us, closed_at_rank, closure_reason,
                    first_seen_us, updated_us)
VALUES (:uuid, :tenant, :provider, :at, :rank, :reason, :at, :at)
ON CONFLICT (uuid) DO UPDATE SET
    closed_at_us = CASE WHEN leases.closed_at_rank < :rank THEN :at ELSE leases.closed_at_us END,
    closure_reason = CASE WHEN leases.closed_at_rank < :rank THEN :reason ELSE leases.closure_reason END,
    closed_at_rank = MAX(leases.closed_at_rank, :rank),
    updated_us = MAX(leases.updated_us, :at)
"""

def _items_json(lease: Lease) -> str:
    return json.dumps(
        [[i.sku_uuid, i.quantity, i.locked_price.denom, str(i.locked_price.amount)] for i in lease.items],
        separators=(",", ":"),
    )


def rate_of_items(items_json: str) -> dict[str, int]:
    """Per-denom accrual per second of a lease: the sum of locked price x quantity."""
    rate: dict[str, int] = {}
    for _sku, quantity, denom, price in json.loads(items_json):
        rate[denom] = rate.get(denom, 0) + int(price) * int(quantity)
    return rate


class Ledger:
    """The ledger database of one provider. Thread-safe; one transaction at a time."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        provider_uuid: str,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self.path = path
        self.provider_uuid = provider_uuid
        #: Wall-clock seconds, for run-lock heartbeats only (which process is
        #: alive is a question about real time, not about the billing clock).
        self.wall = wall
        #: This Ledger object's identity in run locks.
        self.token = os.urandom(8).hex()
        self._lock = threading.RLock()
        self._handlers: dict[type, Callable[[Any], None]] = {
            LeasesObserved: self._leases_observed,
            LeasesReconciled: self._leases_reconciled,
            LeaseObserved: self._lease_observed,
            LeaseEventRecorded: self._event,
            LeaseSettled: self._settled,
            SettlementsRecorded: self._settlements,
            WithdrawalRecorded: self._withdrawal,
            ClosureRecorded: self._closure,
            TenantStateChanged: self._tenant_state,
            TenantForgotten: self._tenant_forgotten,
            WithdrawLookupOpened: self._lookup_opened,
            WithdrawLookupClosed: self._lookup_closed,
            CloseLookupOpened: self._close_lookup_opened,
            CloseLookupClosed: self._close_lookup_closed,
            LeaseIssue: self._issue,
            LeaseIssueResolved: self._issue_resolved,
        }

    # -- opening ------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | Path,
        provider_uuid: str,
        *,
        wall: Callable[[], float] = time.time,
        busy_timeout: float = BUSY_TIMEOUT_S,
        migrations: tuple[Migration, ...] = MIGRATIONS,
        synchronous: str = "full",
        chain_id: str = "",
        signer: str = "",
        create: bool = True,
    ) -> "Ledger":
        """Open (creating and migrating as needed) the ledger at ``path``.

        ``synchronous``: ``full`` (a commit survives a power cut) or ``normal``
        (a commit survives the process being killed; faster).

        ``chain_id`` and ``signer``: whose books these must be, with
        ``provider_uuid`` (``ledger.identity``); a ledger of another is
        refused with ``IdentityMismatch``. Given a ``signer`` (the sidecar,
        which holds the key), a ledger without an identity is given this one.
        ``create=False``: a missing file is an error (the commands read books,
        the sidecar makes them).
        """
        if synchronous not in _SYNCHRONOUS:
            raise LedgerError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}")
        path = Path(path)
        if not create and str(path) != ":memory:" and not path.exists():
            raise LedgerError(
                f"{path}: no ledger here yet; the sidecar creates it at its first start (python run.py), "
                f"or set [ledger] path to the ledger the sidecar writes"
            )
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"{path}: cannot open the ledger: {exc}") from None
        try:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.DatabaseError as exc:
                raise NotALedgerError(f"{path}: not a SQLite database ({exc})") from None
            # FULL: a committed fact survives a power cut, not only a crash of
            # the process (NORMAL, in WAL mode, survives the latter only). The
            # actor batches writes, so FULL costs one fsync per batch.
            conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[synchronous]}")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate(conn, str(path), lambda: iso(datetime.fromtimestamp(wall(), timezone.utc)), migrations)
            with _immediate(conn):
                check_identity(
                    conn, str(path), LedgerIdentity(chain_id, provider_uuid, signer),
                    record=bool(signer), now_us=int(wall() * 1_000_000),
                )
        except BaseException:
            conn.close()
            raise
        return cls(conn, str(path), provider_uuid, wall)

    def copied_into_memory(self) -> "Ledger":
        """A copy of this ledger in memory, to run a command on that writes nothing here; this one is closed."""
        memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        with self._lock:
            self.conn.backup(memory)
            self.conn.close()
        memory.execute("PRAGMA foreign_keys = ON")
        return Ledger(memory, ":memory:", self.provider_uuid, self.wall)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    # -- transactions ---------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); nested ones are savepoints."""
        with self._lock:
            if self.conn.in_transaction:
                name = f"sp_{os.urandom(4).hex()}"
                self.conn.execute(f"SAVEPOINT {name}")
                try:
                    yield self.conn
                except BaseException:
                    self.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                    self.conn.execute(f"RELEASE SAVEPOINT {name}")
                    raise
                self.conn.execute(f"RELEASE SAVEPOINT {name}")
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """Several reads that see one state of the database (a deferred read transaction)."""
        with self._lock:
            if self.conn.in_transaction:
                yield self.conn
                return
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("COMMIT")

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """A consistent read: a separate connection in one read transaction.

        WAL gives it a snapshot: what it reads does not move while this
        ledger (or another process) commits, which is what lets a month be
        metered in batches while facts keep arriving.
        """
        if self.path == ":memory:":
            with self._lock:
                yield self.conn
            return
        reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            reader.execute("BEGIN")
            yield reader
        finally:
            reader.close()

    # -- recording facts ------------------------------------------------------------------
    def record(self, fact: Any) -> None:
        """Record one fact of ``messages/ledger.py`` in its own transaction."""
        self.record_all((fact,))

    def record_all(self, facts: Iterable[Any]) -> int:
        """Record facts in one transaction (all or none). Returns how many."""
        n = 0
        with self.transaction():
            for fact in facts:
                handler = self._handlers.get(type(fact))
                if handler is None:
                    raise LedgerError(f"the ledger does not record {type(fact).__name__}")
                handler(fact)
                n += 1
        return n

    def _leases_observed(self, fact: LeasesObserved) -> None:
        # Some leases, not necessarily all: nothing is inferred about the others.
        at = to_us(fact.at)
        for lease in fact.leases:
            if lease.provider_uuid == self.provider_uuid:
                self._upsert(at, lease, reopen=True)

    def _leases_reconciled(self, fact: LeasesReconciled) -> None:
        """The complete active set: its leases' prices and times. A lease missing from it is not
        closed here: a listing alone ends nothing; the read of that lease does (``LeaseObserved``)."""
        at = to_us(fact.at)
        for lease in fact.leases:
            if lease.provider_uuid == self.provider_uuid:
                self._upsert(at, lease, reopen=True)

    def _lease_observed(self, fact: LeaseObserved) -> None:
        if fact.lease.provider_uuid == self.provider_uuid:
            self._upsert(to_us(fact.at), fact.lease, reopen=True)
        # Read at last: whatever kept it from being read is over.
        self.conn.execute("DELETE FROM lease_issues WHERE lease_uuid = ? AND kind = 'unread'", (fact.lease.uuid,))

    def _upsert(self, at: int, lease: Lease, reopen: bool) -> None:
        active_from = to_us(lease.acknowledged_at) if lease.acknowledged_at is not None else None
        closed = None
        ended = lease.closed_at or lease.ended_at  # a lease that never became active ends at its expiry or rejection
        if lease.state in _ENDED_STATES and ended is not None:
            closed = to_us(ended)
        self.conn.execute(
            _UPSERT_LEASE,
            {
                "uuid": lease.uuid,
                "tenant": lease.tenant,
                "provider": lease.provider_uuid,
                "items": _items_json(lease),
                "af": active_from,
                "af_rank": int(Precision.CHAIN) if active_from is not None else 0,
                "ca": closed,
                "ca_rank": int(Precision.CHAIN) if closed is not None else 0,
                "reason": (lease.closure_reason or lease.state.lower()) if closed is not None else "",
                "at": at,
                "reopen": 1 if (reopen and lease.state == "ACTIVE") else 0,
                # No reservation field (16): a v2.1.0 chain, which drops each settlement's fraction.
                "whole": 1 if lease.reservation is None else 0,
            },
        )

    def _event(self, fact: LeaseEventRecorded) -> None:
        """A lease event, kept as what the websocket said: a hint, never a fact of the books.

        Nothing of it reaches ``leases`` or ``settlements``: a lease's times
        and price come from its read (``LeaseObserved``), what it settled from
        the tx that settled it. (The scheduler no longer sends these; a
        capture or a tool of an older build may.)
        """
        ev: LeaseEvent = fact.event
        self.conn.execute(
            "INSERT OR IGNORE INTO lease_events (kind, lease_uuid, tenant, provider_uuid, reason, height, at_us) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ev.kind, ev.lease_uuid, ev.tenant, ev.provider_uuid, ev.reason, ev.height, to_us(fact.at)),
        )

    def _closure(self, fact: ClosureRecorded) -> None:
        key = hashlib.sha256(
            json.dumps(
                [iso(fact.at), fact.tenant, sorted(fact.lease_uuids), fact.reason, list(fact.tx_hashes)]
            ).encode()
        ).hexdigest()
        at = to_us(fact.at)
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO closures (key, at_us, tenant, lease_uuids, reason, tx_hashes) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (key, at, fact.tenant, json.dumps(list(fact.lease_uuids)), fact.reason, json.dumps(list(fact.tx_hashes))),
        )
        if cur.rowcount == 0:
            return
        self.conn.executemany(
            _CLOSE_LEASE,
            (
                {
                    "uuid": u,
                    "tenant": fact.tenant,
                    "provider": self.provider_uuid,
                    "at": at,
                    "rank": int(Precision.CLOSURE),
                    "reason": fact.reason,
                }
                for u in fact.lease_uuids
            ),
        )

    def _settlements(self, fact: SettlementsRecorded) -> None:
        for settled in fact.settlements:
            self._settled(settled)

    def _settled(self, fact: LeaseSettled) -> None:
        if not fact.tx_hash:
            raise LedgerError(f"settlement of lease {fact.lease_uuid} has no tx hash: it could not be deduplicated")
        tenant = fact.tenant
        if not tenant:
            row = self.conn.execute("SELECT tenant FROM leases WHERE uuid = ?", (fact.lease_uuid,)).fetchone()
            tenant = row[0] if row else ""
        at = to_us(fact.at)
        period = str(Month.of(fact.at))
        rate, since = self._settlement_bound(fact.lease_uuid, fact.tx_hash, at)
        rows = []
        for c in fact.amounts:
            why = refusal(c.amount, c.denom, rate, since, at)
            if why:
                detail = f"tx {fact.tx_hash}: {why}: not booked"
                logger.warning("lease %s: settlement refused: %s", fact.lease_uuid, detail)
                self._issue(LeaseIssue(fact.at, fact.lease_uuid, SETTLEMENT_REFUSED, detail, tenant))
            elif c.amount:
                rows.append((fact.tx_hash, fact.lease_uuid, c.denom, str(c.amount), fact.kind, tenant, at, period))
        self.conn.executemany(
            "INSERT OR IGNORE INTO settlements (tx_hash, lease_uuid, denom, amount, kind, tenant, at_us, period) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def _settlement_bound(self, lease_uuid: str, tx_hash: str, at: int) -> tuple[dict[str, int] | None, int | None]:
        """(the lease's rate, its previous settlement or start) for ``settlement_bounds``; None where unknown."""
        row = self.conn.execute(
            "SELECT items, priced, active_from_us FROM leases WHERE uuid = ?", (lease_uuid,)
        ).fetchone()
        if row is None or not row[1] or row[2] is None:
            return None, None
        previous = self.conn.execute(
            "SELECT MAX(at_us) FROM settlements WHERE lease_uuid = ? AND at_us < ? AND tx_hash != ?",
            (lease_uuid, at, tx_hash),
        ).fetchone()[0]
        return rate_of_items(row[0]), max(row[2], previous) if previous is not None else row[2]

    def _withdrawal(self, fact: WithdrawalRecorded) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO withdrawals (tx_hash, cycle, page, amounts, withdrawal_count, at_us) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                fact.tx_hash,
                fact.cycle,
                fact.page,
                json.dumps({c.denom: str(c.amount) for c in fact.amounts}, sort_keys=True),
                fact.withdrawal_count,
                to_us(fact.at),
            ),
        )

    def _tenant_state(self, fact: TenantStateChanged) -> None:
        self.conn.execute(
            "INSERT INTO tenant_state (tenant, snapshot, updated_us) VALUES (?, ?, ?) "
            "ON CONFLICT (tenant) DO UPDATE SET snapshot = excluded.snapshot, updated_us = excluded.updated_us",
            (fact.snapshot.tenant, encode(fact.snapshot), _snapshot_time(fact.snapshot)),
        )

    def _tenant_forgotten(self, fact: TenantForgotten) -> None:
        self.conn.execute("DELETE FROM tenant_state WHERE tenant = ?", (fact.tenant,))

    def _lookup_opened(self, fact: WithdrawLookupOpened) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO withdraw_lookups (tx_hash, cycle, page, opened_at_us) VALUES (?, ?, ?, ?)",
            (fact.tx_hash, fact.cycle, fact.page, to_us(fact.at)),
        )

    def _lookup_closed(self, fact: WithdrawLookupClosed) -> None:
        self.conn.execute("DELETE FROM withdraw_lookups WHERE tx_hash = ?", (fact.tx_hash,))

    def _close_lookup_opened(self, fact: CloseLookupOpened) -> None:
        by_tenant = json.dumps([[tenant, list(leases)] for tenant, leases in fact.by_tenant])
        # chain-io writes a close ahead first (actors.write_ahead), without tenants; the chain
        # actor's fact of the same tx follows with them: the first time is kept, its tenants taken.
        known = all(tenant for tenant, _ in fact.by_tenant)
        self.conn.execute(
            "INSERT INTO close_lookups (tx_hash, reason, by_tenant, opened_at_us) VALUES (?, ?, ?, ?) "
            + ("ON CONFLICT (tx_hash) DO UPDATE SET by_tenant = excluded.by_tenant, reason = excluded.reason"
               if known else "ON CONFLICT (tx_hash) DO NOTHING"),
            (fact.tx_hash, fact.reason, by_tenant, to_us(fact.at)),
        )

    def _close_lookup_closed(self, fact: CloseLookupClosed) -> None:
        self.conn.execute("DELETE FROM close_lookups WHERE tx_hash = ?", (fact.tx_hash,))

    def _issue(self, fact: LeaseIssue) -> None:
        tenant = fact.tenant
        if not tenant:
            row = self.conn.execute("SELECT tenant FROM leases WHERE uuid = ?", (fact.lease_uuid,)).fetchone()
            tenant = row[0] if row else ""
        at = to_us(fact.at)
        period = str(Month.of(fact.at))
        detail = fact.detail[:ISSUE_DETAIL_CHARS]
        if fact.kind == SETTLEMENT_REFUSED:
            # One row per month, each refusal kept (a refusal per denom, per tx): the month's
            # statement says every settlement it lacks, and a repeat of one is not added twice.
            self.conn.execute(
                "INSERT INTO lease_issues (lease_uuid, kind, tenant, period, detail, since_us, updated_us) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (lease_uuid, kind, period) DO UPDATE SET "
                "detail = CASE WHEN instr(lease_issues.detail, excluded.detail) > 0 THEN lease_issues.detail "
                f"ELSE substr(lease_issues.detail || '; ' || excluded.detail, 1, {ISSUE_DETAIL_CHARS}) END, "
                "updated_us = MAX(lease_issues.updated_us, excluded.updated_us), "
                "tenant = CASE WHEN excluded.tenant != '' THEN excluded.tenant ELSE lease_issues.tenant END",
                (fact.lease_uuid, fact.kind, tenant, period, detail, at, at),
            )
            return
        # The other kinds say where a lease stands now: one row per lease, under the month it began.
        updated = self.conn.execute(
            "UPDATE lease_issues SET detail = ?, updated_us = MAX(updated_us, ?), "
            "tenant = CASE WHEN ? != '' THEN ? ELSE tenant END WHERE lease_uuid = ? AND kind = ?",
            (detail, at, tenant, tenant, fact.lease_uuid, fact.kind),
        ).rowcount
        if not updated:
            self.conn.execute(
                "INSERT INTO lease_issues (lease_uuid, kind, tenant, period, detail, since_us, updated_us) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (fact.lease_uuid, fact.kind, tenant, period, detail, at, at),
            )

    def _issue_resolved(self, fact: LeaseIssueResolved) -> None:
        self.conn.execute("DELETE FROM lease_issues WHERE lease_uuid = ? AND kind = ?", (fact.lease_uuid, fact.kind))

    # -- reading -------------------------------------------------------------------------
    def first_fact_at(self) -> datetime | None:
        """The earliest instant any billing fact of these books is about (None: no fact yet).

        A lease's start counts even where it was recorded later: its accrual
        from then on is in the books. Nothing of a month before this instant
        is, so no month before it is ever metered or stored.
        """
        return self._fact_time(
            "MIN", "SELECT MIN(MIN(first_seen_us, COALESCE(active_from_us, first_seen_us))) AS t FROM leases"
        )

    def last_fact_at(self) -> datetime | None:
        """The latest instant a billing fact was recorded at (None: no fact yet).

        On an embedded chain the clock runs faster than the wall clock, so this
        is where the books' own time has got to.
        """
        return self._fact_time("MAX", "SELECT MAX(updated_us) AS t FROM leases")

    def _fact_time(self, agg: str, leases: str) -> datetime | None:
        with self._lock:
            row = self.conn.execute(
                f"SELECT {agg}(t) FROM ({leases}"
                f" UNION ALL SELECT {agg}(at_us) FROM lease_events"
                f" UNION ALL SELECT {agg}(at_us) FROM settlements"
                f" UNION ALL SELECT {agg}(at_us) FROM withdrawals"
                f" UNION ALL SELECT {agg}(at_us) FROM closures)"
            ).fetchone()
        return from_us(row[0]) if row and row[0] is not None else None

    def withdraw_lookups(self) -> list[WithdrawLookupOpened]:
        """The withdraw txs still being looked up, oldest first, to go on at start."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT tx_hash, cycle, page, opened_at_us FROM withdraw_lookups ORDER BY opened_at_us, tx_hash"
            ).fetchall()
        return [WithdrawLookupOpened(tx, cycle, page, from_us(at)) for tx, cycle, page, at in rows]

    def close_lookups(self) -> list[CloseLookupOpened]:
        """The close txs not settled in the books yet, oldest first, to be looked up at start."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT tx_hash, reason, by_tenant, opened_at_us FROM close_lookups ORDER BY opened_at_us, tx_hash"
            ).fetchall()
        out = []
        for tx, reason, by_tenant, at in rows:
            try:
                grouped = tuple((str(t), tuple(str(u) for u in leases)) for t, leases in json.loads(by_tenant))
            except (ValueError, TypeError) as exc:
                raise LedgerError(f"{self.path}: close_lookups of tx {tx}: cannot be read: {exc}") from None
            out.append(CloseLookupOpened(tx, reason, self._with_tenants(grouped), from_us(at)))
        return out

    def _with_tenants(self, grouped: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """A close written ahead without its tenants (``actors.write_ahead``): each lease's tenant from
        the books, grouped as a close round groups them; a lease the books do not know keeps none."""
        if all(tenant for tenant, _ in grouped):
            return grouped
        by_tenant: dict[str, list[str]] = {}
        with self._lock:
            for tenant, leases in grouped:
                for u in leases:
                    if not tenant:
                        row = self.conn.execute("SELECT tenant FROM leases WHERE uuid = ?", (u,)).fetchone()
                        tenant_of = row[0] if row else ""
                    else:
                        tenant_of = tenant
                    by_tenant.setdefault(tenant_of, []).append(u)
        return tuple((t, tuple(us)) for t, us in by_tenant.items())

    def tenant_snapshots(self) -> list[TenantSnapshot]:
        """Every persisted tenant state, to restore the tenant actors at start."""
        out: list[TenantSnapshot] = []
        with self._lock:
            rows = self.conn.execute("SELECT tenant, snapshot FROM tenant_state ORDER BY tenant").fetchall()
        for tenant, blob in rows:
            try:
                snapshot = decode(blob)
            except CodecError as exc:
                raise LedgerError(f"{self.path}: tenant_state of {tenant}: cannot be read: {exc}") from None
            if not isinstance(snapshot, TenantSnapshot):
                raise LedgerError(
                    f"{self.path}: tenant_state of {tenant} holds a {type(snapshot).__name__}, not a TenantSnapshot"
                )
            out.append(snapshot)
        return out

    def open_lease_uuids(self) -> list[str]:
        """Our leases the ledger bills as active, or as closed only by a reconcile's guess:
        the ones whose end a start-up reconcile reads from the chain."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT uuid FROM leases WHERE provider_uuid = ? AND active_from_us IS NOT NULL "
                "AND (closed_at_us IS NULL OR closed_at_rank = ?) ORDER BY uuid",
                (self.provider_uuid, int(Precision.RECONCILE)),
            ).fetchall()
        return [r[0] for r in rows]

    def leases_to_read(self, limit: int = 2_000) -> list[str]:
        """Our leases the books hold without a price, or closed at a time the chain did not give, or unread,
        or ended with the search for their closing tx unfinished.

        Read from the chain at start (``actors.lease_reads``): a database
        written before every mode read them, or whose reads failed, bills
        them to the second again; a month held back for a lease without a
        price is metered at its next tick; a search for a closing tx that a
        stop cut short is made again. At most ``limit``, unpriced first.
        """
        with self._lock:
            rows = self.conn.execute(
                "SELECT uuid FROM leases WHERE provider_uuid = ? AND (priced = 0 OR "
                # a lease that never became active (expired or rejected while
                # pending) was never billed: its end needs no second read
                "(active_from_us IS NOT NULL AND closed_at_us IS NOT NULL AND closed_at_rank < ?)) "
                "ORDER BY priced, uuid LIMIT ?",
                (self.provider_uuid, int(Precision.CHAIN), limit),
            ).fetchall()
            # Leases whose read failed (maybe before the books had a row of them at all), and
            # ended leases whose closing tx was still being looked for (``actors.close_search``).
            unread = self.conn.execute(
                "SELECT DISTINCT lease_uuid FROM lease_issues WHERE kind IN ('unread', 'close_sought') "
                "ORDER BY lease_uuid LIMIT ?",
                (limit,),
            ).fetchall()
        out = [r[0] for r in rows]
        seen = set(out)
        out += [r[0] for r in unread if r[0] not in seen]
        return out[:limit]

    def lease_issues(self, period: str | None = None) -> list[Issue]:
        """What the books cannot yet say of some leases (of ``period``, YYYY-MM, or all), by period then lease."""
        where, args = ("WHERE period = ?", (period,)) if period else ("", ())
        with self._lock:
            rows = self.conn.execute(
                "SELECT lease_uuid, kind, tenant, period, detail, since_us, updated_us FROM lease_issues "
                f"{where} ORDER BY period, lease_uuid, kind",
                args,
            ).fetchall()
        return [Issue(u, k, t, p, d, from_us(s), from_us(up)) for u, k, t, p, d, s, up in rows]

    def lease(self, uuid: str) -> dict[str, Any] | None:
        """One lease row as a dict (for inspection and tests)."""
        with self._lock:
            rows = list(self.db.query("SELECT * FROM leases WHERE uuid = ?", (uuid,)))
        return rows[0] if rows else None

    def count(self, table: str) -> int:
        if table not in self.db.table_names():
            raise LedgerError(f"no table {table!r} in the ledger")
        with self._lock:
            return int(self.conn.execute(f"SELECT COUNT(*) FROM [{table}]").fetchone()[0])


def _snapshot_time(snapshot: TenantSnapshot) -> int:
    """The latest time the snapshot mentions (0 if none): when the tenant last learned something."""
    times = [t for t in (snapshot.last_sample_at, snapshot.zero_since, snapshot.recheck_at) if t is not None]
    return max(map(to_us, times)) if times else 0
