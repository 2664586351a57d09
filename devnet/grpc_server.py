"""The devnet's gRPC endpoint: what cosmpy and the sidecar call on a node, on loopback.

Services (each unimplemented method answers UNIMPLEMENTED, as a node
without that module would):

- ``cosmos.auth.v1beta1.Query/Account``: the ``BaseAccount`` (number,
  committed sequence), or a vesting account wrapping it when the devnet
  gives the signer one (``[devnet] signer_account``); a funded credit
  address as the bank made it (a ``BaseAccount`` with no key, or the
  vesting account a test put there first); NOT_FOUND for an unknown address.
- ``cosmos.bank.v1beta1.Query/DenomOwners``: the holders of a denom and
  their raw balances, by page (the model's bank holds credit addresses only).
- ``cosmos.consensus.v1.Query/Params``: the block gas limit, which
  cosmpy's default gas strategy reads.
- ``cosmos.tx.v1beta1.Service``: ``Simulate`` (UNKNOWN with the node's
  error text on failure, as the SDK answers), ``BroadcastTx`` (sync: the
  CheckTx code in ``tx_response``), ``GetTx`` (NOT_FOUND until included),
  ``GetTxsEvent`` (SDK 0.50: ``query`` in the websocket's language,
  ``page`` from 1, ``limit`` up to 100, ``order_by``; every failure of the
  search, a query it cannot parse or a node whose indexer is ``null``
  ("transaction indexing is disabled", which ``GetTx`` answers too), is
  INTERNAL with the node's text, as the SDK wraps ``QueryTxsByEvents``).
- ``cosmos.base.tendermint.v1beta1.Service``: ``GetLatestBlock`` (height,
  time, chain id), ``GetBlockByHeight`` (a past block's height and time;
  NOT_FOUND for one not made yet), ``GetSyncing`` (``catching_up``) and
  ``GetNodeInfo`` (the chain id as ``network``).
- ``liftedinit.billing.v1.Query``: ``Lease``, ``LeasesByTenant``,
  ``LeasesByProvider``, ``CreditAccount``, ``CreditAccounts``, ``CreditAddress``,
  ``WithdrawableAmount``, ``ProviderWithdrawable`` and ``CreditEstimate``,
  each in the wire of the model's chain version (a v2.1.0 devnet sets no
  field that version lacks, and reads ``limit`` where the current chain
  reads ``pagination``); refusals as the gRPC statuses the chain's querier
  sets (``chain.errors.QueryRefused``).

Every answer carries the response header ``x-cosmos-block-height``: the
height the node answered at, read before the call runs (so it is never
newer than the state answered), as a Cosmos SDK node sets it on every query.

``GrpcFaults`` (an interceptor) adds latency to every call, fails methods
at random, the next N times, or always for given tenants with UNAVAILABLE
(the demo's tenants whose credit reads fail; ``CreditAccounts`` then leaves
their accounts out), and can *lose a response*:
run the call, then answer UNAVAILABLE, as when a connection drops after
the node accepted a tx. Two faults make a node lie while it says it is
synced (``[devnet] stale_read_rate`` and ``zero_read_rate``):

- a *stale read* answers a ``CreditAccount`` or ``LeasesByTenant`` call with
  what the node answered the same request at least ``stale_read_lag``
  before, with that answer's height: a node behind a load balancer that
  lags. (The devnet keeps no past state: a request never asked before, or
  only just now, is answered as it is.)
- a *zero read* answers a ``CreditAccount`` call with every balance zero
  (a ``DenomOwners`` page with every holder at 0), at the current height: a
  node serving a state it has not filled in.

The bulk listings a credit check reads (``CreditAccounts``, ``DenomOwners``)
are stale-read too: a node that lags does for every query.
"""

from __future__ import annotations

import collections
import errno
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import grpc
from google.protobuf.any_pb2 import Any as ProtoAny

