"""The payment/email/WhatsApp stand-ins and the load balancer: real HTTP on loopback."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from refund.proxy import RoundRobinProxy
from refund.services import Faults, Service
from refund.workflow import ApiError, post_json


def _post(url: str, body: dict[str, object], key: str) -> tuple[int, dict[str, object], str | None]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Idempotency-Key": key})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read()), r.headers.get("Idempotent-Replayed")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), None


@pytest.fixture
def payment(tmp_path: Path) -> Iterator[Service]:
    svc = Service("payment", tmp_path / "payment.sqlite", faults=Faults(slow_seconds=1.0)).start()
    yield svc
    svc.stop()


def test_same_key_pays_once_and_replays(payment: Service) -> None:
    body = {"order_id": "12345", "amount": 500.0, "currency": "BRL"}
    s1, r1, replayed1 = _post(f"{payment.url}/v1/refunds", body, "k1")
    s2, r2, replayed2 = _post(f"{payment.url}/v1/refunds", body, "k1")
    assert (s1, s2) == (200, 200)
    assert r1 == r2 and replayed1 is None and replayed2 == "true"
    assert payment.ledger.stats()["effects"] == 1
    _post(f"{payment.url}/v1/refunds", body, "k2")
    assert payment.ledger.stats() == {"requests": 3, "effects": 2, "replayed": 1, "timeouts": 0, "errors": 0}


def test_same_key_other_request_is_rejected(payment: Service) -> None:
    _post(f"{payment.url}/v1/refunds", {"order_id": "1", "amount": 1.0}, "k")
    status, body, _ = _post(f"{payment.url}/v1/refunds", {"order_id": "1", "amount": 2.0}, "k")
    assert status == 422 and "different request" in str(body["error"])
    assert payment.ledger.stats()["effects"] == 1


def test_caller_killed_mid_request_records_nothing(payment: Service) -> None:
    """A caller that dies between its headers and its body (kill -9) must not leave an empty refund behind,
    which would also make its retry, with the same key and the whole body, a 422 'different request'."""
    host, port = payment.url.removeprefix("http://").split(":")
    body = json.dumps({"order_id": "7", "amount": 3.0}).encode()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"POST /v1/refunds HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Idempotency-Key: cut\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:5])
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1024) == b""  # no answer: the request never arrived whole
    status, _, _ = _post(f"{payment.url}/v1/refunds", {"order_id": "7", "amount": 3.0}, "cut")
    assert status == 200
    assert [e["request"] for e in payment.ledger.effects()] == [{"order_id": "7", "amount": 3.0}]


async def test_timeout_means_paid_but_unknown_and_a_retry_learns_it(payment: Service) -> None:
    payment.faults.next.append("timeout")
    body = {"order_id": "9", "amount": 10.0}
    with pytest.raises(ApiError, match="no answer"):
        await post_json(f"{payment.url}/v1/refunds", body, key="t1", timeout=0.3)
    assert payment.ledger.stats()["effects"] == 1  # the money moved
    again = await post_json(f"{payment.url}/v1/refunds", body, key="t1", timeout=3)
    assert again["transaction_id"] == payment.ledger.effects()[0]["response"]["transaction_id"]
    assert payment.ledger.stats()["effects"] == 1


async def test_error_fault_does_nothing(payment: Service) -> None:
    payment.faults.next.append("error")
    with pytest.raises(ApiError, match="HTTP 500"):
        await post_json(f"{payment.url}/v1/refunds", {"order_id": "9"}, key="e1")
    assert payment.ledger.stats()["effects"] == 0


def test_proxy_alternates_and_skips_a_dead_upstream(tmp_path: Path) -> None:
    a = Service("email", tmp_path / "a.sqlite").start()
    b = Service("email", tmp_path / "b.sqlite").start()
    dead_port = b.url.rsplit(":", 1)[1]
    proxy = RoundRobinProxy([a.url.removeprefix("http://"), b.url.removeprefix("http://")]).start()
    try:
        seen = []
        for _ in range(4):
            with urllib.request.urlopen(f"{proxy.url}/v1/stats", timeout=5) as r:
                seen.append(r.headers["X-Upstream"])
        assert seen[0] != seen[1] and seen[0] == seen[2] and seen[1] == seen[3]
        b.stop()
        for _ in range(3):
            with urllib.request.urlopen(f"{proxy.url}/v1/stats", timeout=5) as r:
                assert not r.headers["X-Upstream"].endswith(f":{dead_port}")
    finally:
        proxy.stop()
        a.stop()
