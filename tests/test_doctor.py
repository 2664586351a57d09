"""``run.py doctor`` against the devnet: each check passes on a healthy node and names what is wrong on a bad one."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from chain.doctor import NodeDoctor, min_gas_prices
from tests.devnet_harness import OTHER_PROVIDER, PROVIDER, World, make_world

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def world():
    w = make_world(websocket=True)
    yield w
    w.close()


def doctor(w: World, **changes) -> dict[str, tuple[bool | None, str]]:  # type: ignore[no-untyped-def]
    node = dataclasses.replace(w.config.node, **changes.pop("node", {}))
    args = dict(
        node=node, grpc_url=w.devnet.grpc_url, websocket_url=w.devnet.websocket_url,
        key_file=str(w.devnet.provider_key_file), chain_id=w.config.chain.chain_id, provider_uuid=PROVIDER,
        max_node_lag=w.config.scheduler.max_node_lag, now=w.clock.now, open_timeout=3.0,
    )
    args.update(changes)
    return {c.name: (c.ok, c.detail) for c in NodeDoctor(**args).run()}


def test_a_healthy_node_passes_every_check_and_the_key_is_never_shown(world: World) -> None:
    checks = doctor(world)
    assert list(checks) == [
        "grpc", "chain id", "synced", "tx index", "read heights", "key", "account", "provider", "fee", "websocket"
    ]
    assert all(ok for ok, _ in checks.values()), checks
    assert checks["provider"][1].startswith(f"{PROVIDER} is registered to {world.devnet.provider_address}, active")
    assert "the node's minimum is 0.000025umfx" in checks["fee"][1]
    secret = world.devnet.provider_key_file.read_text().strip()
    assert not any(secret in detail for _, detail in checks.values())


def test_what_is_wrong_is_named_check_by_check(world: World) -> None:
    checks = doctor(world, chain_id="manifest-1", provider_uuid=OTHER_PROVIDER, node={"gas_price": "0.00001"})
    assert checks["chain id"] == (False, "the node is on 'leasewarden-devnet', [chain] chain_id is 'manifest-1'")
    assert checks["provider"][0] is False and "is registered to manifest1" in checks["provider"][1]
    assert checks["fee"] == (False, "[node] gas_price 0.00001 is below the node's minimum 0.000025umfx: every tx would be refused")
    world.node.set_catching_up(True)
    assert doctor(world)["synced"][0] is False
    world.node.set_catching_up(False)
    stale = doctor(world, now=lambda: world.clock.now().replace(year=2027))
    assert stale["synced"][0] is False and "more than [scheduler] max_node_lag" in stale["synced"][1]
    world.node.set_tx_index("null")
    assert doctor(world)["tx index"][0] is False and "keeps no tx index" in doctor(world)["tx index"][1]
    world.node.set_tx_index("kv")
    assert doctor(world)["read heights"][0] is True
    world.devnet.faults.height_header = False  # a proxy in front of the node that drops the header
    heights = doctor(world)["read heights"]
    assert heights[0] is False and "carry no x-cosmos-block-height header" in heights[1]


def test_an_unreachable_node_fails_and_skips_what_needs_it(world: World, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    checks = doctor(world, grpc_url=f"grpc+http://127.0.0.1:{port}", websocket_url=f"ws://127.0.0.1:{port}/websocket",
                    node={"query_timeout": timedelta(seconds=1)})
    assert checks["grpc"][0] is False and "does not answer (UNAVAILABLE" in checks["grpc"][1]
    assert [checks[n][0] for n in ("chain id", "synced", "tx index", "read heights", "account", "provider", "fee")] == [None] * 7
    assert checks["key"][0] is True and checks["websocket"][0] is False
    missing = doctor(world, key_file=str(tmp_path / "nope.key"))
    assert missing["key"][0] is False and "nope.key" in missing["key"][1] and missing["account"][0] is None


def test_the_command_prints_one_line_per_check_and_exits_non_zero_on_a_failure(world: World, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[chain]\nmode = "node"\nchain_id = "not-this-chain"\n[provider]\nuuid = "{PROVIDER}"\n'
        f'[node]\ngrpc_url = "{world.devnet.grpc_url}"\nwebsocket_url = "{world.devnet.websocket_url}"\n'
        f'key_file = "{world.devnet.provider_key_file}"\n'
    )
    out = subprocess.run([sys.executable, str(ROOT / "run.py"), "--config", str(config), "doctor"],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    assert len([line for line in lines if line.startswith(("ok  ", "FAIL", "skip"))]) == 10
    assert "FAIL  chain id: the node is on 'leasewarden-devnet', [chain] chain_id is 'not-this-chain'" in lines
    # by the wall clock a node mode doctor goes by, the world's blocks (on its manual clock, in March 2026) are old
    assert lines[-1] == "2 of 10 checks did not pass: chain id, synced"


def test_min_gas_prices_reads_a_nodes_list() -> None:
    assert min_gas_prices("0.01umfx, 0.5upwr") == {"umfx": Decimal("0.01"), "upwr": Decimal("0.5")}
    assert min_gas_prices("") == {}


def test_the_devnet_answers_a_provider_by_uuid_as_the_chain_does(world: World) -> None:
    import grpc

    from chain.sku_pb import query_pb2, query_pb2_grpc

    with grpc.insecure_channel(world.devnet.grpc_url.removeprefix("grpc+http://")) as channel:
        stub = query_pb2_grpc.QueryStub(channel)
        found = stub.Provider(query_pb2.QueryProviderRequest(uuid=OTHER_PROVIDER), timeout=5).provider
        assert (found.uuid, found.address, found.active) == (OTHER_PROVIDER, world.model.provider(OTHER_PROVIDER)[0], True)
        for uuid, code in (("", grpc.StatusCode.INVALID_ARGUMENT), ("019bbef3-b000-7e2a-8d41-5c0f9b3a7e61", grpc.StatusCode.NOT_FOUND)):
            with pytest.raises(grpc.RpcError) as info:
                stub.Provider(query_pb2.QueryProviderRequest(uuid=uuid), timeout=5)
            assert info.value.code() == code
