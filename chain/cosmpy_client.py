"""``ChainClient`` over a node's gRPC endpoint, signing with cosmpy: the production path.

Reads are single gRPC queries with a deadline (``[node] query_timeout``):
the billing ``Query`` service for leases (every page of ``LeasesByProvider``
with the ACTIVE filter), credit (per tenant, and every account by page:
``CreditAccounts``), withdrawable amounts and estimates; the bank's
``DenomOwners`` (a denom's holders by page) and ``auth/Account`` (what kind
of account a credit address is); and
``cosmos.base.tendermint.v1beta1.Service`` ``GetLatestBlock`` (height, time)
plus ``GetSyncing`` (``catching_up``) for the node's status, asked together.

Writes are txs signed with the provider key in ``SIGN_MODE_DIRECT`` (cosmpy's
``Transaction``/``SigningCfg``), one at a time under one lock, because txs of
one signer must carry consecutive sequence numbers:

1. the account number and sequence are read once and cached (from a
   ``BaseAccount`` or any vesting account wrapping one); each accepted
   broadcast advances the cached sequence;
2. the tx is simulated for gas as the production client (fred) does it: a
   tx declaring ``simulate_gas`` (200,000) with no fee and an empty
   signature beside the real public key; the gas limit is the gas used x
   ``gas_adjustment`` (1.2), truncated, and the fee ``ceil(limit x
   gas_price)`` in ``fee_denom``, at least 1 (``gas_price`` 0.000025 umfx,
   the network's minimum). One Simulate seeds the gas of every attempt of
   the tx. A message error (e.g. billing code 3, lease not active) is the
   tx's answer: it surfaces here, before any fee is paid. A Simulate that
   fails otherwise (transport, an internal or unreadable error, no gas
   answered; at most ``SIMULATE_TIMEOUT``) leaves the tx to the fallback
   gas, ``gas_limit`` (1,500,000) x ``gas_adjustment``, and after
   ``SIMULATE_BREAKER_THRESHOLD`` such failures in a row Simulate is not
   asked for ``SIMULATE_BREAKER_COOLDOWN`` (``SimulationBreaker``). No tx
   declares more than ``max_gas_limit`` (0: no cap): the fallback is
   capped, and a simulated gas over it is refused, nothing sent;
3. it is broadcast (sync). A sequence mismatch (sdk 32) re-reads the
   account (taking the ``expected N`` the node names when it is ahead, as
   when our own txs still wait in its mempool) and signs again; out of gas
   (sdk 11, at CheckTx or at inclusion) signs again with the gas x
   ``out_of_gas_multiplier`` (1.5), up to ``max_gas_limit``, and is final
   once at it;
   "already in mempool" (sdk 19) means the node already has these exact
   bytes: the tx it names is awaited, never sent again, and if it is not
   included in time that is a final error (``may_have_committed``, with its
   hash to look it up). A broadcast whose answer is lost in transport is
   sent again byte for byte, which a node can apply at most once;
4. inclusion is awaited by polling ``GetTx`` for the tx hash until
   ``tx_timeout``; the ``Msg*Response`` is read from the included tx's
   ``TxMsgData``. No inclusion in time is a transient ``ChainError`` with
   ``may_have_committed=True``: the caller must not re-drive it blindly.
   The included tx's events give what each lease settled
   (``provider_withdraw`` / ``lease_closed``, ``chain.settlements``), at the
   tx's block time (``timestamp``; the block's header time if a node leaves
   it out): a ``WithdrawPage`` or ``CloseOutcome`` carries them for the ledger.

The tx that ended a lease the sidecar did not hear end is found with
``GetTxsEvent`` (``lease_end_tx``, the queries of ``chain.lease_end``); a
node whose indexer is ``null`` answers "transaction indexing is disabled",
which is ``chain.errors.NO_TX_INDEX``.

Every failure is a ``chain.errors.ChainError`` with the node's codespace and
code (gRPC texts without numbers are read through ``chain.sdk_errors``);
transport failures are transient. Only the transient cases above are retried
here, at most ``max_tx_retries`` times; everything else goes to the caller.
"""

from __future__ import annotations

import msgspec
import hashlib
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Iterable, Sequence

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
    CLIENT,
    GRPC_NOT_FOUND,
    NO_TX_INDEX,
    TX_INDEX,
    GAS_OVER_CAP,
    GRPC,
    INVALID_LEASE,
    SDK,
    SDK_OUT_OF_GAS,
    SDK_SEQUENCE_MISMATCH,
    SDK_TX_IN_MEMPOOL,
    ChainError,
)
from chain.client import AccountListing, HolderListing, Listing
from chain.keys import ProviderKey, load_provider_key
from chain.lease_end import ending_kind, ending_queries, lease_end_outcome
from chain.listing import walk_pages, withdrawable_due
from chain.model import CURRENT_WITHDRAWABLE_LIMIT as _CURRENT, MAX_BATCH_LEASE_SIZE, V21_WITHDRAWABLE_LIMIT as _V21
from chain.node_settings import read_tls_ca
from chain.sdk_errors import (
    MESSAGE_FAILURE,
    SDK_UNKNOWN_ADDRESS,
    TRANSPORT_STATUS_NAMES,
    expected_sequence,
    status_error,
)
from chain.settlements import settlements_in_tx, settlements_in_withdraw
from cosmpy.aerial.tx import SigningCfg, Transaction, TxFee
from cosmpy.aerial.urls import Protocol, parse_url
from cosmpy.protos.cosmos.auth.v1beta1 import auth_pb2, query_pb2 as auth_query, query_pb2_grpc as auth_grpc
from cosmpy.protos.cosmos.bank.v1beta1 import query_pb2 as bank_query, query_pb2_grpc as bank_grpc
from cosmpy.protos.cosmos.base.abci.v1beta1 import abci_pb2
from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2
from cosmpy.protos.cosmos.base.tendermint.v1beta1 import query_pb2 as tm_query, query_pb2_grpc as tm_grpc
from cosmpy.protos.cosmos.tx.v1beta1 import service_pb2 as tx_service, service_pb2_grpc as tx_grpc, tx_pb2
from cosmpy.protos.cosmos.vesting.v1beta1 import vesting_pb2
from messages.chain import CloseOutcome, CreditAccount, CreditEstimate, Lease, NodeStatus, WithdrawPage
from messages.coins import Coin, add_coins, coins
from messages.ledger import LeaseSettled
from messages.tx_cost import TxCost
from runtime.urls import shown_url

