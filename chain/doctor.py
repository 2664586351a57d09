"""``run.py doctor``: a configuration checked against its node, one line per check.

Each check asks the node one thing a running sidecar depends on, and says
what it found:

1. ``grpc``: the gRPC endpoint answers (``GetNodeInfo``);
2. ``chain id``: the node's network is ``[chain] chain_id``;
3. ``synced``: the node is not catching up and its latest block is no
   older than ``[scheduler] max_node_lag``;
4. ``tx index``: the node keeps a tx index (a lookup of a hash no tx has
   answers "not found", not "transaction indexing is disabled"): without
   one the sidecar cannot read what its own txs did, nor find the closes it
   did not hear;
5. ``key``: the provider key loads (from ``key_file`` or ``key_env``; the
   key itself is never shown);
6. ``account``: the key's account exists on chain;
7. ``provider``: ``[provider] uuid`` is registered (``liftedinit.sku.v1``)
   to that account, and active;
8. ``fee``: a ``MsgWithdraw`` simulates with the fee the sidecar would pay
   (``fee_denom``, ``gas_price``, ``gas_adjustment``), and the gas price is
   at least the node's minimum where the node says it
   (``cosmos.base.node.v1beta1.Service/Config``): a simulation alone never
   checks the fee against it;
9. ``read heights``: a billing query's answer carries the height it was
   answered at (the ``x-cosmos-block-height`` header an SDK node sets):
   without it a read from a node further behind cannot be told from a
   fresh one, so the sidecar's stale-read guard has nothing to compare;
10. ``websocket``: the provider's subscriptions (``chain.ws_query.provider_queries``) are accepted.

A check that needs one that failed is not run ("skip"). Nothing is
broadcast: the simulation is the only tx, and it is never sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

import grpc

import cosmpy.protos  # noqa: F401  (puts cosmpy's generated packages on sys.path first)
from chain.billing_pb import query_pb2 as billing_query, query_pb2_grpc as billing_grpc, tx_pb2 as billing_tx
from chain.billing_pb import types_pb2 as billing_types
from chain.billing_codec import time_from_proto
from chain.cosmpy_client import BLOCK_HEIGHT_HEADER, block_height_header, tx_index_kept
from chain.errors import BILLING, NO_TX_INDEX_HARM, ChainError
from chain.keys import KeyLoadError, ProviderKey, load_provider_key
from chain.sku_pb import query_pb2 as sku_query, query_pb2_grpc as sku_grpc
from chain.ws_events import MalformedFrame, Reply, decode_frame
from chain.ws_query import provider_queries
from cosmpy.aerial.urls import parse_url
from cosmpy.protos.cosmos.auth.v1beta1 import query_pb2 as auth_query, query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2 as node_query, query_pb2_grpc as node_grpc
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_query, query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2_grpc as tx_grpc
from runtime.urls import shown_url

__all__ = ["Check", "NodeDoctor", "min_gas_prices"]


@dataclass(frozen=True)
class Check:
    name: str
    #: None: not run, because a check it needs failed
    ok: bool | None
    detail: str

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.ok is False else "skip")
        return f"{mark}  {self.name}: {self.detail}"


def min_gas_prices(text: str) -> dict[str, Decimal]:
    """``"0.01umfx,0.1upwr"`` -> {denom: price}; a part that is not a decimal and a denom is left out."""
    out: dict[str, Decimal] = {}
    for part in text.split(","):
        part = part.strip()
        i = next((k for k, ch in enumerate(part) if ch.isalpha()), len(part))
        try:
            out[part[i:]] = Decimal(part[:i])
        except InvalidOperation:
            continue
    return {d: p for d, p in out.items() if d}


def _skipped(why: str, *names: str) -> list[Check]:
    return [Check(name, None, why) for name in names]


def _status_detail(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    return f"{code.name if code else 'error'}: {details}".rstrip(": ")


class NodeDoctor:
    def __init__(
        self,
        *,
        node: Any,
        grpc_url: str,
        websocket_url: str,
        chain_id: str,
        provider_uuid: str,
        max_node_lag: timedelta,
        now: Callable[[], datetime],
        key_file: str | None = None,
        open_timeout: float = 10.0,
    ) -> None:
        """``node``: the ``[node]`` settings; ``grpc_url``/``websocket_url``/``key_file`` where they
        are not the node's own (the embedded devnet's)."""
        self.node = node
        self.grpc_url = grpc_url
        self.websocket_url = websocket_url
        self.chain_id = chain_id
        self.provider_uuid = provider_uuid
        self.max_node_lag = max_node_lag
        self.now = now
        self.key_file = node.key_file if key_file is None else key_file
        self.timeout = node.query_timeout.total_seconds()
        self.open_timeout = open_timeout

    def run(self) -> list[Check]:
        checks: list[Check] = []
        parsed = parse_url(self.grpc_url)
        channel = (
            grpc.secure_channel(parsed.host_and_port, grpc.ssl_channel_credentials())
            if parsed.secure else grpc.insecure_channel(parsed.host_and_port)
        )
        try:
            reachable = self._grpc(channel, checks)
            if reachable:
                self._synced(channel, checks)
                self._tx_index(channel, checks)
                self._read_heights(channel, checks)
            else:
                checks += _skipped(
                    "not checked: the gRPC endpoint does not answer", "chain id", "synced", "tx index", "read heights"
                )
            key = self._key(checks)
            if not reachable or key is None:
                why = "the gRPC endpoint does not answer" if not reachable else "the key did not load"
                checks += _skipped(f"not checked: {why}", "account", "provider", "fee")
            elif self._account(channel, key, checks):
                self._provider(channel, key, checks)
                self._fee(channel, key, checks)
            else:
                checks += _skipped("not checked: the account does not exist", "provider", "fee")
            self._websocket(checks)
        finally:
            channel.close()
        return checks

    # -- the checks ---------------------------------------------------------------------
    def _grpc(self, channel: grpc.Channel, checks: list[Check]) -> bool:
        try:
            info = tm_grpc.ServiceStub(channel).GetNodeInfo(tm_query.GetNodeInfoRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            checks.append(Check("grpc", False, f"{shown_url(self.grpc_url)} does not answer ({_status_detail(exc)})"))
            return False
        network = info.default_node_info.network
        checks.append(Check("grpc", True, f"{shown_url(self.grpc_url)} answers (node {info.default_node_info.moniker or '?'})"))
        if network == self.chain_id:
            checks.append(Check("chain id", True, f"the node is on {network}, as [chain] chain_id says"))
        else:
            checks.append(Check("chain id", False, f"the node is on {network!r}, [chain] chain_id is {self.chain_id!r}"))
        return True

    def _synced(self, channel: grpc.Channel, checks: list[Check]) -> None:
        stub = tm_grpc.ServiceStub(channel)
        try:
            syncing = stub.GetSyncing(tm_query.GetSyncingRequest(), timeout=self.timeout).syncing
            block = stub.GetLatestBlock(tm_query.GetLatestBlockRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            checks.append(Check("synced", False, f"the node's status could not be read ({_status_detail(exc)})"))
            return
        header = block.sdk_block.header if block.sdk_block.header.height else block.block.header
        lag = self.now() - time_from_proto(header.time)
        if syncing:
            checks.append(Check("synced", False, f"the node is catching up (height {header.height})"))
        elif lag > self.max_node_lag:
            checks.append(Check("synced", False, f"its latest block (height {header.height}) is {lag.total_seconds():.0f}s old, "
                                                 f"more than [scheduler] max_node_lag"))
        else:
            checks.append(Check("synced", True, f"height {header.height}, latest block {max(lag.total_seconds(), 0):.0f}s old"))

    def _tx_index(self, channel: grpc.Channel, checks: list[Check]) -> None:
        try:
            kept = tx_index_kept(tx_grpc.ServiceStub(channel), self.timeout)
        except grpc.RpcError as exc:
            checks.append(Check("tx index", False, f"a tx could not be looked up ({_status_detail(exc)})"))
            return
        if kept:
            checks.append(Check("tx index", True, "the node keeps a tx index (a tx is looked up by its hash)"))
        else:
            checks.append(Check("tx index", False, f"the node keeps no tx index (\"transaction indexing is disabled\"): {NO_TX_INDEX_HARM}"))

    def _read_heights(self, channel: grpc.Channel, checks: list[Check]) -> None:
        request = billing_query.QueryLeasesByProviderRequest(
            provider_uuid=self.provider_uuid, pagination=pagination_pb2.PageRequest(limit=1),
            state_filter=billing_types.LEASE_STATE_ACTIVE,
        )
        try:
            _, call = billing_grpc.QueryStub(channel).LeasesByProvider.with_call(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            checks.append(Check("read heights", False, f"the provider's leases could not be read ({_status_detail(exc)})"))
            return
        height = block_height_header(call.initial_metadata() or ())
        if not height:
            checks.append(Check("read heights", False, f"the node's answers carry no {BLOCK_HEIGHT_HEADER} header: "
                                "a read from a node further behind cannot be told from a fresh one (behind a load "
                                "balancer, point [node] grpc_url at one node, or at a proxy that passes the header on)"))
            return
        checks.append(Check("read heights", True, f"answers say the height they were read at ({BLOCK_HEIGHT_HEADER}: {height})"))

    def _key(self, checks: list[Check]) -> ProviderKey | None:
        source = f"key file {self.key_file}" if self.key_file else f"environment variable {self.node.key_env}"
        try:
            key = load_provider_key(self.key_file, "" if self.key_file else self.node.key_env)
        except KeyLoadError as exc:
            checks.append(Check("key", False, str(exc)))
            return None
        checks.append(Check("key", True, f"loaded from the {source}: signing as {key.address}"))
        return key

    def _account(self, channel: grpc.Channel, key: ProviderKey, checks: list[Check]) -> bool:
        try:
            auth_grpc.QueryStub(channel).Account(auth_query.QueryAccountRequest(address=key.address), timeout=self.timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                checks.append(Check("account", False, f"{key.address} does not exist on chain: send it some {self.node.fee_denom} first"))
            else:
                checks.append(Check("account", False, f"{key.address} could not be read ({_status_detail(exc)})"))
            return False
        checks.append(Check("account", True, f"{key.address} exists on chain"))
        return True

    def _provider(self, channel: grpc.Channel, key: ProviderKey, checks: list[Check]) -> None:
        uuid = self.provider_uuid
        try:
            r = sku_grpc.QueryStub(channel).Provider(sku_query.QueryProviderRequest(uuid=uuid), timeout=self.timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                checks.append(Check("provider", False, f"[provider] uuid {uuid} is not registered on this chain"))
            elif exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                checks.append(Check("provider", False, "the node serves no liftedinit.sku.v1 Query: is it a Manifest node?"))
            else:
                checks.append(Check("provider", False, f"provider {uuid} could not be read ({_status_detail(exc)})"))
            return
        p = r.provider
        if p.address != key.address:
            checks.append(Check("provider", False, f"{uuid} is registered to {p.address}, not to the key's account {key.address}"))
        elif not p.active:
            checks.append(Check("provider", False, f"{uuid} is registered to {key.address} but not active"))
        else:
            checks.append(Check("provider", True, f"{uuid} is registered to {key.address}, active, payout to {p.payout_address}"))

    def _fee(self, channel: grpc.Channel, key: ProviderKey, checks: list[Check]) -> None:
        from chain.cosmpy_client import CosmpyChainClient

        n = self.node
        client = CosmpyChainClient.from_settings(n, self.chain_id, key=key, grpc_url=self.grpc_url)
        msg = billing_tx.MsgWithdraw(sender=key.address, provider_uuid=self.provider_uuid, limit=n.withdraw_limit)
        try:
            used, limit, fee = client.simulate_with_fee("doctor: simulate MsgWithdraw", [msg])
            simulated = f"a MsgWithdraw simulates: gas {used}, limit {limit}, fee {fee}{n.fee_denom} at {n.gas_price}"
        except ChainError as exc:
            if exc.codespace != BILLING:
                checks.append(Check("fee", False, f"a MsgWithdraw does not simulate with fee_denom {n.fee_denom}: {exc}"))
                return
            # The tx's checks passed (fee, signature, sequence); the billing module itself answered.
            simulated = f"a MsgWithdraw passes the tx checks (the billing module answers: {exc})"
        finally:
            client.close()
        try:
            minimum = node_grpc.ServiceStub(channel).Config(node_query.ConfigRequest(), timeout=self.timeout).minimum_gas_price
        except grpc.RpcError:
            checks.append(Check("fee", True, f"{simulated}; the node does not say its minimum gas price"))
            return
        prices = min_gas_prices(minimum)
        price = Decimal(n.gas_price)
        if prices and n.fee_denom not in prices:
            checks.append(Check("fee", False, f"the node takes fees in {', '.join(sorted(prices))}, not [node] fee_denom {n.fee_denom}"))
        elif n.fee_denom in prices and price < prices[n.fee_denom]:
            checks.append(Check("fee", False, f"[node] gas_price {n.gas_price} is below the node's minimum {minimum}: "
                                              "every tx would be refused"))
        else:
            checks.append(Check("fee", True, f"{simulated}; the node's minimum is {minimum or 'none'}"))

    def _websocket(self, checks: list[Check]) -> None:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        queries = provider_queries(self.provider_uuid)
        try:
            with connect(self.websocket_url, open_timeout=self.open_timeout, close_timeout=1) as ws:
                for i, q in enumerate(queries, start=1):
                    ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": "subscribe", "params": {"query": q}}))
                waiting = set(range(1, len(queries) + 1))
                while waiting:
                    try:
                        frame = decode_frame(ws.recv(timeout=self.open_timeout))
                    except MalformedFrame:
                        continue
                    if not isinstance(frame, Reply) or frame.id not in waiting:
                        continue
                    if frame.error is not None:
                        checks.append(Check("websocket", False, f"subscription {queries[frame.id - 1]!r} refused: {frame.error}"))
                        return
                    waiting.discard(frame.id)
        except TimeoutError:
            checks.append(Check("websocket", False, f"{shown_url(self.websocket_url)}: no answer to the subscriptions within {self.open_timeout:g}s"))
            return
        except (OSError, WebSocketException) as exc:
            checks.append(Check("websocket", False, f"{shown_url(self.websocket_url)}: {type(exc).__name__}: "
                                  f"{str(exc).replace(self.websocket_url, shown_url(self.websocket_url))}"))
            return
        checks.append(Check("websocket", True, f"{len(queries)} subscriptions accepted on {shown_url(self.websocket_url)}"))
