"""The websocket listener: the chain's lease events, fed to the scheduler as messages.

``ListenerActor`` (address ``listener``) owns a background thread running an
asyncio websocket client (``LeaseEventStream``) connected to the node's
CometBFT ``/websocket``. It subscribes to the provider's five queries
(``chain.ws_query.provider_queries``), parses every lease event of every
matching tx (``chain.ws_events``), delivers each one once as
``LeaseEventReceived`` to ``scheduler``, and after every successful connect
and subscribe sends ``Reconcile`` to ``scheduler``: a node replays nothing,
so whatever happened while the listener was away (or before it first
connected) is recovered by re-reading the chain's active leases. Nothing
missed stays missed. It also tells ``health`` of each subscribe
(``WebsocketSubscribed``) and each lost session or failed attempt
(``WebsocketLost``): what ``/readyz`` and the metrics say of the websocket.

Keeping the connection alive:

- a peer that stops answering pings for ``ping_timeout`` is dead (websockets
  keepalive), and a dead or dropped connection is reconnected;
- reconnects back off exponentially from ``backoff_initial`` to
  ``backoff_max`` with jitter (``backoff_delay``, a pure function), and the
  backoff resets only after a connection that stayed up ``stable_after``, so
  a flapping node is not hammered;
- a malformed frame is counted and logged (the first as a warning, then
  every Nth as an error with the running count), never fatal;
- an error in handling a frame that is not the frame's fault (a bug in
  reading or delivering its events) is reported to the supervisor
  (``runtime.supervision``: logged with the frame, counted, watched for a
  crash loop) and the frame dropped; the session goes on. An error that
  escapes the reconnect loop itself is reported the same way and the loop
  started again, so the listener never ends while the sidecar runs;
- an error answer for one of our subscriptions (a node cancelling it, e.g.
  for a slow client) ends the connection so that it is re-established and
  reconciled, instead of silently receiving nothing;
- a subscription the node drops *without* a word is found too. CometBFT
  drops a subscriber whose buffer is full (a block of some 400 txs does it)
  and tells it only if its write buffer has room, which under the same
  load it has not; the socket and its pings stay up. Every block's
  end-of-block events say how many txs it held (``num_txs``): a block with
  fewer tx frames than that, once ``BLOCK_CHECK_LAG`` later blocks have come
  (the two subscriptions' frames are not ordered with each other), ends the
  session. (The block subscription dropped alone is not found: a chain
  that makes no empty blocks is silent too, and a timer would reconnect it
  for nothing; it is one frame a block, far from a full buffer.)

Stopping the actor closes the socket (politely, for at most a second), ends
the thread and joins it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import random as _random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedError

from actors.listener_settings import ListenerSettings
from chain.ws_events import MalformedFrame, Reply, SeenEvents, TxFrame, decode_frame
from chain.ws_query import provider_queries
from messages.health import WebsocketLost, WebsocketSubscribed
from messages.lease_events import LeaseEvent
from messages.scheduler import LeaseEventReceived, Reconcile
from runtime.dispatch import Dispatcher, PooledActor, sending_as
from runtime.router import HEALTH, LISTENER, SCHEDULER, Router
from runtime.urls import shown_url

__all__ = [
    "ListenerActor",
    "LeaseEventStream",
    "ListenerStats",
    "backoff_delay",
    "malformed_log_level",
    "SubscriptionRefused",
    "SubscriptionLost",
]

logger = logging.getLogger(__name__)

#: On stop, the node gets this long to acknowledge our close before the
#: socket is cut: stopping must be prompt even when the node is dead.
STOP_CLOSE_TIMEOUT = 1.0
#: How much of a malformed frame a log line shows: enough to recognise it,
#: not enough for an untrusted peer to flood the log.
FRAME_SAMPLE_CHARS = 120
#: Blocks whose end-of-block frame must have come after a block's before its tx frames are counted:
#: the node writes each subscription's frames from its own queue, so a block's txs can arrive after
#: the next block's end-of-block events (a lost tx taken for one still on its way reconnects for nothing).
BLOCK_CHECK_LAG = 3


def backoff_delay(
    attempt: int,
    initial: float,
    maximum: float,
    jitter: float = 0.2,
    random: Callable[[], float] = _random.random,
) -> float:
    """Seconds to wait before reconnect attempt ``attempt`` (0 for the first retry).

    ``initial * 2**attempt`` capped at ``maximum``, spread by up to ``jitter``
    of itself either way (``random()`` in [0, 1) picks where), and kept within
    [initial, maximum]: never faster than the first delay, never slower than
    the cap.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    if not 0 < initial <= maximum:
        raise ValueError(f"need 0 < initial <= maximum, got initial={initial}, maximum={maximum}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be within [0, 1], got {jitter}")
    # 2**64 is far past any cap; bounding the exponent keeps the float finite.
    base = min(maximum, initial * 2.0 ** min(attempt, 64))
    spread = base * jitter * (2.0 * random() - 1.0)
    return min(maximum, max(initial, base + spread))


