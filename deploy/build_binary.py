#!/usr/bin/env python3
"""Build the one-file executable ``dist/leasewarden`` with PyInstaller.

    python3 -m pip install -e '.[binary]' && python3 deploy/build_binary.py

The result runs on a Linux machine of the same architecture and a glibc no
older than the build machine's, with no Python and none of the project's
packages installed: the interpreter, the packages and the generated protos
travel inside it and are unpacked to a temporary folder at each start.

Why PyInstaller: it is the standard, maintained tool that turns a Python
program with C extensions (grpcio, protobuf, coincurve's and msgpack's)
into one file, without changing how the program imports. The alternatives
each miss something here: zipapp/shiv/pex still need a Python on the
target, Nuitka compiles for minutes per build and needs a C compiler, and
PyOxidizer is no longer maintained.

Two things PyInstaller cannot see by itself: cosmpy puts its generated
protos' folder on ``sys.path`` at import time (its modules import
``gogoproto``, ``cosmos_proto``, ``amino`` as top-level packages), so that
folder is given as a search path; and the version (``--version``) is read
from the installed package's metadata, which is copied in.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(dist: Path, work: Path) -> Path:
    """Build into ``dist`` (scratch in ``work``); returns the executable's path."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        import PyInstaller.__main__ as pyinstaller
    except ImportError:
        raise SystemExit("PyInstaller is not installed: python3 -m pip install -e '.[binary]'") from None
    try:
        version("leasewarden")
    except PackageNotFoundError:
        raise SystemExit("leasewarden is not installed in this Python: python3 -m pip install -e '.[binary]'") from None
    import cosmpy

    protos = Path(cosmpy.__file__).resolve().parent / "protos"
    pyinstaller.run([
        "--onefile", "--noconfirm", "--clean", "--log-level", "WARN",
        "--name", "leasewarden",
        "--distpath", str(dist), "--workpath", str(work), "--specpath", str(work),
        "--paths", str(ROOT), "--paths", str(protos),
        "--copy-metadata", "leasewarden",
        str(ROOT / "run.py"),
    ])
    return dist / "leasewarden"


def main() -> int:
    p = argparse.ArgumentParser(description="Build the one-file executable leasewarden with PyInstaller.")
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the executable goes (default: %(default)s)")
    p.add_argument("--work", type=Path, default=ROOT / "build", help="PyInstaller's scratch folder (default: %(default)s)")
    args = p.parse_args()
    exe = build(args.dist, args.work)
    print(f"{exe}: {exe.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
