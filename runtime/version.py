"""Which leasewarden this is: ``--version``, the capture's run record, the metrics' build info."""

from __future__ import annotations

import configparser
from pathlib import Path

__all__ = ["sidecar_version"]


def sidecar_version() -> str:
    """The installed leasewarden version, else the one in the checkout's setup.cfg."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("leasewarden")
    except PackageNotFoundError:
        pass
    cfg = Path(__file__).resolve().parent.parent / "setup.cfg"
    parser = configparser.ConfigParser()
    try:
        parser.read(cfg, encoding="utf-8")
        return parser.get("metadata", "version")
    except (configparser.Error, OSError):
        return "unknown"
