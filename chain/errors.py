"""Chain errors and how the sidecar treats them.

Every failed chain call becomes a ``ChainError`` carrying the chain's
codespace and code (CHAIN.md lists them). Whether it is worth retrying, and
whether the call may have been applied anyway, is decided here and nowhere
else, so the retry policy and the "never re-drive a page that may have
committed" rule read one table.
"""

from __future__ import annotations

from messages.chain import ChainFailure

__all__ = [
    "ChainError",
    "LEASE_NOT_FOUND",
    "LEASE_NOT_ACTIVE",
    "UNAUTHORIZED",
    "NO_WITHDRAWABLE",
    "INVALID_REQUEST",
    "INVALID_CLOSURE_REASON",
    "CREDIT_ACCOUNT_NOT_FOUND",
    "INSUFFICIENT_CREDIT",
    "SDK_UNAUTHORIZED",
    "SDK_INSUFFICIENT_FUNDS",
    "SDK_OUT_OF_GAS",
    "SDK_INSUFFICIENT_FEE",
    "SDK_TX_IN_MEMPOOL",
    "SDK_SEQUENCE_MISMATCH",
    "INVALID_LEASE",
    "PROVIDER_NOT_FOUND",
    "INVALID_CREDIT_OPERATION",
    "ARITHMETIC_OVERFLOW",
    "ACK_DEADLINE_EXCEEDED",
    "ACK_ACTIVE_CAP_EXCEEDED",
    "RESERVATION_INVARIANT",
    "LEASE_QUERY_LIMIT_EXCEEDED",
    "RESERVATION_DENOM_LIMIT_EXCEEDED",
    "SEQUENCE_EXHAUSTED",
    "INTERNAL_CORRUPTION",
    "CLIENT",
    "GAS_OVER_CAP",
    "GRPC",
    "GRPC_STATUS_CODES",
    "GRPC_UNKNOWN",
    "GRPC_INVALID_ARGUMENT",
    "GRPC_NOT_FOUND",
    "GRPC_RESOURCE_EXHAUSTED",
    "GRPC_INTERNAL",
    "ERROR_NAMES",
    "error_name",
    "is_lease_gone",
]

BILLING = "billing"
SDK = "sdk"
#: Refused by this client before anything was sent (codes below).
CLIENT = "client"
#: A gRPC status the node set itself (a querier's NOT_FOUND, INVALID_ARGUMENT,
#: INTERNAL, RESOURCE_EXHAUSTED, ...): the code is the status's number.
GRPC = "grpc"

# liftedinit.billing.v1 module errors (codespace "billing"; CHAIN-VERSIONS.md 4).
LEASE_NOT_FOUND = 2
LEASE_NOT_ACTIVE = 3
INSUFFICIENT_CREDIT = 4
MAX_LEASES_REACHED = 5
UNAUTHORIZED = 6
CREDIT_ACCOUNT_NOT_FOUND = 8
INVALID_LEASE = 9
PROVIDER_NOT_FOUND = 12
PROVIDER_NOT_ACTIVE = 13
MIXED_PROVIDERS = 14
NO_WITHDRAWABLE = 15
EMPTY_LEASE_ITEMS = 16
INVALID_QUANTITY = 17
INVALID_CREDIT_OPERATION = 19
ARITHMETIC_OVERFLOW = 20  # current chain; "reserved" on v2.1.0
LEASE_NOT_PENDING = 22
MAX_PENDING_LEASES_REACHED = 23
INVALID_REJECTION_REASON = 24
INVALID_REQUEST = 25
INVALID_CLOSURE_REASON = 26
# 34-40 exist on the current chain only (v2.1.0 has 1-33).
ACK_DEADLINE_EXCEEDED = 34
ACK_ACTIVE_CAP_EXCEEDED = 35
RESERVATION_INVARIANT = 36
LEASE_QUERY_LIMIT_EXCEEDED = 37
RESERVATION_DENOM_LIMIT_EXCEEDED = 38
SEQUENCE_EXHAUSTED = 39
INTERNAL_CORRUPTION = 40

# Cosmos SDK errors (codespace "sdk").
SDK_UNAUTHORIZED = 4
SDK_INSUFFICIENT_FUNDS = 5
SDK_OUT_OF_GAS = 11
SDK_INSUFFICIENT_FEE = 13
SDK_TX_IN_MEMPOOL = 19
SDK_SEQUENCE_MISMATCH = 32

#: The node cannot search its txs by event (codespace ``tx_index``, code
#: ``NO_TX_INDEX``): its indexer is ``null`` ("transaction indexing is
#: disabled"). Not transient: asking again gets the same answer.
TX_INDEX = "tx_index"
NO_TX_INDEX = 1
#: What a node without a tx index costs the sidecar, and the fix (``run.py doctor``, the readiness check).
NO_TX_INDEX_HARM = (
    "the sidecar cannot see its withdraw and close txs included, so what they withdrew and settled is missing "
    "from the books; set [tx_index] indexer = \"kv\" in the node's config.toml"
)

