"""The devnet node: a mempool, blocks on the injected clock, and a node's tx checks.

What a Cosmos SDK node does with a signed tx, in the order it does it, on
top of the billing model (``chain.model.BillingModel``):

- **CheckTx** (``check_tx``, behind ``BroadcastTx`` sync): decode the
  ``TxRaw``; refuse a tx already in the mempool or recently included (sdk
  19); each message's ``ValidateBasic`` (billing codes: bad UUIDs, limit,
  reason length, mode); one signer, a secp256k1 key matching the
  messages' sender; gas limit covering the ante cost (sdk 11) and a fee at
  the node's min gas price (sdk 13) the account can pay (sdk 5); the
  sequence the account expects counting the txs it already has in the
  mempool (sdk 32, ``account sequence mismatch, expected N, got M``); the
  signature over the ``SignDoc`` with this chain id and the account number
  (sdk 4). Messages are *not* executed: their state errors surface at
  inclusion, as on a node.
- **Simulate**: the same checks without the signature, then the messages
  run against the model and are rolled back; answers the gas used, or the
  message's error (billing codes) worded the way a node words it.
- **Blocks**: heights sit on a fixed grid of ``block_time`` from genesis on
  the injected clock (so an idle chain costs nothing and a ``ManualClock``
  jump of a day does not run 17,280 timers). A block is cut at the next
  grid point after a tx enters the mempool; its txs execute in order: fee
  and sequence are taken, then the messages run inside the model's
  ``in_tx`` (one ``TxEvents`` with this block's height and the tx hash; a
  failing message undoes the tx, which is still included with its code).
- **GetTx**: an included tx's ``TxResponse`` (height, code, codespace,
  raw log, events, ``data`` = hex of ``TxMsgData`` with the ``Msg*Response``
  ``Any``s); ``None`` until included.
- **Status**: latest height and block time, ``catching_up``.
- **Tx index** (``tx_index``): every tx the chain includes, the node's own
  and those made on the model directly (the demo's tenants closing their
  leases), kept by ``chain.tx_index.TxIndex`` for ``GetTxsEvent`` (and
  ``GetTx`` of a tx that did not go through this node's mempool). Its mode
  is a node's ``[tx_index]`` setting: ``kv`` indexes every event,
  ``hash_only`` none (an ``index-events`` list that leaves the billing
  events out: a search finds nothing), ``null`` nothing at all (the gRPC
  server then answers "transaction indexing is disabled").

Faults for tests and the demo: ``set_catching_up``, ``advance_sequence``
(another writer used the key), ``add_gas_surcharge`` (execution costs more
than simulated: out of gas at inclusion).

Locks: the node lock is taken before the model's, never after; ``status``
and ``next_height`` take no lock, so model listeners may call them.
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable
from decimal import Decimal

from google.protobuf.any_pb2 import Any as ProtoAny
from google.protobuf.message import DecodeError

from chain.billing_codec import coins_to_proto, time_to_proto, time_to_rfc3339
from chain.billing_pb import tx_pb2 as billing_tx
from chain.errors import (
    SDK,
    SDK_INSUFFICIENT_FEE,
    SDK_INSUFFICIENT_FUNDS,
    SDK_OUT_OF_GAS,
    SDK_SEQUENCE_MISMATCH,
    SDK_TX_IN_MEMPOOL,
    SDK_UNAUTHORIZED,
    ChainError,
)
from chain.keys import BECH32_PREFIX
from chain.model import BillingModel, TxEvents
from chain.tx_index import TxIndex
from chain.sdk_errors import (
    MESSAGE_FAILURE,
    SDK_INVALID_ADDRESS,
    SDK_INVALID_PUBKEY,
    SDK_INVALID_REQUEST,
    SDK_NO_SIGNATURES,
    SDK_TX_DECODE,
    SDK_UNKNOWN_ADDRESS,
    SDK_UNKNOWN_REQUEST,
    describe,
)
from cosmpy.crypto.address import Address
from cosmpy.crypto.keypairs import PublicKey
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey as Secp256k1PubKey
from cosmpy.protos.cosmos.tx.signing.v1beta1.signing_pb2 import SignMode
from cosmpy.protos.cosmos.tx.v1beta1 import tx_pb2
from cosmpy.protos.tendermint.abci import types_pb2 as abci_types
from messages.chain import NodeStatus
from runtime.clock import Clock, TimerHandle

__all__ = ["DevnetNode", "AccountInfo", "TxRejected", "CheckResult", "FEE_DENOM", "GAS"]

FEE_DENOM = "umfx"

MSG_WITHDRAW = "/liftedinit.billing.v1.MsgWithdraw"
MSG_CLOSE_LEASE = "/liftedinit.billing.v1.MsgCloseLease"
MSG_ACKNOWLEDGE_LEASE = "/liftedinit.billing.v1.MsgAcknowledgeLease"
MSG_REJECT_LEASE = "/liftedinit.billing.v1.MsgRejectLease"
#: The messages the devnet executes, by type URL.
_MESSAGES = {
    MSG_WITHDRAW: billing_tx.MsgWithdraw,
    MSG_CLOSE_LEASE: billing_tx.MsgCloseLease,
    MSG_ACKNOWLEDGE_LEASE: billing_tx.MsgAcknowledgeLease,
    MSG_REJECT_LEASE: billing_tx.MsgRejectLease,
}
#: Signer account types the devnet can give the provider key (``[devnet] signer_account``):
#: a plain account, or one of the SDK's vesting accounts wrapping it.
ACCOUNT_KINDS = ("base", "continuous_vesting", "delayed_vesting", "periodic_vesting", "permanent_locked")
PUBKEY_SECP256K1 = "/cosmos.crypto.secp256k1.PubKey"


@dataclass(frozen=True)
class _Gas:
    """The devnet's gas schedule: ante cost by tx size, message cost by leases touched."""

    ante_base: int = 20_000
    per_tx_byte: int = 10
    signature: int = 1_000
    withdraw_base: int = 30_000
    withdraw_per_lease: int = 15_000
    close_base: int = 25_000
    close_per_lease: int = 12_000


