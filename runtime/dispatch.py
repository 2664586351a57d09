"""Pooled pykka actors: many actors, each with its own mailbox, on a few threads.

pykka's ``ThreadingActor`` gives every actor a thread. At 10,000 tenants that
costs seconds to start and hundreds of MB, and most of those threads sleep.
``PooledActor`` keeps pykka's actor model (``ActorRef``, ``tell``/``ask``,
proxies, ``on_start``/``on_stop``, one message at a time per actor, the
registry) and replaces only the loop: an actor whose mailbox has mail is
*runnable*, and a ``Dispatcher`` runs runnable actors on a fixed set of
threads, at most ``throughput`` messages at a time each, so a busy actor
cannot starve the rest.

Two dispatchers:

- ``ThreadedDispatcher``: worker threads, for running the sidecar;
- ``ManualDispatcher``: no threads; ``run_until_idle()`` delivers every
  pending message in the caller's thread, in a deterministic order. Tests
  and replay use it, so no test depends on thread timing.

Every delivery goes through the dispatcher, which is where capture taps in:
it numbers each delivered message and knows who sent it (the actor handling
a message when it called ``tell``, or the name given to ``sending_as``).

One bad message never stops an actor: where pykka would log a handler's
exception and stop the actor (a tenant's monitor gone for good because of
one odd chain answer), the dispatcher reports it to its ``Supervisor``
(``runtime.supervision``: logged with the message and its capture sequence
number, counted in ``failures`` by actor kind for the metrics, watched for
a crash loop) and delivers the actor's next message as usual. An ``ask``
still gets the exception.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import sys
import threading
import uuid
from datetime import datetime
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import pykka
from pykka import messages as pykka_messages
from pykka._envelope import Envelope  # the envelope type ActorRef.tell puts in inboxes

from runtime.future import PooledFuture
from runtime.supervision import Supervisor

__all__ = [
    "Delivery",
    "DeliveryTap",
    "Dispatcher",
    "ThreadedDispatcher",
    "ManualDispatcher",
    "PooledActor",
    "sending_as",
    "current_sender",
    "delivery_time",
    "stop_pooled",
]

logger = logging.getLogger(__name__)
#: pykka's own logger, for the lines ``PooledActor.start`` writes in pykka's stead.
_pykka_logger = logging.getLogger("pykka")
#: The registry ``PooledActor.start`` registers in (its list and lock, as ``register`` does).
_REGISTRY = pykka.ActorRegistry

#: Sender name for messages sent from outside any actor and outside ``sending_as``.
EXTERNAL = "external"


class _Context(threading.local):
    #: (sender, cause, now) on this thread: the actor handling a message when it
    #: tells (or the name given to ``sending_as``), the delivery number of that
    #: message, and the clock's time of that delivery (None outside one). One
    #: tuple, read and replaced whole: a thread-local's attributes cost a
    #: lookup each, and every delivery saves, sets and restores all three.
    state: tuple[str, int, datetime | None] = (EXTERNAL, 0, None)


_context = _Context()


class sending_as:
    """Messages told inside this block are captured as sent by ``name``.

    Timers use ``clock``, the chain I/O executor uses ``chain-io``. A class
    rather than a generator: chain-io enters one for every answer, 10,000 a
    check at 10,000 tenants, and a generator's context costs three times as much.
    """

    __slots__ = ("_name", "_cause", "_prev")

    def __init__(self, name: str, cause: int = 0) -> None:
        self._name = name
        self._cause = cause

    def __enter__(self) -> None:
        context = _context
        self._prev = prev = context.state
        context.state = (self._name, self._cause, prev[2])

    def __exit__(self, *exc: object) -> None:
        _context.state = self._prev


def current_sender() -> tuple[str, int]:
    sender, cause, _ = _context.state
    return sender, cause


def delivery_time() -> datetime | None:
    """The clock's time of the delivery being handled on this thread (None outside one).

    Read once per delivery, it is both what a capture records and the ``now``
    a core decides with, so a replay on the captured times decides alike.
    """
    return _context.state[2]


class Delivery(NamedTuple):
    """One message as it is handed to its actor: what a capture records.

    A tuple, so that the dispatcher makes one in C (``_new_delivery``) on
    every delivery a tap sees, and a capture packs it as it is, in the
    order of its fields: the capture's delivery row.
    """

    seq: int
    at: datetime
    sender: str
    recipient: str
    cause: int
    message: Any


#: Builds a ``Delivery`` from its six values without the Python-level
#: ``__new__`` a named tuple has: once per tapped delivery.
_new_delivery = tuple.__new__


class DeliveryTap(Protocol):
    def __call__(self, delivery: Delivery) -> None: ...


class _Mailbox:
    """An actor's inbox that makes its actor runnable on the dispatcher.

    Its mail is a list read from ``_head`` on, emptied whole once read: an
    empty list is 56 bytes where a deque is 760, and a sidecar holds one
    mailbox per tenant, nearly always empty (a deque's worth of bytes per
    tenant was 7.6 MB at 10,000 tenants); it stays O(1) a message for a
    mailbox thousands deep (the scheduler's, as every tenant answers a check).
    """

    __slots__ = ("actor", "dispatcher", "_mail", "_head", "_lock", "_scheduled", "_started")

    def __init__(self, actor: "PooledActor", dispatcher: "Dispatcher") -> None:
        self.actor = actor
        self.dispatcher = dispatcher
        self._mail: list[tuple[Envelope[Any], str, int] | None] = []
        self._head = 0
        self._lock = threading.Lock()
        # Runnable from birth: its first run is on_start().
        self._scheduled = True
        self._started = False

    def _pop(self) -> tuple[Envelope[Any], str, int]:
        """The oldest message (the caller holds the lock and knows there is one)."""
        mail, head = self._mail, self._head
        item = mail[head]
        head += 1
        if head == len(mail):
            mail.clear()
            head = 0
        else:
            mail[head - 1] = None  # read: let it go now, not when the list empties
        self._head = head
        return item  # type: ignore[return-value]

    def open_without_start(self) -> bool:
        """For an actor with nothing to run before its first message: runnable from its first
        mail on, not now. False when mail came first (it must be scheduled now)."""
        with self._lock:
            self._started = True  # pykka's on_start is a no-op: nothing to set up
            if len(self._mail) == self._head:
                self._scheduled = False
                return True
        return False

    # pykka's ActorInbox protocol --------------------------------------------
    def put(self, envelope: Envelope[Any], /) -> None:
        sender, cause, _ = _context.state
        with self._lock:
            self._mail.append((envelope, sender, cause))
            if self._scheduled:
                return
            self._scheduled = True
        self.dispatcher._runnable(self)

    def get(self) -> Envelope[Any]:
        with self._lock:
            if len(self._mail) == self._head:
                raise IndexError("get from an empty mailbox")
            return self._pop()[0]

    def empty(self) -> bool:
        with self._lock:
            return len(self._mail) == self._head

    def __len__(self) -> int:
        """Messages waiting (for the metrics' deepest mailbox)."""
        return len(self._mail) - self._head

    # dispatcher side ----------------------------------------------------------
    def run(self, throughput: int) -> None:
        actor = self.actor
        if not self._started:
            self._started = True
            actor._actor_loop_setup()
        # Once per message for every tenant a check reads: what the loop needs is looked up
        # once, and the stopped flag read as the attribute it is (a pooled actor's is a
        # ``_Stopped``, set only by pykka's ``_stop``).
        stopped = actor.actor_stopped
        lock, mail, deliver = self._lock, self._mail, self.dispatcher._deliver
        for _ in range(throughput):
            if stopped._set:
                actor._actor_loop_teardown()
                with lock:
                    self._scheduled = False
                return
            with lock:
                head = self._head
                if len(mail) == head:
                    self._scheduled = False
                    return
                envelope, sender, cause = mail[head]  # _pop(), inline
                head += 1
                if head == len(mail):
                    mail.clear()
                    head = 0
                else:
                    mail[head - 1] = None
                self._head = head
            deliver(actor, envelope, sender, cause)
        if stopped._set:
            actor._actor_loop_teardown()
        with lock:
            if len(mail) == self._head or stopped._set:
                self._scheduled = False
                return
        self.dispatcher._runnable(self)


class _Stopped:
    """An actor's stopped flag: ``threading.Event``'s ``is_set``/``set``/``wait``, for a pooled actor.

    pykka gives every actor a ``threading.Event``, a Condition with its own
    lock and waiter queue: 1.2 KB and a few microseconds per tenant monitor,
    for a flag nobody waits on (the dispatcher reads it; ``ActorRef.stop``
    waits on a future). A waiter, should one come, gets a real Event.
    """

    __slots__ = ("_set", "_event")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        with _WAITERS_LOCK:
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        if self._set:
            return True
        with _WAITERS_LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if self._set:  # set between the first look and the Event's making
            event.set()
        return event.wait(timeout)


#: pykka's own messages, which its ``Actor._handle_receive`` acts on; every other message
#: goes straight to ``on_receive`` (four isinstance tests less a delivery).
_PYKKA_MESSAGES = frozenset(
    {pykka_messages._ActorStop, pykka_messages.ProxyCall, pykka_messages.ProxyGetAttr, pykka_messages.ProxySetAttr}
)

#: Guards the making of a stopped flag's Event for a waiter (rare: see ``_Stopped``).
_WAITERS_LOCK = threading.Lock()

#: Actor URNs: unique in the process from a counter, random across processes from
#: one uuid4 (a uuid4 per actor cost 3 us of a monitor's start).
_URN_PREFIX = str(uuid.uuid4())[:24]
_URN_SEQ = itertools.count(1)


#: Delivery numbers, shared by every dispatcher in the process: the ledger
#: writer runs on a dispatcher of its own, and one capture must still have one
#: order of deliveries.
_DELIVERY_SEQ = itertools.count(1)


class Dispatcher:
    """Runs pooled actors. Subclasses decide on which thread."""

    def __init__(
        self,
        clock_now: Callable[[], datetime],
        throughput: int = 64,
        tap: DeliveryTap | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.clock_now = clock_now
        self.throughput = throughput
        self.tap = tap
        self._seq = _DELIVERY_SEQ
        self.delivered = 0
        #: where handler failures are reported (one may serve several dispatchers: the ledger writer's too)
        self.supervisor = supervisor or Supervisor(clock_now)

    @property
    def failures(self) -> collections.Counter[str]:
        """Messages whose handler raised, by actor kind (``actor_kind``); each was dropped, its actor went on."""
        return self.supervisor.failures

    def _runnable(self, mailbox: _Mailbox) -> None:
        raise NotImplementedError

    def _deliver(self, actor: "PooledActor", envelope: Envelope[Any], sender: str, cause: int) -> None:
        """Hand one message to its actor, with pykka's error semantics."""
        message = envelope.message
        seq = next(self._seq)
        self.delivered += 1
        now = self.clock_now()
        tap = self.tap
        if tap is not None and not isinstance(message, pykka_messages._ActorStop):
            tap(_new_delivery(Delivery, (seq, now, sender, actor.address, cause, message)))
        context = _context
        prev = context.state
        context.state = (actor.address, seq, now)
        try:
            if type(message) in _PYKKA_MESSAGES:
                response = actor._handle_receive(message)  # a stop, or a proxy's call
            else:
                response = actor.on_receive(message)  # what pykka's _handle_receive does with the rest
            if envelope.reply_to is not None:
                envelope.reply_to.set(response)
        except Exception as exc:
            # Logged, counted, dropped and survived (the module doc): not
            # pykka's _handle_failure, which would stop the actor. An ask's
            # caller gets the exception itself, so it is not logged twice.
            self.supervisor.failed(actor.address, message, seq, exc, log=envelope.reply_to is None)
            if envelope.reply_to is not None:
                envelope.reply_to.set_exception()
        except BaseException:
            logger.debug("%r in %s: stopping all actors", sys.exc_info()[1], actor)
            actor._stop()
            pykka.ActorRegistry.stop_all(block=False)
        finally:
            context.state = prev

    def wait(self, future: pykka.Future[Any], timeout: float | None = None) -> Any:
        """The future's value, letting this dispatcher make progress meanwhile."""
        return future.get(timeout=timeout)

    def shutdown(self) -> None:
        pass


class ThreadedDispatcher(Dispatcher):
    """A fixed pool of worker threads shared by every pooled actor."""

    def __init__(
        self,
        clock_now: Callable[[], datetime],
        workers: int = 2,
        throughput: int = 64,
        tap: DeliveryTap | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        super().__init__(clock_now, throughput, tap, supervisor)
        self._queue: queue.SimpleQueue[_Mailbox | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"dispatcher-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    def _runnable(self, mailbox: _Mailbox) -> None:
        self._queue.put(mailbox)

    def _work(self) -> None:
        while True:
            mailbox = self._queue.get()
            if mailbox is None:
                return
            try:
                mailbox.run(self.throughput)
            except Exception:  # the loop itself must survive anything
                logger.exception("dispatcher worker caught an error")

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)


class ManualDispatcher(Dispatcher):
    """No threads: ``run_until_idle()`` delivers all pending mail, deterministically."""

    def __init__(
        self,
        clock_now: Callable[[], datetime],
        throughput: int = 64,
        tap: DeliveryTap | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        super().__init__(clock_now, throughput, tap, supervisor)
        self._runq: collections.deque[_Mailbox] = collections.deque()
        self._lock = threading.Lock()

    def _runnable(self, mailbox: _Mailbox) -> None:
        with self._lock:
            self._runq.append(mailbox)

    def run_until_idle(self, max_messages: int = 10_000_000) -> int:
        """Deliver until no actor has mail. Returns how many messages were delivered."""
        start = self.delivered
        while self.delivered - start < max_messages:
            with self._lock:
                if not self._runq:
                    break
                mailbox = self._runq.popleft()
            mailbox.run(self.throughput)
        return self.delivered - start

    def wait(self, future: pykka.Future[Any], timeout: float | None = None) -> Any:
        self.run_until_idle()
        return future.get(timeout=0)


class PooledActor(pykka.Actor):
    """A pykka actor run by a ``Dispatcher`` instead of a thread of its own.

    ``address`` names the actor in captures and in the ``Router``.
    """

    def __init__(self, dispatcher: Dispatcher, address: str) -> None:
        self.dispatcher = dispatcher
        self.address = address
        #: taken out of pykka's registry already, with others (``stop_pooled``): ``_stop`` need not look
        self._unregistered = False
        # pykka's Actor.__init__ sets these four, with a uuid4 and a threading.Event
        # per actor; a pooled actor needs neither (``_Stopped``, ``_URN_PREFIX``).
        self.actor_urn = f"urn:uuid:{_URN_PREFIX}{next(_URN_SEQ):012x}"
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = _Stopped()  # type: ignore[assignment]
        self._actor_ref = pykka.ActorRef(self)

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> pykka.ActorRef[Any]:
        """pykka's ``Actor.start``, but for its debug lines ("Registered", "Starting"), which
        pykka formats whether debug is on or not: a tenth of a monitor's start."""
        obj = cls(*args, **kwargs)
        ref = obj._actor_ref
        # ``ActorRegistry.register`` without its f-string: the same list under the same lock.
        with _REGISTRY._actor_refs_lock:
            _REGISTRY._actor_refs.append(ref)
        if _pykka_logger.isEnabledFor(logging.DEBUG):
            _pykka_logger.debug("Registered %s", ref)
            _pykka_logger.debug("Starting %s", obj)
        obj._start_actor_loop()
        return ref

    def _stop(self) -> None:
        """pykka's ``Actor._stop``, less what ``stop_pooled`` did already and its "Stopped" f-string.

        ``ActorRegistry.unregister`` looks for the ref in pykka's list, twice:
        each stop costs a scan of every actor still registered.
        """
        if not self._unregistered:
            _REGISTRY.unregister(self._actor_ref)
        self.actor_stopped.set()
        if _pykka_logger.isEnabledFor(logging.DEBUG):
            _pykka_logger.debug("Stopped %s", self)
        try:
            self.on_stop()
        except Exception:
            self._handle_failure(*sys.exc_info())

    def _create_actor_inbox(self) -> _Mailbox:  # type: ignore[override]
        return _Mailbox(self, self.dispatcher)

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return PooledFuture()  # a ThreadingFuture without a Condition per ask (runtime.future)

    def _start_actor_loop(self) -> None:
        inbox: _Mailbox = self.actor_inbox  # type: ignore[assignment]
        # An actor without an on_start of its own (every tenant monitor) would spend its first
        # run, a trip through the run queue, calling pykka's no-op on_start: it is made runnable
        # by its first message instead, half the run-queue traffic of starting 10,000 monitors.
        if type(self).on_start is pykka.Actor.on_start and inbox.open_without_start():
            return
        self.dispatcher._runnable(inbox)

    def __str__(self) -> str:
        return f"{self.__class__.__name__}({self.address})"


def stop_pooled(refs: Sequence[pykka.ActorRef[Any]]) -> None:
    """Ask many actors to stop, the pooled ones taken out of pykka's registry in one pass first.

    pykka's ``ActorRegistry.unregister`` looks for an actor's ref in its list
    of every actor: stopped one by one, a sidecar's 100,000 tenant monitors
    took 11.7 s, 19 times what 10,000 took. Here they leave the list at once,
    as they are asked to stop, where pykka takes each out when its stop is
    handled, after the mail it had before: a monitor still working through
    that mail is already out of ``get_all`` and ``stop_all``, and is stopping.
    """
    actors = [ref.actor_inbox.actor for ref in refs if isinstance(ref.actor_inbox, _Mailbox)]
    if actors:
        # The ref each registered (``PooledActor.start``), whichever ref of it was given.
        leaving = {id(actor._actor_ref) for actor in actors}  # type: ignore[attr-defined]
        with _REGISTRY._actor_refs_lock:
            for actor in actors:
                actor._unregistered = True  # type: ignore[attr-defined]
            _REGISTRY._actor_refs[:] = [ref for ref in _REGISTRY._actor_refs if id(ref) not in leaving]
    for ref in refs:
        ref.stop(block=False)  # an actor already dead gets a failed future, not an error


def actor_kind(address: str) -> str:
    """``tenant/manifest1...`` -> ``tenant``: what metrics label an actor by (one label per kind, not per tenant)."""
    return address.partition("/")[0]


__all__.append("actor_kind")


def fan_out(*taps: DeliveryTap | None) -> DeliveryTap | None:
    """One tap that calls each given tap (None entries are skipped)."""
    live = [t for t in taps if t is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def tap(delivery: Delivery) -> None:
        for t in live:
            t(delivery)

    return tap


__all__.append("fan_out")
