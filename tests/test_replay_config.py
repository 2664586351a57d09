"""The configuration a replay rebuilds from a capture: what it keeps, leaves out and overrides."""

from __future__ import annotations

import pytest

from replay.config import node_files_left_out, replay_config
from runtime.config import ConfigError
import sidecar.settings  # noqa: F401  (every section registered)

#: A production run's [node]: TLS with a CA file, and the files that machine had.
CAPTURED_NODE = {
    "grpc_url": "grpc+https://node.example:443",
    "tls_ca_file": "/etc/leasewarden/no-such-ca.pem",
    "devnet_clock": "/var/lib/leasewarden/no-such-clock.json",
    "page_size": 250,
}


def test_the_files_that_reached_the_node_are_left_out_with_a_notice() -> None:
    config, notices = replay_config({"node": dict(CAPTURED_NODE)})
    assert config.node.tls_ca_file == "" and config.node.devnet_clock == ""
    assert config.node.page_size == 250 and config.node.grpc_url == CAPTURED_NODE["grpc_url"]
    left_out = [n for n in notices if "a replay reaches no node" in n]
    assert len(left_out) == 2
    assert any("[node] tls_ca_file = '/etc/leasewarden/no-such-ca.pem' left out" in n for n in left_out)


def test_an_empty_captured_file_setting_says_nothing() -> None:
    _, notices = replay_config({"node": {"tls_ca_file": "", "devnet_clock": ""}})
    assert notices == []


def test_an_override_still_sets_a_node_file_and_it_is_checked() -> None:
    with pytest.raises(ConfigError, match="tls_ca_file .*no such file"):
        replay_config({"node": dict(CAPTURED_NODE)}, {"node": {"tls_ca_file": "/no/such/ca.pem"}})


def test_values_from_an_operators_config_are_named_so_in_the_notices() -> None:
    _, notices = replay_config({"node": dict(CAPTURED_NODE)}, {"scheduler": {"dry_run": True}}, origin="configured")
    assert any(n.startswith("configured setting [node] tls_ca_file = ") for n in notices)
    assert not any(n.startswith("captured") for n in notices)


def test_a_config_files_node_files_get_the_captured_ones_notice_unless_set_again(tmp_path) -> None:
    """--with-config: the file's CA file and clock file are left out (``without_node_files``), and said so."""
    prod = tmp_path / "prod.toml"
    prod.write_text("[node]\n" + "".join(f"{k} = {v!r}\n" for k, v in CAPTURED_NODE.items()).replace("'", '"'))
    _, captured = replay_config({"node": dict(CAPTURED_NODE)}, origin="configured")
    assert node_files_left_out(str(prod)) == [n for n in captured if "a replay reaches no node" in n]
    assert len(node_files_left_out(str(prod))) == 2
    again = node_files_left_out(str(prod), {"node": {"tls_ca_file": "/etc/ssl/ca.pem"}})
    assert len(again) == 1 and "devnet_clock" in again[0]
    prod.write_text('[node]\ntls_ca_file = "certs/ca.pem"\n')  # relative: told as resolved, as a capture holds it
    assert node_files_left_out(str(prod)) == [
        f"configured setting [node] tls_ca_file = '{tmp_path.resolve() / 'certs' / 'ca.pem'}' left out: "
        "a replay reaches no node"]
    prod.write_text('[node]\ntls_ca_file = ""\n')
    assert node_files_left_out(str(prod)) == []
    prod.write_text("[node\n")  # not TOML: the loader, which reads it first, reports that
    assert node_files_left_out(str(prod)) == []