# This client's refusals (codespace "client").
#: The simulated gas x gas_adjustment is over [node] max_gas_limit: such a tx
#: would only be refused, or run out of gas at the cap, with its fee paid.
GAS_OVER_CAP = 1

#: gRPC status names and their numbers (grpc/status.h): codes of codespace ``grpc``.
GRPC_STATUS_CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9,
    "ABORTED": 10, "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
    "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}
GRPC_UNKNOWN = GRPC_STATUS_CODES["UNKNOWN"]
GRPC_INVALID_ARGUMENT = GRPC_STATUS_CODES["INVALID_ARGUMENT"]
GRPC_NOT_FOUND = GRPC_STATUS_CODES["NOT_FOUND"]
GRPC_RESOURCE_EXHAUSTED = GRPC_STATUS_CODES["RESOURCE_EXHAUSTED"]
GRPC_INTERNAL = GRPC_STATUS_CODES["INTERNAL"]

#: (codespace, code) -> the error's name in the chain's source (``x/billing/types/errors.go``,
#: the SDK's ``types/errors``), so that a log line says which error it was without a table
#: beside it. Codes 34-40 are the current chain's; 39 and 40 are named from its tests.
ERROR_NAMES: dict[tuple[str, int], str] = {
    (BILLING, 1): "ErrInvalidParams",
    (BILLING, LEASE_NOT_FOUND): "ErrLeaseNotFound",
    (BILLING, LEASE_NOT_ACTIVE): "ErrLeaseNotActive",
    (BILLING, INSUFFICIENT_CREDIT): "ErrInsufficientCredit",
    (BILLING, MAX_LEASES_REACHED): "ErrMaxLeasesReached",
    (BILLING, UNAUTHORIZED): "ErrUnauthorized",
    (BILLING, 7): "ErrReserved7",
    (BILLING, CREDIT_ACCOUNT_NOT_FOUND): "ErrCreditAccountNotFound",
    (BILLING, INVALID_LEASE): "ErrInvalidLease",
    (BILLING, 10): "ErrSKUNotFound",
    (BILLING, 11): "ErrSKUNotActive",
    (BILLING, PROVIDER_NOT_FOUND): "ErrProviderNotFound",
    (BILLING, PROVIDER_NOT_ACTIVE): "ErrProviderNotActive",
    (BILLING, 14): "ErrMixedProviders",
    (BILLING, NO_WITHDRAWABLE): "ErrNoWithdrawableAmount",
    (BILLING, EMPTY_LEASE_ITEMS): "ErrEmptyLeaseItems",
    (BILLING, INVALID_QUANTITY): "ErrInvalidQuantity",
    (BILLING, 18): "ErrDuplicateSKU",
    (BILLING, INVALID_CREDIT_OPERATION): "ErrInvalidCreditOperation",
    (BILLING, ARITHMETIC_OVERFLOW): "ErrArithmeticOverflow",
    (BILLING, 21): "ErrTooManyLeaseItems",
    (BILLING, LEASE_NOT_PENDING): "ErrLeaseNotPending",
    (BILLING, MAX_PENDING_LEASES_REACHED): "ErrMaxPendingLeasesReached",
    (BILLING, INVALID_REJECTION_REASON): "ErrInvalidRejectionReason",
    (BILLING, INVALID_REQUEST): "ErrInvalidRequest",
    (BILLING, INVALID_CLOSURE_REASON): "ErrInvalidClosureReason",
    (BILLING, 27): "ErrInvalidMetaHash",
    (BILLING, 28): "ErrInvalidServiceName",
    (BILLING, 29): "ErrInvalidCustomDomain",
    (BILLING, 30): "ErrCustomDomainAlreadyClaimed",
    (BILLING, 31): "ErrLeaseNotEditable",
    (BILLING, 32): "ErrLeaseItemNotFound",
    (BILLING, 33): "ErrAmbiguousLeaseItem",
    (BILLING, ACK_DEADLINE_EXCEEDED): "ErrLeaseAcknowledgementDeadlineExceeded",
    (BILLING, ACK_ACTIVE_CAP_EXCEEDED): "ErrLeaseAcknowledgementActiveCapExceeded",
    (BILLING, RESERVATION_INVARIANT): "ErrReservationInvariant",
    (BILLING, LEASE_QUERY_LIMIT_EXCEEDED): "ErrLeaseQueryLimitExceeded",
    (BILLING, RESERVATION_DENOM_LIMIT_EXCEEDED): "ErrReservationDenomLimitExceeded",
    (BILLING, SEQUENCE_EXHAUSTED): "ErrSequenceExhausted",
    (BILLING, INTERNAL_CORRUPTION): "ErrInternalCorruption",
    (SDK, SDK_UNAUTHORIZED): "ErrUnauthorized",
    (SDK, SDK_INSUFFICIENT_FUNDS): "ErrInsufficientFunds",
    (SDK, 9): "ErrUnknownAddress",
    (SDK, SDK_OUT_OF_GAS): "ErrOutOfGas",
    (SDK, SDK_INSUFFICIENT_FEE): "ErrInsufficientFee",
    (SDK, SDK_TX_IN_MEMPOOL): "ErrTxInMempoolCache",
    (SDK, SDK_SEQUENCE_MISMATCH): "ErrWrongSequence",
    **{(GRPC, number): name for name, number in GRPC_STATUS_CODES.items()},
}