__all__ = [
    "CosmpyChainClient",
    "IncludedTx",
    "SimulationBreaker",
    "TRANSPORT_STATUSES",
    "parse_block_time",
    "simulation_failed",
]

log = logging.getLogger(__name__)

#: The transport statuses (``chain.sdk_errors.TRANSPORT_STATUS_NAMES``) as gRPC codes.
TRANSPORT_STATUSES = frozenset(getattr(grpc.StatusCode, name) for name in TRANSPORT_STATUS_NAMES)

#: ``ProviderWithdrawable`` page sizes asked for: the largest each version answers.
V21_WITHDRAWABLE_LIMIT = _V21[1]
CURRENT_WITHDRAWABLE_LIMIT = _CURRENT[1]

#: The smallest fee a tx pays, in ``fee_denom``: a tiny gas limit at the
#: network's price (0.000025 umfx per gas) rounds to 0, which a node with a
#: min gas price refuses (fred pays at least 1 as well).
MIN_FEE = 1

#: Deadline of one Simulate, apart from ``query_timeout``: a slow node must
#: not spend the tx's time on an estimate the fallback gas can replace.
SIMULATE_TIMEOUT = 5.0
#: Simulate failures in a row after which it is not asked for a while, and
#: for how long (seconds): while a node's Simulate is broken, every tx would
#: otherwise first wait out a call bound to fail.
SIMULATE_BREAKER_THRESHOLD = 5
SIMULATE_BREAKER_COOLDOWN = 30.0

#: Re-sends of one tx's exact bytes after its broadcast answer was lost.
_LOST_BROADCAST_RESENDS = 3
#: Txs asked for per search: the tx that ended a lease is one (a few, where
#: a close tx of the lease failed); more than a page would be a node's oddity.
_SEARCH_LIMIT = 20
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


#: Account types a signer may have, by type URL, and how to reach the
#: ``BaseAccount`` (number, sequence) inside: a provider key's account may
#: well be a vesting one (tokens granted with a schedule), and reading only
#: BaseAccount would leave such a provider unable to sign anything.
_ACCOUNT_TYPES: dict[str, tuple[type[Message], Callable[[Any], auth_pb2.BaseAccount]]] = {
    f"/{auth_pb2.BaseAccount.DESCRIPTOR.full_name}": (auth_pb2.BaseAccount, lambda a: a),
    **{
        f"/{kind.DESCRIPTOR.full_name}": (kind, lambda a: a.base_vesting_account.base_account)
        for kind in (
            vesting_pb2.ContinuousVestingAccount,
            vesting_pb2.DelayedVestingAccount,
            vesting_pb2.PeriodicVestingAccount,
            vesting_pb2.PermanentLockedAccount,
        )
    },
}


#: ``auth/Account`` type URL -> the kind ``account_kind`` answers (``devnet.node.ACCOUNT_KINDS``).
ACCOUNT_KIND_NAMES = {
    f"/{auth_pb2.BaseAccount.DESCRIPTOR.full_name}": "base",
    f"/{vesting_pb2.ContinuousVestingAccount.DESCRIPTOR.full_name}": "continuous_vesting",
    f"/{vesting_pb2.DelayedVestingAccount.DESCRIPTOR.full_name}": "delayed_vesting",
    f"/{vesting_pb2.PeriodicVestingAccount.DESCRIPTOR.full_name}": "periodic_vesting",
    f"/{vesting_pb2.PermanentLockedAccount.DESCRIPTOR.full_name}": "permanent_locked",
}

#: Rows asked for per page of the bulk listings (``CreditAccounts``, ``DenomOwners``): the SDK's
#: ``CollectionPaginate`` caps no limit; 1000 is the most any list query of either version answers
#: (the current chain's cap on lease lists, CHAIN-VERSIONS.md 2.8), a page of well under a megabyte.
BULK_PAGE_LIMIT = 1000


def base_account(packed: ProtoAny) -> auth_pb2.BaseAccount | None:
    """The ``BaseAccount`` of what ``auth/Account`` answered; None for a type a signer cannot have, or bytes that do not decode."""
    found = _ACCOUNT_TYPES.get(packed.type_url)
    if found is None:
        return None
    kind, base_of = found
    account = kind()
    try:
        account.ParseFromString(packed.value)
    except DecodeError:
        return None
    return base_of(account)


def rpc_error(operation: str, exc: grpc.RpcError, *, may_have_committed: bool = False) -> ChainError:
    """A failed gRPC call as a ``ChainError``: transport or the node's (codespace, code)."""
    status = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    if status is None:
        return ChainError.transport(f"{operation}: transport error: {details}".rstrip(": "), may_have_committed=may_have_committed)
    return status_error(operation, status.name, details, may_have_committed=may_have_committed)


def _no_tx_index(operation: str, exc: grpc.RpcError, consequence: str) -> ChainError | None:
    """The node's indexer is ``null`` ("transaction indexing is disabled"), as ``NO_TX_INDEX``; else None."""
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    if "indexing is disabled" not in details:
        return None
    return ChainError(
        f"{operation}: the node keeps no tx index ({details}): {consequence}",
        codespace=TX_INDEX, code=NO_TX_INDEX, transient=False,
    )


#: A hash no tx has: what ``keeps_tx_index`` asks ``GetTx`` for. A node with an
#: index answers NOT_FOUND; one without answers "transaction indexing is disabled".
UNUSED_TX_HASH = "00" * 32


def tx_index_kept(stub: Any, timeout: float) -> bool:
    """Whether the node behind ``stub`` (a ``cosmos.tx.v1beta1.Service`` stub) keeps a tx index.

    Raises ``grpc.RpcError`` when its answer says neither (unreachable, a
    proxy that refuses the method): that is not a node without an index.
    """
    try:
        stub.GetTx(tx_service.GetTxRequest(hash=UNUSED_TX_HASH), timeout=timeout)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return True
        if _no_tx_index("keeps_tx_index", exc, "") is not None:
            return False
        raise
    return True  # found: a tx of that hash is indexed