GAS = _Gas()

#: A CometBFT mempool cache remembers this many recent txs (pending and
#: included): re-broadcasting one of them answers "tx already in mempool".
_TX_CACHE_SIZE = 10_000


class TxRejected(Exception):
    """A tx refused by CheckTx or Simulate, with the node's codespace, code and log."""

    def __init__(self, codespace: str, code: int, log: str) -> None:
        super().__init__(log)
        self.codespace = codespace
        self.code = code
        self.log = log


@dataclass(frozen=True)
class CheckResult:
    txhash: str
    code: int = 0
    codespace: str = ""
    log: str = ""
    gas_wanted: int = 0


@dataclass
class _Account:
    number: int
    address: str
    sequence: int = 0
    #: Sequence CheckTx expects: the committed one plus this account's txs in the mempool.
    check_sequence: int = 0
    pubkey: bytes | None = None
    fee_balance: int = 0
    #: Fees of this account's txs waiting in the mempool (CheckTx's view of the balance).
    pending_fees: int = 0
    kind: str = "base"


@dataclass(frozen=True)
class AccountInfo:
    number: int
    sequence: int
    pubkey: bytes | None
    #: ``ACCOUNT_KINDS``: what ``auth/Account`` answers it as.
    kind: str = "base"


@dataclass
class _DecodedTx:
    raw: bytes
    txhash: str
    tx_raw: tx_pb2.TxRaw
    body: tx_pb2.TxBody
    auth_info: tx_pb2.AuthInfo
    msgs: list
    signer: str
    pubkey: bytes
    sequence: int
    gas_limit: int
    fee: int

    @property
    def ante_gas(self) -> int:
        return GAS.ante_base + GAS.per_tx_byte * len(self.raw) + GAS.signature

    def exec_gas(self) -> int:
        total = 0
        for m in self.msgs:
            if isinstance(m, billing_tx.MsgWithdraw):
                n = len(m.lease_uuids) or (m.limit or 50)
                total += GAS.withdraw_base + GAS.withdraw_per_lease * n
            else:
                total += GAS.close_base + GAS.close_per_lease * len(m.lease_uuids)
        return total


@dataclass
class _Pending:
    tx: _DecodedTx


@dataclass
class _Faults:
    catching_up: bool = False
    gas_surcharge: int = 0
    gas_surcharge_times: int = 0


def tx_hash(raw: bytes) -> str:
    """A tx's hash as nodes print it: upper-case hex of sha256 of its bytes."""
    return hashlib.sha256(raw).hexdigest().upper()


