"""Addresses for actors: ``scheduler``, ``chain``, ``tenant/<address>``, ...

Actors send to an address, not to a ref, so that a tenant actor can be
stopped and started again without its peers holding a dead ref, and so that
captures name senders and recipients the way an operator would.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

import pykka
from pykka._envelope import Envelope  # what ActorRef.tell puts in an inbox (as runtime.dispatch uses it)

from runtime.clock import Clock, TimerHandle
from runtime.dispatch import actor_kind, current_sender, sending_as

__all__ = ["Router", "tenant_address", "SCHEDULER", "CHAIN", "CHAIN_IO", "LISTENER", "LEDGER", "HEALTH"]

logger = logging.getLogger(__name__)

SCHEDULER = "scheduler"
CHAIN = "chain"
CHAIN_IO = "chain-io"
LISTENER = "listener"
LEDGER = "ledger"
HEALTH = "health"


def tenant_address(tenant: str) -> str:
    return f"tenant/{tenant}"


class Router:
    """Address -> actor ref. Mail for an address with no actor is counted and dropped."""

    def __init__(self) -> None:
        self._refs: dict[str, pykka.ActorRef[Any]] = {}
        self._lock = threading.Lock()
        self.dead_letters = 0

    def add(self, address: str, ref: pykka.ActorRef[Any]) -> None:
        with self._lock:
            self._refs[address] = ref

    def remove(self, address: str) -> pykka.ActorRef[Any] | None:
        with self._lock:
            return self._refs.pop(address, None)

    def get(self, address: str) -> pykka.ActorRef[Any] | None:
        return self._refs.get(address)

    def addresses(self) -> list[str]:
        with self._lock:
            return list(self._refs)

    def deepest_mailboxes(self) -> dict[str, int]:
        """The most messages waiting in one mailbox, per actor kind (``tenant``, ``scheduler``, ...)."""
        with self._lock:
            refs = list(self._refs.items())
        out: dict[str, int] = {}
        for address, ref in refs:
            kind = actor_kind(address)
            inbox = ref.actor_inbox
            n = inbox.qsize() if hasattr(inbox, "qsize") else len(inbox)  # a thread-per-actor inbox is a queue
            if n >= out.get(kind, 0):
                out[kind] = n
        return out

    def tell(self, address: str, message: Any) -> bool:
        ref = self._refs.get(address)
        if ref is None:
            self.dead_letters += 1
            logger.debug("no actor at %s for %s", address, type(message).__name__)
            return False
        # ``ActorRef.tell``, inline: the same test of the actor's stopped flag and the same
        # envelope in its inbox, without two calls per message (three a tenant a check).
        if ref.actor_stopped.is_set():
            self.dead_letters += 1
            return False
        ref.actor_inbox.put(Envelope(message))
        return True

    def tell_at(self, clock: Clock, when: datetime, address: str, message: Any) -> TimerHandle:
        """Deliver ``message`` to ``address`` when the clock reaches ``when``.

        The delivery is captured as sent by ``clock``, caused by the message
        whose handling set the timer, so replay can tie a timer back to the
        decision that set it.
        """
        _, cause = current_sender()

        def fire() -> None:
            with sending_as("clock", cause):
                self.tell(address, message)

        return clock.call_at(when, fire)
