"""The provider key: loaded from a file or the environment, refused when exposed, never shown."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest
from cosmpy.crypto.address import Address

from chain.keys import KeyLoadError, ProviderKey, load_provider_key, write_key_file

# cosmjs's public test faucet mnemonic and its published address/pubkey
# (m/44'/118'/0'/0/0): a known vector, not a secret.
MNEMONIC = (
    "economy stock theory fatal elder harbor betray wasp final emotion task crumble "
    "siren bottom lizard educate guess current outdoor pair theory focus wife stone"
)
COSMOS_ADDRESS = "cosmos1pkptre7fdkl6gfrzlesjjvhxhlc3r4gmmk8rs6"


def _as_manifest(address: str) -> str:
    return str(Address(Address(address), "manifest"))


def _key_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "provider.key") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_mnemonic_file_derives_the_cosmos_hd_path_address(tmp_path: Path) -> None:
    key = load_provider_key(_key_file(tmp_path, MNEMONIC + "\n"))
    assert key.address == _as_manifest(COSMOS_ADDRESS)
    assert key.address.startswith("manifest1")
    assert load_provider_key(_key_file(tmp_path, MNEMONIC, name="k2"), prefix="cosmos").address == COSMOS_ADDRESS


def test_hex_file_and_env_var_give_the_same_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = ProviderKey.generate()
    path = write_key_file(tmp_path / "k", original)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    from_file = load_provider_key(path)
    assert from_file.address == original.address
    monkeypatch.setenv("LW_TEST_KEY", "0x" + original.signer.private_key_hex.upper())
    assert load_provider_key(key_env="LW_TEST_KEY").address == original.address
    # The loaded key signs what the original's public key verifies.
    assert original.public_key.verify(b"doc", from_file.sign(b"doc"))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o620])
def test_key_file_open_to_group_or_others_is_refused_naming_file_and_mode(tmp_path: Path, mode: int) -> None:
    path = _key_file(tmp_path, MNEMONIC, mode)
    with pytest.raises(KeyLoadError) as info:
        load_provider_key(path)
    text = str(info.value)
    assert str(path) in text
    assert f"{mode:04o}" in text
    assert "chmod 600" in text
    assert "economy" not in text


def test_bad_key_material_is_reported_without_quoting_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Twelve lowercase words, one not in the BIP-39 list: cosmpy's own error would quote it.
    secret_words = "economy stock theory fatal elder harbor betray wasp final emotion task zzzsecretword"
    path = _key_file(tmp_path, secret_words)
    with pytest.raises(KeyLoadError) as info:
        load_provider_key(path)
    assert "zzzsecretword" not in str(info.value)
    assert info.value.__cause__ is None and (info.value.__context__ is None or info.value.__suppress_context__)
    assert str(path) in str(info.value) and "word 12 is not in the BIP-39 English word list" in str(info.value)

    monkeypatch.setenv("LW_TEST_KEY", "not a key at all deadbeef")
    with pytest.raises(KeyLoadError, match="environment variable LW_TEST_KEY") as info:
        load_provider_key(key_env="LW_TEST_KEY")
    assert "deadbeef" not in str(info.value)


def test_missing_or_ambiguous_sources_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyLoadError, match="no provider key configured"):
        load_provider_key()
    with pytest.raises(KeyLoadError, match="not both"):
        load_provider_key(tmp_path / "k", "LW_TEST_KEY")
    with pytest.raises(KeyLoadError, match="no such file"):
        load_provider_key(tmp_path / "absent")
    monkeypatch.delenv("LW_TEST_KEY", raising=False)
    with pytest.raises(KeyLoadError, match="LW_TEST_KEY is not set"):
        load_provider_key(key_env="LW_TEST_KEY")


def test_key_never_shows_in_repr_str_logs_or_pickles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    key = load_provider_key(_key_file(tmp_path, MNEMONIC))
    secret_hex = key.signer.private_key_hex
    secret_b64 = key.signer.private_key
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("loaded %s / %r", key, key)
    for shown in (repr(key), str(key), f"{key}", caplog.text):
        assert key.address in shown
        assert secret_hex not in shown and secret_b64 not in shown
        assert "economy" not in shown
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(key)


def test_write_key_file_refuses_to_overwrite(tmp_path: Path) -> None:
    path = write_key_file(tmp_path / "k", ProviderKey.generate())
    with pytest.raises(FileExistsError):
        write_key_file(path, ProviderKey.generate())
    assert os.stat(path).st_mode & 0o077 == 0


def _swapped(mnemonic: str, i: int, j: int) -> str:
    words = mnemonic.split()
    words[i], words[j] = words[j], words[i]
    return " ".join(words)


def test_a_mnemonic_whose_checksum_is_wrong_is_refused(tmp_path: Path) -> None:
    from chain.keys import mnemonic_problem

    assert mnemonic_problem(MNEMONIC.split()) == ""
    # Two words swapped: every word is in the list, the checksum is not (the vector's first two differ).
    swapped = _swapped(MNEMONIC, 0, 1)
    assert "checksum does not match" in mnemonic_problem(swapped.split())
    path = _key_file(tmp_path, swapped)
    with pytest.raises(KeyLoadError, match="not a valid BIP-39 mnemonic: its checksum does not match") as info:
        load_provider_key(path)
    assert "economy" not in str(info.value) and "stock" not in str(info.value)
    # The standard all-"abandon" vector of 12 words ends in "about" (its checksum word).
    assert mnemonic_problem(["abandon"] * 11 + ["about"]) == ""
    assert "checksum" in mnemonic_problem(["abandon"] * 12)


def test_the_configured_key_error_names_the_file_and_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chain.keys import load_configured_key
    from runtime.config import ConfigError, load_config

    conf = tmp_path / "config.toml"
    key = _key_file(tmp_path, MNEMONIC, 0o644)
    conf.write_text(f'[node]\nkey_file = "{key.name}"\n')
    with pytest.raises(ConfigError, match=rf"config.toml: \[node\] key_file: key file {key} has mode 0644.*chmod 600"):
        load_configured_key(load_config(conf).node, str(conf))
    key.chmod(0o600)
    loaded = load_configured_key(load_config(conf).node, str(conf))
    assert loaded.address == _as_manifest(COSMOS_ADDRESS) and loaded.form == "a 24-word BIP-39 mnemonic"
    monkeypatch.delenv("LW_UNSET_KEY", raising=False)
    conf.write_text('[node]\nkey_env = "LW_UNSET_KEY"\n')
    with pytest.raises(ConfigError, match=r"\[node\] key_env: environment variable LW_UNSET_KEY is not set"):
        load_configured_key(load_config(conf).node, str(conf))