def malformed_log_level(count: int, every: int) -> int:
    """Log level for the ``count``-th malformed frame: the first warns, every Nth is an error."""
    if count == 1:
        return logging.WARNING
    if count % every == 0:
        return logging.ERROR
    return logging.DEBUG


class SubscriptionRefused(Exception):
    """The node answered a subscribe with an error (bad query, cap reached)."""


class SubscriptionLost(Exception):
    """The node cancelled one of our subscriptions on a live connection."""


@dataclass
class ListenerStats:
    """What the listener has seen; ``snapshot()`` copies it for another thread."""

    #: connections that got every subscription acknowledged (each one is followed by a Reconcile)
    subscribed_sessions: int = 0
    #: attempts that did not get that far (refused, timed out, handshake failed)
    failed_attempts: int = 0
    #: established sessions that ended (dropped, dead peer, subscription lost)
    disconnects: int = 0
    #: disconnects because the peer stopped answering pings
    dead_peers: int = 0
    frames: int = 0
    tx_frames: int = 0
    events_delivered: int = 0
    #: lease events already delivered from another subscription's copy of the tx
    duplicates: int = 0
    #: lease events in a frame that could not be read (see ``chain.ws_events``)
    events_skipped: int = 0
    malformed_frames: int = 0
    #: sessions ended because a block's tx frames fell short of its tx count (a subscription dropped unsaid)
    dropped_subscriptions: int = 0
    last_error: str = ""
    connected: bool = False

    def snapshot(self) -> "ListenerStats":
        return dataclasses.replace(self)


