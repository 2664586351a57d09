"""``[provider]`` and ``[chain]``: who the sidecar is, and on which chain.

The provider UUID is what the sidecar withdraws for, subscribes to and
keeps books under; the chain's mode picks the chain it talks to (the
in-process model, the embedded devnet or a real node) and its id is what
transactions are signed for. Both are facts about the chain, so they sit in
``chain/``, below every part that reads them (actors, ledger, devnet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.config import section, setting

__all__ = ["ProviderSettings", "ChainSettings", "UUID_RE"]

#: Provider UUIDs are interpolated into websocket queries: only this shape
#: passes, the whole value (``\Z``: ``$`` would let a trailing newline through,
#: and the run would pass ``check-config`` to fail after creating its ledger).
UUID_RE = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")

#: CometBFT refuses a longer chain id (``MaxChainIDLen``).
MAX_CHAIN_ID_BYTES = 50


@section("provider")
@dataclass(frozen=True)
class ProviderSettings:
    uuid: str = setting("019bbef3-b000-7001-b950-1b66216ca536", "our provider UUID (its account is the signing key's)")

    def validate(self) -> None:
        if not UUID_RE.match(self.uuid):
            raise ValueError(
                f"uuid: {self.uuid!r} is not a lowercase UUID (expected 8-4-4-4-12 hex digits, "
                f"e.g. 019bbef3-b000-7001-b950-1b66216ca536)"
            )


@section("chain")
@dataclass(frozen=True)
class ChainSettings:
    # devnet by default: with no config file at all (an installed package, the binary) the
    # sidecar runs the demo on the embedded devnet, as the shipped config.toml does.
    mode: str = setting(
        "devnet",
        "model: in-process chain model; devnet: embedded devnet over gRPC+websocket; node: a real node",
        choices=("model", "devnet", "node"),
    )
    chain_id: str = setting(
        "leasewarden-devnet", "chain id transactions are signed for", max_bytes=MAX_CHAIN_ID_BYTES
    )

    def validate(self) -> None:
        if not self.chain_id or any(ch.isspace() for ch in self.chain_id):
            raise ValueError(f"chain_id: expected the chain's id without spaces, e.g. manifest-1, got {self.chain_id!r}")
