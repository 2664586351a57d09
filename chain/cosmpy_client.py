"""``ChainClient`` over a node's gRPC endpoint, signing with cosmpy: the production path.

Reads are single gRPC queries with a deadline (``[node] query_timeout``):
the billing ``Query`` service for leases (every page of ``LeasesByProvider``
with the ACTIVE filter), credit, withdrawable amounts and estimates, and
``cosmos.base.tendermint.v1beta1.Service`` ``GetLatestBlock`` (height, time)
plus ``GetSyncing`` (``catching_up``) for the node's status, asked together.

Writes are txs signed with the provider key in ``SIGN_MODE_DIRECT`` (cosmpy's
``Transaction``/``SigningCfg``), one at a time under one lock, because txs of
one signer must carry consecutive sequence numbers:

1. the account number and sequence are read once and cached; each accepted
   broadcast advances the cached sequence;
2. the tx is simulated for gas (limit = gas used x ``gas_multiplier``, fee =
   ``ceil(limit x gas_price)`` in ``fee_denom``); a message error (e.g.
   billing code 3, lease not active) surfaces here, before any fee is paid;
3. it is broadcast (sync). A sequence mismatch (sdk 32) re-reads the
   account (taking the ``expected N`` the node names when it is ahead, as
   when our own txs still wait in its mempool) and signs again; out of gas
   (sdk 11, at CheckTx or at inclusion) signs again with a larger margin;
   "already in mempool" (sdk 19) means the node already has these exact
   bytes, so it is awaited like an accepted broadcast. A broadcast whose
   answer is lost in transport is sent again byte for byte, which a node
   can apply at most once;
4. inclusion is awaited by polling ``GetTx`` for the tx hash until
   ``tx_timeout``; the ``Msg*Response`` is read from the included tx's
   ``TxMsgData``. No inclusion in time is a transient ``ChainError`` with
   ``may_have_committed=True``: the caller must not re-drive it blindly.
   The included tx's events give what each lease settled
   (``provider_withdraw`` / ``lease_closed``, ``chain.settlements``), at the
   tx's block time (``timestamp``; the block's header time if a node leaves
   it out): a ``WithdrawPage`` or ``CloseOutcome`` carries them for the ledger.

Every failure is a ``chain.errors.ChainError`` with the node's codespace and
code (gRPC texts without numbers are read through ``chain.sdk_errors``);
transport failures are transient. Only the transient cases above are retried
here, at most ``max_tx_retries`` times; everything else goes to the caller.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Sequence

import grpc
from google.protobuf.any_pb2 import Any as ProtoAny
from google.protobuf.message import DecodeError, Message

import cosmpy.protos  # noqa: F401  (puts cosmpy's generated packages on sys.path first)
from chain.billing_codec import (
    ProtocolError,
    coins_from_proto,
    credit_account_from_proto,
    credit_estimate_from_proto,
    lease_from_proto,
    time_from_proto,
)
from chain.billing_pb import query_pb2, query_pb2_grpc, tx_pb2 as billing_tx, types_pb2
from chain.errors import (
    INVALID_REQUEST,
    SDK,
    SDK_OUT_OF_GAS,
    SDK_SEQUENCE_MISMATCH,
    SDK_TX_IN_MEMPOOL,
    ChainError,
)
from chain.keys import ProviderKey, load_provider_key
from chain.model import MAX_BATCH_LEASE_SIZE
from chain.sdk_errors import SDK_UNKNOWN_ADDRESS, classify_text, expected_sequence
from chain.settlements import settlements_in_tx
from cosmpy.aerial.tx import SigningCfg, Transaction, TxFee
from cosmpy.aerial.urls import Protocol, parse_url
from cosmpy.protos.cosmos.auth.v1beta1 import auth_pb2, query_pb2 as auth_query, query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_query, query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service, service_pb2_grpc as tx_grpc, tx_pb2
from messages.chain import CloseOutcome, CreditAccount, CreditEstimate, Lease, NodeStatus, WithdrawPage
from messages.coins import Coin, coins
from messages.ledger import LeaseSettled
from messages.tx_cost import TxCost

__all__ = ["CosmpyChainClient", "IncludedTx", "TRANSPORT_STATUSES", "parse_block_time"]

log = logging.getLogger(__name__)

#: gRPC statuses that say nothing about the request itself: the node was
#: unreachable, overloaded or too slow. Always transient.
TRANSPORT_STATUSES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)

#: Re-sends of one tx's exact bytes after its broadcast answer was lost.
_LOST_BROADCAST_RESENDS = 3
#: First pause before a re-send; doubled each time (a lost answer usually
#: means the connection is being re-established).
_RESEND_BACKOFF = 0.05

#: A node's tx timestamp, RFC 3339 only: date and time, optional fraction
#: (nanoseconds on CometBFT), a zone. ``fromisoformat`` alone would also take
#: forms no node writes (a naive date, ISO basic format) as a block time.
_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|z|[+-]\d{2}:\d{2})")

MSG_WITHDRAW_RESPONSE = "/liftedinit.billing.v1.MsgWithdrawResponse"
MSG_CLOSE_LEASE_RESPONSE = "/liftedinit.billing.v1.MsgCloseLeaseResponse"


@dataclass(frozen=True)
class IncludedTx:
    """A tx the chain included with code 0, and what its messages answered."""

    txhash: str
    height: int
    msg_responses: tuple[ProtoAny, ...]
    gas_used: int
    #: The tx result's events as (type, {key: value}), in order.
    events: tuple[tuple[str, dict[str, str]], ...] = ()
    #: Block time as the node wrote it (RFC 3339); may be empty.
    timestamp: str = ""
    #: The fee, gas limit and re-signs of the tx, for the metrics (``TxCost``).
    cost: TxCost | None = None


@dataclass
class _Account:
    number: int
    sequence: int


def rpc_error(operation: str, exc: grpc.RpcError, *, may_have_committed: bool = False) -> ChainError:
    """A failed gRPC call as a ``ChainError``: transport or the node's (codespace, code)."""
    status = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    if status in TRANSPORT_STATUSES or status is None:
        name = status.name if status is not None else "transport error"
        return ChainError.transport(f"{operation}: {name}: {details}".rstrip(": "), may_have_committed=may_have_committed)
    found = classify_text(details)
    if found is not None:
        codespace, code = found
        return ChainError(f"{operation}: {details}", codespace=codespace, code=code, may_have_committed=may_have_committed)
    return ChainError(
        f"{operation}: gRPC {status.name}: {details}",
        codespace="grpc",
        code=status.value[0],
        transient=False,
        may_have_committed=may_have_committed,
    )


