"""Leases whose withdraw failed: kept, retried by name with backoff, reported until they recover.

On the current chain a provider-wide page settles each lease on its own: a
lease that fails (a payout the bank blocks, a reservation invariant) is
skipped, listed in the page's ``failed_lease_uuids``, and the cursor moves
past it (CHAIN-VERSIONS.md 2.1). The list exists only in that answer: not
kept, such a lease is never withdrawn again while the rest of the provider
is. Named withdraws are atomic, so one failing lease fails its whole batch;
the cycle splits the batch until the failing lease stands alone, and it
lands here too.

Each failing lease is retried alone, by name, once its backoff has passed:
``FIRST_RETRY`` after the first failure, doubling, at most the withdraw
interval (a cause an operator must fix is not fixed by asking faster). It
stays here, counted and reported in every cycle's summary, until a withdraw
settles it (its retry, or any page or batch that reaches it: the chain
emits a lease's ``provider_withdraw`` only when its settlement went
through) or a retry finds nothing left to withdraw (billing code 15):
never dropped. Once the cause is fixed, the next page that reaches it
clears it, not the retry an hour of backoff later.

Every method takes ``now`` and returns notes; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable

from actors.effects import Effect, Note
from messages.chain import ChainFailure

__all__ = ["FailingLeases", "FIRST_RETRY", "MAX_RETRIES_PER_CYCLE"]

#: Delay before a failed lease's first retry; doubled after each failure.
FIRST_RETRY = timedelta(minutes=1)
#: Failing leases retried in one cycle at most: each is a tx of its own, and a
#: cause shared by thousands of leases (a blocked payout address) must not
#: turn one cycle into thousands of paid txs.
MAX_RETRIES_PER_CYCLE = 20


@dataclass
class _Failing:
    count: int
    since: datetime
    retry_at: datetime
    error: str


class FailingLeases:
    def __init__(self, cap: timedelta) -> None:
        #: the longest backoff (the withdraw interval)
        self.cap = cap
        self._leases: dict[str, _Failing] = {}

    def __contains__(self, lease_uuid: str) -> bool:
        return lease_uuid in self._leases

    def __len__(self) -> int:
        return len(self._leases)

    def failed(self, lease_uuids: tuple[str, ...], error: ChainFailure | str, now: datetime) -> list[Effect]:
        """Another failure of each lease (a first one starts its count)."""
        text = error if isinstance(error, str) else error.message
        out: list[Effect] = []
        for u in lease_uuids:
            entry = self._leases.get(u)
            if entry is None:
                entry = self._leases[u] = _Failing(0, now, now, text)
            entry.count += 1
            entry.error = text
            delay = min(FIRST_RETRY * 2 ** (entry.count - 1), self.cap)
            entry.retry_at = now + delay
            out.append(
                Note(
                    f"lease {u}: withdraw failed {entry.count} time(s) in a row since {entry.since:%Y-%m-%d %H:%M:%S} "
                    f"({text}); retried by name at {entry.retry_at:%Y-%m-%d %H:%M:%S}"
                )
            )
        return out

    def recovered(self, lease_uuid: str, how: str) -> list[Effect]:
        entry = self._leases.pop(lease_uuid, None)
        if entry is None:
            return []
        return [Note(f"lease {lease_uuid}: withdraw {how} after {entry.count} failure(s) since {entry.since:%Y-%m-%d %H:%M:%S}")]

    def settled(self, lease_uuids: Iterable[str]) -> list[Effect]:
        """Leases a withdraw tx just settled, whichever way it reached them: failing no more."""
        out: list[Effect] = []
        for u in lease_uuids:
            if u in self._leases:
                out += self.recovered(u, "went through")
        return out

    def due(self, now: datetime) -> list[str]:
        """The failing leases whose retry is due, soonest first, at most ``MAX_RETRIES_PER_CYCLE``."""
        ready = sorted((e.retry_at, u) for u, e in self._leases.items() if e.retry_at <= now)
        return [u for _, u in ready[:MAX_RETRIES_PER_CYCLE]]

    def report(self) -> tuple[tuple[str, int], ...]:
        """(lease, failures in a row) of every failing lease, for the cycle's summary."""
        return tuple(sorted((u, e.count) for u, e in self._leases.items()))
