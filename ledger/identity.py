"""Whose books a ledger holds: the chain, the provider and the signer it was created for.

A ledger is the books of one provider on one chain, signed for by one
account. Pointed at another chain (a testnet's config with the mainnet's
ledger path, say), a sidecar restored that chain's strangers as its
tenants and read their credit from a chain that had never heard of them.
So the first sidecar start writes the three facts into the ledger, and
every later start, and every ledger command, compares them with its
configuration and refuses on a difference, naming what differs and how to
start a new ledger. Nothing is ever rewritten: books cannot change owner.

The commands (``tick``, ``periods``...) load no key, so they compare the
chain and the provider only. A ledger written before this table existed
gets its identity at the next sidecar start, unless it already holds
leases of another provider.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LedgerIdentity", "IdentityMismatch", "differences", "read_identity", "check_identity"]


@dataclass(frozen=True)
class LedgerIdentity:
    chain_id: str
    provider_uuid: str
    #: The provider's account, which signs every tx; "" where the opener loads no key.
    signer: str = ""

    def describe(self) -> str:
        signer = f", signer {self.signer}" if self.signer else ""
        return f"chain {self.chain_id!r}, provider {self.provider_uuid}{signer}"


def differences(stored: LedgerIdentity, expected: LedgerIdentity) -> list[str]:
    """What differs between the stored identity and the one expected; a blank expected field is not compared."""
    out = []
    if expected.chain_id and stored.chain_id != expected.chain_id:
        out.append(f"the chain id ({stored.chain_id!r} in the ledger, {expected.chain_id!r} configured)")
    if stored.provider_uuid != expected.provider_uuid:
        out.append(f"the provider ({stored.provider_uuid} in the ledger, {expected.provider_uuid} configured)")
    if expected.signer and stored.signer and stored.signer != expected.signer:
        out.append(f"the signer ({stored.signer} in the ledger, {expected.signer} from the key)")
    return out


class IdentityMismatch(RuntimeError):
    """The ledger holds another chain's, provider's or signer's books."""

    def __init__(self, path: str, held: str, different: list[str]) -> None:
        super().__init__(
            f"{path}: this ledger holds the books of {held}, and {' and '.join(different)} "
            f"differ{'s' if len(different) == 1 else ''}; to keep books for this configuration, set [ledger] "
            f"path to a new file (the sidecar creates the ledger there at its start); {path} is left as it is"
        )


_TABLE = "ledger_identity"


def _has_table(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_TABLE,)).fetchone() is not None


def _stored(conn: sqlite3.Connection) -> LedgerIdentity | None:
    if not _has_table(conn):
        return None
    row = conn.execute(f"SELECT chain_id, provider_uuid, signer FROM {_TABLE}").fetchone()
    return LedgerIdentity(*row) if row else None


def read_identity(path: str | Path) -> LedgerIdentity | None:
    """The identity stored in the ledger at ``path``, read without writing (None: no file, or none stored)."""
    if not Path(path).is_file():
        return None
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        return _stored(conn)
    except sqlite3.DatabaseError:
        return None  # not a ledger: opening it says so
    finally:
        conn.close()


def check_identity(
    conn: sqlite3.Connection, path: str, expected: LedgerIdentity, *, record: bool, now_us: int
) -> LedgerIdentity | None:
    """Compare the stored identity with ``expected``; with ``record``, store it where there is none.

    Raises ``IdentityMismatch``. Returns the identity in force (None: none stored and none recorded,
    or a schema older than the table, as in the migration tests).
    """
    if not _has_table(conn):
        return None
    stored = _stored(conn)
    if stored is not None:
        different = differences(stored, expected)
        if different:
            raise IdentityMismatch(path, stored.describe(), different)
        return stored
    other = conn.execute(
        "SELECT provider_uuid FROM leases WHERE provider_uuid != ? LIMIT 1", (expected.provider_uuid,)
    ).fetchone()
    if other is not None:
        raise IdentityMismatch(
            path, f"provider {other[0]} (its leases are in it)",
            [f"the provider ({expected.provider_uuid} configured)"],
        )
    if not record:
        return None
    conn.execute(
        f"INSERT INTO {_TABLE} (id, chain_id, provider_uuid, signer, created_us) VALUES (1, ?, ?, ?, ?)",
        (expected.chain_id, expected.provider_uuid, expected.signer, now_us),
    )
    return expected
