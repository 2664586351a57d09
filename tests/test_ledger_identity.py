"""A ledger is one chain's, one provider's and one signer's books, and refuses to be another's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger.identity import IdentityMismatch, LedgerIdentity, read_identity
from ledger.store import Ledger, LedgerError
from messages.chain import Lease
from messages.ledger import LeasesReconciled
from runtime.clock import utc

ROOT = Path(__file__).resolve().parent.parent
PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"
OTHER_PROVIDER = "019bbef3-b000-7001-b950-1b66216ca537"
SIGNER = "manifest1pkptre7fdkl6gfrzlesjjvhxhlc3r4gm6595yj"


def created(path: Path) -> None:
    Ledger.open(path, PROVIDER, chain_id="manifest-1", signer=SIGNER).close()


def test_the_first_sidecar_start_records_whose_books_these_are(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    created(path)
    assert read_identity(path) == LedgerIdentity("manifest-1", PROVIDER, SIGNER)
    # The same chain, provider and signer: opens; a command (no key, no signer) too.
    Ledger.open(path, PROVIDER, chain_id="manifest-1", signer=SIGNER).close()
    Ledger.open(path, PROVIDER, chain_id="manifest-1", create=False).close()


@pytest.mark.parametrize(
    "provider, chain_id, signer, differs",
    [
        (PROVIDER, "manifest-testnet", SIGNER, "the chain id ('manifest-1' in the ledger, 'manifest-testnet' configured)"),
        (OTHER_PROVIDER, "manifest-1", SIGNER, f"the provider ({PROVIDER} in the ledger, {OTHER_PROVIDER} configured)"),
        (PROVIDER, "manifest-1", "manifest1other", f"the signer ({SIGNER} in the ledger, manifest1other from the key)"),
        (PROVIDER, "manifest-testnet", "", "the chain id"),
    ],
)
def test_a_ledger_of_another_is_refused_naming_what_differs(tmp_path, provider, chain_id, signer, differs) -> None:
    path = tmp_path / "l.sqlite"
    created(path)
    with pytest.raises(IdentityMismatch) as info:
        Ledger.open(path, provider, chain_id=chain_id, signer=signer)
    text = str(info.value)
    assert differs in text
    assert f"holds the books of chain 'manifest-1', provider {PROVIDER}, signer {SIGNER}" in text
    assert "set [ledger] path to a new file" in text
    assert read_identity(path) == LedgerIdentity("manifest-1", PROVIDER, SIGNER)  # never rewritten


def test_an_older_ledger_is_given_its_identity_unless_it_holds_another_providers_leases(tmp_path) -> None:
    path = tmp_path / "l.sqlite"
    lg = Ledger.open(path, OTHER_PROVIDER)  # as a build before identities (or a test) wrote it
    lg.record(LeasesReconciled(utc(2026, 3, 1), (Lease("la", "manifest1t", OTHER_PROVIDER, ()),)))
    lg.close()
    assert read_identity(path) is None
    with pytest.raises(IdentityMismatch, match=f"provider {OTHER_PROVIDER} \\(its leases are in it\\)"):
        Ledger.open(path, PROVIDER, chain_id="manifest-1", signer=SIGNER)
    Ledger.open(path, OTHER_PROVIDER, chain_id="manifest-1", signer=SIGNER).close()
    assert read_identity(path) == LedgerIdentity("manifest-1", OTHER_PROVIDER, SIGNER)


def test_a_command_never_creates_a_ledger(tmp_path) -> None:
    with pytest.raises(LedgerError, match="no ledger here yet; the sidecar creates it at its first start"):
        Ledger.open(tmp_path / "absent.sqlite", PROVIDER, create=False)
    assert not (tmp_path / "absent.sqlite").exists()


def _node_config(tmp_path: Path, chain_id: str) -> Path:
    key = tmp_path / "provider.key"
    if not key.exists():
        key.write_text("0" * 63 + "1\n")
        key.chmod(0o600)
    conf = tmp_path / "config.toml"
    conf.write_text(
        f'[chain]\nmode = "node"\nchain_id = "{chain_id}"\n[provider]\nuuid = "{PROVIDER}"\n'
        '[node]\nkey_file = "provider.key"\ngrpc_url = "grpc+http://127.0.0.1:1"\nwebsocket_url = "ws://127.0.0.1:1/websocket"\n'
        '[ledger]\npath = "books.sqlite"\n[capture]\nenabled = false\n'
    )
    return conf


def test_run_and_check_config_refuse_another_chains_ledger_in_one_line(tmp_path: Path) -> None:
    from chain.keys import load_provider_key

    signer = load_provider_key(_node_config(tmp_path, "manifest-1").parent / "provider.key").address
    Ledger.open(tmp_path / "books.sqlite", PROVIDER, chain_id="manifest-1", signer=signer).close()
    conf = _node_config(tmp_path, "manifest-testnet")
    for command in (["--duration", "1m"], ["check-config"], ["periods"]):
        out = subprocess.run(
            [sys.executable, str(ROOT / "run.py"), "--config", str(conf), *command],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 2, (command, out.stderr)
        assert out.stderr.count("\n") == 1 and "the chain id ('manifest-1' in the ledger, 'manifest-testnet' configured)" in out.stderr
        assert "Traceback" not in out.stderr
    ok = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--config", str(_node_config(tmp_path, "manifest-1")), "check-config"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert f"ledger: {tmp_path / 'books.sqlite'} (the books of chain 'manifest-1', provider {PROVIDER}, signer {signer})" in ok.stdout
