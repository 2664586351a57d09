"""Shared fixtures: a manual clock, a manual dispatcher, the chain model."""

from __future__ import annotations

import pykka
import pytest

from runtime.clock import ManualClock, utc


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(utc(2026, 3, 1))


@pytest.fixture(autouse=True)
def _no_actor_leaks():
    """Every test ends with no actor left in pykka's (global) registry.

    An actor on a manual dispatcher that nobody drives any more never handles
    its stop; unregistering it keeps a later test's ``stop_all`` from waiting
    on it forever.
    """
    yield
    for ref in pykka.ActorRegistry.get_all():
        try:
            ref.stop(block=False)
        except pykka.ActorDeadError:
            pass
        pykka.ActorRegistry.unregister(ref)
