"""``run.py doctor``: check a configuration against its node before a first start.

With ``[chain] mode = "node"`` it checks the node of ``[node]``; with
``"devnet"`` it starts the embedded devnet (the demo's world) and checks
that, which shows what a healthy node answers. The checks are
``chain.doctor``'s; one line each, exit status 0 when all pass, 1 when one
fails, 2 for a configuration that cannot be checked.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from runtime.clock import RealClock
from runtime.config import Config
from runtime.urls import shown_url

__all__ = ["add_command"]


def add_command(subparsers: Any, load_config: Callable[[str], Config]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor",
        help="check the configuration against its node: endpoints, chain id, sync, tx index, read heights, key, account, provider, fee, websocket",
        description=(
            "Check the configuration against the node it names, one line per check: the gRPC endpoint answers, "
            "its chain id is [chain] chain_id, it is synced, it keeps a tx index, its answers carry the height they "
            "were read at, the provider key loads and its account exists, "
            "[provider] uuid is registered to that account, a MsgWithdraw simulates with the configured fee "
            "(and the gas price is at least the node's minimum), and the websocket accepts the provider's "
            "subscriptions. Nothing is broadcast. With [chain] mode = \"devnet\" the embedded devnet is started "
            "and checked. Exit status: 0 all pass, 1 a check failed, 2 a configuration that cannot be checked."
        ),
    )
    p.set_defaults(func=lambda args: run(load_config(args.config)))
    return p


def run(config: Config) -> int:
    from chain.doctor import NodeDoctor

    mode = config.chain.mode
    if mode == "model":
        print(f"error: {config.source}: [chain] mode is \"model\" (the in-process chain): there is no node to check",
              file=sys.stderr)
        return 2
    closers: list[Callable[[], None]] = []
    node = config.node
    try:
        if mode == "devnet":
            from sidecar.runner import demo_devnet

            clock = RealClock(speed=config.demo.speed)
            closers.append(clock.close)
            _, devnet, _ = demo_devnet(config, clock)
            closers.append(devnet.stop)
            print(f"checking the embedded devnet ([chain] mode = \"devnet\"): {shown_url(devnet.grpc_url)}, {shown_url(devnet.websocket_url)}")
            where: dict[str, Any] = dict(
                grpc_url=devnet.grpc_url, websocket_url=devnet.websocket_url,
                key_file=str(devnet.provider_key_file), now=clock.now,
            )
        else:
            print(f"checking the node of {config.source}: {shown_url(node.grpc_url)}, {shown_url(node.websocket_url)}")
            where = dict(grpc_url=node.grpc_url, websocket_url=node.websocket_url, now=lambda: datetime.now(timezone.utc))
        checks = NodeDoctor(
            node=node, chain_id=config.chain.chain_id, provider_uuid=config.provider.uuid,
            max_node_lag=config.scheduler.max_node_lag, open_timeout=config.listener.open_timeout.total_seconds(),
            **where,
        ).run()
    finally:
        for close in reversed(closers):
            close()
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    print("all checks passed" if not failed else f"{len(failed)} of {len(checks)} checks did not pass: {', '.join(failed)}")
    return 0 if not failed else 1
