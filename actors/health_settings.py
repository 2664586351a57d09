"""``[health]``: how often the health actor asks the node whether it answers and is synced.

``/readyz`` says the chain is reachable and the node synced only from an
answer it has seen: one ``node_check_interval`` is how stale that answer
may be. A node whose latest block is older than ``[scheduler]
max_node_lag`` counts as not synced, as it does before a closure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["HealthSettings"]


@section("health")
@dataclass(frozen=True)
class HealthSettings:
    node_check_interval: timedelta = setting(
        timedelta(seconds=30), "ask the node's status this often (clock time) for /readyz and the node metrics",
        min=timedelta(seconds=1), max=timedelta(days=1),
    )
