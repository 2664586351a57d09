"""Regenerate ``chain/billing_pb/`` and ``chain/sku_pb/`` from ``chain/proto/`` with grpcio-tools.

The generated modules are committed, so a fresh clone imports them without
running protoc; run this only after editing a ``.proto``, with grpcio-tools
1.71.2 (its protoc writes code for protobuf 5.29, which the project
pins) in a virtualenv of its own beside cosmpy::

    python -m venv /tmp/protoc && /tmp/protoc/bin/pip install grpcio-tools==1.71.2 cosmpy
    /tmp/protoc/bin/python chain/build_protos.py

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

Each proto package goes to its own Python package (``PACKAGES``):
``liftedinit.billing.v1`` to ``chain/billing_pb``, ``liftedinit.sku.v1``
(the provider registry) to ``chain/sku_pb``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "chain" / "proto"

#: proto package -> (its folder under chain/proto, the Python package it is generated into)
PACKAGES = {
    "liftedinit.billing.v1": ("liftedinit/billing/v1", "billing_pb"),
    "liftedinit.sku.v1": ("liftedinit/sku/v1", "sku_pb"),
}

#: Files of cosmpy's bundled protos the billing protos import (their
#: dependencies are added to the descriptor set too).
COSMOS_IMPORTS = ("cosmos/base/v1beta1/coin.proto", "cosmos/base/query/v1beta1/pagination.proto")

_INIT = '''"""Generated Python for the ``{package}`` protos (``chain/proto``).

Regenerate with ``python chain/build_protos.py``; do not edit the
``*_pb2*.py`` files by hand.
"""

from chain.{out} import {modules}

__all__ = [{names}]
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
    for package, (_, out) in PACKAGES.items():
        text = re.sub(rf"^from {re.escape(package)} import ", f"from chain.{out} import ", text, flags=re.M)
    text = re.sub(r"^from cosmos\.", "from cosmpy.protos.cosmos.", text, flags=re.M)
    return text


def build() -> list[Path]:
    written: list[Path] = []
    for package, (folder, out) in PACKAGES.items():
        written += build_package(package, PROTO_ROOT / folder, ROOT / "chain" / out, out)
    return written


def build_package(package: str, package_dir: Path, out_dir: Path, out: str) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc

    # google/protobuf/*.proto (Timestamp) ship with grpcio-tools.
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(package_dir.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {package_dir}")
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
        out_dir.mkdir(exist_ok=True)
        written = []
        for src in sorted((gen / package_dir.relative_to(PROTO_ROOT)).iterdir()):
            if src.suffix not in (".py", ".pyi"):
                continue
            dst = out_dir / src.name
            dst.write_text(_rewrite_imports(src.read_text()))
            written.append(dst)
    init = out_dir / "__init__.py"
    if not init.exists():  # written once: a package's list is then kept by hand, as billing_pb's is
        modules = sorted(p.stem for p in written if p.suffix == ".py")
        init.write_text(_INIT.format(
            package=package, out=out, modules=", ".join(modules), names=", ".join(f'"{m}"' for m in modules)
        ))
        written.append(init)
    return written


def main() -> int:
    for path in build():
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
