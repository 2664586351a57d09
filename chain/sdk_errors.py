"""How a node words its errors, and how to read (codespace, code) back from the words.

A Cosmos SDK node reports codespace and code as numbers in a tx result
(``BroadcastTx``, ``GetTx``), but a failed ``Simulate`` or query answers a
gRPC status whose message is only text: the wrapped error, ending in the
registered error's description (``lease ... is not active: lease not
active``). This module holds the registered descriptions of the codes
CHAIN.md lists, in one table, so that

- the devnet words its errors exactly as a node would (``describe``), and
- the client recovers the code from such text (``classify_text``).

The ``billing`` descriptions are **(assumed)**: CHAIN.md gives the codes,
not their wording. The ``sdk`` ones are the SDK's ``types/errors`` names.
"""

from __future__ import annotations

import re

from chain.errors import BILLING, SDK

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
    # liftedinit.billing.v1 (assumed wording).
    (BILLING, 2): "lease not found",
    (BILLING, 3): "lease not active",
    (BILLING, 4): "insufficient credit",
    (BILLING, 6): "unauthorized",
    (BILLING, 8): "credit account not found",
    (BILLING, 15): "no withdrawable amount",
    (BILLING, 25): "invalid request",
    (BILLING, 26): "invalid closure reason",
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


def expected_sequence(text: str) -> int | None:
    """N from ``account sequence mismatch, expected N, got M``; None if absent."""
    m = _EXPECTED_SEQUENCE.search(text)
    return int(m.group(1)) if m else None
