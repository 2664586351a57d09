"""The provider's signing key: loaded once, held so it cannot leak.

The key comes from a file holding a BIP-39 mnemonic (derived on the Cosmos
HD path ``m/44'/118'/0'/0/0``) or a 64-hex-digit secp256k1 private key (what
``manifestd keys export --unarmored-hex --unsafe`` prints), or from an
environment variable holding either.

A mnemonic must carry a valid BIP-39 checksum (the last bits of its last
word are the first bits of the sha256 of the others' entropy). Every
sequence of list words derives *some* key, so without the check two swapped
words gave the sidecar an unfunded account of its own, which it signed as
until its first fee failed. cosmpy carries the word list but not the check.

A key file that its group or other users can read is refused before it is
read: anyone on the machine who can read it can drain the provider's
account. The error names the file and its mode and says how to fix it.

The key never appears in logs, errors, reprs or captures: ``ProviderKey``
shows only the address and where the key came from, errors about bad key
material never quote it, and exceptions raised while parsing it are not
chained (their text could hold a word of the mnemonic).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from cosmpy.crypto.address import Address
from cosmpy.crypto.keypairs import PrivateKey, PublicKey
from cosmpy.mnemonic import COSMOS_HD_PATH, derive_child_key_from_mnemonic
from cosmpy.mnemonic.words import ENGLISH_MNEMONIC_WORDS_LIST

from runtime.config import ConfigError

__all__ = [
    "ProviderKey",
    "KeyLoadError",
    "load_provider_key",
    "load_configured_key",
    "mnemonic_problem",
    "write_key_file",
    "BECH32_PREFIX",
]

#: Manifest addresses are bech32 with this human-readable part.
BECH32_PREFIX = "manifest"

#: Permission bits a key file must not have: any access by group or others.
_GROUP_OTHER_BITS = 0o077

_HEX_KEY = re.compile(r"^(0x)?[0-9a-fA-F]{64}$")
#: Word counts BIP-39 allows.
_MNEMONIC_LENGTHS = (12, 15, 18, 21, 24)
_WORD_INDEX = {word: i for i, word in enumerate(ENGLISH_MNEMONIC_WORDS_LIST)}


class KeyLoadError(ValueError):
    """The provider key could not be loaded; the message names the source, never the key."""



class ProviderKey:
    """A secp256k1 key with its ``manifest1...`` address; its repr hides the secret.

    ``signer`` is what cosmpy's ``Transaction.sign`` takes. Do not log it or
    put it in a message: it is the private key.
    """

    __slots__ = ("_private_key", "public_key", "address", "source", "form")

    def __init__(
        self, private_key: PrivateKey, source: str, prefix: str = BECH32_PREFIX, form: str = "a private key"
    ) -> None:
        self._private_key = private_key
        self.public_key: PublicKey = private_key.public_key
        self.address: str = str(Address(self.public_key, prefix))
        self.source = source
        #: What the source held, for the operator: "a 24-word BIP-39 mnemonic", "a hex private key".
        self.form = form

    @classmethod
    def generate(cls, source: str = "generated", prefix: str = BECH32_PREFIX) -> "ProviderKey":
        return cls(PrivateKey(), source, prefix)

    @property
    def signer(self) -> PrivateKey:
        return self._private_key

    def sign(self, data: bytes) -> bytes:
        """A deterministic (RFC 6979), low-S secp256k1 signature of ``sha256(data)``."""
        return self._private_key.sign(data, deterministic=True, canonicalise=True)

    def __repr__(self) -> str:
        return f"ProviderKey(address={self.address!r}, source={self.source!r})"

    __str__ = __repr__

    def __reduce__(self):  # never pickled into a capture or a queue by accident
        raise TypeError("ProviderKey cannot be pickled")


def _parse_key_text(text: str, source: str, prefix: str) -> ProviderKey:
    material = text.strip()
    if _HEX_KEY.match(material):
        raw = bytes.fromhex(material[2:] if material.startswith("0x") else material)
        try:
            private_key = PrivateKey(raw)
        except Exception:
            raise KeyLoadError(f"{source}: not a valid secp256k1 private key") from None
        return ProviderKey(private_key, source, prefix, "a hex private key")
    words = material.split()
    if len(words) in _MNEMONIC_LENGTHS and all(w.isalpha() and w.islower() for w in words):
        problem = mnemonic_problem(words)
        if problem:
            raise KeyLoadError(f"{source}: not a valid BIP-39 mnemonic: {problem}")
        try:
            raw = derive_child_key_from_mnemonic(" ".join(words), path=COSMOS_HD_PATH)
        except Exception:
            # cosmpy's message could quote a word: never chain it.
            raise KeyLoadError(f"{source}: not a valid BIP-39 mnemonic") from None
        return ProviderKey(PrivateKey(raw), source, prefix, f"a {len(words)}-word BIP-39 mnemonic")
    raise KeyLoadError(
        f"{source}: holds neither a BIP-39 mnemonic (12-24 words) nor a 64-hex-digit private key"
    )


def mnemonic_problem(words: list[str]) -> str:
    """What is wrong with a mnemonic of ``words``, "" when nothing. Names positions, never words."""
    if len(words) not in _MNEMONIC_LENGTHS:
        return f"{len(words)} words; a mnemonic has {', '.join(map(str, _MNEMONIC_LENGTHS))}"
    unknown = [i + 1 for i, w in enumerate(words) if w not in _WORD_INDEX]
    if unknown:
        return f"word {', '.join(map(str, unknown))} is not in the BIP-39 English word list (a typo?)"
    # 11 bits a word: the entropy, then its checksum, the first ENT/32 bits of sha256(entropy).
    bits = 0
    for w in words:
        bits = bits << 11 | _WORD_INDEX[w]
    checksum_bits = len(words) * 11 // 33
    entropy = (bits >> checksum_bits).to_bytes(checksum_bits * 4, "big")
    expected = hashlib.sha256(entropy).digest()[0] >> (8 - checksum_bits)
    if bits & ((1 << checksum_bits) - 1) != expected:
        return "its checksum does not match (a word mistyped into another list word, or two words swapped?)"
    return ""


def _check_mode(path: Path) -> None:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyLoadError(
            f"key file {path}: no such file (expected a file of mode 0600 holding the provider's mnemonic or hex key)"
        ) from None
    except OSError as exc:
        raise KeyLoadError(f"key file {path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyLoadError(f"key file {path}: not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & _GROUP_OTHER_BITS:
        raise KeyLoadError(
            f"key file {path} has mode {mode:04o}: it is readable or writable by group or others; "
            f"run `chmod 600 {path}`"
        )


def load_provider_key(
    key_file: str | Path = "", key_env: str = "", prefix: str = BECH32_PREFIX
) -> ProviderKey:
    """Load the provider key from ``key_file`` or the environment variable named ``key_env``.

    Exactly one source must be given. Raises ``KeyLoadError`` naming the
    source (file path and mode, or variable name), never the key.
    """
    if key_file and key_env:
        raise KeyLoadError("give the provider key as a key file or an environment variable, not both")
    if key_file:
        path = Path(key_file).expanduser()
        _check_mode(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise KeyLoadError(f"key file {path}: not UTF-8 text") from None
        except OSError as exc:
            raise KeyLoadError(f"key file {path}: cannot be read ({exc.strerror})") from None
        return _parse_key_text(text, f"key file {path}", prefix)
    if key_env:
        value = os.environ.get(key_env)
        if not value:
            raise KeyLoadError(
                f"environment variable {key_env} is not set or empty: export it with the provider's mnemonic "
                f"or hex key, or set [node] key_file instead"
            )
        return _parse_key_text(value, f"environment variable {key_env}", prefix)
    raise KeyLoadError("no provider key configured: set [node] key_file or key_env")


def load_configured_key(node: Any, source: str, prefix: str = BECH32_PREFIX) -> ProviderKey:
    """The key ``[node]`` names (``chain.node_settings.NodeSettings``), as ``run`` and ``check-config`` load it.

    Raises ``ConfigError`` naming the configuration file and the setting, then
    what was wrong with the key's source (never the key).
    """
    setting = "key_file" if node.key_file else "key_env" if node.key_env else "key_file"
    try:
        return load_provider_key(node.key_file, node.key_env, prefix)
    except KeyLoadError as exc:
        raise ConfigError(f"{source}: [node] {setting}: {exc}") from None


def write_key_file(path: str | Path, key: ProviderKey) -> Path:
    """Write ``key`` as hex to a new file created with mode 0600 (refuses to overwrite)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key.signer.private_key_hex + "\n")
    return path
