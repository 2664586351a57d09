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
"""

from __future__ import annotations

from typing import IO, Any

from chain.keys import load_configured_key

__all__ = ["check_config"]


def check_config(config: Any, out: IO[str]) -> int:
    """Print every setting in force, then the provider key's source and address. Returns 0.

    Raises ``ConfigError`` when the key cannot be loaded (the caller prints it).
    """
    key_line = _key_line(config)
    out.write(f"{config.source}: ok\n")
    for name, values in config.effective().items():
        out.write(f"[{name}]\n")
        for key, value in values.items():
            out.write(f"  {key} = {value!r}\n")
    out.write(f"{key_line}\n")
    return 0


def _key_line(config: Any) -> str:
    if config.chain.mode != "node":
        return (
            f"provider key: the embedded chain's own, made at start (mode = {config.chain.mode!r}; "
            f"[node] key_file and key_env are read with mode = \"node\")"
        )
    key = load_configured_key(config.node, config.source)
    return f"provider key: {key.source} ({key.form}), signs as {key.address}"
