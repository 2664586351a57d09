"""The clock and the pooled actor runtime."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pykka
import pytest

from runtime.clock import ManualClock, RealClock, utc
from runtime.dispatch import Delivery, Dispatcher, ManualDispatcher, PooledActor, ThreadedDispatcher, sending_as, stop_pooled
from runtime.router import Router
from tests.support import probe


def test_manual_clock_fires_due_timers_in_time_order_at_their_time() -> None:
    clock = ManualClock(utc(2026, 1, 1))
    seen: list[tuple[str, Any]] = []
    clock.call_at(utc(2026, 1, 1, 0, 0, 30), lambda: seen.append(("b", clock.now())))
    clock.call_at(utc(2026, 1, 1, 0, 0, 10), lambda: seen.append(("a", clock.now())))
    late = clock.call_at(utc(2026, 1, 1, 0, 5), lambda: seen.append(("late", clock.now())))
    cancelled = clock.call_at(utc(2026, 1, 1, 0, 0, 20), lambda: seen.append(("x", clock.now())))
    cancelled.cancel()
    clock.advance(timedelta(minutes=1))
    assert seen == [("a", utc(2026, 1, 1, 0, 0, 10)), ("b", utc(2026, 1, 1, 0, 0, 30))]
    assert clock.now() == utc(2026, 1, 1, 0, 1)
    assert clock.next_timer() == late.when


def test_accelerated_clock_runs_speed_times_faster_and_fires_timers() -> None:
    clock = RealClock(speed=1000.0, start=utc(2026, 1, 1))
    try:
        fired = threading.Event()
        clock.call_at(utc(2026, 1, 1, 0, 0, 50), fired.set)  # 50 simulated s = 0.05 real s
        assert fired.wait(2.0)
        assert clock.now() >= utc(2026, 1, 1, 0, 0, 50)
    finally:
        clock.close()


class Counter(PooledActor):
    def __init__(self, dispatcher: Any, address: str) -> None:
        super().__init__(dispatcher, address)
        self.handled: list[Any] = []
        self.active = 0
        self.max_active = 0

    def on_receive(self, message: Any) -> Any:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.handled.append(message)
        self.active -= 1
        return message


def test_pooled_actor_is_a_pykka_actor_with_its_own_mailbox_in_order() -> None:
    clock = ManualClock()
    d = ManualDispatcher(clock.now)
    ref = Counter.start(d, "c")
    for i in range(200):
        ref.tell(i)
    future = ref.ask("last", block=False)
    assert d.wait(future) == "last"
    actor = ref.actor_inbox.actor  # type: ignore[attr-defined]
    assert actor.handled == list(range(200)) + ["last"]
    assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is ref
    ref.stop(block=False)
    d.run_until_idle()
    assert not ref.is_alive()
    assert pykka.ActorRegistry.get_by_urn(ref.actor_urn) is None and ref not in pykka.ActorRegistry.get_all()


class Stopping(Counter):
    stopped: list[str] = []

    def on_stop(self) -> None:
        Stopping.stopped.append(self.address)


def test_stop_pooled_takes_many_actors_out_of_the_registry_at_once_and_each_still_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock()
    d = ManualDispatcher(clock.now)
    Stopping.stopped = []
    refs = [Stopping.start(d, f"s{i}") for i in range(5)]
    staying = Stopping.start(d, "stays")
    for ref in refs:
        ref.tell("before the stop")
    scans: list[Any] = []
    unregister = pykka.ActorRegistry.unregister
    monkeypatch.setattr(pykka.ActorRegistry, "unregister", lambda ref: (scans.append(ref), unregister(ref)))
    stop_pooled(refs)
    # Out of the registry at once (as pykka's own unregister leaves a ref), the others kept.
    registered = pykka.ActorRegistry.get_all()
    assert not any(ref in registered for ref in refs) and staying in registered
    d.run_until_idle()
    assert all(not ref.is_alive() for ref in refs) and staying.is_alive()
    # Each handled its mail from before the stop, then ran on_stop; none looked for itself in the list again.
    assert [r.actor_inbox.actor.handled for r in refs] == [["before the stop"]] * 5  # type: ignore[attr-defined]
    assert Stopping.stopped == [f"s{i}" for i in range(5)] and scans == []
    staying.stop(block=False)  # one actor stopped alone takes itself out, as pykka does
    d.run_until_idle()
    assert scans == [staying] and staying not in pykka.ActorRegistry.get_all()
    stop_pooled(refs)  # asking the stopped again is harmless


def test_a_mailbox_keeps_order_through_bursts_and_lets_read_mail_go() -> None:
    """Mail arriving while earlier mail is read, in bursts deeper than one run's throughput."""
    clock = ManualClock()
    d = ManualDispatcher(clock.now, throughput=7)
    ref = Counter.start(d, "c")
    inbox = ref.actor_inbox
    sent = 0
    for burst in (1, 50, 3, 200):
        for _ in range(burst):
            ref.tell(sent)
            sent += 1
        assert len(inbox) == burst and not inbox.empty()  # type: ignore[arg-type]
        mailbox = inbox._mail  # type: ignore[attr-defined]
        d._runq.popleft().run(7)  # one run: seven read, the rest waiting, the read ones let go
        read = min(burst, 7)
        assert len(inbox) == burst - read  # type: ignore[arg-type]
        assert mailbox.count(None) == (read if burst > read else 0)
        d.run_until_idle()
        assert inbox.empty() and inbox._mail == []  # type: ignore[attr-defined]
    actor = inbox.actor  # type: ignore[attr-defined]
    assert actor.handled == list(range(sent))
    ref.stop(block=False)
    d.run_until_idle()


