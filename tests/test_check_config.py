"""``run.py check-config``: checks the provider key the way ``run`` loads it, and never shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

import run

MNEMONIC = (
    "economy stock theory fatal elder harbor betray wasp final emotion task crumble "
    "siren bottom lizard educate guess current outdoor pair theory focus wife stone"
)
ADDRESS = "manifest1pkptre7fdkl6gfrzlesjjvhxhlc3r4gm6595yj"  # the cosmjs faucet vector's, as manifest


def node_config(tmp_path: Path, node: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f'[chain]\nmode = "node"\nchain_id = "manifest-1"\n[node]\n{node}\n')
    return path


def check(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[int, str, str]:
    code = run.main(["--config", str(config), "check-config"])
    out, err = capsys.readouterr()
    return code, out, err


def key_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("provider key: ")]
    return line


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "provider.key"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_a_good_key_file_prints_its_address_and_never_the_key(tmp_path, capsys) -> None:
    key_file(tmp_path, MNEMONIC)
    code, out, err = check(capsys, node_config(tmp_path, 'key_file = "provider.key"'))
    assert code == 0, err
    assert key_line(out) == (
        f"provider key: key file {tmp_path / 'provider.key'} (a 24-word BIP-39 mnemonic), signs as {ADDRESS}"
    )
    for word in ("economy", "crumble", "lizard", "stone"):
        assert word not in out and word not in err


def test_a_hex_key_in_the_environment_prints_its_address(tmp_path, capsys, monkeypatch) -> None:
    from chain.keys import ProviderKey

    key = ProviderKey.generate()
    monkeypatch.setenv("LW_CHECK_KEY", key.signer.private_key_hex)
    code, out, _ = check(capsys, node_config(tmp_path, 'key_env = "LW_CHECK_KEY"'))
    assert code == 0
    assert key_line(out) == f"provider key: environment variable LW_CHECK_KEY (a hex private key), signs as {key.address}"
    assert key.signer.private_key_hex not in out


def _swapped(text: str) -> str:
    words = text.split()
    words[0], words[1] = words[1], words[0]
    return " ".join(words)


@pytest.mark.parametrize(
    "setup, node, expected",
    [
        (lambda d: key_file(d, MNEMONIC, 0o644), 'key_file = "provider.key"', "has mode 0644: it is readable or writable by group or others; run `chmod 600"),
        (lambda d: None, 'key_file = "provider.key"', "provider.key: no such file"),
        (lambda d: key_file(d, MNEMONIC.replace("crumble", "crumbel")), 'key_file = "provider.key"', "word 12 is not in the BIP-39 English word list"),
        (lambda d: key_file(d, _swapped(MNEMONIC)), 'key_file = "provider.key"', "its checksum does not match"),
        (lambda d: None, 'key_env = "LW_SURELY_UNSET_KEY"', "[node] key_env: environment variable LW_SURELY_UNSET_KEY is not set"),
        (lambda d: None, "", "[node] key_file: no provider key configured: set [node] key_file or key_env"),
    ],
)
def test_a_key_run_would_refuse_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, setup, node, expected) -> None:
    monkeypatch.delenv("LW_SURELY_UNSET_KEY", raising=False)
    setup(tmp_path)
    code, out, err = check(capsys, node_config(tmp_path, node))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'config.toml'}: [node] key_")
    assert expected in err
    assert "economy" not in err and "crumbel" not in err


def test_on_an_embedded_chain_no_key_file_is_read(capsys) -> None:
    code, out, _ = check(capsys, Path(run.DEFAULT_CONFIG))
    assert code == 0
    assert key_line(out).startswith("provider key: the embedded chain's own")
