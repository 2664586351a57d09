"""The HTTP server of ``/metrics``, ``/healthz`` and ``/readyz``, on its own threads.

- ``/metrics``: the Prometheus text format of the sidecar's registry;
- ``/healthz``: 200 ``alive`` when the actor system answers an ask within
  ``ASK_TIMEOUT_S`` (its dispatcher runs), else 503;
- ``/readyz``: 200 when every part is ready, else 503; the body says, one
  line per part, which is not and since when (``?format=json``: the same as
  JSON).

What readiness is, is asked of the ``health`` actor through the callable
the wiring gives (``ask``: a report, or None when it did not answer in
time); this module knows HTTP and nothing of the actors.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from logs.format import utc_iso
from monitoring.settings import parse_listen

__all__ = ["MonitoringServer", "ASK_TIMEOUT_S"]

logger = logging.getLogger(__name__)

#: An actor system that cannot answer one small ask in this long is stuck, not busy:
#: a cycle of 10,000 tenants keeps each worker busy for milliseconds at a time.
ASK_TIMEOUT_S = 2.0


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        url = urlsplit(self.path)
        try:
            if url.path == "/metrics":
                self._send(200, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
            elif url.path == "/healthz":
                report = self.server.ask(ASK_TIMEOUT_S)
                if report is None:
                    self._text(503, f"not alive: the actor system did not answer within {ASK_TIMEOUT_S:g}s\n")
                else:
                    self._text(200, "alive\n")
            elif url.path == "/readyz":
                self._readyz("json" in parse_qs(url.query).get("format", []))
            else:
                self._text(404, "not found: /metrics, /healthz, /readyz\n")
        except BrokenPipeError:
            pass  # the scraper went away

    def _readyz(self, as_json: bool) -> None:
        report = self.server.ask(ASK_TIMEOUT_S)
        if report is None:
            self._text(503, f"not ready: the actor system did not answer within {ASK_TIMEOUT_S:g}s\n")
            return
        code = 200 if report.ready else 503
        if as_json:
            parts = []
            for p in report.parts:
                since = p.since or report.started
                parts.append({"name": p.name, "ready": p.ready, "since": utc_iso(since) if since else None, "detail": p.detail})
            body = {"ready": report.ready, "parts": parts}
            self._send(code, json.dumps(body).encode(), "application/json")
        else:
            self._text(code, "\n".join(report.lines()) + "\n")

    def _text(self, code: int, text: str) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http: " + format, *args)  # scrapes every few seconds are not decisions


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry, ask: Callable[[float], Any]) -> None:
        self.registry = registry
        self.ask = ask
        if ":" in address[0]:
            self.address_family = socket.AF_INET6  # an IPv6 host, e.g. [::1]:9464
        super().__init__(address, _Handler)


class MonitoringServer:
    """Serves ``registry`` and the health actor's answers on ``listen`` (``host:port``; port 0: a free one)."""

    def __init__(self, listen: str, registry: CollectorRegistry, ask: Callable[[float], Any]) -> None:
        host, port = parse_listen(listen)
        self._server = _Server((host, port), registry, ask)
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="monitoring-http", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
