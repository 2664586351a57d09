"""The chain's error codes by name, and how a node's error text is read back (``chain.errors``, ``chain.sdk_errors``)."""

from __future__ import annotations

import pytest

from chain.errors import (
    ACK_ACTIVE_CAP_EXCEEDED,
    ACK_DEADLINE_EXCEEDED,
    BILLING,
    INTERNAL_CORRUPTION,
    INVALID_CREDIT_OPERATION,
    INVALID_LEASE,
    LEASE_QUERY_LIMIT_EXCEEDED,
    PROVIDER_NOT_FOUND,
    RESERVATION_DENOM_LIMIT_EXCEEDED,
    RESERVATION_INVARIANT,
    SDK,
    SEQUENCE_EXHAUSTED,
    ChainError,
    error_name,
)
from chain.sdk_errors import MESSAGE_FAILURE, classify_text, describe

#: CHAIN-VERSIONS.md 4: the codes a provider meets that the sidecar must know by name.
NAMED = [
    (INVALID_LEASE, 9, "ErrInvalidLease", "invalid lease"),
    (PROVIDER_NOT_FOUND, 12, "ErrProviderNotFound", "provider not found"),
    (INVALID_CREDIT_OPERATION, 19, "ErrInvalidCreditOperation", "invalid credit operation"),
    (ACK_DEADLINE_EXCEEDED, 34, "ErrLeaseAcknowledgementDeadlineExceeded", "lease acknowledgement deadline exceeded"),
    (ACK_ACTIVE_CAP_EXCEEDED, 35, "ErrLeaseAcknowledgementActiveCapExceeded", "lease acknowledgement active cap exceeded"),
    (RESERVATION_INVARIANT, 36, "ErrReservationInvariant", "billing reservation invariant violated"),
    (LEASE_QUERY_LIMIT_EXCEEDED, 37, "ErrLeaseQueryLimitExceeded", "tenant lease query limit exceeded"),
    (RESERVATION_DENOM_LIMIT_EXCEEDED, 38, "ErrReservationDenomLimitExceeded",
     "credit account reservation denomination limit exceeded"),
    (SEQUENCE_EXHAUSTED, 39, "ErrSequenceExhausted", "lease UUID sequence exhausted"),
    (INTERNAL_CORRUPTION, 40, "ErrInternalCorruption", "stored record cannot be decoded"),
]


@pytest.mark.parametrize("constant, code, name, description", NAMED, ids=[n[2] for n in NAMED])
def test_billing_codes_are_known_by_name_and_read_back_from_a_nodes_text(
    constant: int, code: int, name: str, description: str
) -> None:
    assert constant == code
    assert error_name(BILLING, code) == name
    # A message handler's failure, as Simulate's UNKNOWN status words it, reads back as this code.
    text = f"{MESSAGE_FAILURE}; message index: 0: {describe(BILLING, code, 'lease 0197-x')}"
    assert text.endswith(f": {description}")
    assert classify_text(text) == (BILLING, code)
    # A log line names the error.
    assert str(ChainError.billing(code, "lease 0197-x")) == f"billing code {code} ({name}): lease 0197-x"


def test_an_unnamed_code_is_shown_by_number_alone() -> None:
    assert error_name(BILLING, 99) == ""
    assert str(ChainError.billing(99, "odd")) == "billing code 99: odd"
    assert str(ChainError("plain")) == "plain"
    assert str(ChainError("seq", codespace=SDK, code=32)) == "sdk code 32 (ErrWrongSequence): seq"