from chain.billing_codec import (
    coins_to_proto,
    credit_account_to_proto,
    credit_estimate_to_proto,
    lease_to_proto,
    time_to_proto,
)
from chain.billing_pb import query_pb2, query_pb2_grpc, types_pb2
from chain.errors import QueryRefused
from chain.model import LeaseRecord, PageRequest
from chain.ws_query import QueryError, parse_query
from cosmpy.protos.cosmos.auth.v1beta1 import auth_pb2, query_pb2 as auth_query, query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_query, query_pb2_grpc as bank_grpc
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_query, query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.consensus.v1 import query_pb2 as consensus_query, query_pb2_grpc as consensus_grpc
from cosmpy.protos.cosmos.vesting.v1beta1 import vesting_pb2
from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey as Secp256k1PubKey
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service, service_pb2_grpc as tx_grpc, tx_pb2
from cosmpy.protos.tendermint.p2p import types_pb2 as p2p_types
from cosmpy.protos.tendermint.types import block_pb2 as tm_block, params_pb2 as tm_params, types_pb2 as tm_types
from devnet import node_service, sku_service
from devnet.node import DevnetNode, TxRejected

__all__ = ["DevnetGrpcServer", "GrpcFaults"]

#: ``block.max_gas`` of the consensus params: -1, CometBFT's "no limit",
#: so cosmpy's gas estimate is never clipped.
BLOCK_MAX_GAS = -1


#: The response header a Cosmos SDK node sets on every query (baseapp's gRPC interceptor).
BLOCK_HEIGHT_HEADER = "x-cosmos-block-height"
#: The reads a stale-read fault serves from an older height (the listings a credit check reads
#: in bulk too: a lagging node lags for every query).
STALE_METHODS = frozenset({"CreditAccount", "LeasesByTenant", "CreditAccounts", "DenomOwners"})
#: The reads a zero-read fault answers with every balance zero.
ZERO_METHODS = frozenset({"CreditAccount", "DenomOwners"})
#: Past answers kept per request for stale reads: at one read per 30 s, well past any lag worth testing.
STALE_HISTORY = 64