def test_a_pooled_actors_stopped_flag_wakes_a_waiter_and_stop_can_block() -> None:
    clock = ManualClock()
    d = ThreadedDispatcher(clock.now, workers=1)
    try:
        refs = [Counter.start(d, f"c{i}") for i in range(3)]
        assert len({r.actor_urn for r in refs}) == 3 and all(r.actor_urn.startswith("urn:uuid:") for r in refs)
        waiter_saw: list[bool] = []
        waiter = threading.Thread(target=lambda: waiter_saw.append(refs[0].actor_stopped.wait(5)))
        waiter.start()
        refs[0].stop(block=True, timeout=5)
        waiter.join(5)
        assert waiter_saw == [True] and not refs[0].is_alive()
        assert refs[1].actor_stopped.wait(0.01) is False and refs[1].is_alive()
        with pytest.raises(pykka.ActorDeadError):
            refs[0].tell("late")
    finally:
        for r in refs[1:]:
            r.stop(block=True, timeout=5)
        d.shutdown()


def test_a_pooled_actor_answers_its_proxy_as_a_pykka_actor_does() -> None:
    """Messages of pykka's own (a proxy's calls and attribute reads) go through pykka; the rest straight to on_receive."""
    clock = ManualClock()
    d = ManualDispatcher(clock.now)
    ref = Counter.start(d, "c")
    proxy = ref.proxy()
    assert d.wait(proxy.on_receive("by proxy")) == "by proxy"
    assert d.wait(proxy.handled) == ["by proxy"]
    ref.tell("told")
    d.run_until_idle()
    assert ref.actor_inbox.actor.handled == ["by proxy", "told"]  # type: ignore[attr-defined]
    ref.stop(block=False)
    d.run_until_idle()
    assert not ref.is_alive()


def test_threaded_dispatcher_runs_each_actor_one_message_at_a_time() -> None:
    clock = ManualClock()
    d = ThreadedDispatcher(clock.now, workers=2, throughput=3)
    refs = [Counter.start(d, f"c{i}") for i in range(20)]
    try:
        for r in refs:
            for j in range(50):
                r.tell(j)
        for r in refs:
            assert r.ask("done", timeout=5) == "done"
        for r in refs:
            actor = r.actor_inbox.actor  # type: ignore[attr-defined]
            assert actor.handled == list(range(50)) + ["done"]
            assert actor.max_active == 1
    finally:
        for r in refs:
            r.stop(timeout=5)
        d.shutdown()


