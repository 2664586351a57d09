"""``run.py check-config``: the configuration checked the way ``run`` will use it, and shown.

Loading the file already checks every setting (``runtime.config``). What
the loader cannot check is what only the run touches: the provider key. In
node mode it is loaded here exactly as ``run`` loads it
(``chain.keys.load_configured_key``: the file's permissions, its format,
a mnemonic's BIP-39 checksum) and the address it signs as is printed, so a
key that ``run`` would refuse is refused here, and a key that is not the
provider's shows as the wrong address before anything is signed. Key
material is never printed: ``Config.effective`` leaves secrets out and the
key is shown by its source, its form and its address.

The ledger is checked the way ``run`` opens it, without writing to it: one
that holds another chain's, provider's or signer's books is refused here
too (``ledger.identity``).
"""

from __future__ import annotations

from typing import IO, Any

from chain.keys import load_configured_key
from ledger.identity import IdentityMismatch, LedgerIdentity, differences, read_identity
from ledger.settings import ledger_path
from runtime.config import ConfigError

__all__ = ["check_config"]


def check_config(config: Any, out: IO[str]) -> int:
    """Print every setting in force, then the provider key's source and address. Returns 0.

    Raises ``ConfigError`` when the key cannot be loaded (the caller prints it).
    """
    key_line, signer = _key_line(config)
    ledger_line = _ledger_line(config, signer)
    out.write(f"{config.source}: ok\n")
    for name, values in config.effective().items():
        out.write(f"[{name}]\n")
        for key, value in values.items():
            out.write(f"  {key} = {value!r}\n")
    out.write(f"{key_line}\n{ledger_line}\n")
    return 0


def _key_line(config: Any) -> tuple[str, str]:
    """The key's line, and the address it signs as ("" on an embedded chain)."""
    if config.chain.mode != "node":
        return (
            f"provider key: the embedded chain's own, made at start (mode = {config.chain.mode!r}; "
            f"[node] key_file and key_env are read with mode = \"node\")"
        ), ""
    key = load_configured_key(config.node, config.source)
    return f"provider key: {key.source} ({key.form}), signs as {key.address}", key.address


def _ledger_line(config: Any, signer: str) -> str:
    path = ledger_path(config.ledger)
    if path is None:
        return "ledger: none kept ([ledger] path is empty)"
    if config.chain.mode != "node":
        return f"ledger: a new one beside {path} at each start (an embedded chain lives one run)"
    if path.exists() and not path.is_file():
        raise ConfigError(f"{config.source}: [ledger] path: {path} is not a file: expected the ledger's SQLite file")
    stored = read_identity(path)
    if stored is None:
        return f"ledger: {path} ({'no identity recorded yet' if path.exists() else 'created at the first start'})"
    different = differences(stored, LedgerIdentity(config.chain.chain_id, config.provider.uuid, signer))
    if different:
        raise IdentityMismatch(str(path), stored.describe(), different)
    return f"ledger: {path} (the books of {stored.describe()})"
