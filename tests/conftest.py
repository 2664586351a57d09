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
    """Every test starts and ends with no live actor."""
    yield
    pykka.ActorRegistry.stop_all(block=False)
