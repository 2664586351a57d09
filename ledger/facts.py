"""Chain transaction events -> the ledger's per-lease settlement facts.

A withdraw transaction carries one ``provider_withdraw`` event per lease it
settled (``lease_uuid``, ``amount``), and a close one ``lease_closed`` per lease
(``settled_amounts``). These are the only place the chain says how much each
lease paid, which is what a statement sets beside what the lease accrued.

The parsing lives in ``chain.settlements``, shared with the chain clients
(which put a tx's settlements on its ``WithdrawPage``/``CloseOutcome`` for
the actors to forward): one parser, so the ledger's two sources on the
in-process chain agree to the unit and deduplicate on (tx, lease, denom).
This is the ledger's view of it: the settlements of one provider's leases.

Attribute values are untrusted text: an event with a missing lease or an
amount that does not parse is skipped and logged, never fatal.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, Mapping

from chain.settlements import settlements_in_tx
from messages.ledger import LeaseSettled

__all__ = ["settlements_from_tx"]


def settlements_from_tx(
    tx_hash: str,
    at: datetime,
    events: Iterable[tuple[str, Mapping[str, str]]],
    provider_uuid: str,
) -> list[LeaseSettled]:
    """The settlements of ``provider_uuid``'s leases in one transaction included at ``at``."""
    return settlements_in_tx(tx_hash, at, events, provider_uuid=provider_uuid)