class DevnetNode:
    """One validator's view of the devnet chain. Thread-safe."""

    def __init__(
        self,
        model: BillingModel,
        clock: Clock,
        *,
        chain_id: str | None = None,
        block_time: timedelta = timedelta(seconds=5),
        min_gas_price: Decimal = Decimal("0.01"),
        fee_denom: str = FEE_DENOM,
        catching_up: bool = False,
        prefix: str = BECH32_PREFIX,
        tx_index: str = "kv",
    ) -> None:
        if block_time <= timedelta(0):
            raise ValueError(f"block_time must be positive, got {block_time}")
        self.model = model
        self.clock = clock
        self.chain_id = chain_id or model.chain_id
        self.block_time = block_time
        self.min_gas_price = Decimal(min_gas_price)
        self.fee_denom = fee_denom
        self.prefix = prefix
        self.genesis_time = clock.now()
        self._lock = threading.RLock()
        self._mempool_changed = threading.Condition(self._lock)
        self._accounts: dict[str, _Account] = {}
        self._mempool: list[_Pending] = []
        #: Recently seen tx hashes (pending and included), oldest first.
        self._cache: dict[str, None] = {}
        #: Included txs by hash, in block order (a dict keeps the order of insertion).
        self._included: dict[str, abci_pb2.TxResponse] = {}
        #: told of each tx a block includes that fails (height, hash, code, codespace, log): a node
        #: pushes its Tx event too, with no events (the websocket server, ``devnet.embedded``)
        self.failed_tx_listeners: list[Callable[[int, str, int, str, str], None]] = []
        self._raw: dict[str, bytes] = {}
        self._timer: TimerHandle | None = None
        self._last_block_height = 0
        self._faults = _Faults(catching_up=catching_up)
        self._stopped = False
        self.tx_index_mode = ""
        self.tx_index = TxIndex()
        self.set_tx_index(tx_index)
        model.subscribe(self.tx_index.add)
        model.set_block_source(self.next_height, self.latest_block_time, self._expiry_block)

    # -- chain time -------------------------------------------------------------
    def height_at(self, when: datetime) -> int:
        if when < self.genesis_time:
            return 1
        return 1 + (when - self.genesis_time) // self.block_time

    def time_of(self, height: int) -> datetime:
        return self.genesis_time + (height - 1) * self.block_time

    def latest_height(self) -> int:
        return max(self.height_at(self.clock.now()), self._last_block_height)

    def latest_block_time(self) -> datetime:
        """What a query sees as block time: the latest block's."""
        return self.time_of(self.latest_height())

    def next_height(self) -> int:
        """The height the next block will have (what a change made now is included at)."""
        return self.latest_height() + 1

    def status(self) -> NodeStatus:
        height = self.latest_height()
        return NodeStatus(
            latest_block_height=height,
            latest_block_time=self.time_of(height),
            catching_up=self._faults.catching_up,
        )

    # -- accounts ---------------------------------------------------------------
    def add_account(self, address: str, fee_balance: int = 0, kind: str = "base") -> int:
        """Create (or top up) an account of ``kind`` (``ACCOUNT_KINDS``); returns its account number."""
        if kind not in ACCOUNT_KINDS:
            raise ValueError(f"account kind {kind!r}: expected one of {', '.join(ACCOUNT_KINDS)}")
        with self._lock:
            acct = self._accounts.get(address)
            if acct is None:
                acct = _Account(number=len(self._accounts) + 1, address=address, kind=kind)
                self._accounts[address] = acct
            acct.fee_balance += fee_balance
            return acct.number

    def account(self, address: str) -> "AccountInfo | None":
        """The committed account (number, sequence, pubkey, kind), or None for an unknown address."""
        with self._lock:
            acct = self._accounts.get(address)
            return AccountInfo(acct.number, acct.sequence, acct.pubkey, acct.kind) if acct else None

    def fee_balance(self, address: str) -> int:
        with self._lock:
            acct = self._accounts.get(address)
            return acct.fee_balance if acct else 0

    # -- faults -----------------------------------------------------------------
    def set_tx_index(self, mode: str) -> None:
        """The node's ``[tx_index]``: ``kv`` (every event searchable), ``hash_only`` or ``null`` (``TX_INDEX_MODES``)."""
        if mode not in TX_INDEX_MODES:
            raise ValueError(f"tx_index {mode!r}: expected one of {', '.join(TX_INDEX_MODES)}")
        self.tx_index_mode = mode
        self.tx_index.events = mode == "kv"

    def set_catching_up(self, on: bool) -> None:
        self._faults.catching_up = on

    def advance_sequence(self, address: str, n: int = 1) -> None:
        """Another writer signed ``n`` txs with this key: the account's sequence moves on."""
        with self._lock:
            acct = self._require_account(address)
            acct.sequence += n
            acct.check_sequence += n

    def add_gas_surcharge(self, gas: int, times: int = 1) -> None:
        """The next ``times`` included txs cost ``gas`` more than Simulate said."""
        with self._lock:
            self._faults.gas_surcharge = gas
            self._faults.gas_surcharge_times = times

    # -- CheckTx / Simulate ------------------------------------------------------
    def _decode(self, raw: bytes, *, simulate: bool) -> _DecodedTx:
        try:
            tx_raw = tx_pb2.TxRaw.FromString(raw)
            body = tx_pb2.TxBody.FromString(tx_raw.body_bytes)
            auth_info = tx_pb2.AuthInfo.FromString(tx_raw.auth_info_bytes)
        except DecodeError as exc:
            raise TxRejected(SDK, SDK_TX_DECODE, describe(SDK, SDK_TX_DECODE, f"cannot decode tx: {exc}")) from None
        if not body.messages:
            raise TxRejected(SDK, SDK_INVALID_REQUEST, describe(SDK, SDK_INVALID_REQUEST, "must contain at least one message"))
        msgs = []
        for any_msg in body.messages:
            kind = _MESSAGES.get(any_msg.type_url)
            if kind is None:
                raise TxRejected(
                    SDK, SDK_UNKNOWN_REQUEST,
                    describe(SDK, SDK_UNKNOWN_REQUEST, f"unrecognized message type: {any_msg.type_url}"),
                )
            msg = kind()
            try:
                msg.ParseFromString(any_msg.value)
            except DecodeError:
                raise TxRejected(SDK, SDK_TX_DECODE, describe(SDK, SDK_TX_DECODE, f"cannot decode {any_msg.type_url}")) from None
            if isinstance(msg, billing_tx.MsgWithdraw) and msg.key and not self.model.version.withdraw_cursor:
                # v2.1.0's MsgWithdraw has no field 5; the SDK rejects unknown fields in a tx body.
                raise TxRejected(
                    SDK, SDK_TX_DECODE,
                    describe(SDK, SDK_TX_DECODE, 'errUnknownField "*types.MsgWithdraw": {TagNum: 5, WireType:"bytes"}'),
                )
            msgs.append(msg)
        senders = {m.sender for m in msgs}
        for sender in senders:
            try:
                Address(sender)  # checksum and length
                hrp = sender.rsplit("1", 1)[0]
            except Exception:
                hrp = ""
            if hrp != self.prefix:
                raise TxRejected(SDK, SDK_INVALID_ADDRESS, describe(SDK, SDK_INVALID_ADDRESS, f"invalid sender address {sender!r}"))
        self._validate_basic(msgs)
        if not tx_raw.signatures and not simulate:
            raise TxRejected(SDK, SDK_NO_SIGNATURES, describe(SDK, SDK_NO_SIGNATURES, "no signatures supplied"))
        infos = auth_info.signer_infos
        if len(senders) != 1 or len(infos) != 1 or (not simulate and len(tx_raw.signatures) != 1):
            raise TxRejected(
                SDK, SDK_UNAUTHORIZED,
                describe(SDK, SDK_UNAUTHORIZED, f"wrong number of signers; expected {len(senders)}, got {len(infos)}"),
            )
        info = infos[0]
        if info.public_key.type_url != PUBKEY_SECP256K1:
            raise TxRejected(SDK, SDK_INVALID_PUBKEY, describe(SDK, SDK_INVALID_PUBKEY, f"unsupported key type {info.public_key.type_url!r}"))
        pk = Secp256k1PubKey()
        try:
            info.public_key.Unpack(pk)
            public_key = PublicKey(pk.key)
        except Exception:
            raise TxRejected(SDK, SDK_INVALID_PUBKEY, describe(SDK, SDK_INVALID_PUBKEY, "invalid secp256k1 public key")) from None
        if info.mode_info.single.mode != SignMode.SIGN_MODE_DIRECT:
            raise TxRejected(SDK, SDK_UNAUTHORIZED, describe(SDK, SDK_UNAUTHORIZED, "only SIGN_MODE_DIRECT is supported"))
        signer = senders.pop()
        if str(Address(public_key, self.prefix)) != signer:
            raise TxRejected(SDK, SDK_UNAUTHORIZED, describe(SDK, SDK_UNAUTHORIZED, f"pubkey does not match signer address {signer}"))
        fee = 0
        for c in auth_info.fee.amount:
            if c.denom == self.fee_denom and c.amount.isdigit():
                fee += int(c.amount)
        return _DecodedTx(
            raw=raw,
            txhash=tx_hash(raw),
            tx_raw=tx_raw,
            body=body,
            auth_info=auth_info,
            msgs=msgs,
            signer=signer,
            pubkey=pk.key,
            sequence=info.sequence,
            gas_limit=auth_info.fee.gas_limit,
            fee=fee,
        )

    def _validate_basic(self, msgs: list) -> None:
        """Each message's ``ValidateBasic``, which the SDK runs before the ante handler, at
        CheckTx and Simulate alike: its error answers the tx, unprefixed (CHAIN-VERSIONS.md 4)."""
        model = self.model
        try:
            for m in msgs:
                if isinstance(m, billing_tx.MsgWithdraw):
                    model.validate_withdraw(
                        m.sender, provider_uuid=m.provider_uuid, lease_uuids=list(m.lease_uuids), limit=m.limit, key=m.key
                    )
                elif isinstance(m, billing_tx.MsgCloseLease):
                    model.validate_close(m.sender, list(m.lease_uuids), m.reason)
                elif isinstance(m, billing_tx.MsgAcknowledgeLease):
                    model.validate_acknowledge(m.sender, list(m.lease_uuids))
                else:
                    model.validate_reject(m.sender, list(m.lease_uuids), m.reason)
        except ChainError as exc:
            raise TxRejected(exc.codespace, exc.code, describe(exc.codespace, exc.code, exc.message)) from None

    def _require_account(self, address: str) -> _Account:
        acct = self._accounts.get(address)
        if acct is None:
            raise TxRejected(SDK, SDK_UNKNOWN_ADDRESS, describe(SDK, SDK_UNKNOWN_ADDRESS, f"account {address} not found"))
        return acct

    def _check_sequence(self, acct: _Account, tx: _DecodedTx, expected: int) -> None:
        if tx.sequence != expected:
            raise TxRejected(
                SDK, SDK_SEQUENCE_MISMATCH,
                describe(SDK, SDK_SEQUENCE_MISMATCH, f"account sequence mismatch, expected {expected}, got {tx.sequence}"),
            )

    def _verify_signature(self, acct: _Account, tx: _DecodedTx) -> None:
        sign_doc = tx_pb2.SignDoc(
            body_bytes=tx.tx_raw.body_bytes,
            auth_info_bytes=tx.tx_raw.auth_info_bytes,
            chain_id=self.chain_id,
            account_number=acct.number,
        ).SerializeToString()
        if not PublicKey(tx.pubkey).verify(sign_doc, tx.tx_raw.signatures[0]):
            raise TxRejected(
                SDK, SDK_UNAUTHORIZED,
                describe(
                    SDK, SDK_UNAUTHORIZED,
                    f"signature verification failed; please verify account number ({acct.number}) "
                    f"and chain-id ({self.chain_id})",
                ),
            )

    def check_tx(self, raw: bytes) -> CheckResult:
        """``BroadcastTx`` (sync): admit the tx to the mempool or say why not."""
        txhash = tx_hash(raw)
        with self._lock:
            if txhash in self._cache:
                return CheckResult(
                    txhash, SDK_TX_IN_MEMPOOL, SDK, describe(SDK, SDK_TX_IN_MEMPOOL, "tx already exists in cache")
                )
            try:
                tx = self._decode(raw, simulate=False)
                if tx.gas_limit < tx.ante_gas:
                    raise TxRejected(
                        SDK, SDK_OUT_OF_GAS,
                        describe(SDK, SDK_OUT_OF_GAS, f"out of gas in location: txSize; gasWanted: {tx.gas_limit}, gasUsed: {tx.ante_gas}"),
                    )
                required = math.ceil(Decimal(tx.gas_limit) * self.min_gas_price)
                if tx.fee < required:
                    raise TxRejected(
                        SDK, SDK_INSUFFICIENT_FEE,
                        describe(SDK, SDK_INSUFFICIENT_FEE, f"insufficient fees; got: {tx.fee}{self.fee_denom} required: {required}{self.fee_denom}"),
                    )
                acct = self._require_account(tx.signer)
                self._check_sequence(acct, tx, acct.check_sequence)
                self._verify_signature(acct, tx)
                if acct.fee_balance - acct.pending_fees < tx.fee:
                    raise TxRejected(
                        SDK, SDK_INSUFFICIENT_FUNDS,
                        describe(SDK, SDK_INSUFFICIENT_FUNDS, f"{acct.fee_balance - acct.pending_fees}{self.fee_denom} is smaller than {tx.fee}{self.fee_denom}"),
                    )
            except TxRejected as rej:
                return CheckResult(txhash, rej.code, rej.codespace, rej.log)
            acct.check_sequence += 1
            acct.pending_fees += tx.fee
            self._mempool.append(_Pending(tx))
            self._remember(txhash)
            self._schedule_block()
            self._mempool_changed.notify_all()
            return CheckResult(txhash, gas_wanted=tx.gas_limit)

    def simulate(self, raw: bytes) -> tuple[int, abci_pb2.Result]:
        """(gas used, result) of running the tx now, rolled back. Raises ``TxRejected``."""
        with self._lock:
            tx = self._decode(raw, simulate=True)
            acct = self._require_account(tx.signer)
            self._check_sequence(acct, tx, acct.check_sequence)
            try:
                height = self.next_height()
                with self.model.in_tx(height, "SIMULATION", self.time_of(height), atomic=True) as ctx:
                    responses = self._run_msgs(tx)
                    raise _Rollback(responses, list(ctx.events))
            except _Rollback as done:
                responses, events = done.responses, done.events
            except ChainError as exc:
                raise TxRejected(exc.codespace, exc.code, self._message_failure(exc)) from None
            gas = tx.ante_gas + tx.exec_gas()
            result = abci_pb2.Result(
                data=b"",
                msg_responses=responses,
                events=[_abci_event(e) for e in events],
            )
            return gas, result

    @staticmethod
    def _message_failure(exc: ChainError, index: int = 0) -> str:
        return f"{MESSAGE_FAILURE}; message index: {index}: {describe(exc.codespace, exc.code, exc.message)}"

    def _run_msgs(self, tx: _DecodedTx) -> list[ProtoAny]:
        """Execute the messages on the model (inside ``in_tx``); their responses.
        Raises ``ChainError`` with the failing message's index set."""
        responses: list[ProtoAny] = []
        model = self.model
        for index, msg in enumerate(tx.msgs):
            model.begin_message(index)
            try:
                if isinstance(msg, billing_tx.MsgWithdraw):
                    r = model.withdraw(
                        msg.sender,
                        provider_uuid=msg.provider_uuid,
                        lease_uuids=list(msg.lease_uuids),
                        limit=msg.limit,
                        key=msg.key,
                    )
                    response = billing_tx.MsgWithdrawResponse(
                        total_amounts=coins_to_proto(r.total_amounts),
                        payout_address=r.payout_address,
                        withdrawal_count=r.withdrawal_count,
                        has_more=r.has_more,
                        next_key=r.next_key,
                        failed_lease_uuids=list(r.failed_lease_uuids),
                    )
                elif isinstance(msg, billing_tx.MsgCloseLease):
                    c = model.close_leases(msg.sender, list(msg.lease_uuids), msg.reason)
                    response = billing_tx.MsgCloseLeaseResponse(
                        closed_at=time_to_proto(c.closed_at),
                        closed_count=c.closed_count,
                        total_settled_amounts=coins_to_proto(c.total_settled_amounts),
                    )
                elif isinstance(msg, billing_tx.MsgAcknowledgeLease):
                    at = model.acknowledge_leases(list(msg.lease_uuids), msg.sender)
                    response = billing_tx.MsgAcknowledgeLeaseResponse(
                        acknowledged_at=time_to_proto(at), acknowledged_count=len(msg.lease_uuids)
                    )
                else:
                    at = model.reject_leases(list(msg.lease_uuids), msg.reason, msg.sender)
                    response = billing_tx.MsgRejectLeaseResponse(
                        rejected_at=time_to_proto(at), rejected_count=len(msg.lease_uuids)
                    )
            except ChainError as exc:
                exc.message_index = index  # type: ignore[attr-defined]
                raise
            any_response = ProtoAny()
            any_response.Pack(response, type_url_prefix="/")
            responses.append(any_response)
        return responses

    # -- blocks -----------------------------------------------------------------
    def _remember(self, txhash: str) -> None:
        self._cache[txhash] = None
        while len(self._cache) > _TX_CACHE_SIZE:
            self._cache.pop(next(iter(self._cache)))

    def _schedule_block(self) -> None:
        if self._timer is not None or self._stopped:
            return
        when = self.time_of(self.next_height())
        self._timer = self.clock.call_at(when, self._on_block_timer)

    def _on_block_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self._stopped:
                return
            self.cut_block()

    def _expiry_block(self, deadline: datetime) -> None:
        """The model has a PENDING lease expiring at ``deadline``: cut the first block after it.

        Called with the model's lock held, so it takes no node lock (the
        order is node, then model): it only sets a clock timer.
        """
        if not self._stopped:
            self.clock.call_at(self.time_of(self.height_at(deadline) + 1), self._on_end_block_timer)

    def _on_end_block_timer(self) -> None:
        with self._lock:
            # A block cut at this grid time already ended (and expired what was due).
            if not self._stopped and self.height_at(self.clock.now()) > self._last_block_height:
                self.cut_block()

    def cut_block(self) -> int:
        """Include every mempool tx in a block at the current grid height, then end the block
        (expiring PENDING leases past their timeout); returns the height."""
        with self._lock:
            height = max(self.height_at(self.clock.now()), self._last_block_height + 1)
            pending, self._mempool = self._mempool, []
            block_time = self.time_of(height)
            for p in pending:
                self._deliver(p.tx, height, block_time)
            self.model.end_block(height, block_time, num_txs=len(pending))
            self._last_block_height = height
            if self._mempool:
                self._schedule_block()
            later = self.model.next_expiry()
            if later is not None and later < block_time:
                # More expired than one block ends (100 at most): the next block goes on.
                self.clock.call_at(self.time_of(height + 1), self._on_end_block_timer)
            self._mempool_changed.notify_all()
            return height

    def _deliver(self, tx: _DecodedTx, height: int, block_time: datetime) -> None:
        acct = self._accounts[tx.signer]
        acct.pending_fees -= tx.fee
        response = abci_pb2.TxResponse(
            height=height,
            txhash=tx.txhash,
            gas_wanted=tx.gas_limit,
            timestamp=time_to_rfc3339(block_time),  # to the microsecond: a settlement's time is the block's
        )
        response.tx.Pack(
            tx_pb2.Tx(body=tx.body, auth_info=tx.auth_info, signatures=list(tx.tx_raw.signatures)),
            type_url_prefix="/",
        )
        if tx.sequence != acct.sequence:
            # Another writer moved the sequence on while this tx waited: the
            # ante handler fails, nothing is charged.
            self._fail(response, SDK, SDK_SEQUENCE_MISMATCH,
                       describe(SDK, SDK_SEQUENCE_MISMATCH, f"account sequence mismatch, expected {acct.sequence}, got {tx.sequence}"),
                       gas_used=tx.ante_gas)
            acct.check_sequence = max(acct.check_sequence, acct.sequence)
            self._store(response, tx.raw)
            return
        # The ante handler's effects stay even if the messages fail.
        acct.sequence += 1
        acct.pubkey = tx.pubkey
        acct.fee_balance -= min(tx.fee, acct.fee_balance)
        gas_used = tx.ante_gas + tx.exec_gas()
        if self._faults.gas_surcharge_times > 0:
            self._faults.gas_surcharge_times -= 1
            gas_used += self._faults.gas_surcharge
        if gas_used > tx.gas_limit:
            self._fail(response, SDK, SDK_OUT_OF_GAS,
                       describe(SDK, SDK_OUT_OF_GAS, f"out of gas in location: billing; gasWanted: {tx.gas_limit}, gasUsed: {gas_used}"),
                       gas_used=tx.gas_limit)
            self._store(response, tx.raw)
            return
        try:
            with self.model.in_tx(height, tx.txhash, block_time, atomic=True) as ctx:
                responses = self._run_msgs(tx)
            events = ctx.events
        except ChainError as exc:
            index = getattr(exc, "message_index", 0)
            self._fail(response, exc.codespace, exc.code, self._message_failure(exc, index), gas_used=gas_used)
            self._store(response, tx.raw)
            return
        response.gas_used = gas_used
        response.data = abci_pb2.TxMsgData(msg_responses=responses).SerializeToString().hex().upper()
        response.events.extend(_abci_event(e) for e in events)
        self._store(response, tx.raw)

    @staticmethod
    def _fail(response: abci_pb2.TxResponse, codespace: str, code: int, log: str, *, gas_used: int) -> None:
        response.codespace = codespace
        response.code = code
        response.raw_log = log
        response.gas_used = gas_used

    def _store(self, response: abci_pb2.TxResponse, raw: bytes) -> None:
        self._included[response.txhash] = response
        self._raw[response.txhash] = raw
        if response.code != 0:
            for listener in list(self.failed_tx_listeners):
                listener(response.height, response.txhash, response.code, response.codespace, response.raw_log)

    # -- reads ------------------------------------------------------------------
    def get_tx(self, txhash: str) -> abci_pb2.TxResponse | None:
        """An included tx's ``TxResponse``: this node's own, or one the chain made outside its mempool."""
        with self._lock:
            found = self._included.get(txhash.upper())
        if found is not None:
            return found
        indexed = self.tx_index.get(txhash)
        return None if indexed is None else _response_of(indexed)

    def search_txs(self, query, page: int = 1, limit: int = 100, descending: bool = False) -> tuple[list[abci_pb2.TxResponse], int]:
        """``GetTxsEvent``: the included txs matching ``query`` (``chain.ws_query.Query``), and how many match."""
        found, total = self.tx_index.search(query, page, limit, descending)
        out = []
        with self._lock:
            for tx in found:
                own = self._included.get(tx.tx_hash)
                out.append(own if own is not None else _response_of(tx))
        return out, total

    def tx_data(self, txhash: str) -> bytes | None:
        """The ``TxMsgData`` of an included tx (what the websocket's ``TxResult.result.data`` carries)."""
        with self._lock:
            found = self._included.get(txhash.upper())
            return bytes.fromhex(found.data) if found is not None and found.data else None

    def tx_bytes(self, txhash: str) -> bytes | None:
        """The raw bytes of an included tx (what the websocket's ``TxResult.tx`` carries)."""
        with self._lock:
            return self._raw.get(txhash.upper())

    def included_txs(self) -> list[abci_pb2.TxResponse]:
        """Every included tx, in block order (tests count landings with it)."""
        with self._lock:
            return list(self._included.values())

    def mempool_size(self) -> int:
        with self._lock:
            return len(self._mempool)

    def wait_for_mempool(self, timeout: float) -> bool:
        """Block until a tx waits in the mempool (or ``timeout`` seconds pass)."""
        with self._mempool_changed:
            return self._mempool_changed.wait_for(lambda: bool(self._mempool) or self._stopped, timeout)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._mempool_changed.notify_all()
        self.model.set_block_source(None)


