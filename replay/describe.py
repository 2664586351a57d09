"""Readable one-line texts for messages: timeline entries and divergence details.

Every text is a pure function of the message (no clock, no ids, no dict
order from outside), so two replays of the same logs print the same bytes.
"""

from __future__ import annotations

import msgspec
from datetime import datetime
from typing import Any, Callable

from messages.chain import ChainFailure
from messages.chain_actor import (
    CloseBatchAnswered,
    LeaseCheckAnswered,
    NodeStatusAnswered,
    WithdrawPageAnswered,
    WithdrawTxAnswered,
    WithdrawTxSigned,
    CloseTxSigned,
)
from messages.coins import Coin, format_coins
from messages.credit import CreditReadFailed
from messages.ledger import BillingTickDue
from messages.scheduler import (
    ActiveLeasesRead,
    Reconcile,
    RunCycle,
    StartSchedule,
    StopSchedule,
    TriggerWithdraw,
)

__all__ = ["when", "value", "message", "differences", "outside_input", "decision"]

#: Items of a long tuple shown before "... (N in all)": a 50,000-lease read
#: must not print a 5 MB line.
SHOWN_ITEMS = 4


def when(t: datetime | None) -> str:
    if t is None:
        return "-"
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{t.microsecond:06d}" if t.microsecond else text


def value(v: Any) -> str:
    if isinstance(v, datetime):
        return when(v)
    if isinstance(v, Coin):
        return f"{v.amount}{v.denom}"
    if isinstance(v, ChainFailure):
        return f"ChainFailure({v.operation}: {v.message})"
    if isinstance(v, tuple):
        if v and all(isinstance(c, Coin) for c in v):
            return format_coins(v)
        shown = ", ".join(value(x) for x in v[:SHOWN_ITEMS])
        more = f", ... ({len(v)} in all)" if len(v) > SHOWN_ITEMS else ""
        return f"({shown}{more})"
    if isinstance(v, bytes):
        return v.hex() or "''"
    if isinstance(v, str):
        return repr(v)
    fields = getattr(type(v), "__struct_fields__", None)
    if fields is not None:
        return message(v)
    return repr(v)


def message(m: Any) -> str:
    """``TypeName(field=value, ...)``, fields left at their default omitted."""
    fields = getattr(type(m), "__struct_fields__", None)
    if fields is None:
        return str(m) if isinstance(m, str) else type(m).__name__
    defaults = {f.name: f.default for f in msgspec.structs.fields(m)}
    parts = []
    for f in fields:
        v = getattr(m, f)
        d = defaults.get(f, msgspec.NODEFAULT)
        if d is not msgspec.NODEFAULT and type(d) is type(v) and d == v:
            continue
        parts.append(f"{f}={value(v)}")
    return f"{type(m).__name__}({', '.join(parts)})"


def differences(captured: Any, replayed: Any) -> str:
    """What changed between two messages: ``field: captured -> replayed; ...``."""
    if type(captured) is not type(replayed):
        return f"{message(captured)} -> {message(replayed)}"
    fields = getattr(type(captured), "__struct_fields__", ())
    parts = []
    for f in fields:
        a, b = getattr(captured, f), getattr(replayed, f)
        if a != b:
            parts.append(f"{f}: {value(a)} -> {value(b)}")
    return f"{type(captured).__name__}: " + "; ".join(parts) if parts else message(captured)


def _failure(e: ChainFailure) -> str:
    return e.message + (" (transient)" if e.transient else "")


def _withdraw_page(m: WithdrawPageAnswered) -> str:
    if m.error is not None:
        return f"withdraw page {m.page} (try {m.attempt}) failed: {_failure(m.error)}"
    r = m.result
    if r is None:
        return f"withdraw page {m.page}: no answer"
    more = ", more to come" if r.has_more else ", last page"
    return f"withdraw page {m.page}: {format_coins(r.total_amounts)} from {r.withdrawal_count} lease(s){more} (tx {r.tx_hash[:12]})"


def _withdraw_signed(m: WithdrawTxSigned) -> str:
    return f"withdraw page {m.page} (try {m.attempt}): tx {m.tx_hash[:12]} signed, broadcasting"