class GrpcFaults(grpc.ServerInterceptor):
    """Latency and failures per gRPC method name (``CreditAccount``, ``BroadcastTx``...), and the height header."""

    def __init__(self, latency: float = 0.0, error_rates: dict[str, float] | None = None, seed: int = 1) -> None:
        #: the node's latest height, for the header (``DevnetGrpcServer`` sets it)
        self.height: Callable[[], int] | None = None
        self.stale_rate = 0.0
        #: how many blocks behind a stale read is at least
        self.stale_blocks = 1
        self.zero_rate = 0.0
        #: False: answers carry no height header, as from a proxy that drops it (``run.py doctor`` says so)
        self.height_header = True
        #: (method, request bytes) -> the answers given, oldest first: (height, response)
        self._history: dict[tuple[str, bytes], collections.deque[tuple[int, object]]] = {}
        self.stale_served = 0
        self.zero_served = 0
        self.latency = latency
        self._rates = dict(error_rates or {})
        self._fail_next: dict[str, int] = {}
        self._lose_next: dict[str, int] = {}
        #: method -> request subjects (tenant, lease or provider) whose calls always fail.
        self._fail_for: dict[str, frozenset[str]] = {}
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}

    def set_error_rate(self, method: str, rate: float) -> None:
        with self._lock:
            self._rates[method] = rate

    def fail_next(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer UNAVAILABLE without running."""
        with self._lock:
            self._fail_next[method] = self._fail_next.get(method, 0) + times

    def fail_for(self, method: str, subjects: frozenset[str]) -> None:
        """Calls of ``method`` about these tenants (or lease/provider uuids) always answer UNAVAILABLE."""
        with self._lock:
            self._fail_for[method] = frozenset(subjects)

    def lose_response(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` run, then answer UNAVAILABLE (the reply is lost)."""
        with self._lock:
            self._lose_next[method] = self._lose_next.get(method, 0) + times

    def stale_reads(self, rate: float, blocks: int) -> None:
        """A fraction ``rate`` of ``STALE_METHODS`` answers come from at least ``blocks`` blocks before."""
        if not 0.0 <= rate <= 1.0 or blocks < 1:
            raise ValueError(f"stale reads: need 0 <= rate <= 1 and blocks >= 1, got {rate}, {blocks}")
        with self._lock:
            self.stale_rate, self.stale_blocks = rate, blocks

    def zero_reads(self, rate: float) -> None:
        """A fraction ``rate`` of ``ZERO_METHODS`` answers say every balance is zero."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"zero reads: need 0 <= rate <= 1, got {rate}")
        with self._lock:
            self.zero_rate = rate

    def clear(self) -> None:
        with self._lock:
            self._rates.clear()
            self._fail_next.clear()
            self._lose_next.clear()
            self._fail_for.clear()
            self.latency = 0.0
            self.stale_rate = self.zero_rate = 0.0

    def _take(self, table: dict[str, int], method: str) -> bool:
        if table.get(method, 0) > 0:
            table[method] -= 1
            return True
        return False

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = handler_call_details.method.rsplit("/", 1)[-1]
        inner = handler.unary_unary

        def call(request, context):
            # Before the call: the state answered is at least this recent.
            height = self.height() if self.height is not None else 0
            with self._lock:
                self.calls[method] = self.calls.get(method, 0) + 1
                fail = (
                    self._take(self._fail_next, method)
                    or (method in self._fail_for and _subject(request) in self._fail_for[method])
                    or (self._rates.get(method, 0.0) > 0 and self._random.random() < self._rates[method])
                )
                lose = self._take(self._lose_next, method)
                stale = method in STALE_METHODS and self.stale_rate > 0 and self._random.random() < self.stale_rate
                zero = method in ZERO_METHODS and self.zero_rate > 0 and self._random.random() < self.zero_rate
            if self.latency:
                time.sleep(self.latency)
            if fail:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"devnet: injected failure of {method}")
            response = inner(request, context)
            if lose:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"devnet: connection lost after {method}")
            if method == "CreditAccounts" and self._fail_for.get("CreditAccount"):
                response = _without(response, self._fail_for["CreditAccount"])
            if method in STALE_METHODS:
                height, response = self._as_of(method, request, height, response, stale)
            if zero:
                response = _zero_balances(response)
                with self._lock:
                    self.zero_served += 1
            if height and self.height_header:
                context.send_initial_metadata(((BLOCK_HEIGHT_HEADER, str(height)),))
            return response

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


    def _as_of(self, method: str, request, height: int, response, stale: bool):
        """(height, response) to serve: a fresh answer is kept for later stale reads; a stale one is an old one."""
        key = (method, request.SerializeToString(deterministic=True))
        with self._lock:
            history = self._history.setdefault(key, collections.deque(maxlen=STALE_HISTORY))
            if stale:
                # The newest answer at least stale_blocks old; short of one, the oldest there is.
                lagging = [h for h in history if h[0] <= height - self.stale_blocks]
                older = lagging[-1:] or [h for h in history if h[0] < height][:1]
                if older:
                    self.stale_served += 1
                    return older[0]
            if height and (not history or history[-1][0] < height):
                history.append((height, response))
        return height, response


def _zero_balances(response):
    """A ``CreditAccount`` answer with its balances (and what is available of them) gone; a
    ``DenomOwners`` page whose holders all hold 0 (a state not filled in)."""
    zeroed = type(response)()
    zeroed.CopyFrom(response)
    if isinstance(zeroed, bank_query.QueryDenomOwnersResponse):
        for owner in zeroed.denom_owners:
            owner.balance.amount = "0"
        return zeroed
    del zeroed.balances[:]
    del zeroed.available_balances[:]
    return zeroed


def _without(response, tenants: frozenset[str]):
    """A ``CreditAccounts`` page without the accounts of ``tenants``: a node that cannot answer a tenant's
    account (``fail_for``) cannot list it either, so the demo's failing tenant fails in bulk reads too."""
    kept = type(response)()
    kept.CopyFrom(response)
    del kept.credit_accounts[:]
    kept.credit_accounts.extend(a for a in response.credit_accounts if a.tenant not in tenants)
    return kept


def _subject(request) -> str:
    """What a request is about: its tenant, lease or provider."""
    for name in ("tenant", "lease_uuid", "provider_uuid", "address"):
        value = getattr(request, name, "")
        if value:
            return value
    return ""


def _model_call(context: grpc.ServicerContext, fn: Callable):
    """A model query; its refusal as the gRPC status the chain's querier would set."""
    try:
        return fn()
    except QueryRefused as exc:
        context.abort(getattr(grpc.StatusCode, exc.status), exc.message)


def _page(request_page) -> PageRequest:
    return PageRequest(
        key=bytes(request_page.key),
        offset=request_page.offset,
        limit=request_page.limit,
        count_total=request_page.count_total,
        reverse=request_page.reverse,
    )


class _AuthQuery(auth_grpc.QueryServicer):
    def __init__(self, node: DevnetNode) -> None:
        self.node = node

    def Account(self, request, context):
        found = self.node.account(request.address)
        if found is None:
            credit = self.node.model.credit_address_kind(request.address)
            if credit is not None:
                # A funded credit address: the bank made it an account (no key, so no pubkey, sequence 0).
                kind, number = credit
                packed = ProtoAny()
                packed.Pack(_wrapped(auth_pb2.BaseAccount(address=request.address, account_number=number), kind),
                            type_url_prefix="/")
                return auth_query.QueryAccountResponse(account=packed)
            context.abort(grpc.StatusCode.NOT_FOUND, f"account {request.address} not found")
        account = auth_pb2.BaseAccount(
            address=request.address, account_number=found.number, sequence=found.sequence
        )
        if found.pubkey:  # set by the account's first included tx
            account.pub_key.Pack(Secp256k1PubKey(key=found.pubkey), type_url_prefix="/")
        packed = ProtoAny()
        packed.Pack(_wrapped(account, found.kind), type_url_prefix="/")
        return auth_query.QueryAccountResponse(account=packed)


def _wrapped(base: auth_pb2.BaseAccount, kind: str):
    """The account as ``kind`` (``devnet.node.ACCOUNT_KINDS``): a vesting account wraps the base one."""
    if kind == "base":
        return base
    vesting = vesting_pb2.BaseVestingAccount(base_account=base, end_time=2_000_000_000)
    vesting.original_vesting.add(denom="umfx", amount="1000000")
    if kind == "continuous_vesting":
        return vesting_pb2.ContinuousVestingAccount(base_vesting_account=vesting, start_time=1_700_000_000)
    if kind == "delayed_vesting":
        return vesting_pb2.DelayedVestingAccount(base_vesting_account=vesting)
    if kind == "periodic_vesting":
        return vesting_pb2.PeriodicVestingAccount(base_vesting_account=vesting, start_time=1_700_000_000)
    return vesting_pb2.PermanentLockedAccount(base_vesting_account=vesting)


class _ConsensusQuery(consensus_grpc.QueryServicer):
    """``cosmos.consensus.v1.Query/Params``: cosmpy's default gas path reads ``block.max_gas``."""

    def Params(self, request, context):
        return consensus_query.QueryParamsResponse(
            params=tm_params.ConsensusParams(block=tm_params.BlockParams(max_bytes=22_020_096, max_gas=BLOCK_MAX_GAS))
        )


class _TxService(tx_grpc.ServiceServicer):
    def __init__(self, node: DevnetNode) -> None:
        self.node = node

    def Simulate(self, request, context):
        raw = request.tx_bytes or request.tx.SerializeToString()
        try:
            gas_used, result = self.node.simulate(raw)
        except TxRejected as rej:
            context.abort(grpc.StatusCode.UNKNOWN, f"{rej.log} With gas wanted: '0' and gas used: '0' ")
        return tx_service.SimulateResponse(
            gas_info=abci_pb2.GasInfo(gas_wanted=0, gas_used=gas_used), result=result
        )

    def BroadcastTx(self, request, context):
        if request.mode not in (tx_service.BROADCAST_MODE_SYNC, tx_service.BROADCAST_MODE_ASYNC):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "only BROADCAST_MODE_SYNC and ASYNC are supported")
        if not request.tx_bytes:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "invalid empty tx")
        r = self.node.check_tx(request.tx_bytes)
        return tx_service.BroadcastTxResponse(
            tx_response=abci_pb2.TxResponse(
                txhash=r.txhash, code=r.code, codespace=r.codespace, raw_log=r.log, gas_wanted=r.gas_wanted
            )
        )

    def GetTx(self, request, context):
        if not request.hash:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be nil")
        if self.node.tx_index_mode == "null":
            # CometBFT's Tx with a null indexer; the SDK passes the error on as it is.
            context.abort(grpc.StatusCode.UNKNOWN, INDEXING_DISABLED)
        found = self.node.get_tx(request.hash)
        if found is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"tx not found: {request.hash}")
        tx = tx_pb2.Tx()
        found.tx.Unpack(tx)
        return tx_service.GetTxResponse(tx=tx, tx_response=found)


    def GetTxsEvent(self, request, context):
        if self.node.tx_index_mode == "null":
            context.abort(grpc.StatusCode.INTERNAL, INDEXING_DISABLED)
        if not request.query:
            context.abort(grpc.StatusCode.INTERNAL, "query cannot be empty")
        try:
            query = parse_query(request.query)
        except QueryError as exc:
            context.abort(grpc.StatusCode.INTERNAL, f"failed to search for txs: {exc}")
        found, total = self.node.search_txs(
            query, page=request.page or 1, limit=request.limit or 100,
            descending=request.order_by == tx_service.ORDER_BY_DESC,
        )
        response = tx_service.GetTxsEventResponse(tx_responses=found, total=total)
        for r in found:
            tx = tx_pb2.Tx()
            if r.HasField("tx"):
                r.tx.Unpack(tx)
            response.txs.append(tx)
        return response