def parse_block_time(text: str) -> datetime | None:
    """A ``TxResponse.timestamp`` (RFC 3339, ``Z`` or an offset, up to nanoseconds) as UTC; None if empty or malformed."""
    m = _RFC3339.fullmatch(text.strip())
    if m is None:
        return None
    base, fraction, zone = m.groups()
    micros = (fraction[1:] + "000000")[:6] if fraction else "000000"
    try:
        at = datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone in ('Z', 'z') else zone}")
    except ValueError:
        return None
    return at.astimezone(timezone.utc)


def _fee_of(included: abci_pb2.TxResponse) -> tuple[Coin, ...]:
    """The fee an included tx carried, from the tx itself (the chain takes it whole); () if the node left the tx out."""
    tx = tx_pb2.Tx()
    if not included.HasField("tx") or not included.tx.Unpack(tx):
        return ()
    return coins(Coin(c.denom, int(c.amount)) for c in tx.auth_info.fee.amount if c.amount.isdigit())


class CosmpyChainClient:
    """The sidecar's chain I/O against a node's gRPC endpoint. Thread-safe.

    Queries may run concurrently from many threads; txs are serialized.
    """

    def __init__(
        self,
        grpc_url: str,
        key: ProviderKey,
        chain_id: str,
        *,
        fee_denom: str = "umfx",
        gas_price: Decimal | str = "0.025",
        gas_multiplier: float = 1.5,
        out_of_gas_multiplier: float = 1.5,
        tx_timeout: float = 30.0,
        tx_poll_interval: float = 0.2,
        query_timeout: float = 10.0,
        max_tx_retries: int = 5,
        withdraw_limit: int = 50,
        page_size: int = 100,
    ) -> None:
        parsed = parse_url(grpc_url) if "://" in grpc_url else None
        if parsed is None or parsed.protocol != Protocol.GRPC:
            raise ValueError(f"grpc_url {grpc_url!r}: expected grpc+http://host:port or grpc+https://host:port")
        self.grpc_url = grpc_url
        self.key = key
        self.chain_id = chain_id
        self.fee_denom = fee_denom
        self.gas_price = Decimal(gas_price)
        self.gas_multiplier = gas_multiplier
        self.out_of_gas_multiplier = out_of_gas_multiplier
        self.tx_timeout = tx_timeout
        self.tx_poll_interval = tx_poll_interval
        self.query_timeout = query_timeout
        self.max_tx_retries = max_tx_retries
        self.withdraw_limit = withdraw_limit
        self.page_size = page_size
        options = [("grpc.keepalive_time_ms", 30_000), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        if parsed.secure:
            self._channel = grpc.secure_channel(parsed.host_and_port, grpc.ssl_channel_credentials(), options)
        else:
            self._channel = grpc.insecure_channel(parsed.host_and_port, options)
        self._auth = auth_grpc.QueryStub(self._channel)
        self._txs = tx_grpc.ServiceStub(self._channel)
        self._tendermint = tm_grpc.ServiceStub(self._channel)
        self._billing = query_pb2_grpc.QueryStub(self._channel)
        #: One signer, one writer: held for the whole life of a tx.
        self._tx_lock = threading.Lock()
        self._account: _Account | None = None

    @classmethod
    def from_settings(
        cls, node: Any, chain_id: str, *, key: ProviderKey | None = None, grpc_url: str | None = None
    ) -> "CosmpyChainClient":
        """Build from ``[node]`` settings (``chain.node_settings.NodeSettings``); loads the key if not given."""
        if key is None:
            key = load_provider_key(node.key_file, node.key_env)
        return cls(
            grpc_url or node.grpc_url,
            key,
            chain_id,
            fee_denom=node.fee_denom,
            gas_price=node.gas_price,
            gas_multiplier=node.gas_multiplier,
            out_of_gas_multiplier=node.out_of_gas_multiplier,
            tx_timeout=node.tx_timeout.total_seconds(),
            tx_poll_interval=node.tx_poll_interval.total_seconds(),
            query_timeout=node.query_timeout.total_seconds(),
            max_tx_retries=node.max_tx_retries,
            withdraw_limit=node.withdraw_limit,
            page_size=node.page_size,
        )

    @property
    def address(self) -> str:
        return self.key.address

    def __repr__(self) -> str:
        return f"CosmpyChainClient({self.grpc_url!r}, signer={self.key.address!r}, chain_id={self.chain_id!r})"

    def close(self) -> None:
        self._channel.close()

    # -- queries ----------------------------------------------------------------
    def _query(self, operation: str, method: Callable[..., Any], request: Message) -> Any:
        try:
            return method(request, timeout=self.query_timeout)
        except grpc.RpcError as exc:
            raise rpc_error(operation, exc) from None

    def _decoded(self, operation: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ProtocolError as exc:
            raise ChainError(f"{operation}: {exc}", codespace="protocol", transient=False) from None

    def provider_withdrawable(self, provider_uuid: str) -> tuple[Coin, ...]:
        op = f"provider_withdrawable {provider_uuid}"
        r = self._query(op, self._billing.ProviderWithdrawable, query_pb2.QueryProviderWithdrawableRequest(provider_uuid=provider_uuid))
        return self._decoded(op, lambda: coins_from_proto(r.amounts))

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        op = f"active_leases_by_provider {provider_uuid}"
        leases: list[Lease] = []
        key = b""
        seen_keys: set[bytes] = set()
        while True:
            request = query_pb2.QueryLeasesByProviderRequest(
                provider_uuid=provider_uuid,
                pagination=pagination_pb2.PageRequest(key=key, limit=self.page_size),
                state_filter=types_pb2.LEASE_STATE_ACTIVE,
            )
            r = self._query(op, self._billing.LeasesByProvider, request)
            leases.extend(self._decoded(op, lambda: [lease_from_proto(p) for p in r.leases]))
            key = r.pagination.next_key
            if not key:
                return tuple(leases)
            if key in seen_keys:  # a node that loops would otherwise hang the sidecar
                raise ChainError(f"{op}: the node repeated page key {key!r}", codespace="protocol", transient=False)
            seen_keys.add(key)

    def lease(self, lease_uuid: str) -> Lease:
        op = f"lease {lease_uuid}"
        r = self._query(op, self._billing.Lease, query_pb2.QueryLeaseRequest(lease_uuid=lease_uuid))
        return self._decoded(op, lambda: lease_from_proto(r.lease))

    def credit_account(self, tenant: str) -> CreditAccount:
        op = f"credit_account {tenant}"
        r = self._query(op, self._billing.CreditAccount, query_pb2.QueryCreditAccountRequest(tenant=tenant))
        return self._decoded(op, lambda: credit_account_from_proto(tenant, r))

    def credit_estimate(self, tenant: str) -> CreditEstimate:
        op = f"credit_estimate {tenant}"
        r = self._query(op, self._billing.CreditEstimate, query_pb2.QueryCreditEstimateRequest(tenant=tenant))
        return self._decoded(op, lambda: credit_estimate_from_proto(tenant, r))

    def node_status(self) -> NodeStatus:
        """Latest block (``GetLatestBlock``) and ``catching_up`` (``GetSyncing``), asked in parallel."""
        op = "node_status"
        try:
            block_call = self._tendermint.GetLatestBlock.future(tm_query.GetLatestBlockRequest(), timeout=self.query_timeout)
            sync_call = self._tendermint.GetSyncing.future(tm_query.GetSyncingRequest(), timeout=self.query_timeout)
            block = block_call.result()
            syncing = sync_call.result()
        except grpc.RpcError as exc:
            raise rpc_error(op, exc) from None
        header = block.sdk_block.header if block.sdk_block.header.height else block.block.header
        if not header.height:
            raise ChainError(f"{op}: the node answered no latest block", codespace="protocol", transient=True)
        return NodeStatus(
            latest_block_height=header.height,
            latest_block_time=time_from_proto(header.time),
            catching_up=syncing.syncing,
        )

    # -- transactions -------------------------------------------------------------
    def withdraw_by_provider(
        self, provider_uuid: str, key: bytes, signed: Callable[[str], None] | None = None
    ) -> WithdrawPage:
        msg = billing_tx.MsgWithdraw(
            sender=self.address, provider_uuid=provider_uuid, limit=self.withdraw_limit, key=key
        )
        op = f"withdraw_by_provider {provider_uuid}"
        included = self.send_messages(op, [msg], signed=signed)
        return self._withdraw_page(op, included, provider_uuid)

    def withdraw_outcome(self, tx_hash: str, provider_uuid: str) -> WithdrawPage | None:
        op = f"withdraw_outcome {tx_hash}"
        included = self._looked_up(op, tx_hash)
        return None if included is None else self._withdraw_page(op, included, provider_uuid)

    def close_outcome(self, tx_hash: str, lease_uuids: Sequence[str]) -> CloseOutcome | None:
        op = f"close_outcome {tx_hash}"
        included = self._looked_up(op, tx_hash)
        if included is None:
            return None
        closed = 0
        for i, any_msg in enumerate(included.msg_responses):
            if any_msg.type_url == MSG_CLOSE_LEASE_RESPONSE:
                r = billing_tx.MsgCloseLeaseResponse()
                self._unpack(op, included, i, MSG_CLOSE_LEASE_RESPONSE, r)
                closed += r.closed_count
        return CloseOutcome(
            closed_count=closed,
            tx_hashes=(included.txhash,),
            settlements=self._settlements(op, included, lease_uuids=set(lease_uuids)),
            cost=included.cost,
        )

    def _looked_up(self, op: str, tx_hash: str) -> IncludedTx | None:
        """A tx of unknown outcome, as included; None while no node knows it; a ``ChainError`` if it failed."""
        found = self._get_tx(op, tx_hash)
        if found is None:
            return None
        if found.code != 0:
            raise self._tx_error(op, found, included_at=found.height, final=True)
        return self._included(op, tx_hash, found)

    def _withdraw_page(self, op: str, included: IncludedTx, provider_uuid: str) -> WithdrawPage:
        r = billing_tx.MsgWithdrawResponse()
        self._unpack(op, included, 0, MSG_WITHDRAW_RESPONSE, r)
        return self._decoded(
            op,
            lambda: WithdrawPage(
                tx_hash=included.txhash,
                total_amounts=coins_from_proto(r.total_amounts),
                withdrawal_count=r.withdrawal_count,
                has_more=r.has_more,
                next_key=bytes(r.next_key),
                payout_address=r.payout_address,
                settlements=self._settlements(op, included, provider_uuid=provider_uuid),
                cost=included.cost,
            ),
        )

    def close_leases(self, lease_uuids: Sequence[str], reason: str) -> CloseOutcome:
        """One ``MsgCloseLease`` of 1..100 leases; the chain closes all or none."""
        return self.close_lease_batches([lease_uuids], reason)

    def close_lease_batches(self, batches: Sequence[Sequence[str]], reason: str) -> CloseOutcome:
        """One tx with a ``MsgCloseLease`` per batch (each 1..100 leases); atomic as a whole."""
        if not batches:
            raise ChainError.billing(INVALID_REQUEST, "close_leases: no leases given")
        for batch in batches:
            if not 1 <= len(batch) <= MAX_BATCH_LEASE_SIZE:
                raise ChainError.billing(
                    INVALID_REQUEST, f"close_leases: a batch holds 1..{MAX_BATCH_LEASE_SIZE} leases, got {len(batch)}"
                )
        msgs = [billing_tx.MsgCloseLease(sender=self.address, lease_uuids=list(b), reason=reason) for b in batches]
        total = sum(len(b) for b in batches)
        op = f"close_leases ({total} leases)"
        included = self.send_messages(op, msgs)
        closed = 0
        for i in range(len(msgs)):
            r = billing_tx.MsgCloseLeaseResponse()
            self._unpack(op, included, i, MSG_CLOSE_LEASE_RESPONSE, r)
            closed += r.closed_count
        asked = {u for b in batches for u in b}
        return CloseOutcome(
            closed_count=closed,
            tx_hashes=(included.txhash,),
            settlements=self._settlements(op, included, lease_uuids=asked),
            cost=included.cost,
        )

    def _settlements(
        self, operation: str, included: IncludedTx, *, provider_uuid: str | None = None, lease_uuids: set[str] | None = None
    ) -> tuple[LeaseSettled, ...]:
        """What the included tx settled per lease, at its block time.

        Never fails the call: the tx is on chain and its answer stands. When
        no block time can be had the settlements are left out, with a warning
        naming the tx (the ledger then shows the shortfall, not a wrong month).
        """
        at = self._block_time(operation, included)
        if at is None:
            return ()
        return tuple(
            settlements_in_tx(included.txhash, at, included.events, provider_uuid=provider_uuid, lease_uuids=lease_uuids)
        )

    def _block_time(self, operation: str, included: IncludedTx) -> datetime | None:
        at = parse_block_time(included.timestamp)
        if at is not None:
            return at
        try:
            r = self._tendermint.GetBlockByHeight(
                tm_query.GetBlockByHeightRequest(height=included.height), timeout=self.query_timeout
            )
            header = r.sdk_block.header if r.sdk_block.header.height else r.block.header
            return time_from_proto(header.time)
        except (grpc.RpcError, ProtocolError) as exc:
            log.warning(
                "%s: tx %s at height %d: no block time (%s); its per-lease settlements are not recorded",
                operation, included.txhash, included.height, exc,
            )
            return None

    @staticmethod
    def _unpack(operation: str, included: IncludedTx, index: int, type_url: str, into: Message) -> None:
        if index >= len(included.msg_responses):
            raise ChainError(
                f"{operation}: tx {included.txhash} has no response for message {index}",
                codespace="protocol", transient=False, may_have_committed=True,
            )
        any_msg = included.msg_responses[index]
        if any_msg.type_url != type_url:
            raise ChainError(
                f"{operation}: tx {included.txhash} answered {any_msg.type_url}, expected {type_url}",
                codespace="protocol", transient=False, may_have_committed=True,
            )
        try:
            into.ParseFromString(any_msg.value)
        except DecodeError:
            raise ChainError(
                f"{operation}: tx {included.txhash}: undecodable {type_url}",
                codespace="protocol", transient=False, may_have_committed=True,
            ) from None

    def send_messages(
        self, operation: str, msgs: Sequence[Message], signed: Callable[[str], None] | None = None
    ) -> IncludedTx:
        """Sign ``msgs`` into one tx, broadcast it and wait until it is included with code 0.

        ``signed`` hears each signed tx's hash just before its broadcast.
        """
        with self._tx_lock:
            return self._send(operation, list(msgs), signed)

    def _send(self, operation: str, msgs: list[Message], signed: Callable[[str], None] | None) -> IncludedTx:
        margin = self.gas_multiplier
        retries = 0
        #: re-signs by cause, for the tx's ``TxCost``
        resigned = {SDK_SEQUENCE_MISMATCH: 0, SDK_OUT_OF_GAS: 0}
        txhash = ""
        while True:
            account = self._account_info(operation)
            try:
                gas_used = self._simulate(operation, msgs, account)
                gas_limit = math.ceil(gas_used * margin)
                raw = self._sign(msgs, account, gas_limit)
                txhash = hashlib.sha256(raw).hexdigest().upper()
                if signed is not None:
                    signed(txhash)  # before the broadcast: from here on the tx may be applied
                response = self._broadcast(operation, raw, txhash)
                if response.code not in (0, SDK_TX_IN_MEMPOOL) or (response.code and response.codespace != SDK):
                    raise self._tx_error(operation, response)
                # The node holds the tx (accepted now, or earlier with the same bytes).
                account.sequence += 1
                included = self._await_inclusion(operation, txhash)
                if included.code != 0:
                    if included.codespace == SDK and included.code == SDK_SEQUENCE_MISMATCH:
                        # Failed in the ante handler at inclusion: the sequence was not used.
                        self._account = None
                    raise self._tx_error(operation, included, included_at=included.height)
                done = self._included(operation, txhash, included)
                assert done.cost is not None
                return replace(done, cost=replace(
                    done.cost,
                    sequence_retries=resigned[SDK_SEQUENCE_MISMATCH],
                    out_of_gas_retries=resigned[SDK_OUT_OF_GAS],
                ))
            except ChainError as exc:
                if exc.may_have_committed and not exc.tx_hash:
                    exc.tx_hash = txhash  # signed and maybe applied: it can be looked up
                if retries >= self.max_tx_retries or not self._retry_here(exc):
                    raise
                retries += 1
                resigned[exc.code] += 1
                if exc.codespace == SDK and exc.code == SDK_OUT_OF_GAS:
                    margin *= self.out_of_gas_multiplier
                    log.info("%s: out of gas, signing again with gas margin %.2f", operation, margin)
                else:
                    log.info("%s: %s; re-reading the account and signing again", operation, exc)
                    self._resync(operation, exc)

    def _included(self, operation: str, txhash: str, included: abci_pb2.TxResponse) -> IncludedTx:
        return IncludedTx(
            txhash=txhash,
            height=included.height,
            msg_responses=self._msg_responses(operation, included),
            gas_used=included.gas_used,
            events=tuple((e.type, {a.key: a.value for a in e.attributes}) for e in included.events),
            timestamp=included.timestamp,
            cost=TxCost(fee=_fee_of(included), gas_wanted=included.gas_wanted, gas_used=included.gas_used),
        )

    @staticmethod
    def _retry_here(exc: ChainError) -> bool:
        """What this client retries itself: a stale sequence, or too little gas."""
        if exc.codespace != SDK or exc.may_have_committed:
            return False
        return exc.code in (SDK_SEQUENCE_MISMATCH, SDK_OUT_OF_GAS)

    def _resync(self, operation: str, exc: ChainError) -> None:
        self._account = None
        account = self._account_info(operation)
        expected = expected_sequence(exc.message)
        # A node counts our txs still in its mempool; the committed account does not.
        if expected is not None and expected > account.sequence:
            account.sequence = expected

    def _account_info(self, operation: str) -> _Account:
        if self._account is not None:
            return self._account
        try:
            r = self._auth.Account(auth_query.QueryAccountRequest(address=self.address), timeout=self.query_timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise ChainError(
                    f"{operation}: provider account {self.address} does not exist on chain {self.chain_id}; fund it first",
                    codespace=SDK, code=SDK_UNKNOWN_ADDRESS, transient=False,
                ) from None
            raise rpc_error(operation, exc) from None
        base = auth_pb2.BaseAccount()
        if not r.account.Unpack(base):
            raise ChainError(
                f"{operation}: account {self.address} is a {r.account.type_url}, not a BaseAccount",
                codespace="protocol", transient=False,
            )
        self._account = _Account(number=base.account_number, sequence=base.sequence)
        return self._account

    def _sign(self, msgs: list[Message], account: _Account, gas_limit: int) -> bytes:
        fee_amount = math.ceil(Decimal(gas_limit) * self.gas_price)
        tx = Transaction()
        for m in msgs:
            tx.add_message(m)
        tx.seal(
            SigningCfg.direct(self.key.public_key, account.sequence),
            fee=TxFee(amount=f"{fee_amount}{self.fee_denom}" if fee_amount else None, gas_limit=gas_limit),
            memo="",
        )
        tx.sign(self.key.signer, self.chain_id, account.number, deterministic=True)
        tx.complete()
        return tx.tx.SerializeToString()

    def simulate_with_fee(self, operation: str, msgs: Sequence[Message]) -> tuple[int, int, int]:
        """Simulate ``msgs`` as the next tx would carry them, fee included: (gas used, gas limit, fee in fee_denom).

        Nothing is broadcast (``run.py doctor``). Raises ``ChainError`` as a send would at its simulation.
        """
        with self._tx_lock:
            account = self._account_info(operation)
            used = self._simulate(operation, list(msgs), account)
            limit = math.ceil(used * self.gas_multiplier)
            self._simulate(operation, list(msgs), account, gas_limit=limit)
            return used, limit, math.ceil(Decimal(limit) * self.gas_price)

    def _simulate(self, operation: str, msgs: list[Message], account: _Account, gas_limit: int = 0) -> int:
        raw = self._sign(msgs, account, gas_limit)
        try:
            r = self._txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw), timeout=self.query_timeout)
        except grpc.RpcError as exc:
            raise rpc_error(operation, exc) from None
        if r.gas_info.gas_used <= 0:
            raise ChainError(f"{operation}: simulation answered no gas used", codespace="protocol", transient=False)
        return r.gas_info.gas_used

    def _broadcast(self, operation: str, raw: bytes, txhash: str) -> abci_pb2.TxResponse:
        """BroadcastTx (sync). A lost answer is re-sent byte for byte; the node applies it at most once."""
        request = tx_service.BroadcastTxRequest(tx_bytes=raw, mode=tx_service.BROADCAST_MODE_SYNC)
        lost = 0
        while True:
            try:
                r = self._txs.BroadcastTx(request, timeout=self.query_timeout).tx_response
            except grpc.RpcError as exc:
                error = rpc_error(operation, exc, may_have_committed=True)
                if not error.transient or lost >= _LOST_BROADCAST_RESENDS:
                    # The node may hold the tx: our cached sequence is unknowable.
                    self._account = None
                    raise error from None
                time.sleep(_RESEND_BACKOFF * 2**lost)
                lost += 1
                continue
            if lost and r.codespace == SDK and r.code == SDK_SEQUENCE_MISMATCH:
                # Our sequence was used since the first send: by this very tx if it is included.
                found = self._get_tx(operation, txhash)
                if found is not None:
                    return abci_pb2.TxResponse(txhash=txhash, code=SDK_TX_IN_MEMPOOL, codespace=SDK)
            return r

    def _get_tx(self, operation: str, txhash: str) -> abci_pb2.TxResponse | None:
        try:
            return self._txs.GetTx(tx_service.GetTxRequest(hash=txhash), timeout=self.query_timeout).tx_response
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise rpc_error(operation, exc, may_have_committed=True) from None

    def _await_inclusion(self, operation: str, txhash: str) -> abci_pb2.TxResponse:
        deadline = time.monotonic() + self.tx_timeout
        while True:
            try:
                found = self._get_tx(operation, txhash)
            except ChainError as exc:
                if not exc.transient:
                    raise
                found = None  # the node is briefly unreachable: keep waiting until the deadline
            if found is not None:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChainError.transport(
                    f"{operation}: tx {txhash} was broadcast but not included within {self.tx_timeout:g}s",
                    may_have_committed=True,
                )
            time.sleep(min(self.tx_poll_interval, remaining))

    @staticmethod
    def _tx_error(operation: str, r: abci_pb2.TxResponse, included_at: int = 0, final: bool = False) -> ChainError:
        """The error of a tx the node refused or included failed.

        ``final``: a tx found included and failed (a lookup): whatever its
        code (out of gas, a sequence mismatch), asking again changes nothing.
        """
        where = f" (included at height {included_at})" if included_at else ""
        return ChainError(
            f"{operation}: tx {r.txhash}{where}: {r.raw_log}",
            codespace=r.codespace or SDK,
            code=r.code,
            transient=False if final else None,
        )

    @staticmethod
    def _msg_responses(operation: str, r: abci_pb2.TxResponse) -> tuple[ProtoAny, ...]:
        try:
            data = abci_pb2.TxMsgData.FromString(bytes.fromhex(r.data))
        except (ValueError, DecodeError):
            raise ChainError(
                f"{operation}: tx {r.txhash}: undecodable TxMsgData {r.data[:32]!r}",
                codespace="protocol", transient=False, may_have_committed=True,
            ) from None
        if data.msg_responses:
            return tuple(data.msg_responses)
        # Nodes before SDK 0.46 put each response in the deprecated MsgData list.
        return tuple(ProtoAny(type_url=d.msg_type + "Response", value=d.data) for d in data.data)