def _close_signed(m: CloseTxSigned) -> str:
    return f"close batch {m.batch}: tx {m.tx_hash[:12]} signed, broadcasting"


def _withdraw_tx(m: WithdrawTxAnswered) -> str:
    if m.error is not None:
        return f"withdraw tx {m.tx_hash[:12]} lookup {m.attempt}: {_failure(m.error)}"
    if m.result is None:
        return f"withdraw tx {m.tx_hash[:12]} lookup {m.attempt}: not known to the node"
    r = m.result
    return f"withdraw tx {m.tx_hash[:12]} lookup {m.attempt}: applied, {format_coins(r.total_amounts)} from {r.withdrawal_count} lease(s)"


def _leases_read(m: ActiveLeasesRead) -> str:
    if m.error is not None:
        return f"active leases read failed: {_failure(m.error)}"
    tenants = len({lease.tenant for lease in m.leases})
    return f"active leases read: {len(m.leases)} lease(s) of {tenants} tenant(s)"


def _close_batch(m: CloseBatchAnswered) -> str:
    if m.error is not None:
        return f"close batch {m.batch} of {len(m.lease_uuids)} lease(s) failed: {_failure(m.error)}"
    closed = m.outcome.closed_count if m.outcome else 0
    return f"close batch {m.batch}: {closed} of {len(m.lease_uuids)} lease(s) closed"


def _lease_check(m: LeaseCheckAnswered) -> str:
    if m.error is not None:
        return f"lease check failed: {_failure(m.error)}"
    return f"lease check: {len(m.active)} lease(s) still active"


def _node_status(m: NodeStatusAnswered) -> str | None:
    if m.error is not None:
        return f"node status failed: {_failure(m.error)}"
    if m.status is not None and m.status.catching_up:
        return f"node is catching up (block {m.status.latest_block_height} at {when(m.status.latest_block_time)})"
    return None


def _lease_event(m: Any) -> str:
    e = m.event
    why = f" ({e.reason})" if e.reason else ""
    return f"lease event: {e.kind} {e.lease_uuid} of tenant {e.tenant}, provider {e.provider_uuid}{why}"


_OUTSIDE: dict[type, Callable[[Any], str | None]] = {
    WithdrawPageAnswered: _withdraw_page,
    WithdrawTxAnswered: _withdraw_tx,
    WithdrawTxSigned: _withdraw_signed,
    CloseTxSigned: _close_signed,
    ActiveLeasesRead: _leases_read,
    CloseBatchAnswered: _close_batch,
    LeaseCheckAnswered: _lease_check,
    NodeStatusAnswered: _node_status,
    CreditReadFailed: lambda m: f"credit read failed: {_failure(m.error)}",
    StartSchedule: lambda m: "start",
    StopSchedule: lambda m: "stop",
    TriggerWithdraw: lambda m: f"withdraw triggered by {m.source}",
    RunCycle: lambda m: "withdraw_once" if m.withdraw else "one credit check",
    Reconcile: lambda m: f"reconcile after {m.source}",
}


def outside_describer(cls: type) -> Callable[[Any], str | None] | None:
    """What makes the line for an outside input of type ``cls`` (None: it gets none)."""
    if cls.__name__ == "LeaseEventReceived":
        return _lease_event
    return _OUTSIDE.get(cls)


def outside_input(m: Any) -> str | None:
    """A line for an input that came from outside the cores (chain answers, events, controls)."""
    describe = outside_describer(type(m))
    return describe(m) if describe is not None else None


#: Decisions that no core note already tells, and their lines (month steps go to the ledger).
_DECISIONS: dict[type, Callable[[Any], str | None]] = {
    BillingTickDue: lambda m: f"billing tick: the ledger steps the billing months due at {when(m.at)}",
}


def decision_describer(cls: type) -> Callable[[Any], str | None] | None:
    """What makes the line for a decision of type ``cls`` (None: it gets none)."""
    return _DECISIONS.get(cls)


def decision(m: Any) -> str | None:
    """A line for a decision that no core note already tells."""
    describe = decision_describer(type(m))
    return describe(m) if describe is not None else None
