"""The timeline viewer: a small read-only web app on the standard library's HTTP server.

``GET /`` serves the page (HTML, JS and CSS shipped as package data in ``ui/static``) with the data of its
first view inline; the page then reads JSON from ``/api/health``, ``/api/health/series`` (the chart),
``/api/conversations`` and ``/api/conversations/<id>``; ``/metrics`` is the health for Prometheus
(:mod:`.metrics`). Nothing here writes.

It listens on 127.0.0.1 by default. Bound to loopback it only answers requests whose ``Host`` is a
loopback name, so a web page elsewhere cannot read it through DNS rebinding; the Content-Security-Policy
allows only its own scripts, and every value reaches the page through ``textContent``.
"""

from __future__ import annotations

import ipaddress
import json
import sys
from functools import cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import PgAgentStateError
from ..ops import operations
from ..ops.operations import to_jsonable
from ..sync import StateStore
from . import metrics
from .term import parse_duration

_STATIC = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css"}
# The health-over-time chart (its own files, so the timeline's can change without touching it).
_STATIC.update({"health_chart.js": "text/javascript", "health_chart.css": "text/css"})
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


@cache
def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ViewerServer(ThreadingHTTPServer):
    """The HTTP server, holding the store every request reads through."""

    daemon_threads = True

    def __init__(self, store: StateStore, address: tuple[str, int], *, idle: float) -> None:
        self.store = store
        self.idle = idle
        self.loopback = _is_loopback(address[0])
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "pgagentstate-ui"

    def log_message(self, format: str, *args: Any) -> None:
        # Access logs would print conversation ids to the terminal for every poll; errors still go out.
        if args and str(args[1] if len(args) > 1 else "").startswith(("4", "5")):
            sys.stderr.write("ui: " + (format % args) + "\n")

    def do_GET(self) -> None:
        if self.server.loopback and not self._host_is_loopback():
            self._send(HTTPStatus.FORBIDDEN, b"forbidden host\n", "text/plain")
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path
        try:
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, self._page(query), _STATIC["index.html"])
            elif path == "/favicon.ico":
                self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            elif path.startswith("/static/") and path[len("/static/") :] in _STATIC:
                name = path[len("/static/") :]
                self._send(HTTPStatus.OK, _static(name), _STATIC[name])
            elif path == "/api/health":
                self._json(self._health(query))
            elif path == "/api/conversations":
                self._json(self._list(query))
            elif path == "/api/health/series":
                self._json(self._health_series(query))
            elif path == "/metrics":
                self._send(HTTPStatus.OK, self._metrics(query).encode(), metrics.CONTENT_TYPE)
            elif path.startswith("/api/conversations/"):
                cid = unquote(path[len("/api/conversations/") :])
                found = self._timeline(cid, query)
                if found is None:
                    self._json({"error": f"conversation {cid!r} not found"}, HTTPStatus.NOT_FOUND)
                else:
                    self._json(found)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
        except (PgAgentStateError, ValueError) as exc:
            self._json({"error": f"{type(exc).__name__}: {exc}"}, HTTPStatus.BAD_REQUEST)

    def _page(self, query: dict[str, str]) -> bytes:
        """The page with the data of its first view inline (health, the list, the conversation ``?id=``
        names): it renders before any request of its own, so a screenshot taken at load shows it. The data
        is a JSON block the script reads (not executed; ``<`` escaped so no value can close the element)."""
        page = _static("index.html")
        try:
            first: dict[str, Any] = {"health": self._health(query), "conversations": self._list(query)}
            if query.get("id"):
                first["conversation"] = self._timeline(query["id"], query)
        except (PgAgentStateError, ValueError) as exc:  # the page still loads and shows the error
            first = {"error": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(first, ensure_ascii=False, default=str).replace("<", "\\u003c").replace("&", "\\u0026")
        block = f'<script type="application/json" id="first-view">{data}</script>'.encode()
        return page.replace(b"<!-- first view -->", block, 1)

    def _host_is_loopback(self) -> bool:
        host = self.headers.get("Host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]", 1)[0]
        return _is_loopback(name)

    def _idle(self, query: dict[str, str]) -> float:
        return parse_duration(query["idle"]) if query.get("idle") else self.server.idle

    def _health(self, query: dict[str, str]) -> Any:
        store = self.server.store
        return to_jsonable(store.run(operations.health(store.context, idle=self._idle(query))))

    def _health_series(self, query: dict[str, str]) -> Any:
        """``?every=hour|day`` (default hour), ``buckets`` (default 24 hours / 30 days), ``app``,
        ``framework``, ``idle``."""
        store = self.server.store
        buckets = int(query["buckets"]) if query.get("buckets") else None
        series = store.run(
            operations.health_series(
                store.context,
                every=query.get("every") or "hour",
                buckets=buckets,
                idle=self._idle(query),
                app=query.get("app") or None,
                framework=query.get("framework") or None,
            )
        )
        return to_jsonable(series)

    def _metrics(self, query: dict[str, str]) -> str:
        """OpenMetrics over the last ``?window=`` (default 24h), per app and framework."""
        store = self.server.store
        window = parse_duration(query["window"]) if query.get("window") else 86400.0
        series = store.run(
            operations.health_series(store.context, every=window, buckets=1, rolling=True, idle=self._idle(query))
        )
        return metrics.render(series, store.inbox_metrics())

    def _list(self, query: dict[str, str]) -> Any:
        store = self.server.store
        found = store.run(
            operations.list_conversations(
                store.context,
                app=query.get("app") or None,
                framework=query.get("framework") or None,
                user_id=query.get("user") or None,
                health=query.get("health") or None,
                stuck_only=query.get("stuck") in ("1", "true"),
                id_prefix=query.get("q") or None,
                idle=self._idle(query),
                limit=min(int(query.get("limit", "100")), 500),
                offset=int(query.get("offset", "0")),
            )
        )
        return [
            {
                **to_jsonable(s.conversation),
                "health": s.health,
                "stuck_steps": s.stuck_steps,
                "failed_steps": s.failed_steps,
                "calls": s.calls,
                "duplicate_hits": s.duplicate_hits,
                "messages": s.messages,
            }
            for s in found
        ]

    def _timeline(self, cid: str, query: dict[str, str]) -> Any:
        store = self.server.store
        limit = int(query["events"]) if query.get("events") else None
        found = store.run(operations.timeline(store.context, cid, event_limit=limit, idle=self._idle(query)))
        if found is None:
            return None
        data = to_jsonable(found)
        # The chat column shows text; the raw payloads stay available for the detail view.
        names = operations.call_names([e.payload for e in found.events])
        for event, raw in zip(data["events"], found.events, strict=True):
            event["text"] = operations.message_text(raw.payload, names)
        for version, raw_version in zip(data["state_versions"], found.state_versions, strict=True):
            version["label"] = raw_version.label
        for version, raw_version in zip(data["shared_state"], found.shared_state, strict=True):
            version["label"] = raw_version.label
        return data

    def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        body = json.dumps(data, ensure_ascii=False, default=str).encode()
        self._send(status, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        )
        self.end_headers()
        self.wfile.write(body)


def make_server(
    store: StateStore, *, host: str = "127.0.0.1", port: int = 8765, idle: float = operations.DEFAULT_IDLE
) -> ViewerServer:
    """A viewer server bound to ``host:port`` (port 0 picks a free one); call ``serve_forever()``."""
    return ViewerServer(store, (host, port), idle=idle)


__all__ = ["ViewerServer", "make_server"]
