"""The chain's identifiers: bech32 account addresses, credit addresses, UUIDv7.

Both chain versions refuse what is not exactly one of these (CHAIN.md,
"Identities"; CHAIN-VERSIONS.md 1.7, 2.2, 2.3), so the model that stands in
for the chain checks them the same way, and a client checks a provider UUID
before it interpolates it into a websocket query.

- An account address is bech32 with the ``manifest`` prefix over 20 bytes
  (a key's address) or 32 (a module-derived one, such as a credit address).
- A tenant's credit address is ``address.Module("billing",
  sha256("billing/credit/" || tenant bytes))`` (v2.1.0
  ``x/billing/types/credit.go``), i.e. ``sha256(sha256("module") ||
  "billing" || 0x00 || key)``; the ``CreditAddress`` query answers it for
  any valid tenant, account or not.
- Lease and provider UUIDs are canonical lowercase UUIDv7 (version nibble 7,
  variant 8-b). The chain generates lease UUIDs deterministically from the
  block time and a sequence; ``uuid7`` does the same from what the model has.

Validity is cached: a sidecar asks about the same few thousand addresses
millions of times, and a bech32 decode costs tens of microseconds.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

import bech32

__all__ = [
    "BECH32_PREFIX",
    "InvalidAddress",
    "address_bytes",
    "is_address",
    "address_of",
    "credit_address",
    "credit_address_bytes",
    "is_uuid7",
    "uuid7",
]

#: Manifest addresses are bech32 with this human-readable part.
BECH32_PREFIX = "manifest"

#: ``x/billing`` ``CreditAccountAddressPrefix``: the derivation key's prefix.
CREDIT_ADDRESS_PREFIX = b"billing/credit/"
#: ``x/billing`` ``ModuleName``: the module credit addresses derive from.
MODULE_NAME = b"billing"

#: The chain's own pattern (``pkg/uuid``): anything else is refused, braces,
#: capitals and other versions included.
_UUID7 = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")

_VALID: dict[str, bytes] = {}
#: Bounds the cache, so addresses an untrusted peer makes up cannot grow it forever.
_CACHE_LIMIT = 200_000


class InvalidAddress(ValueError):
    """Text that is not a bech32 account address of the expected prefix."""


def address_bytes(text: str, prefix: str = BECH32_PREFIX) -> bytes:
    """The bytes behind a bech32 address; raises ``InvalidAddress`` naming the text."""
    found = _VALID.get(text)
    if found is not None:
        return found
    if not isinstance(text, str) or not text or len(text) > 128:
        raise InvalidAddress(f"{str(text)[:64]!r} is not a bech32 address")
    hrp, data = bech32.bech32_decode(text)
    if hrp != prefix or data is None:
        raise InvalidAddress(f"{text[:64]!r} is not a bech32 address with prefix {prefix!r}")
    raw = bech32.convertbits(data, 5, 8, False)
    if raw is None or len(raw) not in (20, 32):
        raise InvalidAddress(f"{text[:64]!r} does not hold 20 or 32 bytes")
    value = bytes(raw)
    if len(_VALID) >= _CACHE_LIMIT:
        _VALID.clear()
    _VALID[text] = value
    return value


def is_address(text: str, prefix: str = BECH32_PREFIX) -> bool:
    try:
        address_bytes(text, prefix)
    except InvalidAddress:
        return False
    return True


def address_of(data: bytes, prefix: str = BECH32_PREFIX) -> str:
    """The bech32 text of 20 or 32 address bytes."""
    if len(data) not in (20, 32):
        raise InvalidAddress(f"an address holds 20 or 32 bytes, not {len(data)}")
    return bech32.bech32_encode(prefix, bech32.convertbits(data, 8, 5, True))


_CREDIT: dict[str, str] = {}


def credit_address_bytes(tenant: str, prefix: str = BECH32_PREFIX) -> bytes:
    """The 32 bytes of the tenant's credit address (what the bank's index orders it by)."""
    key = hashlib.sha256(CREDIT_ADDRESS_PREFIX + address_bytes(tenant, prefix)).digest()
    typ = hashlib.sha256(b"module").digest()
    return hashlib.sha256(typ + MODULE_NAME + b"\x00" + key).digest()


def credit_address(tenant: str, prefix: str = BECH32_PREFIX) -> str:
    """The tenant's credit address (where its credit balance is held)."""
    found = _CREDIT.get(tenant)
    if found is not None:
        return found
    text = address_of(credit_address_bytes(tenant, prefix), prefix)
    if len(_CREDIT) >= _CACHE_LIMIT:
        _CREDIT.clear()
    _CREDIT[tenant] = text
    return text


def is_uuid7(text: str) -> bool:
    """Whether ``text`` is a canonical lowercase UUIDv7, as the chain requires."""
    return isinstance(text, str) and _UUID7.match(text) is not None


def uuid7(at: datetime, sequence: int, salt: str = "") -> str:
    """A deterministic UUIDv7: ``at`` in milliseconds, 12 bits of ``sequence``, the rest from a hash.

    What the chain does for a lease (``pkg/uuid``: block time, a module
    sequence, and entropy from the chain); two calls with the same arguments
    give the same UUID, so a seeded world gets the same lease ids every run.
    """
    ms = int(at.timestamp() * 1000) & ((1 << 48) - 1)
    tail = int.from_bytes(hashlib.sha256(f"{salt}/{sequence}".encode()).digest()[:8], "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | ((sequence & 0xFFF) << 64) | (0b10 << 62) | tail
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
