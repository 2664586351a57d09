"""How a node words its errors, and how to read (codespace, code) back from the words.

A Cosmos SDK node reports codespace and code as numbers in a tx result
(``BroadcastTx``, ``GetTx``), but a failed ``Simulate`` answers gRPC status
UNKNOWN whose message is only text: the wrapped error, ending in the
registered error's description (``lease ... is not active: lease not
active``). A query the billing querier refuses sets a status of its own
(NOT_FOUND, INVALID_ARGUMENT, ...), which is its answer: ``status_error``
files it under that status. This module holds the registered descriptions
of the codes CHAIN.md lists, in one table, so that

- the devnet words its errors exactly as a node would (``describe``), and
- the client recovers the code from an UNKNOWN's text (``classify_text``).

The ``billing`` descriptions are ``x/billing/types/errors.go``'s, as
CHAIN-VERSIONS.md 4 lists them. The ``sdk`` ones are the SDK's
``types/errors`` names.
"""

from __future__ import annotations

import re

from chain.errors import BILLING, GRPC, GRPC_STATUS_CODES, GRPC_UNKNOWN, SDK

__all__ = [
    "DESCRIPTIONS",
    "SDK_TX_DECODE",
    "SDK_UNKNOWN_REQUEST",
    "SDK_INVALID_ADDRESS",
    "SDK_INVALID_PUBKEY",
    "SDK_UNKNOWN_ADDRESS",
    "SDK_INVALID_REQUEST",
    "SDK_NO_SIGNATURES",
    "SDK_TOO_MANY_SIGNATURES",
    "describe",
    "classify_text",
    "expected_sequence",
    "status_error",
]

# SDK codes the devnet answers besides those in chain.errors.
SDK_TX_DECODE = 2
SDK_UNKNOWN_REQUEST = 6
SDK_INVALID_ADDRESS = 7
SDK_INVALID_PUBKEY = 8
SDK_UNKNOWN_ADDRESS = 9
SDK_TOO_MANY_SIGNATURES = 14
SDK_NO_SIGNATURES = 15
SDK_INVALID_REQUEST = 18

#: (codespace, code) -> the registered description a node appends to an error.
DESCRIPTIONS: dict[tuple[str, int], str] = {
    (SDK, 2): "tx parse error",
    (SDK, 3): "invalid sequence",
    (SDK, 4): "unauthorized",
    (SDK, 5): "insufficient funds",
    (SDK, 6): "unknown request",
    (SDK, 7): "invalid address",
    (SDK, 8): "invalid pubkey",
    (SDK, 9): "unknown address",
    (SDK, 11): "out of gas",
    (SDK, 13): "insufficient fee",
    (SDK, 14): "maximum number of signatures exceeded",
    (SDK, 15): "no signatures supplied",
    (SDK, 18): "invalid request",
    (SDK, 19): "tx already in mempool",
    (SDK, 32): "incorrect account sequence",
    # liftedinit.billing.v1, x/billing/types/errors.go (CHAIN-VERSIONS.md 4).
    (BILLING, 1): "invalid params",
    (BILLING, 2): "lease not found",
    (BILLING, 3): "lease not active",
    (BILLING, 4): "insufficient credit balance",
    (BILLING, 5): "maximum leases per tenant reached",
    (BILLING, 6): "unauthorized",
    (BILLING, 7): "reserved",
    (BILLING, 8): "credit account not found",
    (BILLING, 9): "invalid lease",
    (BILLING, 10): "sku not found",
    (BILLING, 11): "sku not active",
    (BILLING, 12): "provider not found",
    (BILLING, 13): "provider not active",
    (BILLING, 14): "all SKUs in a lease must belong to the same provider",
    (BILLING, 15): "no withdrawable amount",
    (BILLING, 16): "lease must contain at least one item",
    (BILLING, 17): "quantity must be greater than zero",
    (BILLING, 18): "duplicate sku in lease items",
    (BILLING, 19): "invalid credit operation",
    (BILLING, 20): "billing arithmetic overflow",
    (BILLING, 21): "too many items in lease",
    (BILLING, 22): "lease not in pending state",
    (BILLING, 23): "maximum pending leases per tenant reached",
    (BILLING, 24): "invalid rejection reason",
    (BILLING, 25): "invalid request",
    (BILLING, 26): "invalid closure reason",
    (BILLING, 27): "invalid meta hash",
    (BILLING, 28): "invalid service name",
    (BILLING, 29): "invalid custom domain",
    (BILLING, 30): "custom domain already claimed",
    (BILLING, 31): "lease state does not allow custom_domain edit",
    (BILLING, 32): "lease item not found",
    (BILLING, 33): "lease item lookup is ambiguous",
    (BILLING, 34): "lease acknowledgement deadline exceeded",
    (BILLING, 35): "lease acknowledgement active cap exceeded",
    (BILLING, 36): "billing reservation invariant violated",
    (BILLING, 37): "tenant lease query limit exceeded",
    (BILLING, 38): "credit account reservation denomination limit exceeded",
    (BILLING, 39): "lease UUID sequence exhausted",
    (BILLING, 40): "stored record cannot be decoded",
    # 20 reads "reserved" on v2.1.0; 39 and 40 are the current chain's and
    # their exact wording was not seen (CHAIN-VERSIONS.md 4): assumed.
}

