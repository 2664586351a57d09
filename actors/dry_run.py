"""A dry run's withdraws and closures: everything read and decided, nothing sent (``[scheduler] dry_run``).

For a first deployment: the sidecar runs against the real chain with the
real key and tells what it would do. The chain actor hands these the
decisions that would become txs:

- a withdraw cycle reads what the provider could withdraw now
  (``ProviderWithdrawable``), says it would withdraw that, and ends as a
  cycle of no pages;
- the closures of a check are named per tenant and reported failed, with
  "dry run" as the reason: each tenant keeps its grace window and asks
  again at its next check, as it would after a refused close, so the log
  says every 30 s (folded) that it would still close them.

The sidecar's chain client refuses txs as well in a dry run
(``chain.read_only``): a path that reached it anyway would fail, not pay.
"""

from __future__ import annotations

from actors.effects import Effect, Note, Send
from messages.chain import ChainFailure
from messages.chain_actor import WithdrawableAnswered, WithdrawableCall
from messages.coins import format_coins
from messages.credit import CloseFailed, CloseRequested
from messages.scheduler import ClosuresFlushed, WithdrawFinished
from runtime.router import CHAIN_IO, SCHEDULER, tenant_address

__all__ = ["DRY_RUN", "withdraw", "withdrawable", "closures"]

#: The failure a dry run's closures report: not transient (nothing to retry soon), nothing applied.
DRY_RUN = ChainFailure("close_leases", "dry run: no tx is sent")


def withdraw(cycle: int) -> list[Effect]:
    return [Send(CHAIN_IO, WithdrawableCall(cycle))]


def withdrawable(m: WithdrawableAnswered) -> list[Effect]:
    if m.error is not None:
        text = f"dry run: could not read what the provider can withdraw ({m.error.message}); no tx sent"
        note = Note(text, event="dry_run_withdraw", fields=(("cycle", m.cycle), ("error", m.error.message)), level="warning")
    elif m.due is None:
        text = "dry run: the node cannot tell what the provider can withdraw (v2.1.0 reads a lease limit); no tx sent"
        note = Note(text, event="dry_run_withdraw", fields=(("cycle", m.cycle), ("withdrawable", "unknown")))
    else:
        text = f"dry run: would withdraw {format_coins(m.due)} (what the provider can withdraw now); no tx sent"
        note = Note(text, event="dry_run_withdraw", fields=(("cycle", m.cycle), ("withdrawable", m.due)))
    return [note, Send(SCHEDULER, WithdrawFinished(m.cycle, 0, (), 0, (), error=m.error))]


def closures(cycle: int, requests: list[CloseRequested]) -> list[Effect]:
    out: list[Effect] = []
    failed: list[str] = []
    for r in requests:
        out.append(Note(
            f"dry run: would close {len(r.lease_uuids)} lease(s) of tenant {r.tenant} ({r.reason}): "
            f"{', '.join(r.lease_uuids)}; no tx sent",
            r.tenant, event="dry_run_close", fields=(("leases", r.lease_uuids), ("reason", r.reason)), level="warning",
        ))
        out.append(Send(tenant_address(r.tenant), CloseFailed(r.tenant, r.lease_uuids, DRY_RUN)))
        failed += r.lease_uuids
    out.append(Send(SCHEDULER, ClosuresFlushed(cycle, failed=tuple(sorted(set(failed))), error=DRY_RUN)))
    return out
