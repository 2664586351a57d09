"""Regenerate ``chain/billing_pb/`` from ``chain/proto/`` with grpcio-tools.

The generated modules are committed, so a fresh clone imports them without
running protoc; run this only after editing a ``.proto``::

    python chain/build_protos.py

The billing protos import ``cosmos/base/v1beta1/coin.proto`` and
``cosmos/base/query/v1beta1/pagination.proto``. Their ``.proto`` sources do
not ship with cosmpy, only their compiled descriptors do, so this script
hands protoc those descriptors (``--descriptor_set_in``) instead of copies
of the files: the generated code then refers to exactly the types cosmpy
registers at run time.

protoc writes ``from liftedinit.billing.v1 import types_pb2`` and ``from
cosmos.base.v1beta1 import coin_pb2``; the first only resolves with
``chain/proto`` on ``sys.path`` and the second only after cosmpy has put its
protos directory there. The imports are rewritten to package-absolute ones
(``chain.billing_pb`` and ``cosmpy.protos``) so that importing a generated
module works from anywhere.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "chain" / "proto"
PACKAGE_DIR = PROTO_ROOT / "liftedinit" / "billing" / "v1"
OUT = ROOT / "chain" / "billing_pb"

#: Files of cosmpy's bundled protos the billing protos import (their
#: dependencies are added to the descriptor set too).
COSMOS_IMPORTS = ("cosmos/base/v1beta1/coin.proto", "cosmos/base/query/v1beta1/pagination.proto")

_INIT = '''"""Generated Python for the ``liftedinit.billing.v1`` protos (``chain/proto``).

Regenerate with ``python chain/build_protos.py``; do not edit the
``*_pb2*.py`` files by hand.
"""

from chain.billing_pb import query_pb2, query_pb2_grpc, tx_pb2, tx_pb2_grpc, types_pb2

__all__ = ["types_pb2", "tx_pb2", "tx_pb2_grpc", "query_pb2", "query_pb2_grpc"]
'''


def cosmos_descriptor_set() -> bytes:
    """A FileDescriptorSet of ``COSMOS_IMPORTS`` and everything they import, from cosmpy."""
    import cosmpy.protos  # noqa: F401  (puts cosmpy's proto packages on sys.path)
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.Default()
    # Importing the modules registers their files in the default pool.
    from cosmpy.protos.cosmos.base.query.v1beta1 import pagination_pb2  # noqa: F401
    from cosmpy.protos.cosmos.base.v1beta1 import coin_pb2  # noqa: F401

    seen: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    order: list[str] = []

    def add(name: str) -> None:
        if name in seen:
            return
        fd = pool.FindFileByName(name)
        for dep in fd.dependencies:
            add(dep.name)
        proto = descriptor_pb2.FileDescriptorProto()
        fd.CopyToProto(proto)
        seen[name] = proto
        order.append(name)

    for name in COSMOS_IMPORTS:
        add(name)
    out = descriptor_pb2.FileDescriptorSet()
    out.file.extend(seen[n] for n in order)
    return out.SerializeToString()


def _rewrite_imports(text: str) -> str:
    text = re.sub(r"^from liftedinit\.billing\.v1 import ", "from chain.billing_pb import ", text, flags=re.M)
    text = re.sub(r"^from cosmos\.", "from cosmpy.protos.cosmos.", text, flags=re.M)
    return text


def build() -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc

    # google/protobuf/*.proto (Timestamp) ship with grpcio-tools.
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(PACKAGE_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PACKAGE_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        deps = tmp_path / "cosmos.pb"
        deps.write_bytes(cosmos_descriptor_set())
        gen = tmp_path / "gen"
        gen.mkdir()
        args = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={deps}",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={gen}",
            f"--pyi_out={gen}",
            f"--grpc_python_out={gen}",
            *[str(p.relative_to(PROTO_ROOT)) for p in protos],
        ]
        code = protoc.main(args)
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        OUT.mkdir(exist_ok=True)
        written = []
        for src in sorted((gen / "liftedinit" / "billing" / "v1").iterdir()):
            if src.suffix not in (".py", ".pyi"):
                continue
            dst = OUT / src.name
            dst.write_text(_rewrite_imports(src.read_text()))
            written.append(dst)
    (OUT / "__init__.py").write_text(_INIT)
    written.append(OUT / "__init__.py")
    return written


def main() -> int:
    for path in build():
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
