"""Coins: an integer amount of one denom, and the multi-denom lists the chain uses.

Amounts are Python ints (a Cosmos ``Int`` is 256-bit and never a float). A
coin list is a tuple of ``Coin`` sorted by denom with no zero amounts and no
denom twice, so two lists that mean the same amount compare equal.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from msgspec.msgpack import Ext
from msgspec.structs import force_setattr

from messages.codec import EXT_BIG_INT, Message, decode_big_int

__all__ = ["Coin", "coins", "coins_to_dict", "add_coins", "format_coins", "parse_coins"]

#: Cosmos SDK denom syntax: a letter, then 2..127 of letters, digits, / : . _ -
_DENOM = re.compile(r"^[a-zA-Z][a-zA-Z0-9/:._-]{2,127}$")


#: Denoms already validated: a sidecar sees a handful, millions of times.
_VALID_DENOMS: set[str] = set()


class Coin(Message, tag="coin"):
    denom: str
    #: Always an int once built. On the wire an amount beyond 64 bits is the
    #: codec's big-int ext (msgpack has no wider int), which a decoder hands
    #: over as an ``Ext`` and ``__post_init__`` reads back.
    amount: int | Ext

    def __post_init__(self) -> None:
        if type(self.amount) is not int:
            if type(self.amount) is Ext and self.amount.code == EXT_BIG_INT:
                force_setattr(self, "amount", decode_big_int(self.amount.data))
            elif not isinstance(self.amount, int) or isinstance(self.amount, bool):
                raise TypeError(f"coin amount must be an int, got {type(self.amount).__name__}")
        if self.denom not in _VALID_DENOMS:
            if not isinstance(self.denom, str) or not _DENOM.match(self.denom):
                raise ValueError(f"invalid denom {self.denom!r}")
            _VALID_DENOMS.add(self.denom)


def coins(amounts: Mapping[str, int] | Iterable[Coin]) -> tuple[Coin, ...]:
    """The canonical coin list for ``amounts`` (a denom -> int mapping or coins)."""
    if type(amounts) is dict or isinstance(amounts, Mapping):
        if len(amounts) == 1:  # the common case: one denom
            for d, a in amounts.items():
                return (Coin(d, a),) if a else ()
        total = amounts  # type: ignore[assignment]
    else:
        total = {}
        for c in amounts:
            total[c.denom] = total.get(c.denom, 0) + c.amount
    return tuple(Coin(d, a) for d, a in sorted(total.items()) if a != 0)


def coins_to_dict(values: Iterable[Coin]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in values:
        out[c.denom] = out.get(c.denom, 0) + c.amount
    return out


def add_coins(*lists: Iterable[Coin]) -> tuple[Coin, ...]:
    total: dict[str, int] = {}
    for values in lists:
        for c in values:
            total[c.denom] = total.get(c.denom, 0) + c.amount
    return coins(total)


def format_coins(values: Iterable[Coin]) -> str:
    """Cosmos text form, ``12umfx,3upwr``; ``0`` for an empty list."""
    text = ",".join(f"{c.amount}{c.denom}" for c in values)
    return text or "0"


_COIN_TEXT = re.compile(r"^(-?\d+)([a-zA-Z][a-zA-Z0-9/:._-]{2,127})$")


def parse_coins(text: str) -> tuple[Coin, ...]:
    """Parse the Cosmos text form (``12umfx,3upwr``). Raises ValueError naming the bad part."""
    text = text.strip()
    if text in ("", "0"):
        return ()
    parts = []
    for part in text.split(","):
        m = _COIN_TEXT.match(part.strip())
        if not m:
            raise ValueError(f"not a coin amount: {part!r} (expected e.g. 12umfx)")
        parts.append(Coin(m.group(2), int(m.group(1))))
    return coins(parts)