#: What CometBFT answers a search (or a tx by hash) on a node whose indexer is ``null``.
INDEXING_DISABLED = "transaction indexing is disabled"


class _TendermintService(tm_grpc.ServiceServicer):
    def __init__(self, node: DevnetNode) -> None:
        self.node = node

    def GetSyncing(self, request, context):
        return tm_query.GetSyncingResponse(syncing=self.node.status().catching_up)

    def GetLatestBlock(self, request, context):
        status = self.node.status()
        header = tm_types.Header(
            chain_id=self.node.chain_id,
            height=status.latest_block_height,
            time=time_to_proto(status.latest_block_time),
        )
        response = tm_query.GetLatestBlockResponse(block=tm_block.Block(header=header))
        response.sdk_block.header.chain_id = header.chain_id
        response.sdk_block.header.height = header.height
        response.sdk_block.header.time.CopyFrom(header.time)
        return response

    def GetBlockByHeight(self, request, context):
        if request.height <= 0 or request.height > self.node.latest_height():
            context.abort(grpc.StatusCode.NOT_FOUND, f"requested block height {request.height} is not available")
        header = tm_types.Header(
            chain_id=self.node.chain_id, height=request.height, time=time_to_proto(self.node.time_of(request.height))
        )
        response = tm_query.GetBlockByHeightResponse(block=tm_block.Block(header=header))
        response.sdk_block.header.chain_id = header.chain_id
        response.sdk_block.header.height = header.height
        response.sdk_block.header.time.CopyFrom(header.time)
        return response

    def GetNodeInfo(self, request, context):
        return tm_query.GetNodeInfoResponse(
            default_node_info=p2p_types.DefaultNodeInfo(network=self.node.chain_id, moniker="leasewarden-devnet")
        )


