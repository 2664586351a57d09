"""``[listener]``: how the websocket listener keeps its connection to the node alive.

The node's websocket URL is ``[node] websocket_url``; this section holds the
listener's own timings: keepalive (a peer that stops answering pings is
dead), reconnect backoff (1 s doubling to 60 s, with jitter so that many
sidecars cut off by one node restart do not reconnect in lockstep), and how
loudly malformed frames are reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from runtime.config import section, setting

__all__ = ["ListenerSettings"]


@section("listener")
@dataclass(frozen=True)
class ListenerSettings:
    ping_interval: timedelta = setting(
        timedelta(seconds=20), "send a websocket ping this often", min=timedelta(seconds=1), max=timedelta(hours=1)
    )
    ping_timeout: timedelta = setting(
        timedelta(seconds=20), "a ping unanswered this long means the node is dead: reconnect",
        min=timedelta(seconds=1), max=timedelta(hours=1),
    )
    close_timeout: timedelta = setting(
        timedelta(seconds=5), "wait this long for the node to acknowledge a close before cutting the socket",
        min=timedelta(seconds=1), max=timedelta(minutes=5),
    )
    open_timeout: timedelta = setting(
        timedelta(seconds=10), "connecting and having every subscription acknowledged must take less than this",
        min=timedelta(seconds=1), max=timedelta(hours=1),
    )
    backoff_initial: timedelta = setting(
        timedelta(seconds=1), "first reconnect delay, doubled after each failed attempt", min=timedelta(seconds=1),
        max=timedelta(hours=1),
    )
    backoff_max: timedelta = setting(
        timedelta(seconds=60), "reconnect delay cap", min=timedelta(seconds=1), max=timedelta(days=1)
    )
    backoff_jitter: float = setting(
        0.2, "each delay is spread by up to this fraction either way (0: none)", min=0.0, max=1.0
    )
    stable_after: timedelta = setting(
        timedelta(seconds=30),
        "a connection that lasted this long resets the backoff; shorter ones (a flapping node) keep it growing",
        max=timedelta(days=1),
    )
    malformed_log_every: int = setting(
        100, "malformed frames: the first is logged as a warning, then every Nth as an error with the count",
        min=1, max=10**9,
    )
    max_frame_bytes: int = setting(
        4 * 1024 * 1024, "largest websocket message accepted (a 100-lease batch close is ~100 kB)",
        min=64 * 1024, max=1024 * 1024 * 1024,
    )
    dedupe_window: int = setting(
        10_000, "recent txs remembered so an event seen on two subscriptions is delivered once", min=1,
        max=10_000_000,
    )

    def validate(self) -> None:
        if self.backoff_max < self.backoff_initial:
            raise ValueError("backoff_max must not be shorter than backoff_initial")
