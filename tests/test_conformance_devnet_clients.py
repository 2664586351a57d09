"""Conformance, the issue's "done when" checks: the devnet of each chain version serves clients that are not ours.

- ``python3 run.py devnet --chain-version v2.1`` (and ``current``) starts,
  prints its endpoints and the version it behaves as, and exits 0 after
  ``--duration``;
- a plain cosmpy ``LedgerClient`` (none of leasewarden's client code, only
  the billing ``MsgWithdraw`` proto class) reads the provider's account and
  broadcasts a provider-wide withdraw through cosmpy's default gas path,
  which simulates and reads the block gas limit from
  ``cosmos.consensus.v1.Query/Params``, and sees it succeed.

Each runs once per chain version.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chain.billing_pb.tx_pb2 import MsgWithdraw
from chain.keys import load_provider_key
from cosmpy.aerial.client import LedgerClient, NetworkConfig
from cosmpy.aerial.client.utils import prepare_and_broadcast_basic_transaction
from cosmpy.aerial.tx import Transaction
from cosmpy.aerial.wallet import LocalWallet
from tests.devnet_harness import PROVIDER, World

#: Every test here runs on both chain versions (CHAIN-VERSIONS.md).
pytestmark = pytest.mark.usefixtures("chain_version")

ROOT = Path(__file__).resolve().parent.parent


def test_run_py_devnet_starts_as_the_chain_version_asked_for(chain_version: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "--config", str(ROOT / "config.toml"), "devnet",
         "--chain-version", chain_version, "--duration", "1s"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    label = "v2.1.0" if chain_version == "v2.1" else "current"
    assert f"behaving as the {label} chain" in out.stdout
    assert "  gRPC:              grpc+http://127.0.0.1:" in out.stdout
    assert "  websocket:         ws://127.0.0.1:" in out.stdout
    assert f"  provider:          {PROVIDER} (manifest1" in out.stdout


def test_a_plain_cosmpy_ledger_client_withdraws_on_the_devnet(world: World) -> None:
    tenant = world.tenant("t")
    world.lease(tenant, price=4)
    world.clock.advance(60)
    config = NetworkConfig(
        chain_id=world.devnet.chain_id,
        url=world.devnet.grpc_url,
        fee_minimum_gas_price=float(world.config.devnet.min_gas_price),
        fee_denomination="umfx",
        staking_denomination="umfx",
    )
    client = LedgerClient(config, query_interval_secs=0.02, query_timeout_secs=10)  # type: ignore[arg-type]
    wallet = LocalWallet(load_provider_key(world.devnet.provider_key_file).signer, prefix="manifest")
    account = client.query_account(wallet.address())
    assert (str(account.address), account.sequence) == (world.devnet.provider_address, 0)

    tx = Transaction()
    tx.add_message(MsgWithdraw(sender=str(wallet.address()), provider_uuid=PROVIDER))
    submitted = prepare_and_broadcast_basic_transaction(client, tx, wallet)  # simulate, then the fee from the gas
    submitted.wait_to_complete()

    assert submitted.response is not None and submitted.response.code == 0, submitted.response
    assert {e for e in submitted.response.events} >= {"batch_withdraw"}
    assert world.model.balance(tenant) == {"umfx": 10**9 - 4 * (60 + 5)}  # settled to the including block
    assert client.query_account(wallet.address()).sequence == 1
    calls = world.devnet.faults.calls
    assert calls.get("Simulate", 0) >= 1 and calls.get("Params", 0) >= 1  # cosmpy's own gas estimate