class _BillingQuery(query_pb2_grpc.QueryServicer):
    """The billing ``Query`` service, in the wire of the model's chain version."""

    def __init__(self, node: DevnetNode) -> None:
        self.model = node.model
        self.version = node.model.version

    def _lease(self, record: LeaseRecord) -> types_pb2.Lease:
        return lease_to_proto(
            record.lease,
            rejected_at=record.rejected_at,
            rejection_reason=record.rejection_reason,
            expired_at=record.expired_at,
            meta_hash=record.meta_hash,
        )

    def Lease(self, request, context):
        record = _model_call(context, lambda: self.model.lease_record(request.lease_uuid))
        return query_pb2.QueryLeaseResponse(lease=self._lease(record))

    def LeasesByProvider(self, request, context):
        state = _state_name(request.state_filter) if request.state_filter else ""
        leases, next_key, total = _model_call(
            context, lambda: self.model.leases_by_provider(request.provider_uuid, state, _page(request.pagination))
        )
        return query_pb2.QueryLeasesByProviderResponse(
            leases=[self._lease(r) for r in leases],
            pagination=pagination_pb2.PageResponse(next_key=next_key, total=total),
        )

    def LeasesByTenant(self, request, context):
        state = _state_name(request.state_filter) if request.state_filter else ""
        leases, next_key, total = _model_call(
            context, lambda: self.model.leases_by_tenant(request.tenant, state, _page(request.pagination))
        )
        return query_pb2.QueryLeasesByTenantResponse(
            leases=[self._lease(r) for r in leases],
            pagination=pagination_pb2.PageResponse(next_key=next_key, total=total),
        )

    def CreditAccount(self, request, context):
        page = _page(request.pagination) if self.version.credit_account_pagination else PageRequest()
        account, next_key = _model_call(context, lambda: self.model.credit_account(request.tenant, page))
        response = credit_account_to_proto(account)
        if self.version.credit_account_pagination:
            response.pagination.CopyFrom(pagination_pb2.PageResponse(next_key=next_key))
        return response

    def CreditAccounts(self, request, context):
        accounts, next_key, total = _model_call(context, lambda: self.model.credit_accounts(_page(request.pagination)))
        response = query_pb2.QueryCreditAccountsResponse(
            pagination=pagination_pb2.PageResponse(next_key=next_key, total=total)
        )
        for account in accounts:
            response.credit_accounts.append(credit_account_to_proto(account).credit_account)
        return response

    def CreditAddress(self, request, context):
        address = _model_call(context, lambda: self.model.credit_address(request.tenant))
        return query_pb2.QueryCreditAddressResponse(credit_address=address)

    def WithdrawableAmount(self, request, context):
        amounts = _model_call(context, lambda: self.model.withdrawable_amount(request.lease_uuid))
        return query_pb2.QueryWithdrawableAmountResponse(amounts=coins_to_proto(amounts))

    def ProviderWithdrawable(self, request, context):
        if self.version.withdrawable_pagination:
            page, limit = _page(request.pagination), 0
        else:
            page, limit = PageRequest(), request.limit
        amounts, count, has_more, next_key, failed = _model_call(
            context, lambda: self.model.provider_withdrawable(request.provider_uuid, limit, page)
        )
        response = query_pb2.QueryProviderWithdrawableResponse(amounts=coins_to_proto(amounts), lease_count=count)
        if self.version.withdrawable_pagination:
            response.pagination.CopyFrom(pagination_pb2.PageResponse(next_key=next_key))
            response.failed_lease_uuids.extend(failed)
        else:
            response.has_more = has_more
        return response

    def CreditEstimate(self, request, context):
        estimate = _model_call(context, lambda: self.model.credit_estimate(request.tenant))
        return credit_estimate_to_proto(estimate)


