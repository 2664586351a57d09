"""Generated Python for the ``liftedinit.sku.v1`` protos (``chain/proto``).

Regenerate with ``python chain/build_protos.py``; do not edit the
``*_pb2*.py`` files by hand.
"""

from chain.sku_pb import query_pb2, query_pb2_grpc

__all__ = ["query_pb2", "query_pb2_grpc"]
