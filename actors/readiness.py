"""Is the sidecar ready: which of its parts work, since when, and why not (``/readyz``).

``Readiness`` is the ``health`` actor's core. Its parts, each ready or not
since a time, with a line saying why:

- ``chain``: the node answered the last status check (``NodeStatusAnswered``
  to its own ``NodeStatusCall``, every ``node_check_interval``);
- ``node``: that answer says the node is synced: not catching up, and its
  latest block no older than ``max_node_lag``;
- ``websocket`` (when the sidecar listens to one): subscribed, from the
  listener's ``WebsocketSubscribed`` to its next ``WebsocketLost``;
- ``ledger`` (when the sidecar keeps books): writable, from its last
  ``LedgerWriteFailed`` to the ``LedgerWritesResumed`` after it;
- ``key`` (when the sidecar signs): loaded at start; a key that cannot be
  loaded stops the sidecar before it starts, so while it runs it is ready;
- ``tx index`` (when the sidecar signs or keeps books): the node keeps a tx
  index, asked with each status check. Without one no tx of ours is seen
  included, so the sidecar still withdraws and closes, but what those txs
  did never reaches the books (each is logged as of unknown outcome). A
  node that cannot say keeps it not ready, with its reason, until it is
  once found kept; after that, a check that cannot say changes nothing.

Until the first answer the chain and the node are "not checked yet". The
first answer, and every change after, gets a decision line (a node
unreachable at start says so at once); one status check at a time is in
flight (a node slower than the interval is asked again once it answers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from actors.effects import Effect, Note, Send
from chain.errors import NO_TX_INDEX_HARM
from messages.chain_actor import NodeStatusAnswered, NodeStatusCall
from messages.health import (
    BooksTicked,
    HealthCheckDue,
    LedgerWriteFailed,
    LedgerWritesResumed,
    WebsocketLost,
    WebsocketSubscribed,
)
from runtime.router import CHAIN_IO, HEALTH

__all__ = ["Readiness", "Part", "ReadinessReport", "TX_INDEX"]

#: The readiness part that says whether the node keeps a tx index.
TX_INDEX = "tx index"


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Part:
    name: str
    ready: bool
    #: when it last became ready or not ready (None: since the start)
    since: datetime | None
    detail: str


@dataclass(frozen=True)
class ReadinessReport:
    at: datetime
    started: datetime | None
    parts: tuple[Part, ...]

    @property
    def ready(self) -> bool:
        return all(p.ready for p in self.parts)

    def lines(self) -> list[str]:
        """``ready`` or ``not ready``, then one line per part: ``chain: not ready since ...: why``."""
        out = ["ready" if self.ready else "not ready"]
        for p in self.parts:
            since = p.since or self.started
            when = f" since {_when(since)}" if since is not None else ""
            out.append(f"{p.name}: {'ready' if p.ready else 'NOT READY'}{when}: {p.detail}")
        return out


class Readiness:
    def __init__(
        self,
        check_interval: timedelta,
        max_node_lag: timedelta,
        *,
        websocket: bool,
        ledger: bool,
        signer: str = "",
    ) -> None:
        self.check_interval = check_interval
        self.max_node_lag = max_node_lag
        parts = [Part("chain", False, None, "not checked yet"), Part("node", False, None, "not checked yet")]
        if websocket:
            parts.append(Part("websocket", False, None, "not subscribed yet"))
        if ledger:
            parts.append(Part("ledger", True, None, "writable"))
        if signer:
            parts.append(Part("key", True, None, f"loaded: signing as {signer}"))
        if signer or ledger:
            parts.append(Part(TX_INDEX, False, None, "not checked yet"))
        self.parts: dict[str, Part] = {p.name: p for p in parts}
        #: parts not heard of yet: their first state is told, whatever it is
        self._unchecked = {"chain", "node", TX_INDEX}
        self.started: datetime | None = None
        self.checks = 0
        #: the status check not answered yet, if any
        self.in_flight: int | None = None

    def report(self, now: datetime) -> ReadinessReport:
        return ReadinessReport(now, self.started, tuple(self.parts.values()))

    def handle(self, message: Any, now: datetime) -> list[Effect]:
        if self.started is None:
            self.started = now
        if isinstance(message, HealthCheckDue):
            return self._check(now)
        if isinstance(message, NodeStatusAnswered):
            return self._answered(message, now)
        if isinstance(message, WebsocketSubscribed):
            return self._set("websocket", True, f"subscribed to {message.queries} queries on {message.url}", now)
        if isinstance(message, WebsocketLost):
            return self._set("websocket", False, f"reconnecting: {message.reason}", now)
        if isinstance(message, LedgerWriteFailed):
            return self._set("ledger", False, f"writes refused ({message.error}); {message.held} fact(s) held", now)
        if isinstance(message, LedgerWritesResumed):
            return self._set("ledger", True, f"writable (the {message.written} fact(s) held were written)", now)
        if isinstance(message, BooksTicked):
            return []  # the months' stages are for the metrics; a tick that ran means nothing is wrong here
        raise TypeError(f"health cannot handle {type(message).__name__}")

    def recover(self, message: Any, now: datetime) -> list[Effect]:
        """Handling ``message`` raised: the status checks go on (their timer is set by the handler that failed)."""
        if isinstance(message, HealthCheckDue):
            return [Send(HEALTH, HealthCheckDue(), at=now + self.check_interval)]
        if isinstance(message, NodeStatusAnswered) and message.round == self.in_flight:
            self.in_flight = None
        return []

    def _check(self, now: datetime) -> list[Effect]:
        out: list[Effect] = [Send(HEALTH, HealthCheckDue(), at=now + self.check_interval)]
        if self.in_flight is None:
            self.checks += 1
            self.in_flight = self.checks
            out.append(Send(CHAIN_IO, NodeStatusCall(self.checks, reply_to=HEALTH, tx_index=TX_INDEX in self.parts)))
        return out

    def _answered(self, m: NodeStatusAnswered, now: datetime) -> list[Effect]:
        if m.round == self.in_flight:
            self.in_flight = None
        status = m.status
        if m.error is not None or status is None:
            why = m.error.message if m.error is not None else "no status and no error"
            return self._set("chain", False, f"the node does not answer: {why}", now) + self._set(
                "node", False, "not known: the node does not answer", now
            )
        out = self._set("chain", True, f"the node answers (height {status.latest_block_height})", now)
        lag = now - status.latest_block_time
        if status.catching_up:
            out += self._set("node", False, f"catching up (height {status.latest_block_height})", now)
        elif lag > self.max_node_lag:
            out += self._set(
                "node", False, f"its latest block ({_when(status.latest_block_time)}) is {lag.total_seconds():.0f}s old", now
            )
        else:
            out += self._set("node", True, f"synced (height {status.latest_block_height})", now)
        if m.tx_index is True:
            out += self._set(TX_INDEX, True, "the node keeps a tx index", now)
        elif m.tx_index is False:
            out += self._set(TX_INDEX, False, f"the node keeps no tx index: {NO_TX_INDEX_HARM}", now)
        elif m.tx_index_error is not None and TX_INDEX in self.parts and not self.parts[TX_INDEX].ready:
            # Never known to be kept (a proxy refusing GetTx, say): not ready, saying why, rather than
            # "not checked yet" for ever. The sidecar's own tx lookups use GetTx too.
            out += self._set(TX_INDEX, False, f"could not be checked: {m.tx_index_error.message}", now)
        # (otherwise: not asked, or a passing failure after it was found kept: the part stays as it was)
        return out

    def _set(self, name: str, ready: bool, detail: str, now: datetime) -> list[Effect]:
        part = self.parts.get(name)
        if part is None:
            return []  # a part this sidecar does not have (no ledger, no websocket)
        first = name in self._unchecked
        self._unchecked.discard(name)
        if part.ready == ready:
            self.parts[name] = replace(part, detail=detail)
            if not first:
                return []  # the same, in other words: nothing to tell
        else:
            self.parts[name] = Part(name, ready, now, detail)
        if name in ("websocket", "ledger"):
            return []  # the listener and the ledger writer log their own troubles
        state = "ready" if ready else "not ready"
        return [Note(
            f"readiness: {name} {state}: {detail}", event=f"{name.replace(' ', '_')}_{'ready' if ready else 'not_ready'}",
            fields=(("part", name), ("ready", ready), ("detail", detail)), level="info" if ready else "warning",
        )]
