"""Close txs of unknown outcome: looked up until the chain says what they settled.

A close batch whose tx was broadcast but whose inclusion the client never
saw (``may_have_committed``) is reported failed to its tenants, who ask for
the close again at their next check; by then the chain has usually closed
the leases, and the batch finds them "already closed". What that first tx
settled from each lease is then known only from its ``lease_closed``
events: when the websocket missed them too (the same outage), the books
would never hear of the money our own close moved.

So the chain actor looks the tx up (``ChainClient.close_outcome``) on the
withdraw lookups' schedule (``actors.withdraw_lookup.LOOKUP_DELAYS``):
applied, the ledger gets its settlements and the closure of each tenant's
leases, as for a close answered at once (the ledger keeps one row per tx,
lease and denom, so a settlement the listener also saw counts once);
included and failed, or unknown after the last lookup, it closed nothing.

Unlike the withdraw lookups these are not kept in the ledger across a
restart: a close of unknown outcome that outlives the process is left to
the listener's events.

Every method takes ``now`` and returns effects.
"""

from __future__ import annotations

from datetime import datetime

from actors.effects import Effect, Note, Send
from actors.withdraw_lookup import LOOKUP_DELAYS, not_applied_yet
from messages.chain_actor import CloseTxAnswered, CloseTxCall
from messages.coins import coins, coins_to_dict, format_coins
from messages.ledger import ClosureRecorded, SettlementsRecorded
from runtime.router import CHAIN_IO, LEDGER

__all__ = ["CloseLookups"]


class CloseLookups:
    """The close txs being looked up: hash -> (each tenant's leases in it, the reason)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[tuple[tuple[str, tuple[str, ...]], ...], str]] = {}

    def begin(self, tx_hash: str, by_tenant: tuple[tuple[str, tuple[str, ...]], ...], reason: str,
              now: datetime) -> list[Effect]:
        if not tx_hash or tx_hash in self.pending:
            return []
        self.pending[tx_hash] = (by_tenant, reason)
        leases = tuple(u for _, uuids in by_tenant for u in uuids)
        return [
            Note(f"close tx {tx_hash} of {len(leases)} lease(s) may have been applied; "
                 f"looking it up in {LOOKUP_DELAYS[0].total_seconds():g}s"),
            Send(CHAIN_IO, CloseTxCall(tx_hash, leases, 1), at=now + LOOKUP_DELAYS[0]),
        ]

    def answered(self, m: CloseTxAnswered, now: datetime) -> list[Effect]:
        entry = self.pending.get(m.tx_hash)
        if entry is None:
            return []
        where = f"close tx {m.tx_hash}"
        if m.result is not None:
            del self.pending[m.tx_hash]
            by_tenant, reason = entry
            total = coins_to_dict(tuple(c for s in m.result.settlements for c in s.amounts))
            out: list[Effect] = [
                Note(f"{where} was applied after all: {m.result.closed_count} lease(s) closed, "
                     f"{format_coins(coins(total)) or 'nothing'} settled, now in the books"),
            ]
            if m.result.settlements:
                out.append(Send(LEDGER, SettlementsRecorded(m.result.settlements)))
            # Closed at the tx's block time (its settlements carry it), not at
            # this lookup's, which comes seconds to minutes later.
            at = min((s.at for s in m.result.settlements), default=now)
            out += [Send(LEDGER, ClosureRecorded(at, tenant, leases, reason, (m.tx_hash,))) for tenant, leases in by_tenant]
            return out
        text, delay = not_applied_yet(where, m.attempt, m.error, "it closed nothing")
        if delay is None:
            del self.pending[m.tx_hash]
            return [Note(text)]
        return [Note(text), Send(CHAIN_IO, CloseTxCall(m.tx_hash, m.lease_uuids, m.attempt + 1), at=now + delay)]
