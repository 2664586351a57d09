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


def test_shipped_config_pays_fees_as_the_production_client() -> None:
    n = load_config(ROOT / "config.toml").node
    assert (n.fee_denom, n.gas_price, n.gas_adjustment, n.simulate_gas) == ("umfx", "0.000025", 1.2, 200_000)
    assert load_config().node == n  # the file says what the defaults are


@pytest.mark.parametrize(
    "section,key,value,expected",
    [
        ("scheduler", "withdraw_interval", "soon", r"\[scheduler\] withdraw_interval: expected a duration"),
        ("scheduler", "max_withdraw_iterations", 0, r"\[scheduler\] max_withdraw_iterations: must be at least 1"),
        ("scheduler", "credit_check_error_threshold", "3", r"credit_check_error_threshold: expected a whole number"),
        ("scheduler", "withdraw_intervl", "1h", r"\[scheduler\] unknown key 'withdraw_intervl'"),
        ("provider", "uuid", "not-a-uuid", r"\[provider\] uuid: 'not-a-uuid' is not a lowercase UUID"),
        ("chain", "mode", "mainnet", r"\[chain\] mode: expected one of"),
        ("node", "gas_adjustment", float("nan"), r"\[node\] gas_adjustment: expected a finite number, got nan"),
        ("node", "gas_adjustment", 3.5, r"\[node\] gas_adjustment: must be at most 3.0"),
        ("node", "gas_adjustment", 0.9, r"\[node\] gas_adjustment: must be at least 1.0"),
        ("node", "out_of_gas_multiplier", float("nan"), r"\[node\] out_of_gas_multiplier: expected a finite number"),
        ("node", "gas_price", "NaN", r"\[node\] gas_price: must be a non-negative decimal, got 'NaN'"),
        ("node", "gas_price", "Infinity", r"\[node\] gas_price: must be a non-negative decimal"),
        ("node", "gas_price", "0.025umfx", r"\[node\] gas_price: not a decimal number"),
        ("node", "simulate_gas", 0, r"\[node\] simulate_gas: must be at least 1"),
        ("node", "gas_multiplier", 1.5, r"\[node\] unknown key 'gas_multiplier'"),
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


# -- values that once got past every bound ------------------------------------------------------
MNEMONIC = (
    "economy stock theory fatal elder harbor betray wasp final emotion task crumble "
    "siren bottom lizard educate guess current outdoor pair theory focus wife stone"
)
HEX_KEY = "4f3edf983ac636a65a842ce7c78d9aa706d3b113bce9c46f30d7d21715b23b1d"


@pytest.mark.parametrize(
    "section,key,value",
    [
        ("listener", "backoff_jitter", float("nan")),
        ("node", "gas_adjustment", float("nan")),
        ("demo", "speed", float("nan")),
        ("demo", "speed", float("inf")),
        ("node", "gas_adjustment", float("-inf")),
    ],
)
def test_a_number_that_is_not_finite_is_refused(section: str, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key}: expected a finite number, got (nan|inf|-inf)"):
        load_config(overrides={section: {key: value}})


@pytest.mark.parametrize("value", ["99999999999999999999d", "9999999999999999999999999ms", 1e300, float("inf"), float("nan"), 10**30])
def test_a_duration_too_large_for_any_setting_is_a_clear_error(value: object) -> None:
    with pytest.raises(ConfigError, match=r"\[scheduler\] withdraw_interval: (a duration must be at most 3650d|expected a finite duration)"):
        load_config(overrides={"scheduler": {"withdraw_interval": value}})


def test_parse_duration_never_overflows() -> None:
    with pytest.raises(ValueError, match="at most 3650d"):
        parse_duration("99999999999999999999d")
    assert parse_duration("3650d") == timedelta(days=3650)


def test_a_control_character_in_a_string_is_named_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[ledger]\npath = "books\\u0000.sqlite"\n')
    with pytest.raises(ConfigError, match=r"c.toml: \[ledger\] path: contains a control character \(U\+0000\) at position 5"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"\[chain\] chain_id: contains a control character \(U\+000A\)"):
        load_config(overrides={"chain": {"chain_id": "manifest-1\n"}})


def test_a_file_that_is_not_utf8_or_not_a_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'[chain]\nchain_id = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"c.toml: not UTF-8 text \(byte 23\)"):
        load_config(path)
    with pytest.raises(ConfigError, match="a directory, not a configuration file"):
        load_config(tmp_path)


def test_an_override_of_a_section_the_file_gives_as_a_value_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("demo = 5\n")
    with pytest.raises(ConfigError, match=r"\[demo\] must be a table"):
        load_config(path, {"demo": {"speed": 2.0}})


@pytest.mark.parametrize("secret", [MNEMONIC, HEX_KEY, "0x" + HEX_KEY.upper(), MNEMONIC.replace(" ", "\n")])
@pytest.mark.parametrize(
    "section,key",
    [("node", "key_file"), ("node", "key_env"), ("scheduler", "closure_reason"), ("node", "gas_adjustment"),
     ("scheduler", "max_retries"), ("devnet", "error_rates")],
)
def test_key_material_in_a_setting_is_refused_and_never_echoed(secret: str, section: str, key: str) -> None:
    value: object = [secret] if key == "error_rates" else secret
    with pytest.raises(ConfigError) as info:
        load_config(overrides={section: {key: value}})
    text = str(info.value)
    assert f"[{section}] {key}" in text and "not shown" in text
    for word in ("economy", "crumble", HEX_KEY[:16], HEX_KEY[:16].upper()):
        assert word not in text


def test_an_unknown_key_shaped_like_a_mnemonic_is_not_echoed() -> None:
    with pytest.raises(ConfigError, match="unknown key") as info:
        load_config(overrides={"node": {MNEMONIC: 1}})
    assert "economy" not in str(info.value)


# -- every setting bounded where it is read ---------------------------------------------------------
def test_every_number_and_duration_setting_has_a_maximum() -> None:
    import dataclasses
    import typing

    from runtime.config import sections

    unbounded = [
        f"[{name}] {f.name}"
        for name, cls in sorted(sections().items())
        for f in dataclasses.fields(cls)
        if typing.get_type_hints(cls)[f.name] in (int, float, timedelta) and "max" not in f.metadata
    ]
    assert unbounded == []


def test_the_closure_reason_fits_the_chain() -> None:
    assert load_config(overrides={"scheduler": {"closure_reason": "é" * 128}}).scheduler.closure_reason == "é" * 128
    with pytest.raises(ConfigError, match=r"\[scheduler\] closure_reason: must be at most 256 bytes \(UTF-8\), got 258"):
        load_config(overrides={"scheduler": {"closure_reason": "é" * 129}})
    with pytest.raises(ConfigError, match=r"closure_reason: contains a control character \(U\+0007\)"):
        load_config(overrides={"scheduler": {"closure_reason": "credit\x07depleted"}})


@pytest.mark.parametrize(
    "uuid", ["0b5e3f8e-8c1a-4b7e-9a53-2f6a1c9d4e10\n", "0B5E3F8E-8C1A-4B7E-9A53-2F6A1C9D4E10", "0b5e3f8e8c1a4b7e9a532f6a1c9d4e10"]
)
def test_a_provider_uuid_must_be_exactly_a_lowercase_uuid(uuid: str) -> None:
    with pytest.raises(ConfigError, match=r"\[provider\] uuid: "):
        load_config(overrides={"provider": {"uuid": uuid}})


def test_a_canonical_uuid_v7_is_accepted() -> None:
    v7 = "019bbef3-b000-7001-b950-1b66216ca536"
    assert load_config(overrides={"provider": {"uuid": v7}}).provider.uuid == v7


def test_demo_counts_have_maxima() -> None:
    with pytest.raises(ConfigError, match=r"\[demo\] healthy_tenants: must be at most 10000, got 2147483648"):
        load_config(overrides={"demo": {"healthy_tenants": 2**31}})
    with pytest.raises(ConfigError, match=r"\[demo\] the demo world would have 1,004,000 leases"):
        load_config(overrides={"demo": {"healthy_tenants": 1000, "leases_per_tenant": 1000}})


def test_key_env_names_a_variable_and_chain_id_has_no_spaces() -> None:
    with pytest.raises(ConfigError, match=r"\[node\] key_env: 'my key' is not the name of an environment variable"):
        load_config(overrides={"node": {"key_env": "my key"}})
    with pytest.raises(ConfigError, match=r"\[chain\] chain_id: expected the chain's id without spaces"):
        load_config(overrides={"chain": {"chain_id": "manifest 1"}})
    with pytest.raises(ConfigError, match=r"\[chain\] chain_id: must be at most 50 bytes"):
        load_config(overrides={"chain": {"chain_id": "m" * 51}})
    with pytest.raises(ConfigError, match=r"\[node\] fee_denom: 'u' is not a Cosmos denom"):
        load_config(overrides={"node": {"fee_denom": "u"}})


def test_every_path_resolves_against_the_config_files_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = elsewhere / "config.toml"
    path.write_text('[ledger]\npath = "books/l.sqlite"\n[capture]\ndirectory = "caps"\n[node]\nkey_file = "keys/p.key"\n')
    monkeypatch.chdir(tmp_path)
    c = load_config(Path("elsewhere/config.toml"))
    assert c.ledger.path == str(elsewhere / "books" / "l.sqlite")
    assert c.capture.directory == str(elsewhere / "caps")
    assert c.node.key_file == str(elsewhere / "keys" / "p.key")
    # Left at their defaults, they resolve against the file's folder too; "" stays "none".
    path.write_text('[ledger]\npath = ""\n')
    c = load_config(path)
    assert c.capture.directory == str(elsewhere / "captures") and c.ledger.path == "" and c.node.key_file == ""
    assert load_config(overrides={"ledger": {"path": "~/books.sqlite"}}).ledger.path == str(Path.home() / "books.sqlite")


def test_a_path_may_hold_a_hex_folder_name_but_not_be_a_key() -> None:
    volume = f"/var/lib/docker/volumes/{HEX_KEY}/_data/books.sqlite"
    assert load_config(overrides={"ledger": {"path": volume}}).ledger.path == volume
    with pytest.raises(ConfigError, match=r"\[node\] key_file: \(a value that looks like a private key"):
        load_config(overrides={"node": {"key_file": HEX_KEY}})


def test_with_no_file_the_built_in_defaults_are_the_shipped_config_toml() -> None:
    """An installed package and the binary carry no config.toml: they must run as the checkout does."""
    assert load_config(None).effective() == load_config(ROOT / "config.toml").effective()


def test_the_deployment_example_loads_and_points_at_a_node() -> None:
    c = load_config(ROOT / "deploy" / "config.example.toml")
    assert (c.chain.mode, c.ledger.path, c.log.format) == ("node", "/var/lib/leasewarden/leasewarden.sqlite", "json")


def test_a_relative_tls_ca_file_is_found_beside_the_config_file_not_in_the_working_directory(tmp_path, monkeypatch) -> None:
    """As key_file is: under a service manager the working directory is the service's, not the config's."""
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "node-ca.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (folder / "config.toml").write_text('[node]\ngrpc_url = "grpc+https://node.example:443"\ntls_ca_file = "node-ca.pem"\n')
    elsewhere = tmp_path / "var"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(folder / "config.toml")
    assert config.node.tls_ca_file == str(folder / "node-ca.pem")
