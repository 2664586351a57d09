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
    "is_lease_gone",
]

BILLING = "billing"
SDK = "sdk"

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
LEASE_NOT_PENDING = 22
MAX_PENDING_LEASES_REACHED = 23
INVALID_REJECTION_REASON = 24
INVALID_REQUEST = 25
INVALID_CLOSURE_REASON = 26
ACK_DEADLINE_EXCEEDED = 34
ACK_ACTIVE_CAP_EXCEEDED = 35
RESERVATION_INVARIANT = 36
LEASE_QUERY_LIMIT_EXCEEDED = 37

# Cosmos SDK errors (codespace "sdk").
SDK_UNAUTHORIZED = 4
SDK_INSUFFICIENT_FUNDS = 5
SDK_OUT_OF_GAS = 11
SDK_INSUFFICIENT_FEE = 13
SDK_TX_IN_MEMPOOL = 19
SDK_SEQUENCE_MISMATCH = 32

#: (codespace, code) pairs worth another try: the same request can succeed.
_TRANSIENT = {
    (SDK, SDK_SEQUENCE_MISMATCH),
    (SDK, SDK_TX_IN_MEMPOOL),
    (SDK, SDK_OUT_OF_GAS),
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
        where = f"{self.codespace} code {self.code}: " if self.codespace else ""
        return f"{where}{self.message}"

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


__all__ += ["failure_from", "BILLING", "SDK", "QueryRefused"]