class SimulationBreaker:
    """Opens after ``threshold`` Simulate failures in a row: Simulate is then skipped for ``cooldown`` seconds.

    Times are the client's ``breaker_clock`` (monotonic seconds). Once the
    cooldown is over Simulate is asked again; one more failure opens it
    again at once, a success closes it. Used under the client's tx lock.
    """

    def __init__(self, threshold: int = SIMULATE_BREAKER_THRESHOLD, cooldown: float = SIMULATE_BREAKER_COOLDOWN) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.failures = 0
        self.open_until: float | None = None

    def allows(self, now: float) -> bool:
        return self.open_until is None or now >= self.open_until

    def succeeded(self) -> None:
        self.failures = 0
        self.open_until = None

    def failed(self, now: float) -> bool:
        """Count one failure; True when it opens the breaker."""
        self.failures += 1
        if self.failures < self.threshold:
            return False
        self.open_until = now + self.cooldown
        return True


def simulation_failed(exc: ChainError) -> bool:
    """Simulate itself failed, rather than answering the tx's error.

    A registered error (a billing code such as 3 or 2, an sdk code such as
    a sequence mismatch) or any text from a failing message handler is the
    node's answer about this tx: signing it anyway would pay a fee to hear
    it again. A transport failure, a status the node set (INTERNAL, ...),
    an UNKNOWN without a registered error, or no gas in the answer says
    nothing about the tx: the fallback gas is used.
    """
    if MESSAGE_FAILURE in exc.message:
        return False
    return exc.codespace in ("transport", GRPC, "protocol")


def _decimal(value: float | Decimal | str) -> Decimal:
    """A setting's number as the decimal it was written as (1.2, not 1.1999999999999999556)."""
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _times(gas: int, factor: Decimal) -> int:
    """``gas x factor``, truncated (decimal arithmetic, as the SDK's LegacyDec: no float rounding in a fee)."""
    return int(Decimal(gas) * factor)


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


#: The response header a Cosmos SDK node puts on every query: the height it answered at.
BLOCK_HEIGHT_HEADER = "x-cosmos-block-height"


def block_height_header(metadata: Sequence[tuple[str, Any]]) -> int:
    """The height in ``x-cosmos-block-height`` (0 when absent or not a positive whole number)."""
    for key, value in metadata:
        if key == BLOCK_HEIGHT_HEADER:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            return int(text) if text.isdigit() and len(text) <= 19 else 0
    return 0


def _low_high(heights: Sequence[int]) -> tuple[int, int]:
    """(lowest, highest) of a walk's page heights; (0, 0) when a page came without one."""
    return (min(heights), max(heights)) if heights and all(heights) else (0, 0)


