"""Fault injection for chain clients: make any call fail, stall, lag or answer stale.

Tests and the demo describe what should go wrong per operation name (the
``ChainClient`` method names); the client consults the plan before every
call. Random failures use a seeded generator so a run can be repeated.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from chain.errors import ChainError

__all__ = ["Faults"]


@dataclass
class _Rule:
    fail_next: int = 0
    #: calls to let through before ``fail_next`` starts failing
    fail_after: int = 0
    error: Callable[[], ChainError] | None = None
    fail_rate: float = 0.0
    latency: float = 0.0
    stale: bool = False
    stall: threading.Event | None = None
    #: calls whose answer is lost after they were applied
    lose_answers: int = 0
    #: Tenants (or any first argument) the rule applies to; empty: all calls.
    only: frozenset[str] = field(default_factory=frozenset)


def _unavailable(operation: str) -> ChainError:
    return ChainError.transport(f"{operation}: injected failure (node unavailable)")


class Faults:
    """Per-operation faults. Thread-safe; cheap when nothing is injected."""

    def __init__(self, seed: int = 1) -> None:
        self._rules: dict[str, _Rule] = {}
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self.catching_up = False
        self._closed = threading.Event()

    def _rule(self, operation: str) -> _Rule:
        return self._rules.setdefault(operation, _Rule())

    def fail(
        self, operation: str, times: int = 1, error: Callable[[], ChainError] | None = None, after: int = 0
    ) -> None:
        """After ``after`` more calls, ``times`` calls of ``operation`` raise ``error()`` (default: node unavailable)."""
        with self._lock:
            rule = self._rule(operation)
            rule.fail_next += times
            rule.fail_after = after
            rule.error = error

    def lose_answer(self, operation: str, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` are applied, then their answer is lost
        (a transaction broadcast whose inclusion the client never saw)."""
        with self._lock:
            self._rule(operation).lose_answers += times

    def answer_lost(self, operation: str) -> bool:
        """After a call was applied: whether its answer is to be lost (uses up one)."""
        rule = self._rules.get(operation)
        if rule is None or not rule.lose_answers:
            return False
        with self._lock:
            if rule.lose_answers <= 0:
                return False
            rule.lose_answers -= 1
            return True

    def fail_rate(self, operation: str, rate: float, only: frozenset[str] = frozenset()) -> None:
        """Each call of ``operation`` (for the given first arguments) fails with probability ``rate``."""
        with self._lock:
            rule = self._rule(operation)
            rule.fail_rate = rate
            rule.only = only

    def always_failing(self, operation: str) -> frozenset[str]:
        """The subjects every call of ``operation`` fails for (a ``fail_rate`` of 1 ``only`` for them).

        A node that cannot answer a tenant's account cannot list it either:
        its client leaves that tenant out of the listings of many accounts.
        """
        rule = self._rules.get(operation)
        return rule.only if rule is not None and rule.fail_rate >= 1.0 else frozenset()

    def latency(self, operation: str, seconds: float) -> None:
        with self._lock:
            self._rule(operation).latency = seconds

    def stale(self, operation: str, on: bool = True) -> None:
        """From now on ``operation`` answers what it answered at its first call after this, for the same arguments."""
        with self._lock:
            self._rule(operation).stale = on

    def stall(self, operation: str) -> threading.Event:
        """Calls of ``operation`` block until the returned event is set (or ``close()``)."""
        with self._lock:
            ev = threading.Event()
            self._rule(operation).stall = ev
            return ev

    def clear(self, operation: str | None = None) -> None:
        with self._lock:
            if operation is None:
                for rule in self._rules.values():
                    if rule.stall:
                        rule.stall.set()
                self._rules.clear()
            else:
                rule = self._rules.pop(operation, None)
                if rule and rule.stall:
                    rule.stall.set()

    def close(self) -> None:
        """Release every stalled call (they then fail)."""
        self._closed.set()
        self.clear()

    def before(self, operation: str, subject: str = "") -> bool:
        """Apply the plan to one call. Raises the injected error; returns True to answer stale."""
        rule = self._rules.get(operation)
        if rule is None:
            return False
        if rule.stall is not None:
            stall = rule.stall
            while not stall.wait(0.05):
                if self._closed.is_set():
                    break
            if self._closed.is_set():
                raise ChainError.transport(f"{operation}: client closed while stalled")
        if rule.latency:
            time.sleep(rule.latency)
        with self._lock:
            if rule.fail_after > 0:
                rule.fail_after -= 1
            elif rule.fail_next > 0:
                rule.fail_next -= 1
                raise (rule.error or (lambda: _unavailable(operation)))()
            if rule.fail_rate and (not rule.only or subject in rule.only):
                if self._random.random() < rule.fail_rate:
                    raise _unavailable(operation)
        return rule.stale
