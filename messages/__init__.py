"""Typed messages: every value that crosses an actor boundary.

Every message type is a ``messages.codec.Message`` subclass; importing this
package imports them all, so ``messages.codec.registry()`` is complete once
``messages`` is imported.
"""

from messages import chain, chain_actor, coins, credit, health, lease_events, ledger, scheduler, tx_cost  # noqa: F401
from messages.codec import (  # noqa: F401
    CodecError,
    NewerSchemaVersion,
    UnknownMessageType,
    decode,
    encode,
    Message,
    registry,
    to_plain,
)
from messages.coins import Coin  # noqa: F401