class _Rollback(Exception):
    """Unwinds a simulation out of ``in_tx`` so that its changes are undone."""

    def __init__(self, responses: list[ProtoAny], events: list) -> None:
        super().__init__("simulation rollback")
        self.responses = responses
        self.events = events


def _response_of(tx: TxEvents) -> abci_pb2.TxResponse:
    """The ``TxResponse`` of a tx the chain made outside the node's mempool: its height, time and events.

    It carries no tx bytes and no ``data`` (the devnet never had them): a
    client reading it gets the events, which is where a settlement is.
    """
    response = abci_pb2.TxResponse(height=tx.height, txhash=tx.tx_hash, timestamp=time_to_rfc3339(tx.time))
    response.events.extend(_abci_event(e) for e in tx.events)
    return response


def _abci_event(e) -> abci_types.Event:
    return abci_types.Event(
        type=e.type,
        attributes=[abci_types.EventAttribute(key=k, value=v, index=True) for k, v in e.attributes],
    )


#: ``[devnet] tx_index``: what the node's tx indexer keeps (see the module doc).
TX_INDEX_MODES = ("kv", "hash_only", "null")

__all__ += ["tx_hash", "MSG_WITHDRAW", "MSG_CLOSE_LEASE", "TX_INDEX_MODES"]
