"""config.toml: defaults from the seed, and errors that name the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from runtime.config import ConfigError, load_config, parse_duration

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_config_loads_with_the_seed_defaults() -> None:
    c = load_config(ROOT / "config.toml")
    s = c.scheduler
    assert s.withdraw_interval == timedelta(hours=1)
    assert s.check_interval == timedelta(hours=1)  # 0 means equal to withdraw_interval
    assert s.max_withdraw_iterations == 100
    assert s.credit_check_error_threshold == 3
    assert s.credit_check_retry_interval == timedelta(seconds=30)
    assert s.credit_check_zero_grace_period == timedelta(minutes=5)
    assert s.depletion_check_buffer == timedelta(seconds=10)
    assert (s.max_retries, s.initial_backoff, s.max_backoff) == (3, timedelta(seconds=1), timedelta(seconds=10))


@pytest.mark.parametrize(
    "section,key,value,expected",
    [
        ("scheduler", "withdraw_interval", "soon", r"\[scheduler\] withdraw_interval: expected a duration"),
        ("scheduler", "max_withdraw_iterations", 0, r"\[scheduler\] max_withdraw_iterations: must be at least 1"),
        ("scheduler", "credit_check_error_threshold", "3", r"credit_check_error_threshold: expected a whole number"),
        ("scheduler", "withdraw_intervl", "1h", r"\[scheduler\] unknown key 'withdraw_intervl'"),
        ("provider", "uuid", "not-a-uuid", r"\[provider\] uuid: 'not-a-uuid' is not a lowercase UUID"),
        ("chain", "mode", "mainnet", r"\[chain\] mode: expected one of"),
    ],
)
def test_bad_values_fail_at_start_naming_the_key(section: str, key: str, value: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config(overrides={section: {key: value}})


def test_unknown_section_and_bad_toml_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text("[schedular]\nwithdraw_interval = '1h'\n")
    with pytest.raises(ConfigError, match=r"c.toml: unknown section \[schedular\]"):
        load_config(bad)
    bad.write_text("[scheduler\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_durations() -> None:
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("0") == timedelta(0)
    assert parse_duration(45) == timedelta(seconds=45)
    with pytest.raises(ValueError):
        parse_duration("-5s")
    with pytest.raises(ValueError):
        parse_duration("5 parsecs")


def test_durations_print_back_exactly() -> None:
    from runtime.config import format_duration

    for text in ("1h30m", "200ms", "1s500ms", "2d", "0s"):
        assert format_duration(parse_duration(text)) == text


def test_with_no_file_the_built_in_defaults_are_the_shipped_config_toml() -> None:
    """An installed package and the binary carry no config.toml: they must run as the checkout does."""
    assert load_config(None).effective() == load_config(ROOT / "config.toml").effective()


def test_the_deployment_example_loads_and_points_at_a_node() -> None:
    c = load_config(ROOT / "deploy" / "config.example.toml")
    assert (c.chain.mode, c.ledger.path, c.log.format) == ("node", "/var/lib/leasewarden/leasewarden.sqlite", "json")
