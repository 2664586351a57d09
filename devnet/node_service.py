"""The devnet's ``cosmos.base.node.v1beta1.Service/Config``: the node's minimum gas price.

A node says what fee per gas it takes (``minimum_gas_price``, e.g.
``0.01umfx``); ``run.py doctor`` compares the configured gas price with
it, since a simulation alone never checks the fee.
"""

from __future__ import annotations

import grpc

from cosmpy.protos.cosmos.base.node.v1beta1 import query_pb2, query_pb2_grpc
from devnet.node import DevnetNode

__all__ = ["NodeConfig", "add_to_server"]


class NodeConfig(query_pb2_grpc.ServiceServicer):
    def __init__(self, node: DevnetNode) -> None:
        self.node = node

    def Config(self, request, context):  # noqa: N802 (the gRPC method's name)
        return query_pb2.ConfigResponse(minimum_gas_price=f"{self.node.min_gas_price}{self.node.fee_denom}")


def add_to_server(node: DevnetNode, server: grpc.Server) -> None:
    query_pb2_grpc.add_ServiceServicer_to_server(NodeConfig(node), server)
