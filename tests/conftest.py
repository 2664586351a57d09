"""Shared fixtures: a manual clock, a devnet world, no actor left behind."""

from __future__ import annotations

import pykka
import pytest

import sidecar.settings  # noqa: F401  (every section registered: the tests load config as run.py does)
from runtime.clock import ManualClock, utc


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(utc(2026, 3, 1))


@pytest.fixture(scope="module", params=["current", "v2.1"])
def chain_version(request):
    """Runs the module's tests once per chain version (CHAIN-VERSIONS.md): the worlds they build are of it.

    Module-scoped, so a module's shared worlds (module fixtures) are built
    once per version too. A test marked ``@pytest.mark.xfail_on("v2.1",
    fact="2.1", reason=...)`` is expected to fail (strictly) on that
    version: what the sidecar does not yet do right there, named by the
    fact it gets wrong.
    """
    from tests.support import use_chain_version

    token = use_chain_version(request.param)
    yield request.param
    token.var.reset(token)


def pytest_collection_modifyitems(items):
    """A test's ``xfail_on`` marks, made strict xfails of the versions they name.

    Done at collection, not in a fixture, so that a failure while a
    module's shared world is built (setup) counts as the expected failure too.
    """
    for item in items:
        version = getattr(item, "callspec", None) and item.callspec.params.get("chain_version")
        if not version:
            continue
        for mark in item.iter_markers("xfail_on"):
            if version in mark.args:
                fact = mark.kwargs.get("fact", "?")
                item.add_marker(
                    pytest.mark.xfail(strict=True, reason=f"{version}: fact {fact}: {mark.kwargs.get('reason', '')}")
                )


@pytest.fixture
def world():
    """A devnet world for one test (``tests.devnet_harness.make_world()``), closed after it.

    A module with a ``world`` fixture of its own uses that one instead.
    """
    from tests.devnet_harness import make_world  # the devnet and cosmpy: only for the tests that ask

    w = make_world()
    yield w
    w.close()


@pytest.fixture
def raw(world):
    """Plain gRPC stubs and a hand signer for ``world``'s provider account (``tests.devnet_harness.Raw``)."""
    from tests.devnet_harness import Raw

    r = Raw(world)
    yield r
    r.close()


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
