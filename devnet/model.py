"""The embedded chain's billing model, as ``[devnet]`` configures it.

Both embedded modes (``model``: in-process; ``devnet``: behind gRPC and the
websocket) run the same ``chain.model.BillingModel``; this is where its
chain version and billing params come from the configuration, once.
"""

from __future__ import annotations

from typing import Any

from chain.model import BillingModel, ChainParams
from chain.versions import chain_version
from runtime.clock import Clock

__all__ = ["new_model"]


def new_model(config: Any, clock: Clock) -> BillingModel:
    """A model of the chain ``[devnet] chain_version`` names, with ``[devnet]``'s billing params."""
    settings = config.devnet
    return BillingModel(
        clock,
        config.chain.chain_id,
        version=chain_version(settings.chain_version),
        params=ChainParams(
            min_lease_duration=int(settings.min_lease_duration.total_seconds()),
            pending_timeout=int(settings.pending_timeout.total_seconds()),
        ),
    )
