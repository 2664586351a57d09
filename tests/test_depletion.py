"""Depletion estimates: integer arithmetic, earliest denom, deposits ignored, horizon clamp."""

from __future__ import annotations

from datetime import timedelta

from actors.depletion import DEPLETION_HORIZON, burn_estimate, chain_estimate, earliest
from messages.chain import CreditEstimate
from messages.coins import Coin
from runtime.clock import utc

T0 = utc(2026, 3, 1)


def test_burn_rate_extrapolates_the_earliest_denom() -> None:
    e = burn_estimate({"umfx": 1000, "upwr": 100}, T0, {"umfx": 900, "upwr": 90}, T0 + timedelta(seconds=100))
    # umfx: 900 left at 1/s -> 900 s; upwr: 90 left at 0.1/s -> 900 s; tie -> first seen
    assert e is not None and e.at == T0 + timedelta(seconds=100 + 900) and e.source == "burn rate"
    e = burn_estimate({"umfx": 1000, "upwr": 100}, T0, {"umfx": 900, "upwr": 50}, T0 + timedelta(seconds=100))
    assert e is not None and e.denom == "upwr" and e.at == T0 + timedelta(seconds=200)


def test_deposits_and_unmoved_balances_say_nothing() -> None:
    assert burn_estimate({"umfx": 100}, T0, {"umfx": 500}, T0 + timedelta(seconds=60)) is None
    assert burn_estimate({"umfx": 100}, T0, {"umfx": 100}, T0 + timedelta(seconds=60)) is None
    assert burn_estimate({"umfx": 100}, T0, {"umfx": 50}, T0) is None  # no time passed


def test_integer_arithmetic_rounds_down() -> None:
    e = burn_estimate({"umfx": 10}, T0, {"umfx": 7}, T0 + timedelta(seconds=10))
    assert e is not None and e.at == T0 + timedelta(seconds=10 + 23)  # 7 * 10 // 3 = 23


def test_huge_balance_tiny_burn_is_clamped_not_overflowed() -> None:
    huge = 2**250
    e = burn_estimate({"umfx": huge + 1}, T0, {"umfx": huge}, T0 + timedelta(seconds=1))
    assert e is not None and e.clamped and e.at == T0 + timedelta(seconds=1) + DEPLETION_HORIZON
    est = CreditEstimate("t", (Coin("umfx", huge),), (Coin("umfx", 1),), 2**64 - 1)
    c = chain_estimate(est, T0)
    assert c is not None and c.clamped and c.at == T0 + DEPLETION_HORIZON


def test_chain_estimate_and_earliest() -> None:
    est = CreditEstimate("t", (Coin("umfx", 50), Coin("upwr", 9)), (Coin("umfx", 1), Coin("upwr", 3)), 3)
    c = chain_estimate(est, T0)
    assert c is not None and c.at == T0 + timedelta(seconds=3) and c.denom == "upwr"
    assert chain_estimate(CreditEstimate("t", (), (), 0), T0) is None
    b = burn_estimate({"umfx": 100}, T0, {"umfx": 90}, T0 + timedelta(seconds=10))
    assert earliest(b, c) is c and earliest(None, b) is b and earliest(None, None) is None
