"""Shared fixtures: a manual clock, a devnet world, no actor left behind."""

from __future__ import annotations

import pykka
import pytest

import sidecar.settings  # noqa: F401  (every section registered: the tests load config as run.py does)
from runtime.clock import ManualClock, utc


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(utc(2026, 3, 1))


@pytest.fixture
def world():
    """A devnet world for one test (``tests.devnet_harness.make_world()``), closed after it.

    A module with a ``world`` fixture of its own uses that one instead.
    """
    from tests.devnet_harness import make_world  # the devnet and cosmpy: only for the tests that ask

    w = make_world()
    yield w
    w.close()


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
