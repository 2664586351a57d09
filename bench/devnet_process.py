"""A devnet in a process of its own, as a node would be: ``python run.py devnet``.

Benches that measure the sidecar over its production transport (the cosmpy
client over gRPC, the websocket listener) start the devnet here, so that
the node's own work runs in another interpreter, as a real node's does, and
not in the process being measured.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent

#: What ``run.py devnet`` prints, by the name it prints it under.
ENDPOINT_LINES = ("gRPC", "websocket", "provider key file")


@contextmanager
def devnet_process(provider: str, tenants: int, *, leases_per_tenant: int = 1,
                   latency_ms: float = 0.0) -> Iterator[dict[str, str]]:
    """Run a devnet with ``tenants`` healthy tenants on a real-time clock; yield its endpoints (``ENDPOINT_LINES``) and ``config``.

    ``config`` is the path of the devnet's config file, ``[provider]``
    included, for the sidecar to load with its own overrides.
    """
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "devnet.toml")
        with open(conf, "w") as fh:
            fh.write(
                f'[provider]\nuuid = "{provider}"\n[devnet]\nlatency = "{latency_ms:g}ms"\n'
                f"[demo]\nspeed = 1\nhealthy_tenants = {tenants}\ndraining_tenants = 0\n"
                f"failing_tenants = 0\nleases_per_tenant = {leases_per_tenant}\nother_provider_interval = \"0s\"\n"
            )
        devnet = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), "--config", conf, "devnet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            info: dict[str, str] = {"config": conf}
            for line in devnet.stdout:  # type: ignore[union-attr]
                for key in ENDPOINT_LINES:
                    if line.strip().startswith(key + ":"):
                        info[key] = line.split(":", 1)[1].strip().split()[0]
                if line.startswith("Ctrl-C"):
                    break
            missing = [k for k in ENDPOINT_LINES if k not in info]
            if missing:
                raise RuntimeError(f"the devnet did not print its {', '.join(missing)}: {devnet.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            yield info
        finally:
            devnet.terminate()
            devnet.wait(10)
