"""Generated Python for the ``liftedinit.billing.v1`` protos (``chain/proto``).

Regenerate with ``python chain/build_protos.py``; do not edit the
``*_pb2*.py`` files by hand.
"""

from chain.billing_pb import query_pb2, query_pb2_grpc, tx_pb2, tx_pb2_grpc, types_pb2

__all__ = ["types_pb2", "tx_pb2", "tx_pb2_grpc", "query_pb2", "query_pb2_grpc"]
