"""``runtime.future.PooledFuture`` behaves as pykka's ``ThreadingFuture`` does, for each of them."""

from __future__ import annotations

import queue
import threading
import traceback
from typing import Any, Callable

import pykka
import pytest

from runtime.dispatch import ManualDispatcher, PooledActor, ThreadedDispatcher
from runtime.future import PooledFuture
from runtime.clock import ManualClock, utc

FUTURES: list[Callable[[], Any]] = [pykka.ThreadingFuture, PooledFuture]


@pytest.fixture(params=FUTURES, ids=["ThreadingFuture", "PooledFuture"])
def make(request: Any) -> Callable[[], Any]:
    return request.param  # type: ignore[no-any-return]


def test_a_value_set_is_got_by_every_reader(make: Callable[[], Any]) -> None:
    f = make()
    f.set({"a": 1})
    assert f.get() == {"a": 1} and f.get(timeout=0) == {"a": 1}
    assert isinstance(f, pykka.ThreadingFuture)


def test_an_unset_future_times_out_and_a_second_set_is_refused(make: Callable[[], Any]) -> None:
    f = make()
    for timeout in (0, 0.01, -1):
        with pytest.raises(pykka.Timeout):
            f.get(timeout=timeout)
    f.set(None)
    assert f.get(timeout=0) is None  # None is a value like any other
    with pytest.raises(queue.Full):
        f.set(2)
    with pytest.raises(queue.Full):
        f.set_exception((ValueError, ValueError("x"), None))
    with pytest.raises(queue.Full):
        f.set_get_hook(lambda timeout: 3)


def test_an_exception_set_is_raised_with_its_traceback(make: Callable[[], Any]) -> None:
    f = make()
    try:
        raise KeyError("gone")
    except KeyError:
        f.set_exception()
    for _ in range(2):
        with pytest.raises(KeyError, match="gone") as info:
            f.get()
        assert "raise KeyError" in "".join(traceback.format_tb(info.value.__traceback__))
    g = make()
    g.set_exception((RuntimeError, None, None))  # no instance: one is made
    with pytest.raises(RuntimeError):
        g.get()


def test_get_hooks_and_the_combinators_built_on_them(make: Callable[[], Any]) -> None:
    calls = []
    f = make()
    f.set_get_hook(lambda timeout: calls.append(timeout) or 5)
    assert f.get(timeout=1) == 5 and f.get() == 5 and calls == [1]  # evaluated once
    with pytest.raises(queue.Full):
        f.set(6)
    a, b = make(), make()
    a.set([1, 2, 3])
    b.set(10)
    assert a.map(len).get() == 3
    assert a.filter(lambda x: x > 1).get() == [2, 3]
    assert a.reduce(lambda x, y: x + y).get() == 6
    assert a.join(b).get() == [[1, 2, 3], 10]
    assert pykka.get_all([a, b]) == [[1, 2, 3], 10]


def test_a_reader_blocked_in_another_thread_gets_the_value_set_later(make: Callable[[], Any]) -> None:
    f = make()
    got: list[Any] = []
    readers = [threading.Thread(target=lambda: got.append(f.get(timeout=30))) for _ in range(3)]
    for t in readers:
        t.start()
    f.set("v")  # before or after the readers block: either way each reads it
    for t in readers:
        t.join(timeout=30)
    assert got == ["v", "v", "v"]


class Echo(PooledActor):
    def on_receive(self, message: Any) -> Any:
        if message == "boom":
            raise ValueError("boom")
        return message * 2


def test_a_pooled_actors_ask_answers_through_a_pooled_future() -> None:
    clock = ManualClock(utc(2026, 3, 1))
    manual = ManualDispatcher(clock.now)
    ref = Echo.start(manual, "echo")
    future = ref.ask(21, block=False)
    assert isinstance(future, PooledFuture)
    manual.run_until_idle()
    assert future.get(timeout=0) == 42
    failed = ref.ask("boom", block=False)
    manual.run_until_idle()
    with pytest.raises(ValueError, match="boom"):
        failed.get(timeout=0)
    stopped = ref.stop(block=False)
    manual.run_until_idle()
    assert stopped.get(timeout=0) is True
    threaded = ThreadedDispatcher(clock.now, workers=2)
    try:
        ref = Echo.start(threaded, "echo2")
        assert ref.ask(4, timeout=30) == 8
        assert ref.stop(timeout=30) is True
    finally:
        threaded.shutdown()