def _holder(op: str, denom: str, owner: Any) -> tuple[str, int]:
    """One ``DenomOwner`` as (address, amount); a coin of another denom or not a whole number is a protocol error."""
    if owner.balance.denom != denom or not owner.balance.amount.isdigit() or not owner.address:
        raise ProtocolError(f"holder {owner.address!r} of {denom}: balance {owner.balance.amount!r}{owner.balance.denom}")
    return owner.address, int(owner.balance.amount)


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
        gas_price: Decimal | str = "0.000025",
        gas_adjustment: float | Decimal = 1.2,
        out_of_gas_multiplier: float | Decimal = 1.5,
        simulate_gas: int = 200_000,
        gas_limit: int = 1_500_000,
        max_gas_limit: int = 0,
        tx_timeout: float = 30.0,
        tx_poll_interval: float = 0.2,
        query_timeout: float = 10.0,
        max_tx_retries: int = 5,
        withdraw_limit: int = 50,
        page_size: int = 100,
        tls_ca_file: str = "",
        breaker_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parsed = parse_url(grpc_url) if "://" in grpc_url else None
        if parsed is None or parsed.protocol != Protocol.GRPC:
            raise ValueError(f"grpc_url {shown_url(grpc_url)!r}: expected grpc+http://host:port or grpc+https://host:port")
        self.grpc_url = grpc_url
        self.key = key
        self.chain_id = chain_id
        self.fee_denom = fee_denom
        self.gas_price = Decimal(gas_price)
        #: Gas used x this = the gas limit (kept as given; read as a decimal, ``_times``).
        self.gas_adjustment = gas_adjustment
        self.out_of_gas_multiplier = out_of_gas_multiplier
        self.simulate_gas = simulate_gas
        #: Declared (x ``gas_adjustment``) when Simulate fails or its breaker is open.
        self.gas_limit = gas_limit
        #: No tx declares more; 0: no cap.
        self.max_gas_limit = max_gas_limit
        self.simulate_timeout = SIMULATE_TIMEOUT
        #: Monotonic seconds the Simulate breaker counts its cooldown in (tests move it by hand).
        self.breaker_clock = breaker_clock
        #: Skips Simulate while it keeps failing (``SimulationBreaker``).
        self.simulate_breaker = SimulationBreaker()
        self.tx_timeout = tx_timeout
        self.tx_poll_interval = tx_poll_interval
        self.query_timeout = query_timeout
        self.max_tx_retries = max_tx_retries
        self.withdraw_limit = withdraw_limit
        self.page_size = page_size
        options = [("grpc.keepalive_time_ms", 30_000), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        if parsed.secure:
            # The CA file is read now: a wrong one is an error at start, not an unreachable node later.
            roots = read_tls_ca(tls_ca_file) if tls_ca_file else None  # None: the system's CAs
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(parsed.host_and_port, credentials, options)
        elif tls_ca_file:
            raise ValueError(f"tls_ca_file {tls_ca_file!r}: set, but grpc_url {shown_url(grpc_url)!r} does not use TLS (grpc+https://)")
        else:
            self._channel = grpc.insecure_channel(parsed.host_and_port, options)
        self._auth = auth_grpc.QueryStub(self._channel)
        self._txs = tx_grpc.ServiceStub(self._channel)
        self._tendermint = tm_grpc.ServiceStub(self._channel)
        self._billing = query_pb2_grpc.QueryStub(self._channel)
        self._bank = bank_grpc.QueryStub(self._channel)
        #: One signer, one writer: held for the whole life of a tx.
        self._tx_lock = threading.Lock()
        self._account: _Account | None = None

    @classmethod
    def from_settings(
        cls, node: Any, chain_id: str, *, key: ProviderKey | None = None, grpc_url: str | None = None
    ) -> "CosmpyChainClient":
        """Build from ``[node]`` settings (``chain.node_settings.NodeSettings``); loads the key if not given.

        A ``grpc_url`` given here (the embedded devnet's) replaces ``[node]``'s
        endpoint, and its TLS CA with it: that CA is for the node configured.
        """
        if key is None:
            key = load_provider_key(node.key_file, node.key_env)
        return cls(
            grpc_url or node.grpc_url,
            key,
            chain_id,
            fee_denom=node.fee_denom,
            gas_price=node.gas_price,
            gas_adjustment=node.gas_adjustment,
            out_of_gas_multiplier=node.out_of_gas_multiplier,
            simulate_gas=node.simulate_gas,
            gas_limit=node.gas_limit,
            max_gas_limit=node.max_gas_limit,
            tx_timeout=node.tx_timeout.total_seconds(),
            tx_poll_interval=node.tx_poll_interval.total_seconds(),
            query_timeout=node.query_timeout.total_seconds(),
            max_tx_retries=node.max_tx_retries,
            withdraw_limit=node.withdraw_limit,
            page_size=node.page_size,
            tls_ca_file=node.tls_ca_file if grpc_url is None else "",
        )

    @property
    def address(self) -> str:
        return self.key.address

    def __repr__(self) -> str:
        return f"CosmpyChainClient({shown_url(self.grpc_url)!r}, signer={self.key.address!r}, chain_id={self.chain_id!r})"

    def close(self) -> None:
        self._channel.close()

    # -- queries ----------------------------------------------------------------
    def _query(self, operation: str, method: Callable[..., Any], request: Message) -> Any:
        try:
            return method(request, timeout=self.query_timeout)
        except grpc.RpcError as exc:
            raise rpc_error(operation, exc) from None

    def _query_at(self, operation: str, method: Callable[..., Any], request: Message) -> tuple[Any, int]:
        """``_query``, and the height the node answered at (its ``x-cosmos-block-height`` header; 0: none sent)."""
        try:
            response, call = method.with_call(request, timeout=self.query_timeout)
        except grpc.RpcError as exc:
            raise rpc_error(operation, exc) from None
        return response, block_height_header(call.initial_metadata() or ())

    def _decoded(self, operation: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ProtocolError as exc:
            raise ChainError(f"{operation}: {exc}", codespace="protocol", transient=False) from None

    def provider_withdrawable(self, provider_uuid: str) -> tuple[Coin, ...] | None:
        """What is due now, as far as a node can tell without a tx: () when nothing is, None when unknowable.

        Both versions' fields are sent: v2.1.0 reads ``limit`` (at most 1000,
        leases of every state, ``has_more``), the current chain ``pagination``
        (pages of at most 100 ACTIVE leases, each a dry run of the withdraw
        from current state, so pages are not summed: the first page with
        anything due answers). Each server ignores the other's field.
        """
        op = f"provider_withdrawable {provider_uuid}"

        def page(key: bytes) -> tuple[tuple[Coin, ...], bool, bool, bytes]:
            request = query_pb2.QueryProviderWithdrawableRequest(
                provider_uuid=provider_uuid,
                limit=V21_WITHDRAWABLE_LIMIT,
                pagination=pagination_pb2.PageRequest(key=key, limit=CURRENT_WITHDRAWABLE_LIMIT),
            )
            r = self._query(op, self._billing.ProviderWithdrawable, request)
            amounts = self._decoded(op, lambda: coins_from_proto(r.amounts))
            return amounts, r.has_more, r.HasField("pagination"), r.pagination.next_key

        return withdrawable_due(op, page)

    def active_leases_by_provider(self, provider_uuid: str) -> tuple[Lease, ...]:
        return self._active_leases(
            f"active_leases_by_provider {provider_uuid}", self._billing.LeasesByProvider,
            lambda page: query_pb2.QueryLeasesByProviderRequest(provider_uuid=provider_uuid, pagination=page,
                                                                state_filter=types_pb2.LEASE_STATE_ACTIVE),
        ).leases

    def leases_by_provider(self, provider_uuid: str) -> Listing:
        """Every ACTIVE lease of a provider (ours or one our tenants share), with its pages' heights."""
        return self._active_leases(
            f"leases_by_provider {provider_uuid}", self._billing.LeasesByProvider,
            lambda page: query_pb2.QueryLeasesByProviderRequest(provider_uuid=provider_uuid, pagination=page,
                                                                state_filter=types_pb2.LEASE_STATE_ACTIVE),
        )

    def credit_accounts(self) -> AccountListing:
        """Every credit account (``CreditAccounts``, both versions), walked page by page.

        ``CollectionPaginate`` starts a page at the first row at or after its
        key, so a row gone between two pages does not cut the walk short;
        rows added before the cursor meanwhile are not seen (a tenant funded
        during the walk: read on its own, like any tenant not listed).
        """
        op = "credit_accounts"
        heights: list[int] = []

        def page(key: bytes) -> tuple[list[CreditAccount], bytes]:
            request = query_pb2.QueryCreditAccountsRequest(pagination=pagination_pb2.PageRequest(key=key, limit=BULK_PAGE_LIMIT))
            r, height = self._query_at(op, self._billing.CreditAccounts, request)
            heights.append(height)
            wrapped = query_pb2.QueryCreditAccountResponse()
            accounts = []
            for account in r.credit_accounts:
                wrapped.credit_account.CopyFrom(account)
                accounts.append(self._decoded(op, lambda: credit_account_from_proto(account.tenant, wrapped)))
            return accounts, r.pagination.next_key

        accounts = walk_pages(op, page)
        return AccountListing(accounts, *_low_high(heights))

    def denom_owners(self, denom: str) -> HolderListing:
        """Every holder of ``denom`` (bank ``DenomOwners``, cosmos-sdk 0.50 and 0.53: both versions), walked by page."""
        op = f"denom_owners {denom}"
        heights: list[int] = []

        def page(key: bytes) -> tuple[list[tuple[str, int]], bytes]:
            request = bank_query.QueryDenomOwnersRequest(
                denom=denom, pagination=pagination_pb2.PageRequest(key=key, limit=BULK_PAGE_LIMIT)
            )
            r, height = self._query_at(op, self._bank.DenomOwners, request)
            heights.append(height)
            return self._decoded(op, lambda: [_holder(op, denom, o) for o in r.denom_owners]), r.pagination.next_key

        holders = walk_pages(op, page)
        return HolderListing(denom, holders, *_low_high(heights))

    def account_kind(self, address: str) -> str:
        """The kind of account ``auth/Account`` holds at ``address`` ("" for none; an unknown type by its URL)."""
        op = f"account_kind {address}"
        try:
            r = self._query(op, self._auth.Account, auth_query.QueryAccountRequest(address=address))
        except ChainError as exc:
            if exc.codespace == GRPC and exc.code == GRPC_NOT_FOUND:
                return ""
            raise
        return ACCOUNT_KIND_NAMES.get(r.account.type_url, r.account.type_url or "unknown")

    def leases_by_tenant(self, tenant: str) -> Listing:
        """Every ACTIVE lease of ``tenant``, of every provider: what draws on its credit; at the lowest page's height."""
        return self._active_leases(
            f"leases_by_tenant {tenant}", self._billing.LeasesByTenant,
            lambda page: query_pb2.QueryLeasesByTenantRequest(tenant=tenant, pagination=page,
                                                              state_filter=types_pb2.LEASE_STATE_ACTIVE),
        )

    def _active_leases(
        self, op: str, method: Callable[..., Any], request: Callable[[pagination_pb2.PageRequest], Message]
    ) -> Listing:
        """A lease listing walked to its end (``chain.listing``: a cut-short walk is walked again), at
        the lowest height a page was answered at (0: a page came without one)."""
        heights: list[int] = []

        def page(key: bytes) -> tuple[list[Lease], bytes]:
            r, height = self._query_at(op, method, request(pagination_pb2.PageRequest(key=key, limit=self.page_size)))
            heights.append(height)
            return self._decoded(op, lambda: [lease_from_proto(p) for p in r.leases]), r.pagination.next_key

        leases = walk_pages(op, page)
        return Listing(leases, *_low_high(heights))

    def lease(self, lease_uuid: str) -> Lease:
        op = f"lease {lease_uuid}"
        r = self._query(op, self._billing.Lease, query_pb2.QueryLeaseRequest(lease_uuid=lease_uuid))
        return self._decoded(op, lambda: lease_from_proto(r.lease))

    def credit_account(self, tenant: str) -> CreditAccount:
        """The account and all its balances: the current chain pages them (v2.1.0 ignores the request's page)."""
        op = f"credit_account {tenant}"
        key = b""
        account: CreditAccount | None = None
        heights: list[int] = []
        while True:
            request = query_pb2.QueryCreditAccountRequest(
                tenant=tenant, pagination=pagination_pb2.PageRequest(key=key, limit=self.page_size)
            )
            r, height = self._query_at(op, self._billing.CreditAccount, request)
            heights.append(height)
            page = self._decoded(op, lambda: credit_account_from_proto(tenant, r))
            account = page if account is None else msgspec.structs.replace(
                account,
                balances=add_coins(account.balances, page.balances),
                available_balances=add_coins(account.available_balances, page.available_balances),
            )
            key = r.pagination.next_key if r.HasField("pagination") else b""
            if not key:
                # As old as its oldest page; a page without a height makes it unknown.
                return msgspec.structs.replace(account, height=min(heights) if all(heights) else 0)

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

    def keeps_tx_index(self) -> bool:
        """Whether the node keeps a tx index (``GetTx`` of a hash no tx has: NOT_FOUND, or "indexing is disabled")."""
        try:
            return tx_index_kept(self._txs, self.query_timeout)
        except grpc.RpcError as exc:
            raise rpc_error("keeps_tx_index", exc) from None

    def block_time(self, height: int) -> datetime:
        """The time of the block at ``height`` (``GetBlockByHeight``'s header)."""
        op = f"block_time {height}"
        r = self._query(op, self._tendermint.GetBlockByHeight, tm_query.GetBlockByHeightRequest(height=height))
        header = r.sdk_block.header if r.sdk_block.header.height else r.block.header
        if header.height != height:
            raise ChainError(f"{op}: the node answered the block at height {header.height}", codespace="protocol", transient=True)
        return time_from_proto(header.time)

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

    def withdraw_leases(self, lease_uuids: Sequence[str], signed: Callable[[str], None] | None = None) -> WithdrawPage:
        """One named ``MsgWithdraw`` of 1..100 of our leases, atomic; billing code 15 when nothing was due.

        It reaches every lease on both chain versions (CHAIN-VERSIONS.md 2.2),
        which a provider-wide withdraw without the cursor (v2.1.0) cannot.
        """
        if not 1 <= len(lease_uuids) <= MAX_BATCH_LEASE_SIZE:
            raise ChainError.billing(
                INVALID_LEASE, f"withdraw_leases: a batch holds 1..{MAX_BATCH_LEASE_SIZE} leases, got {len(lease_uuids)}"
            )
        msg = billing_tx.MsgWithdraw(sender=self.address, lease_uuids=list(lease_uuids))
        op = f"withdraw_leases ({len(lease_uuids)} leases)"
        included = self.send_messages(op, [msg], signed=signed)
        return self._withdraw_page(op, included, self._provider_of(included))

    @staticmethod
    def _provider_of(included: IncludedTx) -> str:
        for event_type, attributes in included.events:
            if event_type == "provider_withdraw" and attributes.get("provider_uuid"):
                return attributes["provider_uuid"]
        return ""

    def withdraw_outcome(self, tx_hash: str, provider_uuid: str) -> WithdrawPage | None:
        op = f"withdraw_outcome {tx_hash}"
        included = self._looked_up(op, tx_hash)
        return None if included is None else self._withdraw_page(op, included, provider_uuid)

    def close_outcome(self, tx_hash: str, lease_uuids: Sequence[str]) -> CloseOutcome | None:
        op = f"close_outcome {tx_hash}"
        included = self._looked_up(op, tx_hash)
        if included is None:
            return None
        indices = [i for i, a in enumerate(included.msg_responses) if a.type_url == MSG_CLOSE_LEASE_RESPONSE]
        return CloseOutcome(
            closed_count=self._closed_count(op, included, indices, len(set(lease_uuids))),
            tx_hashes=(included.txhash,),
            settlements=self._settlements(op, included, lease_uuids=set(lease_uuids)),
            cost=included.cost,
        )

    def lease_end_tx(self, lease_uuid: str, provider_uuid: str, tx_hash: str = "") -> CloseOutcome | None:
        """The tx that ended ``lease_uuid`` and what it settled on that lease (``chain.lease_end``); None if not found.

        ``tx_hash``: a hint (an event named it): looked up first, used only
        if that tx did end the lease. Raises ``ChainError`` ``NO_TX_INDEX``
        when the node keeps no tx index.
        """
        op = f"lease_end_tx {lease_uuid}"
        queries = ending_queries(lease_uuid)
        if tx_hash:
            try:
                found = self._get_tx(op, tx_hash)
            except ChainError:
                found = None  # the hint is only a hint: the search below says what the node can
            if found is not None and found.code == 0:
                outcome = self._ended(op, found, lease_uuid, provider_uuid)
                if outcome is not None:
                    return outcome
        for query in queries:
            for response in self._search(op, query):
                if response.code == 0:
                    outcome = self._ended(op, response, lease_uuid, provider_uuid)
                    if outcome is not None:
                        return outcome
        return None

    def _search(self, op: str, query: str) -> list[abci_pb2.TxResponse]:
        """``GetTxsEvent`` (SDK 0.50: ``query``, ``page`` from 1): the first page, oldest first."""
        request = tx_service.GetTxsEventRequest(query=query, page=1, limit=_SEARCH_LIMIT, order_by=tx_service.ORDER_BY_ASC)
        try:
            return list(self._txs.GetTxsEvent(request, timeout=self.query_timeout).tx_responses)
        except grpc.RpcError as exc:
            raise (_no_tx_index(op, exc, "a tx cannot be found by its events") or rpc_error(op, exc)) from None

    def _ended(self, op: str, found: abci_pb2.TxResponse, lease_uuid: str, provider_uuid: str) -> CloseOutcome | None:
        events = tuple((e.type, {a.key: a.value for a in e.attributes}) for e in found.events)
        if not ending_kind(events, lease_uuid):
            return None
        included = self._included(op, found.txhash, found)
        at = self._block_time(op, included)
        if at is None:
            return None  # no block time: not booked at a wrong one (the search is asked again later)
        # None unless every withdraw of the tx answered: a part left out would be read as nothing.
        total: tuple[Coin, ...] | None = ()
        for any_msg in included.msg_responses:
            if any_msg.type_url == MSG_WITHDRAW_RESPONSE and total is not None:
                r = billing_tx.MsgWithdrawResponse()
                try:
                    r.ParseFromString(any_msg.value)
                except DecodeError:
                    total = None
                    continue
                total = add_coins(total, coins_from_proto(r.total_amounts))
        if total == () and not any(m.type_url == MSG_WITHDRAW_RESPONSE for m in included.msg_responses):
            total = None  # no answer to read at all
        return lease_end_outcome(included.txhash, at, included.events, lease_uuid, provider_uuid, total)

    def _looked_up(self, op: str, tx_hash: str) -> IncludedTx | None:
        """A tx of unknown outcome, as included; None while no node knows it; a ``ChainError`` if it failed."""
        found = self._get_tx(op, tx_hash)
        if found is None:
            return None
        if found.code != 0:
            raise self._tx_error(op, found, included_at=found.height, final=True)
        return self._included(op, tx_hash, found)

    def _withdraw_page(self, op: str, included: IncludedTx, provider_uuid: str) -> WithdrawPage:
        """The page an included withdraw (code 0) answered. Its answer unreadable (a response missing
        or not decodable, an amount that is not a whole number), the error still says the tx applied
        and names it: taken as "not applied", its write-ahead record was closed and no lookup begun,
        and the fees it moved dropped out of the books with nothing left to find them by."""
        try:
            return self._read_withdraw_page(op, included, provider_uuid)
        except ChainError as exc:
            exc.may_have_committed, exc.tx_hash = True, included.txhash
            raise

    def _read_withdraw_page(self, op: str, included: IncludedTx, provider_uuid: str) -> WithdrawPage:
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
                settlements=self._withdraw_settlements(op, included, provider_uuid, coins_from_proto(r.total_amounts)),
                failed_lease_uuids=tuple(r.failed_lease_uuids),
                cost=included.cost,
            ),
        )

    def close_leases(
        self, lease_uuids: Sequence[str], reason: str, signed: Callable[[str], None] | None = None
    ) -> CloseOutcome:
        """One ``MsgCloseLease`` of 1..100 leases; the chain closes all or none. ``signed`` as for a withdraw."""
        return self.close_lease_batches([lease_uuids], reason, signed=signed)

    def close_lease_batches(
        self, batches: Sequence[Sequence[str]], reason: str, signed: Callable[[str], None] | None = None
    ) -> CloseOutcome:
        """One tx with a ``MsgCloseLease`` per batch (each 1..100 leases); atomic as a whole."""
        if not batches:
            raise ChainError.billing(INVALID_LEASE, "close_leases: no leases given")
        for batch in batches:
            if not 1 <= len(batch) <= MAX_BATCH_LEASE_SIZE:
                raise ChainError.billing(
                    INVALID_LEASE, f"close_leases: a batch holds 1..{MAX_BATCH_LEASE_SIZE} leases, got {len(batch)}"
                )
        msgs = [billing_tx.MsgCloseLease(sender=self.address, lease_uuids=list(b), reason=reason) for b in batches]
        total = sum(len(b) for b in batches)
        op = f"close_leases ({total} leases)"
        included = self.send_messages(op, msgs, signed=signed)
        asked = {u for b in batches for u in b}
        return CloseOutcome(
            closed_count=self._closed_count(op, included, range(len(msgs)), len(asked)),
            tx_hashes=(included.txhash,),
            settlements=self._settlements(op, included, lease_uuids=asked),
            cost=included.cost,
        )

    def _closed_count(self, op: str, included: IncludedTx, indices: Iterable[int], asked: int) -> int:
        """The leases an included close tx (code 0) closed, from its responses; ``asked`` when they cannot
        be read: a close is atomic, so an applied one closed every lease it named. (Taken as not read,
        the close was reported of unknown outcome, and its lookup read the same answer and gave up.)"""
        try:
            closed = 0
            for i in indices:
                r = billing_tx.MsgCloseLeaseResponse()
                self._unpack(op, included, i, MSG_CLOSE_LEASE_RESPONSE, r)
                closed += r.closed_count
            return closed
        except ChainError as exc:
            log.warning("%s: tx %s applied, but its answer could not be read (%s): counted as closing all %d "
                           "lease(s) it named (a close is all or nothing)", op, included.txhash, exc.message, asked)
            return asked

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

    def _withdraw_settlements(
        self, operation: str, included: IncludedTx, provider_uuid: str, total: tuple[Coin, ...]
    ) -> tuple[LeaseSettled, ...]:
        at = self._block_time(operation, included)
        if at is None:
            return ()
        return tuple(settlements_in_withdraw(included.txhash, at, included.events, total, provider_uuid=provider_uuid))

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
        gas: int | None = None  # one Simulate (or the fallback) seeds every attempt
        retries = 0
        #: re-signs by cause, for the tx's ``TxCost``
        resigned = {SDK_SEQUENCE_MISMATCH: 0, SDK_OUT_OF_GAS: 0}
        txhash = ""
        while True:
            account = self._account_info(operation)
            try:
                if gas is None:
                    gas = self._gas(operation, msgs, account)
                raw = self._sign(msgs, account, gas)
                txhash = hashlib.sha256(raw).hexdigest().upper()
                if signed is not None:
                    signed(txhash)  # before the broadcast: from here on the tx may be applied
                response = self._broadcast(operation, raw, txhash)
                held = response.codespace == SDK and response.code == SDK_TX_IN_MEMPOOL
                if response.code != 0 and not held:
                    raise self._tx_error(operation, response)
                # The node holds the tx (accepted now, or earlier with the same bytes).
                account.sequence += 1
                if held:
                    txhash = (response.txhash or txhash).upper()
                    included = self._await_held(operation, txhash)
                else:
                    included = self._await_inclusion(operation, txhash)
                if included.code != 0:
                    if included.codespace == SDK and included.code == SDK_SEQUENCE_MISMATCH:
                        # Failed in the ante handler at inclusion: the sequence was not used.
                        self._account = None
                    raise self._tx_error(operation, included, included_at=included.height)
                done = self._included(operation, txhash, included)
                assert done.cost is not None
                return replace(done, cost=msgspec.structs.replace(
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
                if exc.codespace == SDK and exc.code in resigned:
                    resigned[exc.code] += 1
                if exc.codespace == SDK and exc.code == SDK_OUT_OF_GAS and gas is not None:
                    gas = self._more_gas(exc, gas)
                    log.info("%s: out of gas, signing again with gas %d", operation, gas)
                else:
                    log.info("%s: %s; re-reading the account and signing again", operation, exc)
                    self._resync(operation, exc)

    def _gas(self, operation: str, msgs: list[Message], account: _Account) -> int:
        """The tx's gas limit: simulated x ``gas_adjustment``, or the fallback when Simulate cannot say.

        Raises the tx's own error when Simulate answers one (``simulation_failed``).
        """
        now = self.breaker_clock()
        if not self.simulate_breaker.allows(now):
            return self._fallback_gas()
        try:
            used = self._simulate(operation, msgs, account)
        except ChainError as exc:
            if not simulation_failed(exc):
                self.simulate_breaker.succeeded()  # Simulate works: it answered the tx's error
                raise
            gas = self._fallback_gas()
            if self.simulate_breaker.failed(now):
                log.warning(
                    "%s: Simulate failed %d times in a row (%s); the fallback gas %d is used for %gs without asking it",
                    operation, self.simulate_breaker.failures, exc, gas, self.simulate_breaker.cooldown,
                )
            else:
                log.warning("%s: Simulate failed (%s); signing with the fallback gas %d", operation, exc, gas)
            return gas
        self.simulate_breaker.succeeded()
        gas = _times(used, _decimal(self.gas_adjustment))
        if self.max_gas_limit and gas > self.max_gas_limit:
            raise ChainError(
                f"{operation}: simulated gas {used} x gas_adjustment {self.gas_adjustment} = {gas} is over "
                f"max_gas_limit {self.max_gas_limit}: not sent",
                codespace=CLIENT, code=GAS_OVER_CAP, transient=False,
            )
        return gas

    def _capped(self, gas: int) -> int:
        return min(gas, self.max_gas_limit) if self.max_gas_limit else gas

    def _fallback_gas(self) -> int:
        return self._capped(_times(self.gas_limit, _decimal(self.gas_adjustment)))

    def _more_gas(self, exc: ChainError, gas: int) -> int:
        """The gas to sign again with after ``exc``, out of gas at ``gas``; at ``max_gas_limit`` the error is final."""
        more = self._capped(_times(gas, _decimal(self.out_of_gas_multiplier)))
        if more <= gas:
            raise ChainError(
                f"{exc.message}; gas {gas} is max_gas_limit already: not sent again",
                codespace=exc.codespace, code=exc.code, transient=False,
                may_have_committed=exc.may_have_committed, tx_hash=exc.tx_hash,
            ) from exc
        return more

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
        base = base_account(r.account)
        if base is None:
            known = ", ".join(sorted(t.rsplit(".", 1)[-1] for t in _ACCOUNT_TYPES))
            raise ChainError(
                f"{operation}: account {self.address} is a {r.account.type_url or '(empty Any)'}; "
                f"the signer's account must be one of {known}",
                codespace="protocol", transient=False,
            )
        self._account = _Account(number=base.account_number, sequence=base.sequence)
        return self._account

    def _fee(self, gas_limit: int) -> int:
        """The fee of a tx of ``gas_limit``, in ``fee_denom``: ``ceil(gas_limit x gas_price)``, at least ``MIN_FEE``."""
        return max(MIN_FEE, math.ceil(Decimal(gas_limit) * Decimal(self.gas_price)))

    def _unsigned(self, msgs: list[Message], account: _Account, gas_limit: int, fee: int | None) -> Transaction:
        """The tx sealed for ``account`` at its sequence; ``fee`` None: no fee amount at all (a Simulate tx)."""
        tx = Transaction()
        for m in msgs:
            tx.add_message(m)
        tx.seal(
            SigningCfg.direct(self.key.public_key, account.sequence),
            fee=TxFee(amount=None if fee is None else f"{fee}{self.fee_denom}", gas_limit=gas_limit),
            memo="",
        )
        return tx

    def _sign(self, msgs: list[Message], account: _Account, gas_limit: int) -> bytes:
        tx = self._unsigned(msgs, account, gas_limit, self._fee(gas_limit))
        tx.sign(self.key.signer, self.chain_id, account.number, deterministic=True)
        tx.complete()
        return tx.tx.SerializeToString()

    def _simulation_tx(self, msgs: list[Message], account: _Account) -> bytes:
        """What Simulate is asked about: ``simulate_gas`` declared, no fee, an empty signature.

        Simulate checks the sequence but not the signature, and deducts no
        fee only when there is none. The declared gas is a small fixed one:
        a node refuses to simulate a tx declaring more than the block's max
        gas, and the gas used it measures does not depend on it.
        """
        tx = self._unsigned(msgs, account, self.simulate_gas, None).complete().tx
        tx.signatures.append(b"")
        return tx.SerializeToString()

    def simulate_with_fee(self, operation: str, msgs: Sequence[Message]) -> tuple[int, int, int]:
        """Simulate ``msgs`` as the next tx would carry them, fee included: (gas used, gas limit, fee in fee_denom).

        The second Simulate carries the signed tx with its real gas and fee,
        so a fee the account cannot pay fails here. Nothing is broadcast
        (``run.py doctor``). Raises ``ChainError`` as a send would at its simulation.
        """
        with self._tx_lock:
            account = self._account_info(operation)
            used = self._simulate(operation, list(msgs), account)
            limit = _times(used, _decimal(self.gas_adjustment))
            self._simulate(operation, list(msgs), account, raw=self._sign(list(msgs), account, limit))
            return used, limit, self._fee(limit)

    def _simulate(self, operation: str, msgs: list[Message], account: _Account, raw: bytes | None = None) -> int:
        """The gas Simulate measures for ``msgs`` (as ``_simulation_tx``, or the tx ``raw`` given)."""
        if raw is None:
            raw = self._simulation_tx(msgs, account)
        try:
            r = self._txs.Simulate(tx_service.SimulateRequest(tx_bytes=raw), timeout=self.simulate_timeout)
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
            if lost and r.code != 0 and not (r.codespace == SDK and r.code == SDK_TX_IN_MEMPOOL):
                # A refused re-send says nothing of the first send, whose answer was lost: the
                # node may hold it (our sequence used since: 32, by this very tx if it is included;
                # CometBFT tells "mempool full", 20, before it looks in its cache), or another node
                # behind a load balancer refused the copy (its own minimum fee, 13) while the first
                # is pending. So it is looked up, never taken as refused.
                found = self._get_tx(operation, txhash)
                if found is not None:
                    return abci_pb2.TxResponse(txhash=txhash, code=SDK_TX_IN_MEMPOOL, codespace=SDK)
                # Not included yet, but the first send may well be pending: signing again would
                # spend the next sequence on a second tx of the same intent.
                self._account = None
                raise ChainError(
                    f"{operation}: tx {txhash}: the answer to its broadcast was lost and the re-send was told "
                    f"{r.raw_log!r}: the first send may be pending; it is not signed again",
                    codespace=r.codespace, code=r.code, transient=True, may_have_committed=True, tx_hash=txhash,
                )
            return r

    def _get_tx(self, operation: str, txhash: str) -> abci_pb2.TxResponse | None:
        try:
            return self._txs.GetTx(tx_service.GetTxRequest(hash=txhash), timeout=self.query_timeout).tx_response
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            unindexed = _no_tx_index(operation, exc, f"tx {txhash} cannot be looked up by its hash")
            if unindexed is not None:
                # Asking again never helps: a send hears it at once (not after tx_timeout) and a lookup ends.
                unindexed.may_have_committed, unindexed.tx_hash = True, txhash
                raise unindexed from None
            error = rpc_error(operation, exc, may_have_committed=True)
            # The node failed to answer (UNKNOWN, INTERNAL...): the tx's outcome is still unknown,
            # so the lookup is asked again rather than ended (fred: GetTx errors are "not yet indexed").
            error.transient = True
            raise error from None

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

    def _await_held(self, operation: str, txhash: str) -> abci_pb2.TxResponse:
        """Inclusion of a tx the node said it already holds (sdk 19); not included in time is final.

        Its bytes are in the node's mempool cache: sending them again is
        answered 19 again, and signing anew would spend the next sequence on
        a second tx. So the caller hears that it may have committed, with
        the hash to look it up, and that retrying is no use.
        """
        try:
            return self._await_inclusion(operation, txhash)
        except ChainError as exc:
            if exc.codespace != "transport":  # the lookup failed for good: that error says more
                raise
            raise ChainError(
                f"{operation}: tx {txhash} was already in the node's mempool (sdk 19) but was not included "
                f"within {self.tx_timeout:g}s; it is not sent again",
                codespace=SDK, code=SDK_TX_IN_MEMPOOL, transient=False, may_have_committed=True, tx_hash=txhash,
            ) from None

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