def test_deliveries_name_sender_recipient_and_cause() -> None:
    clock = ManualClock(utc(2026, 2, 1))
    taps: list[Delivery] = []
    d = ManualDispatcher(clock.now, tap=taps.append)
    router = Router()

    class Relay(PooledActor):
        def on_receive(self, message: Any) -> None:
            router.tell("sink", ("relayed", message))
            router.tell_at(clock, utc(2026, 2, 1, 0, 1), "sink", "timer")

    router.add("relay", Relay.start(d, "relay"))
    probe(router, d, "sink")
    with sending_as("operator"):
        router.tell("relay", "hello")
    d.run_until_idle()
    clock.advance(timedelta(minutes=1))  # the timer's time: delivered then
    d.run_until_idle()
    first, second, third = taps
    assert (first.sender, first.recipient, first.cause, first.message) == ("operator", "relay", 0, "hello")
    assert (second.sender, second.recipient, second.cause) == ("relay", "sink", first.seq)
    assert (third.sender, third.cause, third.at) == ("clock", first.seq, utc(2026, 2, 1, 0, 1))


def test_an_exception_in_a_told_message_is_counted_and_the_actor_goes_on() -> None:
    clock = ManualClock()
    d = ManualDispatcher(clock.now)

    class Fragile(PooledActor):
        def __init__(self, dispatcher: ManualDispatcher, address: str) -> None:
            super().__init__(dispatcher, address)
            self.handled: list[Any] = []

        def on_receive(self, message: Any) -> None:
            if message == "bad":
                raise RuntimeError("boom")
            self.handled.append(message)

    fragile = Fragile.start(d, "tenant/manifest1x")
    fragile.tell("bad")
    fragile.tell("good")
    d.run_until_idle()
    assert fragile.is_alive()
    assert fragile.actor_inbox.actor.handled == ["good"]  # type: ignore[attr-defined]
    assert d.failures == {"tenant": 1}
    with pytest.raises(RuntimeError, match="boom"):  # an ask still gets the error
        future = fragile.ask("bad", block=False)
        d.run_until_idle()
        future.get(timeout=0)
    assert d.failures == {"tenant": 2}


class Starting(PooledActor):
    def __init__(self, dispatcher: Dispatcher, address: str) -> None:
        super().__init__(dispatcher, address)
        self.log: list[Any] = []

    def on_start(self) -> None:
        self.log.append("start")

    def on_receive(self, message: Any) -> Any:
        self.log.append(message)


def test_an_actor_without_on_start_is_runnable_from_its_first_message_and_one_with_it_at_once() -> None:
    clock = ManualClock()
    d = ManualDispatcher(clock.now)
    plain = Counter.start(d, "plain")
    starting = Starting.start(d, "starting")
    assert list(d._runq) == [starting.actor_inbox]  # nothing to run for the plain one yet
    assert d.run_until_idle() == 0
    assert starting.actor_inbox.actor.log == ["start"]  # on_start ran, no message needed
    plain.tell(1)
    starting.tell(2)
    assert d.run_until_idle() == 2
    assert plain.actor_inbox.actor.handled == [1] and starting.actor_inbox.actor.log == ["start", 2]
    # Mail before the start finished (a ref found in the registry): the actor is scheduled for it.
    early = Counter(d, "early")
    early.actor_ref.tell("first")
    early._start_actor_loop()
    assert d.run_until_idle() == 1 and early.handled == ["first"]
    for ref in (plain, starting):
        ref.stop(block=False)
    d.run_until_idle()
    assert not plain.is_alive() and not starting.is_alive()


def test_stop_pooled_takes_out_the_registered_ref_whichever_ref_of_the_actor_it_is_given() -> None:
    clock = ManualClock()
    d = ManualDispatcher(clock.now)
    ref = Counter.start(d, "c")
    twin = pykka.ActorRef(ref.actor_inbox.actor)  # another ref to the same actor
    stop_pooled([twin])
    d.run_until_idle()
    assert not ref.is_alive() and ref not in pykka.ActorRegistry.get_all()