class _BankQuery(bank_grpc.QueryServicer):
    """``cosmos.bank.v1beta1.Query/DenomOwners``: the holders of a denom, by page (the model's bank holds
    the credit addresses only; every other bank query answers UNIMPLEMENTED)."""

    def __init__(self, node: DevnetNode) -> None:
        self.model = node.model

    def DenomOwners(self, request, context):
        owners, next_key, total = _model_call(
            context, lambda: self.model.denom_owners(request.denom, _page(request.pagination))
        )
        response = bank_query.QueryDenomOwnersResponse(pagination=pagination_pb2.PageResponse(next_key=next_key, total=total))
        for address, amount in owners:
            owner = response.denom_owners.add(address=address)
            owner.balance.denom, owner.balance.amount = request.denom, str(amount)
        return response


def _state_name(value: int) -> str:
    return types_pb2.LeaseState.Name(value)[len("LEASE_STATE_"):]


#: The port is the devnet's alone. gRPC sets SO_REUSEPORT on its listening sockets by default, so
#: a second server given a port another holds would share it without a word, and a client could
#: reach either one (grpc/grpc#10755: servers on port 0 started and stopped in quick succession,
#: as a test suite does, cross-talk). Off, such a start fails, naming the port.
SERVER_OPTIONS = (("grpc.so_reuseport", 0),)


