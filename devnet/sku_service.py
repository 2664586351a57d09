"""The devnet's ``liftedinit.sku.v1.Query``: a provider by UUID, as the chain's provider registry answers it.

Answered from the billing model's registered providers
(``BillingModel.provider``): the management address, the payout address,
active. As on the chain, an empty ``uuid`` is ``INVALID_ARGUMENT`` and any
other key that is not registered is ``NOT_FOUND``. ``run.py doctor`` asks
it whether the configured provider is registered to the key's account.
"""

from __future__ import annotations

import grpc

from chain.sku_pb import query_pb2, query_pb2_grpc
from devnet.node import DevnetNode

__all__ = ["SkuQuery", "add_to_server"]


class SkuQuery(query_pb2_grpc.QueryServicer):
    def __init__(self, node: DevnetNode) -> None:
        self.model = node.model

    def Provider(self, request, context):  # noqa: N802 (the gRPC method's name)
        if not request.uuid:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "uuid cannot be empty")
        try:
            address, payout = self.model.provider(request.uuid)
        except KeyError:
            context.abort(grpc.StatusCode.NOT_FOUND, f"provider {request.uuid} not found")
        return query_pb2.QueryProviderResponse(
            provider=query_pb2.Provider(uuid=request.uuid, address=address, payout_address=payout, active=True)
        )


def add_to_server(node: DevnetNode, server: grpc.Server) -> None:
    query_pb2_grpc.add_QueryServicer_to_server(SkuQuery(node), server)
