"""``[metrics]``: where the sidecar serves ``/metrics``, ``/healthz`` and ``/readyz``.

On loopback by default: the metrics name tenants' numbers and the
provider's revenue, so exposing them beyond the host is the operator's
choice (``0.0.0.0:9464`` behind a firewall, or a scraper on the host).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.config import section, setting

__all__ = ["MetricsSettings", "parse_listen"]


def parse_listen(text: str) -> tuple[str, int]:
    """``"127.0.0.1:9464"`` / ``"[::1]:9464"`` -> (host, port). Raises ValueError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"listen: expected host:port (e.g. 127.0.0.1:9464), got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen: {port!r} is not a port (0..65535) in {text!r}")
    return host, int(port)


@section("metrics")
@dataclass(frozen=True)
class MetricsSettings:
    listen: str = setting(
        "127.0.0.1:9464", "host:port of /metrics, /healthz and /readyz; port 0: any free port; empty: no server"
    )

    def validate(self) -> None:
        if self.listen:
            parse_listen(self.listen)