def error_name(codespace: str, code: int) -> str:
    """The chain's name of (codespace, code), e.g. ``ErrReservationInvariant``; "" if not known."""
    return ERROR_NAMES.get((codespace, code), "")


#: (codespace, code) pairs worth another try: the same request can succeed.
#: Not "tx already in mempool" (sdk 19): the node holds those very bytes, so
#: the client waits for that tx; sending it again would only be told 19 again.
_TRANSIENT = {
    (SDK, SDK_SEQUENCE_MISMATCH),
    (SDK, SDK_OUT_OF_GAS),
    # A querier's work bound (CreditEstimate over its lease ceiling, a long
    # offset scan) or a node shedding load: the same query can pass later.
    (GRPC, GRPC_RESOURCE_EXHAUSTED),
}


class QueryRefused(Exception):
    """A query the chain answered with a gRPC status instead of a value.

    The billing querier never answers module codes: it sets a status
    (``NOT_FOUND``, ``INVALID_ARGUMENT``, ``INTERNAL``, ``RESOURCE_EXHAUSTED``;
    CHAIN-VERSIONS.md 4) with a message. ``status`` is the ``grpc.StatusCode``
    name, so this module needs no gRPC import.
    """

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class ChainError(Exception):
    """A chain call that failed.

    ``codespace``/``code`` are the chain's where it answered one; a transport
    failure (timeout, connection refused) has codespace ``transport``.
    """

    def __init__(
        self,
        message: str,
        *,
        codespace: str = "",
        code: int = 0,
        transient: bool | None = None,
        may_have_committed: bool = False,
        tx_hash: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.codespace = codespace
        self.code = code
        if transient is None:
            transient = (codespace, code) in _TRANSIENT or codespace == "transport"
        self.transient = transient
        self.may_have_committed = may_have_committed
        #: the tx whose outcome is unknown (with ``may_have_committed``), when known
        self.tx_hash = tx_hash

    def __str__(self) -> str:
        if not self.codespace:
            return self.message
        name = error_name(self.codespace, self.code)
        return f"{self.codespace} code {self.code}{f' ({name})' if name else ''}: {self.message}"

    def failure(self, operation: str) -> ChainFailure:
        return ChainFailure(
            operation=operation,
            message=str(self),
            codespace=self.codespace,
            code=self.code,
            transient=self.transient,
            may_have_committed=self.may_have_committed,
            tx_hash=self.tx_hash if self.may_have_committed else "",
        )

    @classmethod
    def billing(cls, code: int, message: str) -> "ChainError":
        return cls(message, codespace=BILLING, code=code)

    @classmethod
    def transport(cls, message: str, *, may_have_committed: bool = False, tx_hash: str = "") -> "ChainError":
        return cls(
            message, codespace="transport", transient=True, may_have_committed=may_have_committed, tx_hash=tx_hash
        )


def failure_from(exc: BaseException, operation: str) -> ChainFailure:
    """Any exception from a chain call, as data. Unknown errors are not retried."""
    if isinstance(exc, ChainError):
        return exc.failure(operation)
    return ChainFailure(operation=operation, message=f"{type(exc).__name__}: {exc}")


def is_lease_gone(failure: ChainFailure) -> bool:
    """The failure says some lease of the request is no longer active."""
    return failure.codespace == BILLING and failure.code in (LEASE_NOT_FOUND, LEASE_NOT_ACTIVE)


#: Billing refusals of a batch that one of its leases (or its tenant) can cause alone (CHAIN-VERSIONS.md
#: 2.3, 2.6): a sender whose role for one lease differs from the others' ("inconsistent authorization":
#: the provider's own lease among its tenants'), a payout the bank blocks, a tenant's missing credit
#: account, its reservations broken, a lease the chain cannot settle or store (its last settlement after
#: the block time).
PER_LEASE_REFUSALS = frozenset({UNAUTHORIZED, CREDIT_ACCOUNT_NOT_FOUND, INVALID_LEASE, INVALID_CREDIT_OPERATION,
                                RESERVATION_INVARIANT, INTERNAL_CORRUPTION})


def is_one_lease_refusal(failure: ChainFailure) -> bool:
    """The failure is a refusal of a batch that one of its leases may cause alone (``PER_LEASE_REFUSALS``);
    not one of the whole: a fee, or a key that may close none of them."""
    if failure.codespace != BILLING or failure.code not in PER_LEASE_REFUSALS:
        return False
    return failure.code != UNAUTHORIZED or "inconsistent" in failure.message


def is_no_tx_index(failure: ChainFailure) -> bool:
    """The failure says the node keeps no tx index to search."""
    return failure.codespace == TX_INDEX and failure.code == NO_TX_INDEX


__all__ += ["failure_from", "BILLING", "SDK", "QueryRefused", "TX_INDEX", "NO_TX_INDEX", "NO_TX_INDEX_HARM",
            "is_no_tx_index", "PER_LEASE_REFUSALS", "is_one_lease_refusal"]