class LeaseEventStream:
    """An asyncio websocket client on its own thread: connect, subscribe, read, reconnect.

    ``on_events`` gets each batch of fresh lease events of one frame;
    ``on_subscribed`` is called after every connect whose subscriptions were
    all acknowledged, ``on_lost`` with the reason after every session or
    attempt that ended (and whether it had been subscribed). All run on
    the stream's thread and must not block.
    """

    def __init__(
        self,
        url: str,
        queries: Sequence[str],
        settings: ListenerSettings,
        on_events: Callable[[list[LeaseEvent]], None],
        on_subscribed: Callable[[], None],
        *,
        on_lost: Callable[[str, bool], None] | None = None,
        on_failure: Callable[[Any, BaseException], None] | None = None,
        random: Callable[[], float] = _random.random,
        name: str = "listener",
    ) -> None:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"websocket url must start with ws:// or wss://, got {shown_url(url)!r}")
        if not queries:
            raise ValueError("a listener needs at least one query")
        self.url = url
        #: What logs and messages show of it: a key in the URL masked (``runtime.urls``).
        self.shown_url = shown_url(url)
        self.queries = tuple(queries)
        self.settings = settings
        self.on_events = on_events
        self.on_subscribed = on_subscribed
        self.on_lost = on_lost
        #: told of each error that is nobody's input (a frame it could not handle, the loop failing)
        self.on_failure = on_failure
        self.random = random
        self.name = name
        self.stats = ListenerStats()
        self._seen = SeenEvents(settings.dedupe_window)
        self._stopping = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._main: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        #: subscribe request id -> query, for the session in progress
        self._subscription_ids: dict[int, str] = {}
        self._next_id = 1
        #: whether the session in progress got every subscription acknowledged
        self._session_subscribed = False
        #: this session's tx frames per height, and its blocks (height, txs) not counted yet
        self._txs_at: dict[int, int] = {}
        self._blocks: collections.deque[tuple[int, int]] = collections.deque()
        #: why this session's subscriptions are taken as dropped ("" while they are not)
        self._dropped = ""

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("listener stream already started")
        self._thread = threading.Thread(target=self._run_thread, name=f"{self.name}-ws", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Close the socket and end the thread; True when the thread has ended."""
        self._stopping.set()
        try:
            self._loop.call_soon_threadsafe(self._cancel_main)
        except RuntimeError:
            pass  # the loop has already closed: the thread is ending or ended
        thread = self._thread
        if thread is None:
            self._loop.close()  # never started: nothing runs on it
            return True
        if thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            logger.error("%s: websocket thread did not end within %.1fs", self.name, timeout)
            return False
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _cancel_main(self) -> None:
        if self._main is not None:
            self._main.cancel()

    def _run_thread(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            while not self._stopping.is_set():
                try:
                    self._main = self._loop.create_task(self._run())
                    self._loop.run_until_complete(self._main)
                    return
                except asyncio.CancelledError:
                    return
                except Exception as exc:
                    # Supervised: reported (a crash loop ends the process), then
                    # the loop starts over after the first backoff.
                    self._failed("its reconnect loop", exc)
                    self._stopping.wait(self.settings.backoff_initial.total_seconds())
        finally:
            self.stats.connected = False
            _close_loop(self._loop)

    def _failed(self, what: Any, exc: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(what, exc)
        else:
            logger.error("%s could not handle %s: %s: %s", self.name, what, type(exc).__name__, exc)

    # -- the reconnect loop ------------------------------------------------------------
    async def _run(self) -> None:
        s = self.settings
        attempt = 0
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            started = loop.time()
            self._session_subscribed = False
            try:
                await self._session()
                reason = "the node closed the connection"
            except asyncio.CancelledError:
                raise
            except ConnectionClosedError as exc:
                reason = self._closed_reason(exc)
            except Exception as exc:  # every failure means: reconnect later
                # The library's text may quote the URL (an invalid one, say): shown masked.
                reason = f"{type(exc).__name__}: {exc}".replace(self.url, self.shown_url)
            if self._stopping.is_set():
                return
            subscribed = self._session_subscribed
            if not subscribed:
                self.stats.failed_attempts += 1
            self.stats.last_error = reason
            if self.on_lost is not None:
                self.on_lost(reason, subscribed)
            if subscribed and loop.time() - started >= s.stable_after.total_seconds():
                attempt = 0
            delay = backoff_delay(
                attempt,
                s.backoff_initial.total_seconds(),
                s.backoff_max.total_seconds(),
                s.backoff_jitter,
                self.random,
            )
            attempt += 1
            # A lost session is news; a node that stays unreachable is logged once, then quietly.
            level = logging.WARNING if subscribed or attempt == 1 else logging.INFO
            logger.log(level, "%s: websocket %s: %s; reconnecting in %.2fs", self.name, self.shown_url, reason, delay)
            await asyncio.sleep(delay)

    def _closed_reason(self, exc: ConnectionClosedError) -> str:
        sent = exc.sent
        if sent is not None and sent.code == 1011 and "keepalive" in sent.reason:
            self.stats.dead_peers += 1
            return f"no pong within {self.settings.ping_timeout.total_seconds():g}s: the node is dead"
        rcvd = exc.rcvd
        if rcvd is not None:
            return f"closed by the node ({rcvd.code} {rcvd.reason})".rstrip()
        return "connection lost"

    async def _session(self) -> None:
        """One connection: connect, subscribe, read until it ends (normally or by an exception)."""
        s = self.settings
        ws = await connect(
            self.url,
            open_timeout=s.open_timeout.total_seconds(),
            ping_interval=s.ping_interval.total_seconds(),
            ping_timeout=s.ping_timeout.total_seconds(),
            close_timeout=s.close_timeout.total_seconds(),
            max_size=s.max_frame_bytes,
            compression=None,
        )
        try:
            await asyncio.wait_for(self._subscribe(ws), s.open_timeout.total_seconds())
            self._session_subscribed = True
            self.stats.subscribed_sessions += 1
            self.stats.connected = True
            logger.info("%s: subscribed to %d queries on %s", self.name, len(self.queries), self.shown_url)
            self.on_subscribed()
            async for raw in ws:
                frame = self._on_frame(raw)
                if isinstance(frame, Reply) and frame.error is not None and frame.id in self._subscription_ids:
                    raise SubscriptionLost(
                        f"the node cancelled subscription {self._subscription_ids[frame.id]!r}: {frame.error}"
                    )
                if self._dropped:
                    self.stats.dropped_subscriptions += 1
                    raise SubscriptionLost(f"{self._dropped}; resubscribing, and the leases are read again")
        finally:
            if self._session_subscribed:
                self.stats.disconnects += 1
            self.stats.connected = False
            await self._close(ws)

    async def _close(self, ws: ClientConnection) -> None:
        timeout = STOP_CLOSE_TIMEOUT if self._stopping.is_set() else self.settings.close_timeout.total_seconds()
        try:
            async with asyncio.timeout(timeout):
                await ws.close()
        except (TimeoutError, OSError, ConnectionClosed):
            ws.transport.abort()
        except asyncio.CancelledError:
            ws.transport.abort()
            raise

    async def _subscribe(self, ws: ClientConnection) -> None:
        self._subscription_ids = {}
        self._txs_at, self._blocks, self._dropped = {}, collections.deque(), ""
        waiting: dict[int, str] = {}
        for query in self.queries:
            rid = self._next_id
            self._next_id += 1
            self._subscription_ids[rid] = query
            waiting[rid] = query
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "subscribe", "params": {"query": query}}))
        while waiting:
            frame = self._on_frame(await ws.recv())
            if not isinstance(frame, Reply) or (frame.error is None and frame.id not in waiting):
                continue
            query = self._subscription_ids.get(frame.id)  # type: ignore[arg-type]
            if frame.id in waiting:
                del waiting[frame.id]
                if frame.error is not None:
                    raise SubscriptionRefused(f"subscribe {query!r} refused: {frame.error}")
            elif query is not None:
                raise SubscriptionLost(f"the node cancelled subscription {query!r}: {frame.error}")

    # -- frames -------------------------------------------------------------------------------
    def _on_frame(self, raw: str | bytes) -> Reply | TxFrame | None:
        """Count and decode one frame; deliver its fresh lease events. None if malformed."""
        self.stats.frames += 1
        try:
            frame = decode_frame(raw)
            return self._handle_frame(frame)
        except MalformedFrame as exc:
            self._malformed(exc, raw)
            return None
        except Exception as exc:  # not the frame's fault: supervised, the frame dropped, the session goes on
            sample = raw[:FRAME_SAMPLE_CHARS]
            self._failed(f"a frame {sample!r}{'...' if len(raw) > FRAME_SAMPLE_CHARS else ''}", exc)
            return None

    def _handle_frame(self, frame: Reply | TxFrame) -> Reply | TxFrame:
        if isinstance(frame, TxFrame):
            self._count(frame)
            self.stats.tx_frames += 1
            self.stats.events_skipped += frame.skipped
            before = self._seen.duplicates
            fresh = self._seen.fresh(frame.tx_hash or f"block/{frame.height}", frame.events)
            self.stats.duplicates += self._seen.duplicates - before
            if fresh:
                self.stats.events_delivered += len(fresh)
                self.on_events(fresh)
        elif frame.error is not None and frame.id not in self._subscription_ids:
            logger.warning("%s: error from the node: %s", self.name, frame.error)
        return frame

    def _count(self, frame: TxFrame) -> None:
        """Count a tx frame by its height; a block's frame: check the block ``BLOCK_CHECK_LAG`` before it."""
        if frame.tx_hash:
            self._txs_at[frame.height] = self._txs_at.get(frame.height, 0) + 1
            return
        if frame.num_txs < 0:
            return  # a block's events that do not say how many txs it held: nothing to check
        self._blocks.append((frame.height, frame.num_txs))
        if len(self._blocks) <= BLOCK_CHECK_LAG:
            return
        height, txs = self._blocks.popleft()
        got = self._txs_at.pop(height, 0)
        for h in [h for h in self._txs_at if h < height]:
            del self._txs_at[h]  # (txs of heights no block frame of this session names)
        if got < txs and not self._dropped:
            self._dropped = (f"block {height} held {txs} tx(s) and {got} reached us: the node dropped the tx "
                             "subscription without a word (its buffer full)")

    def _malformed(self, exc: MalformedFrame, raw: str | bytes) -> None:
        self.stats.malformed_frames += 1
        count = self.stats.malformed_frames
        level = malformed_log_level(count, self.settings.malformed_log_every)
        if logger.isEnabledFor(level):
            sample = raw[:FRAME_SAMPLE_CHARS]
            logger.log(
                level, "%s: malformed frame #%d ignored (%s): %r%s",
                self.name, count, exc, sample, "..." if len(raw) > FRAME_SAMPLE_CHARS else "",
            )


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Let the tasks still pending (the websockets keepalive, say) see their cancellation, then close."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


class ListenerActor(PooledActor):
    """The listener at address ``listener``: its stream's events go to ``scheduler``.

    ``provider_uuid`` is validated as a UUID here (it goes into the queries):
    a bad one fails ``ListenerActor.start(...)`` at once.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        router: Router,
        websocket_url: str,
        provider_uuid: str,
        settings: ListenerSettings | None = None,
        *,
        random: Callable[[], float] = _random.random,
    ) -> None:
        super().__init__(dispatcher, LISTENER)
        self.router = router
        self.provider_uuid = provider_uuid
        self.stream = LeaseEventStream(
            websocket_url,
            provider_queries(provider_uuid),
            settings or ListenerSettings(),
            self._deliver,
            self._subscribed,
            on_lost=self._lost,
            on_failure=self._failed,
            random=random,
            name=LISTENER,
        )

    # These run on the stream's thread; sending_as names the listener as the sender in captures.
    def _deliver(self, events: list[LeaseEvent]) -> None:
        # Every tx of the chain arrives (the subscriptions are a firehose, ``chain.ws_query``):
        # only our leases' events and credit exhaustions anywhere go on.
        received = self.dispatcher.clock_now()
        with sending_as(LISTENER):
            for event in events:
                if event.concerns(self.provider_uuid):
                    self.router.tell(SCHEDULER, LeaseEventReceived(event, received_at=received))

    def _subscribed(self) -> None:
        with sending_as(LISTENER):
            self.router.tell(SCHEDULER, Reconcile(source=LISTENER))
            self.router.tell(HEALTH, WebsocketSubscribed(self.stream.shown_url, len(self.stream.queries)))

    def _failed(self, what: Any, exc: BaseException) -> None:
        self.dispatcher.supervisor.failed(LISTENER, what, 0, exc, what="could not handle")

    def _lost(self, reason: str, was_subscribed: bool) -> None:
        with sending_as(LISTENER):
            self.router.tell(HEALTH, WebsocketLost(reason, was_subscribed))

    def on_start(self) -> None:
        self.stream.start()

    def on_stop(self) -> None:
        self.stream.stop()
        if self.router.get(self.address) is self.actor_ref:
            self.router.remove(self.address)

    def on_receive(self, message: Any) -> Any:
        logger.debug("%s ignores %s", self.address, type(message).__name__)

    def stats(self) -> ListenerStats:
        """A copy of the stream's counters (ask through ``ref.proxy().stats()``)."""
        return self.stream.stats.snapshot()

