"""The devnet's CometBFT-style websocket: JSON-RPC 2.0 on ``/websocket``, on loopback.

It answers what a CometBFT node's ``/websocket`` endpoint answers for the
calls the sidecar makes (CHAIN.md, "CometBFT websocket"):

- ``subscribe`` / ``unsubscribe`` / ``unsubscribe_all`` with the query subset
  ``key='value' AND ...`` (``chain.ws_query``); anything else is a JSON-RPC
  error ``-32603`` whose ``data`` says why, as a node answers a query it
  cannot parse;
- ``status``: ``result.sync_info`` from the ``status`` callable (the devnet's
  view of its latest block and whether it is catching up);
- the per-client subscription cap (a node's default is 5);
- websocket ping/pong (the websockets library answers pings; the server also
  pings its clients);
- a slow client, whose outgoing queue grows past ``slow_client_queue``
  frames, is disconnected, as a node drops a subscriber that does not keep up;
- every transaction the chain model emits is matched against every
  subscription and pushed, in the exact Tx event shape: ``result.query``,
  ``result.data`` (``tendermint/event/Tx`` with the ``TxResult``, whose
  ``result.data`` is the tx's ``TxMsgData``) and the flattened
  ``result.events`` map of parallel arrays; every end of block that
  emitted events (``lease_expired``) likewise, as
  ``tendermint/event/NewBlockEvents`` (``height``, ``events``, ``num_txs``)
  under ``tm.event='NewBlockEvents'`` with ``block.height`` and no
  ``tx.hash``.

Nothing is replayed: events emitted while a client is away are lost to it,
which is the gap the listener's reconcile-after-reconnect exists for.

The server runs its own asyncio loop on its own thread. The chain model calls
``publish`` from whichever thread changed state (holding the model's lock),
so ``publish`` only queues the tx and wakes the loop; matching and encoding
happen on the loop.

Faults, for tests and the demo: ``drop_all()`` (every connection cut, as a
network blip would), ``drop_interval`` (the same, periodically),
``freeze_all()`` (connections stay open but nothing is read, answered or
pushed any more: a dead peer that no longer answers pings), and
``send_raw_to_all(text)`` (arbitrary frames, e.g. malformed ones).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from chain.billing_codec import time_to_rfc3339
from chain.model import BillingModel, BlockEvents, TxEvents
from chain.ws_query import Query, QueryError, parse_query
from messages.chain import NodeStatus

__all__ = ["WebsocketServer", "ServerStats", "WEBSOCKET_PATH"]

logger = logging.getLogger(__name__)

WEBSOCKET_PATH = "/websocket"

# JSON-RPC 2.0 error codes, with the messages CometBFT puts beside them.
PARSE_ERROR = (-32700, "Parse error. Invalid JSON")
INVALID_REQUEST = (-32600, "Invalid Request")
METHOD_NOT_FOUND = (-32601, "Method not found")
INVALID_PARAMS = (-32602, "Invalid params")
INTERNAL_ERROR = (-32603, "Internal error")

#: Close code and reason for a client that does not read its events: the
#: words a node uses when it cancels such a subscription.
SLOW_CLIENT_CLOSE = (1008, "client is not pulling messages fast enough")
#: Longest request a client may send; a subscribe is a few hundred bytes.
MAX_REQUEST_BYTES = 64 * 1024
#: How long start() waits for the loop to bind, and stop()/faults for the loop to act.
LOOP_TIMEOUT = 10.0


@dataclass
class ServerStats:
    """Counters an operator (or a test) reads to see what the websocket did."""

    connections: int = 0
    txs_published: int = 0
    frames_pushed: int = 0
    slow_disconnects: int = 0
    dropped: int = 0


class _Client:
    """One websocket connection: its subscriptions and its outgoing queue."""

    __slots__ = ("conn", "subscriptions", "outbox", "wake", "closing", "frozen", "gone")

    def __init__(self, conn: ServerConnection) -> None:
        self.conn = conn
        #: query text -> (subscribe request id as JSON, parsed query); a node keys them by query.
        self.subscriptions: dict[str, tuple[str, Query]] = {}
        #: frames not yet written; the writer task drains it.
        self.outbox: collections.deque[str] = collections.deque()
        self.wake = asyncio.Event()
        self.closing = False
        self.frozen = False
        #: set when the connection's handler has ended.
        self.gone = asyncio.Event()


def _event_objects(events) -> list[dict[str, Any]]:
    return [
        {"type": ev.type, "attributes": [{"key": k, "value": v, "index": True} for k, v in ev.attributes]}
        for ev in events
    ]


@dataclass(frozen=True)
class FailedTx:
    """A tx its block included and that failed (a code, no events): a node pushes its Tx event too."""

    height: int
    tx_hash: str
    code: int
    codespace: str
    log: str
    events: tuple = ()


class _EncodedTx:
    """One tx (or one block's end-of-block events) as every matching subscription sees it:
    the index to match, the JSON to push."""

    __slots__ = ("index", "_tx", "_tx_bytes", "_tx_data", "_index_in_block", "_body")

    def __init__(
        self, tx: TxEvents | BlockEvents | FailedTx, tx_bytes: bytes, index_in_block: int, tx_data: bytes = b""
    ) -> None:
        self._tx = tx
        self._tx_bytes = tx_bytes
        self._tx_data = tx_data
        self._index_in_block = index_in_block
        self._body: str | None = None
        if isinstance(tx, BlockEvents):
            index: dict[str, list[str]] = {"tm.event": ["NewBlockEvents"], "block.height": [str(tx.height)]}
        else:
            index = {"tm.event": ["Tx"], "tx.hash": [tx.tx_hash], "tx.height": [str(tx.height)]}
        for event in tx.events:
            if not event.type:
                continue
            for key, value in event.attributes:
                if key:
                    index.setdefault(f"{event.type}.{key}", []).append(value)
        #: composite key -> values in event order (the flattened ``result.events`` map)
        self.index = index

    def body(self) -> str:
        """``"data":...,"events":...`` as JSON text; built once, shared by every subscription."""
        if self._body is None:
            tx = self._tx
            if isinstance(tx, BlockEvents):
                data: dict[str, Any] = {
                    "type": "tendermint/event/NewBlockEvents",
                    "value": {
                        "height": str(tx.height),
                        "events": _event_objects(tx.events),
                        "num_txs": str(tx.num_txs),
                    },
                }
            else:
                failed = isinstance(tx, FailedTx)
                tx_result = {
                    "height": str(tx.height),
                    "index": self._index_in_block,
                    "tx": base64.b64encode(self._tx_bytes).decode("ascii"),
                    "result": {
                        "code": tx.code if failed else 0,
                        # The tx's TxMsgData (its Msg*Response Anys), as a node puts it.
                        "data": base64.b64encode(self._tx_data).decode("ascii"),
                        "log": tx.log if failed else "",
                        "events": _event_objects(tx.events),
                        **({"codespace": tx.codespace} if failed else {}),
                    },
                }
                data = {"type": "tendermint/event/Tx", "value": {"TxResult": tx_result}}
            self._body = (
                '"data":' + json.dumps(data, separators=(",", ":"))
                + ',"events":' + json.dumps(self.index, separators=(",", ":"))
            )
        return self._body


class WebsocketServer:
    """A CometBFT-style ``/websocket`` over a ``BillingModel``, on its own thread."""

    def __init__(
        self,
        model: BillingModel,
        status: Callable[[], NodeStatus],
        host: str = "127.0.0.1",
        port: int = 0,
        max_subscriptions: int = 5,
        slow_client_queue: int = 1000,
        drop_interval: timedelta | None = None,
        *,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        close_timeout: float = 2.0,
        tx_bytes: Callable[[str], bytes | None] | None = None,
        tx_data: Callable[[str], bytes | None] | None = None,
    ) -> None:
        """``tx_bytes``/``tx_data``: the raw bytes and the ``TxMsgData`` of a tx by hash,
        where the devnet has them (the gRPC side's included txs); a state change with no
        tx behind it (genesis, demo setup) is pushed with empty ``tx`` and ``data``."""
        if max_subscriptions < 1:
            raise ValueError(f"max_subscriptions must be at least 1, got {max_subscriptions}")
        if slow_client_queue < 1:
            raise ValueError(f"slow_client_queue must be at least 1, got {slow_client_queue}")
        if drop_interval is not None and drop_interval <= timedelta(0):
            raise ValueError(f"drop_interval must be positive, got {drop_interval}")
        self.model = model
        self.status = status
        self.host = host
        self.port = port
        self.max_subscriptions = max_subscriptions
        self.slow_client_queue = slow_client_queue
        self.drop_interval = drop_interval
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.close_timeout = close_timeout
        self.tx_bytes = tx_bytes
        self.tx_data = tx_data
        self.stats = ServerStats()

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._clients: set[_Client] = set()
        self._background: set[asyncio.Task[Any]] = set()
        #: txs handed over by the model's thread, not yet matched on the loop
        self._pending: collections.deque[TxEvents | BlockEvents] = collections.deque()
        self._drain_scheduled = False
        self._running = False
        self._last_height = -1
        self._index_in_block = 0
        self._subscribed_to_model = False

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> int:
        """Bind, start serving on a thread of its own, and return the bound port."""
        if self._thread is not None:
            raise RuntimeError("websocket server already started")
        # A restart (a node coming back) starts clean: nothing is replayed.
        self._pending.clear()
        self._drain_scheduled = False
        self._clients = set()
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._bind())
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                # Let the connection tasks see their cancellation before the loop goes.
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="devnet-websocket", daemon=True)
        self._thread.start()
        if not ready.wait(LOOP_TIMEOUT):
            raise RuntimeError(f"websocket server did not bind {self.host}:{self.port} in {LOOP_TIMEOUT}s")
        if failure:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"websocket server could not bind {self.host}:{self.port}: {failure[0]}")
        self._running = True
        if not self._subscribed_to_model:
            self.model.subscribe(self.publish)
            self._subscribed_to_model = True
        logger.info("devnet websocket on ws://%s:%d%s", self.host, self.port, WEBSOCKET_PATH)
        return self.port

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}{WEBSOCKET_PATH}"

    def stop(self) -> None:
        """Close every connection, stop listening and end the thread.

        ``start()`` may be called again: it binds the same port (the one
        first bound when ``port`` was 0), as a restarted node would.
        """
        if self._thread is None or self._loop is None:
            return
        self._running = False
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(LOOP_TIMEOUT)
        except Exception:
            logger.exception("websocket server shutdown")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(LOOP_TIMEOUT)
        self._thread = None

    async def _bind(self) -> None:
        self._server = await serve(
            self._handle,
            self.host,
            self.port,
            process_request=self._check_path,
            ping_interval=self.ping_interval,
            ping_timeout=self.ping_timeout,
            close_timeout=self.close_timeout,
            max_size=MAX_REQUEST_BYTES,
            # A node does not compress; compressing would only cost CPU on loopback.
            compression=None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.drop_interval is not None:
            self._spawn(self._drop_periodically(self.drop_interval.total_seconds()))

    async def _shutdown(self) -> None:
        for task in list(self._background):
            task.cancel()
        assert self._server is not None
        self._server.close(close_connections=False)
        for client in list(self._clients):
            client.conn.transport.abort()
        await self._server.wait_closed()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- inspection ---------------------------------------------------------------
    def client_count(self) -> int:
        return self._call(lambda: sum(1 for c in self._clients if not c.closing))

    def subscription_count(self) -> int:
        return self._call(lambda: sum(len(c.subscriptions) for c in self._clients if not c.closing))

    # -- faults ---------------------------------------------------------------------
    def drop_all(self) -> int:
        """Cut every client connection at once (no close handshake); returns how many."""
        return self._call(self._drop_now)

    def freeze_all(self) -> int:
        """Stop reading, answering pings and pushing on every current connection; returns how many.

        The TCP connection stays up, so only the client's keepalive can tell it
        is talking to a dead peer. The server's own keepalive drops a frozen
        connection after its ``ping_interval + ping_timeout``, as a node would.
        """

        def freeze() -> int:
            n = 0
            for client in self._clients:
                if not client.closing and not client.frozen:
                    client.frozen = True
                    client.outbox.clear()
                    client.conn.transport.pause_reading()
                    n += 1
            return n

        return self._call(freeze)

    def send_raw_to_all(self, text: str) -> int:
        """Push ``text`` as one frame to every live client; returns how many."""

        def push() -> int:
            n = 0
            for client in list(self._clients):
                if not client.closing and not client.frozen:
                    self._enqueue(client, text)
                    n += 1
            return n

        return self._call(push)

    def _drop_now(self) -> int:
        n = 0
        for client in list(self._clients):
            if not client.closing:
                client.closing = True
                client.conn.transport.abort()
                n += 1
        self.stats.dropped += n
        if n:
            logger.info("devnet websocket: dropped %d connection(s)", n)
        return n

    async def _drop_periodically(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            self._drop_now()

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the loop and return its result (the loop owns all client state)."""
        if self._loop is None or not self._running:
            raise RuntimeError("websocket server is not running")

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(LOOP_TIMEOUT)

    # -- connections ------------------------------------------------------------------
    def _check_path(self, conn: ServerConnection, request: Request) -> Response | None:
        if request.path.split("?", 1)[0] != WEBSOCKET_PATH:
            return conn.respond(404, f"no websocket at {request.path[:64]}; use {WEBSOCKET_PATH}\n")
        return None

    async def _handle(self, conn: ServerConnection) -> None:
        client = _Client(conn)
        self._clients.add(client)
        self.stats.connections += 1
        writer = asyncio.get_running_loop().create_task(self._write(client))
        try:
            async for raw in conn:
                if client.closing:
                    break
                if client.frozen:
                    # A dead peer reads nothing more; wait for the connection to be cut.
                    await conn.wait_closed()
                    break
                self._on_request(client, raw)
        except ConnectionClosed:
            pass
        finally:
            client.closing = True
            self._clients.discard(client)
            writer.cancel()
            client.gone.set()

    async def _write(self, client: _Client) -> None:
        conn = client.conn
        try:
            while True:
                while client.outbox and not client.frozen:
                    frame = client.outbox.popleft()
                    await conn.send(frame)
                    self.stats.frames_pushed += 1
                client.wake.clear()
                await client.wake.wait()
        except ConnectionClosed:
            pass

    def _enqueue(self, client: _Client, frame: str) -> None:
        if client.closing or client.frozen:
            return
        client.outbox.append(frame)
        if len(client.outbox) > self.slow_client_queue:
            self._disconnect_slow(client)
            return
        client.wake.set()

    def _disconnect_slow(self, client: _Client) -> None:
        client.closing = True
        client.outbox.clear()
        self.stats.slow_disconnects += 1
        logger.warning(
            "devnet websocket: disconnecting %s: more than %d frames queued",
            client.conn.remote_address, self.slow_client_queue,
        )
        self._spawn(client.conn.close(*SLOW_CLIENT_CLOSE))

    # -- requests -------------------------------------------------------------------------
    def _on_request(self, client: _Client, raw: str | bytes) -> None:
        try:
            request = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            self._reply_error(client, "null", PARSE_ERROR, str(exc))
            return
        if not isinstance(request, dict):
            self._reply_error(client, "null", INVALID_REQUEST, "a request must be a JSON object")
            return
        if "id" not in request or request["id"] is None:
            return  # a JSON-RPC notification: a node answers nothing
        req_id = request["id"]
        if isinstance(req_id, bool) or not isinstance(req_id, (int, str)):
            self._reply_error(client, "null", INVALID_REQUEST, "id must be a number or a string")
            return
        rid = json.dumps(req_id)
        if request.get("jsonrpc") != "2.0":
            self._reply_error(client, rid, INVALID_REQUEST, 'jsonrpc must be "2.0"')
            return
        method = request.get("method")
        params = request.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, (dict, list)):
            self._reply_error(client, rid, INVALID_PARAMS, "params must be an object or an array")
            return
        handler = {
            "subscribe": self._subscribe,
            "unsubscribe": self._unsubscribe,
            "unsubscribe_all": self._unsubscribe_all,
            "status": self._status,
        }.get(method) if isinstance(method, str) else None
        if handler is None:
            self._reply_error(client, rid, METHOD_NOT_FOUND, f"method {str(method)[:64]!r} is not served here")
            return
        handler(client, rid, params)

    @staticmethod
    def _query_param(params: dict[str, Any] | list[Any]) -> Any:
        if isinstance(params, list):
            return params[0] if params else None
        return params.get("query")

    def _subscribe(self, client: _Client, rid: str, params: dict[str, Any] | list[Any]) -> None:
        text = self._query_param(params)
        if not isinstance(text, str):
            self._reply_error(client, rid, INVALID_PARAMS, "subscribe needs a query string")
            return
        try:
            query = parse_query(text)
        except QueryError as exc:
            self._reply_error(client, rid, INTERNAL_ERROR, f"failed to parse query: {exc}")
            return
        if text in client.subscriptions:
            self._reply_error(client, rid, INTERNAL_ERROR, "already subscribed")
            return
        if len(client.subscriptions) >= self.max_subscriptions:
            self._reply_error(
                client, rid, INTERNAL_ERROR, f"max_subscriptions_per_client {self.max_subscriptions} reached"
            )
            return
        client.subscriptions[text] = (rid, query)
        self._reply(client, rid, "{}")

    def _unsubscribe(self, client: _Client, rid: str, params: dict[str, Any] | list[Any]) -> None:
        text = self._query_param(params)
        if not isinstance(text, str):
            self._reply_error(client, rid, INVALID_PARAMS, "unsubscribe needs a query string")
            return
        if client.subscriptions.pop(text, None) is None:
            self._reply_error(client, rid, INTERNAL_ERROR, "subscription not found")
            return
        self._reply(client, rid, "{}")

    def _unsubscribe_all(self, client: _Client, rid: str, params: Any) -> None:
        if not client.subscriptions:
            self._reply_error(client, rid, INTERNAL_ERROR, "subscription not found")
            return
        client.subscriptions.clear()
        self._reply(client, rid, "{}")

    def _status(self, client: _Client, rid: str, params: Any) -> None:
        try:
            status = self.status()
        except Exception as exc:
            self._reply_error(client, rid, INTERNAL_ERROR, f"status unavailable: {exc}")
            return
        result = {
            "node_info": {"network": self.model.chain_id, "moniker": "leasewarden-devnet"},
            "sync_info": {
                "latest_block_height": str(status.latest_block_height),
                "latest_block_time": time_to_rfc3339(status.latest_block_time),
                "catching_up": status.catching_up,
            },
        }
        self._reply(client, rid, json.dumps(result, separators=(",", ":")))

    def _reply(self, client: _Client, rid: str, result_json: str) -> None:
        self._enqueue(client, '{"jsonrpc":"2.0","id":' + rid + ',"result":' + result_json + "}")

    def _reply_error(self, client: _Client, rid: str, error: tuple[int, str], data: str) -> None:
        body = json.dumps({"code": error[0], "message": error[1], "data": data}, separators=(",", ":"))
        self._enqueue(client, '{"jsonrpc":"2.0","id":' + rid + ',"error":' + body + "}")

    # -- events -----------------------------------------------------------------------------
    def publish(self, tx: TxEvents | BlockEvents | FailedTx) -> None:
        """Push ``tx`` to every matching subscription. Safe from any thread; never blocks."""
        loop = self._loop
        if not self._running or loop is None:
            return
        self._pending.append(tx)
        if not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed under us: the server is stopping
                self._drain_scheduled = False

    def _drain(self) -> None:
        # Cleared before popping: a tx appended after this line schedules
        # another drain, so none is left behind.
        self._drain_scheduled = False
        pending = self._pending
        while pending:
            tx = pending.popleft()
            self.stats.txs_published += 1
            self._push(tx)

    def _push(self, tx: TxEvents | BlockEvents | FailedTx) -> None:
        if isinstance(tx, (TxEvents, FailedTx)):
            if tx.height == self._last_height:
                self._index_in_block += 1
            else:
                self._last_height, self._index_in_block = tx.height, 0
        clients = [c for c in self._clients if c.subscriptions and not c.closing and not c.frozen]
        if not clients:
            return
        raw = data = b""
        if isinstance(tx, (TxEvents, FailedTx)):
            raw = (self.tx_bytes(tx.tx_hash) if self.tx_bytes is not None else None) or b""
            data = (self.tx_data(tx.tx_hash) if self.tx_data is not None else None) or b""
        encoded = _EncodedTx(tx, raw, self._index_in_block, data)
        index = encoded.index
        for client in clients:
            for rid, query in list(client.subscriptions.values()):
                if query.matches(index):
                    frame = (
                        '{"jsonrpc":"2.0","id":' + rid + ',"result":{"query":'
                        + json.dumps(query.text) + "," + encoded.body() + "}}"
                    )
                    self._enqueue(client, frame)
                    if client.closing:
                        break
