"""What a private key or a mnemonic looks like, so that no message quotes one.

An operator who pastes the provider's mnemonic or hex key into the wrong
setting (``key_file`` instead of the file's contents, ``key_env`` instead
of the variable's name, a reason, a URL) must not get it echoed back in the
error, in ``check-config``'s listing or in a capture: terminals scroll into
logs and tickets. ``shown`` is how every message quotes a value the
operator gave; ``looks_like_key`` is how a setting refuses to hold one.

The shapes are those the key loader accepts (``chain/keys.py``): 64 hex
digits (``0x`` optional), and a run of twelve or more words of three to
eight letters (every BIP-39 English word has that shape, so a mnemonic with
a typo is caught too). Ordinary values never have either shape: a sentence
of twelve words has a short word somewhere ("a", "of", "to").
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["looks_like_key", "shown", "redacted", "NOT_SHOWN"]

_HEX_KEY = re.compile(r"(?<![0-9a-fA-F])(?:0[xX])?[0-9a-fA-F]{64}(?![0-9a-fA-F])")
#: Twelve words or more: the fewest a BIP-39 mnemonic has, and every longer one.
_MNEMONIC = re.compile(r"(?<![A-Za-z])[A-Za-z]{3,8}(?:\s+[A-Za-z]{3,8}){11,}(?![A-Za-z])")

#: What stands in a message for a value that looks like key material.
NOT_SHOWN = "(a value that looks like a private key or a mnemonic: not shown)"

#: A quoted value longer than this is cut: an error is one line, not the file.
_SHOWN_CHARS = 80


def looks_like_key(value: Any, *, whole: bool = False) -> bool:
    """Whether ``value`` (a string) holds something shaped like a hex key or a mnemonic.

    ``whole``: only when all of it is one (a path may hold 64 hex digits as
    a folder's name, such as a Docker volume's, and is still a path).
    """
    if not isinstance(value, str):
        return False
    if whole:
        text = value.strip()
        return bool(_HEX_KEY.fullmatch(text) or _MNEMONIC.fullmatch(text))
    return bool(_HEX_KEY.search(value) or _MNEMONIC.search(value))


def _strings(value: Any) -> list[str]:
    """The strings in ``value`` and in the lists and tables it holds (a repr escapes a newline)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def shown(value: Any) -> str:
    """``repr(value)`` for a message: key material replaced by ``NOT_SHOWN``, long values cut."""
    text = repr(value)
    if looks_like_key(text) or any(looks_like_key(s) for s in _strings(value)):
        return NOT_SHOWN
    if len(text) > _SHOWN_CHARS:
        return f"{text[: _SHOWN_CHARS - 3]}... ({len(text)} characters)"
    return text


def redacted(text: str) -> str:
    """``text`` with every run shaped like a hex key or a mnemonic replaced by ``NOT_SHOWN``."""
    return _MNEMONIC.sub(NOT_SHOWN, _HEX_KEY.sub(NOT_SHOWN, text))