def _port_in_use(host: str, port: int) -> bool:
    """Whether another socket holds ``host:port`` on one of the addresses ``host`` names, as gRPC would
    bind it (SO_REUSEADDR, not SO_REUSEPORT).

    Asked before gRPC is, so that a port in use is reported in the devnet's own words alone: gRPC
    prints its own error line to the terminal first (``add_port.cc``), which only an environment
    variable read at its import could silence. Only "in use" is answered here; a host that does not
    resolve, or an address this machine cannot bind (``::1`` with IPv6 off), is gRPC's to judge, as
    before. gRPC still has the last word (a port taken between the two is refused by it, with that
    line)."""
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # gRPC's "[::1]"
    try:
        addresses = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return False
    for family, kind, proto, _, where in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(where)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


class DevnetGrpcServer:
    """The gRPC server in front of a ``DevnetNode``; ``start()`` returns the bound port."""

    def __init__(
        self,
        node: DevnetNode,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: GrpcFaults | None = None,
        max_workers: int = 64,
        tls: tuple[bytes, bytes] | None = None,
    ) -> None:
        self.node = node
        self.host = host
        self.port = port
        #: (private key, certificate chain), PEM: serve over TLS (``grpc+https``), as a public node does.
        self.tls = tls
        self.faults = faults or GrpcFaults()
        self.faults.height = node.latest_height
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="devnet-grpc"),
            interceptors=[self.faults],
            options=SERVER_OPTIONS,
        )
        auth_grpc.add_QueryServicer_to_server(_AuthQuery(node), self._server)
        tx_grpc.add_ServiceServicer_to_server(_TxService(node), self._server)
        tm_grpc.add_ServiceServicer_to_server(_TendermintService(node), self._server)
        query_pb2_grpc.add_QueryServicer_to_server(_BillingQuery(node), self._server)
        bank_grpc.add_QueryServicer_to_server(_BankQuery(node), self._server)
        consensus_grpc.add_QueryServicer_to_server(_ConsensusQuery(), self._server)
        sku_service.add_to_server(node, self._server)
        node_service.add_to_server(node, self._server)
        self._started = False

    def start(self) -> int:
        address = f"{self.host}:{self.port}"
        try:
            if self.port and _port_in_use(self.host, self.port):
                bound = 0  # in use (port 0 takes a free one: nothing to ask)
            elif self.tls is None:
                bound = self._server.add_insecure_port(address)
            else:
                bound = self._server.add_secure_port(address, grpc.ssl_server_credentials([self.tls]))
        except RuntimeError:  # grpcio raises where it used to return 0
            bound = 0
        if bound == 0:
            raise OSError(
                f"devnet gRPC server cannot listen on {self.host}:{self.port}: the port is in use, or the address "
                "is not this machine's ([devnet] host, grpc_port; grpc_port = 0 takes a free one)"
            )
        self.port = bound
        self._server.start()
        self._started = True
        return bound

    @property
    def url(self) -> str:
        return f"grpc+{'http' if self.tls is None else 'https'}://{self.host}:{self.port}"

    def stop(self, grace: float = 0.5) -> None:
        if self._started:
            self._server.stop(grace).wait(grace + 1)
            self._started = False