#: What a node prefixes to an error raised by a message handler (not the ante handler).
MESSAGE_FAILURE = "failed to execute message"

_EXPECTED_SEQUENCE = re.compile(r"account sequence mismatch, expected (\d+), got (\d+)")


def describe(codespace: str, code: int, message: str) -> str:
    """``message`` wrapped the way the SDK prints a registered error: ``<message>: <description>``."""
    description = DESCRIPTIONS.get((codespace, code))
    if description is None or message.endswith(description):
        return message
    return f"{message}: {description}"


def classify_text(text: str) -> tuple[str, int] | None:
    """The (codespace, code) whose description ``text`` carries, or None.

    Two descriptions exist in both codespaces ("unauthorized", "invalid
    request"): an error from a message handler (``failed to execute
    message``) is read as the billing module's, any other as the SDK's.
    """
    module_first = MESSAGE_FAILURE in text
    best: tuple[int, tuple[str, int]] | None = None
    for key, description in DESCRIPTIONS.items():
        pos = text.rfind(": " + description)
        if pos < 0:
            continue
        preferred = (key[0] == BILLING) == module_first
        # The last description in the text is the registered error; between
        # equal positions the codespace preference decides.
        rank = pos * 2 + (1 if preferred else 0)
        if best is None or rank > best[0]:
            best = (rank, key)
    return best[1] if best else None


def status_error(operation: str, status: str, details: str, *, may_have_committed: bool = False):
    """A query or call answered with gRPC status ``status`` (its ``StatusCode`` name) and text ``details``.

    - Statuses that say nothing about the request (unavailable, deadline,
      aborted, cancelled) are transport errors, transient.
    - ``UNKNOWN`` is what a node answers for an error that set no status of
      its own: a registered error, as ``Simulate`` answers a failing message
      (``failed to execute message; ...: lease not active``). Only there is
      the text read for the registered error's description; failing that it
      is ``grpc`` code 2.
    - Any other status (``NOT_FOUND``, ``INVALID_ARGUMENT``, ``INTERNAL``,
      ``RESOURCE_EXHAUSTED``, ...) was set by the querier itself: codespace
      ``grpc``, code the status's number. Its text is not read for a code: a
      NotFound whose text ends in "provider not found" is not billing code
      12, which the chain never answered (CHAIN-VERSIONS.md 4).
      ``RESOURCE_EXHAUSTED`` is transient (``chain.errors``).
    """
    from chain.errors import ChainError

    if status in TRANSPORT_STATUS_NAMES:
        return ChainError.transport(f"{operation}: {status}: {details}".rstrip(": "), may_have_committed=may_have_committed)
    code = GRPC_STATUS_CODES.get(status, GRPC_UNKNOWN)
    if code == GRPC_UNKNOWN:
        found = classify_text(details)
        if found is not None:
            codespace, registered = found
            return ChainError(
                f"{operation}: {details}", codespace=codespace, code=registered, may_have_committed=may_have_committed
            )
    return ChainError(
        f"{operation}: gRPC {status}: {details}", codespace=GRPC, code=code, may_have_committed=may_have_committed
    )


#: gRPC statuses that say nothing about the request itself: the node was
#: unreachable or too slow, or the call was cut. Always transient.
TRANSPORT_STATUS_NAMES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED"})


def expected_sequence(text: str) -> int | None:
    """N from ``account sequence mismatch, expected N, got M``; None if absent."""
    m = _EXPECTED_SEQUENCE.search(text)
    return int(m.group(1)) if m else None
