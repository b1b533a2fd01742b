"""A small round-robin HTTP load balancer in front of the webhook workers.

Each request goes to the next worker in turn, so consecutive messages of one conversation land on
different processes (no stickiness: the agent's memory is in Postgres, not in a worker). A worker that
refuses connections (dead, restarting) is skipped. A worker that dies *during* a request is not retried
here — the request was not idempotent from the proxy's point of view — and the caller gets a 502, which
is what makes WhatsApp deliver the message again.
"""

from __future__ import annotations

import http.client
import itertools
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    # The stdlib listens with a backlog of 5: under 200 concurrent customers that reset connections.
    request_queue_size = 1024


class RoundRobinProxy:
    """Listens on ``port`` (0 = any free port) and spreads requests over ``upstreams`` (``host:port``)."""

    def __init__(self, upstreams: Sequence[str], *, port: int = 0, timeout: float = 60.0) -> None:
        self.upstreams = list(upstreams)
        self.timeout = timeout
        self._next = itertools.cycle(range(len(self.upstreams)))
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RoundRobinProxy:
        threading.Thread(target=self._server.serve_forever, name="round-robin", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def pick(self) -> list[str]:
        """The upstreams in the order to try them for one request."""
        with self._lock:
            first = next(self._next)
        return self.upstreams[first:] + self.upstreams[:first]

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        for upstream in self.pick():
            host, port = upstream.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
            try:
                try:
                    conn.connect()
                except OSError:
                    continue  # down: try the next worker
                try:
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    return 502, {"X-Upstream": upstream}, f"upstream {upstream} failed: {exc!r}".encode()
                out = {k: v for k, v in response.getheaders() if k.lower() in ("content-type",)}
                out["X-Upstream"] = upstream
                return response.status, out, data
            finally:
                conn.close()
        return 503, {}, b"no worker is up"


def _handler_for(proxy: RoundRobinProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _proxy(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if len(body) < length:  # the caller went away mid-request: forward nothing
                self.close_connection = True
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            status, out, data = proxy.forward(self.command, self.path, headers, body)
            self.send_response(status)
            for key, value in out.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = _proxy
        do_POST = _proxy

    return Handler
