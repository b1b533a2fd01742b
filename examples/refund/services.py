"""The outside world of the demo: payment, email and WhatsApp Cloud API stand-ins.

Small real HTTP services on loopback (stdlib ``http.server``, one thread per request) that persist what
they did in a SQLite file and honour an ``Idempotency-Key`` header the way Stripe does: the first request
with a key does the work and stores the response; a repeat with the same key and body gets the stored
response (``Idempotent-Replayed: true``) and does nothing; the same key with another body is a 422.
So "how many refunds were paid" is counted from outside the agent, in the service's own records.

The payment service can be told to fail: ``timeout`` does the refund but answers too late (the nastiest
case: the money moved and the caller does not know), ``error`` answers 500 without doing anything. Faults
come from a queue (``POST /_faults {"next": ["timeout"]}``) or at random with a given share.

Run one from examples/: ``python -m refund.services payment --port 8101 --db /tmp/payment.db``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

KINDS = ("payment", "email", "whatsapp")
_WHATSAPP_SEND = re.compile(r"^/v\d+\.\d+/(?P<phone_number_id>[^/]+)/messages$")


class _Server(ThreadingHTTPServer):
    # The stdlib listens with a backlog of 5: under 200 concurrent customers that reset connections.
    request_queue_size = 1024


@dataclass
class Faults:
    """What the next calls should suffer: a queue first, then random shares."""

    next: list[str] = field(default_factory=list)
    timeout_rate: float = 0.0
    error_rate: float = 0.0
    slow_seconds: float = 2.5  # how late a "timeout" answers; longer than the callers' timeout
    rng: random.Random = field(default_factory=lambda: random.Random(12345))

    def draw(self) -> str | None:
        if self.next:
            return self.next.pop(0)
        roll = self.rng.random()
        if roll < self.timeout_rate:
            return "timeout"
        if roll < self.timeout_rate + self.error_rate:
            return "error"
        return None


class Ledger:
    """The service's own records (SQLite): effects by idempotency key, and every request received."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        with self._connect() as db:
            db.executescript(
                """
                CREATE TABLE IF NOT EXISTS effects (
                    idempotency_key TEXT PRIMARY KEY, kind TEXT NOT NULL, request TEXT NOT NULL,
                    response TEXT NOT NULL, created_at REAL NOT NULL);
                CREATE TABLE IF NOT EXISTS requests (
                    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, idempotency_key TEXT,
                    outcome TEXT NOT NULL, at REAL NOT NULL);
                """
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    def apply(
        self, kind: str, key: str | None, request: Any, make: Callable[[], dict[str, Any]]
    ) -> tuple[int, dict[str, Any], bool]:
        """(status, response, replayed): do the effect once per key."""
        body = json.dumps(request, sort_keys=True)
        with self._lock, self._connect() as db:
            if key is not None:
                row = db.execute("SELECT request, response FROM effects WHERE idempotency_key = ?", (key,)).fetchone()
                if row is not None:
                    if row[0] != body:
                        self._log(db, kind, key, "conflict")
                        return 422, {"error": "idempotency key reused with a different request"}, False
                    self._log(db, kind, key, "replayed")
                    return 200, json.loads(row[1]), True
            response = make()
            db.execute(
                "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
                (key or f"nokey-{uuid.uuid4().hex}", kind, body, json.dumps(response), time.time()),
            )
            self._log(db, kind, key, "done")
            return 200, response, False

    def log(self, kind: str, key: str | None, outcome: str) -> None:
        with self._lock, self._connect() as db:
            self._log(db, kind, key, outcome)

    @staticmethod
    def _log(db: sqlite3.Connection, kind: str, key: str | None, outcome: str) -> None:
        db.execute(
            "INSERT INTO requests (kind, idempotency_key, outcome, at) VALUES (?, ?, ?, ?)",
            (kind, key, outcome, time.time()),
        )

    def effects(self) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT idempotency_key, request, response FROM effects ORDER BY created_at").fetchall()
        return [{"key": k, "request": json.loads(q), "response": json.loads(r)} for k, q, r in rows]

    def stats(self) -> dict[str, int]:
        """requests received, effects done (refunds paid / emails sent / messages delivered), replays."""
        with self._connect() as db:
            effects = db.execute("SELECT count(*) FROM effects").fetchone()[0]
            outcomes = dict(db.execute("SELECT outcome, count(*) FROM requests GROUP BY outcome").fetchall())
        return {
            "requests": sum(n for outcome, n in outcomes.items() if outcome != "timeout"),
            "effects": effects,
            "replayed": outcomes.get("replayed", 0),
            "timeouts": outcomes.get("timeout", 0),
            "errors": outcomes.get("error", 0),
        }


class Service:
    """One API (``kind`` in payment, email, whatsapp) on its own port, records in ``db_path``."""

    def __init__(
        self,
        kind: str,
        db_path: Path,
        *,
        port: int = 0,
        faults: Faults | None = None,
        on_fault: Callable[[str], None] = lambda line: None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown service {kind!r}; one of {KINDS}")
        self.kind = kind
        self.ledger = Ledger(db_path)
        self.faults = faults or Faults()
        self.on_fault = on_fault  # told when an injected fault happens (the demo prints it)
        self._server = _Server(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Service:
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"{self.kind}-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, path: str, key: str | None, request: dict[str, Any]) -> tuple[int, dict[str, Any], bool]:
        if self.kind == "payment" and path == "/v1/refunds":
            return self._refund(key, request)
        if self.kind == "email" and path == "/v1/emails":
            return self.ledger.apply(
                "email",
                key,
                request,
                lambda: {"message_id": f"msg_{uuid.uuid4().hex[:10]}", "to": request.get("to"), "status": "sent"},
            )
        if self.kind == "whatsapp" and _WHATSAPP_SEND.match(path):
            return self.ledger.apply(
                "whatsapp",
                key,
                request,
                lambda: {
                    "messaging_product": "whatsapp",
                    "contacts": [{"input": request.get("to"), "wa_id": request.get("to")}],
                    "messages": [{"id": f"wamid.OUT{uuid.uuid4().hex[:16]}"}],
                },
            )
        return 404, {"error": f"no route {path}"}, False

    def _refund(self, key: str | None, request: dict[str, Any]) -> tuple[int, dict[str, Any], bool]:
        fault = self.faults.draw()
        if fault == "error":
            self.ledger.log("payment", key, "error")
            self.on_fault("payment API: injected error (HTTP 500); the step fails and is retried")
            return 500, {"error": "payment processor unavailable"}, False
        status, response, replayed = self.ledger.apply(
            "payment",
            key,
            request,
            lambda: {
                "transaction_id": f"txn_{uuid.uuid4().hex[:10]}",
                "status": "refunded",
                "order_id": request.get("order_id"),
                "amount": request.get("amount"),
                "currency": request.get("currency", "BRL"),
            },
        )
        if fault == "timeout":
            # The refund is done and recorded; the answer comes too late for the caller.
            self.ledger.log("payment", key, "timeout")
            self.on_fault(
                f"payment API: injected timeout (refund done, answer {self.faults.slow_seconds:.1f} s late); the "
                "step is retried with the same Idempotency-Key and gets the recorded refund back"
            )
            time.sleep(self.faults.slow_seconds)
        return status, response, replayed


def _handler_for(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the demo prints its own progress
            pass

        def _send(self, status: int, body: dict[str, Any], replayed: bool = False) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if replayed:
                    self.send_header("Idempotent-Replayed", "true")
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the caller gave up (timeout): nothing to do
                pass

        def do_GET(self) -> None:
            if self.path == "/v1/stats":
                self._send(200, service.ledger.stats())
            elif self.path == "/v1/effects":
                self._send(200, {"effects": service.ledger.effects()})
            else:
                self._send(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length)
            if len(data) < length:
                # The caller died mid-request (kill -9 between headers and body): like a real API, do nothing,
                # rather than take the missing body for an empty request and record an effect for it.
                self.close_connection = True
                return
            try:
                request = json.loads(data or b"{}")
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            if self.path == "/_faults":
                service.faults.next.extend(request.get("next", []))
                service.faults.timeout_rate = float(request.get("timeout_rate", service.faults.timeout_rate))
                service.faults.error_rate = float(request.get("error_rate", service.faults.error_rate))
                self._send(200, {"queued": list(service.faults.next)})
                return
            if not isinstance(request, dict):
                self._send(400, {"error": "body must be a JSON object"})
                return
            self._send(*service.handle(self.path, self.headers.get("Idempotency-Key"), request))

    return Handler


def main() -> None:  # pragma: no cover - a convenience for running a service by hand
    parser = argparse.ArgumentParser(description="Run one of the demo's HTTP services.")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--timeout-rate", type=float, default=0.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    args = parser.parse_args()
    svc = Service(
        args.kind, args.db, port=args.port, faults=Faults(timeout_rate=args.timeout_rate, error_rate=args.error_rate)
    ).start()
    print(f"{args.kind} API on {svc.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        svc.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
