"""``PooledFuture``: pykka's ``ThreadingFuture``, waited on through a lock instead of a Condition.

Every ``ask`` of a pooled actor makes a future. ``ThreadingFuture`` builds a
``threading.Condition`` for each (an RLock and a Python object, set up in
Python), enters it to set the value and again to read it, and builds a
result tuple: most of the cost of an ask of an actor that answers at once
(a third of starting 10,000 tenant monitors and asking each once).

Here the future holds two C locks: ``_ready``, taken at creation and
released once, when a value, an exception or a get hook is set (a waiter
takes it and gives it back, so every waiter passes); and ``_guard``, which
makes "set at most once" and a get hook's one evaluation atomic, as the
Condition's re-entrant lock did. Same behaviour: ``get(timeout)`` raises ``pykka.Timeout``, a
second set raises ``queue.Full``, an exception is re-raised with its
traceback, and ``map``/``filter``/``join``/``reduce`` (pykka's, on top of
``set_get_hook``) work unchanged. A subclass of ``ThreadingFuture``, so
anything that tests for one still finds one.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any, TypeVar

import pykka
from pykka._future import _Unset

__all__ = ["PooledFuture"]

T = TypeVar("T")

_allocate = threading.Lock
_allocate_reentrant = threading.RLock
#: ``Future``'s "no get-hook result yet" marker; pykka tests it with isinstance, so one serves all.
_UNSET = _Unset()


class PooledFuture(pykka.ThreadingFuture[T]):
    def __init__(self) -> None:  # not ThreadingFuture's: no Condition
        self._get_hook = None
        self._get_hook_result = _UNSET
        #: (value, exc_info), or None until set
        self._result: Any = None
        self._guard = _allocate_reentrant()  # re-entrant, as the Condition's RLock: a hook may read its own future
        self._ready = _allocate()
        self._ready.acquire()

    def get(self, *, timeout: float | None = None) -> Any:
        if self._result is None and self._get_hook is None:
            if not self._ready.acquire(True, -1 if timeout is None else max(timeout, 0.0)):
                raise pykka.Timeout(f"{timeout} seconds")
            self._ready.release()  # for the next waiter
        if self._get_hook is not None:
            with self._guard:  # the hook runs once (``Future.get`` keeps its result)
                return pykka.Future.get(self, timeout=timeout)
        value, exc_info = self._result
        if exc_info is not None:
            exc_type, exc_value, exc_traceback = exc_info
            if exc_value is None:
                exc_value = exc_type()
            if exc_value.__traceback__ is not exc_traceback:
                raise exc_value.with_traceback(exc_traceback)
            raise exc_value
        return value

    def _settle(self, result: Any) -> None:
        with self._guard:
            if self._result is not None or self._get_hook is not None:
                raise queue.Full
            self._result = result
            self._ready.release()

    def set(self, value: Any | None = None) -> None:
        self._settle((value, None))

    def set_exception(self, exc_info: Any = None) -> None:
        assert exc_info is None or len(exc_info) == 3
        self._settle((None, exc_info if exc_info is not None else sys.exc_info()))

    def set_get_hook(self, func: Any) -> None:
        with self._guard:
            if self._result is not None:
                raise queue.Full
            first = self._get_hook is None
            pykka.Future.set_get_hook(self, func)
            if first:  # a hook set again replaces the first, as in ThreadingFuture; _ready is open already
                self._ready.release()
