"""A real network partition between the store and Redis: Redis runs in a network namespace of the test's own,
joined to this one by a veth pair, and the test takes the link down under the store's feet.

Unlike the TCP proxy of conftest.py (which holds bytes back), this is the kernel dropping packets: the client
sees silence, then its socket timeouts. Nothing acknowledged may be lost or wrong, every turn must finish within
the tier's deadline, and once the link is back the tier must not serve what was true before the partition.

The namespace, its link and its Redis exist only for this module (the addresses are a /30 of the test's own on
that link, reachable from nothing else) and are removed at the end. Needs root and iproute2; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgagentstate import RedisTier, StateStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
# tools/netns.py: namespaces and veth links, shared with tests/reliability
import netns as ns_tools

redis = pytest.importorskip("redis", reason="the Redis tier's tests need pip install 'pgagentstate[redis]'")

SERVER = shutil.which("redis-server")
PORT = 6390


class Netns:
    """A network namespace with Redis in it, joined to this namespace by a veth pair."""

    def __init__(self, workdir: Path) -> None:
        self.ns = ns_tools.Netns("redis", block=213)
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def up(self) -> None:
        self.ns.up()
        self.link = self.ns.link()
        self.ns_ip = self.link.ns_ip
        assert SERVER is not None
        self.proc = subprocess.Popen(
            [*self.ns.prefix(), SERVER, "--port", str(PORT), "--bind", self.ns_ip, "--save", "",
             "--appendonly", "no", "--dir", str(self.workdir), "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(host=self.ns_ip, port=PORT, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://{self.ns_ip}:{PORT}/0"

    def cut(self) -> None:
        """Take the link down inside the namespace: this side keeps its route, packets go nowhere."""
        self.link.cut("ns")

    def heal(self) -> None:
        self.link.heal()

    def down(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self.ns.down()


def _can_make_netns() -> str | None:
    if SERVER is None:
        return "redis-server is not installed (apt-get install redis-server)"
    return ns_tools.unavailable()


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Netns]:
    why = _can_make_netns()
    if why:
        pytest.skip(why)
    ns = Netns(tmp_path_factory.mktemp("redis-netns"))
    try:
        ns.up()
        yield ns
    finally:
        ns.down()


def seed(store: StateStore, cid: str) -> None:
    with store.turn(cid, create=True) as t:
        t.state["email"] = "meu@email.com"
        t.append({"text": "Oi, quero reembolso no pedido #12345"})


def test_a_link_down_partition_costs_time_never_state(
    dsn: str, schema: str, netns: Netns, store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    tier = RedisTier(netns.url, secret=os.urandom(32), timeout=0.3, retry_after=0.5)
    with StateStore(dsn, schema=schema, cache=tier) as s:
        cid = f"netns-{uuid.uuid4().hex[:8]}"
        seed(s, cid)
        with s.turn(cid) as t:  # served from Redis: the tier works across the link
            assert t._loaded is not None and t._loaded.cached
            t.append({"text": "meu@email.com"})

        netns.cut()
        caplog.set_level(logging.WARNING, logger="pgagentstate.redis")
        started = time.monotonic()
        for i in range(6):
            with s.turn(cid) as t:
                assert t.state["email"] == "meu@email.com"
                t.state["reason"] = f"reason {i}"
                t.append({"text": f"during {i}"})
        elapsed = time.monotonic() - started
        # Every turn finished although Redis never answered: the tier's deadlines bound the cost (a timed-out
        # GET and a timed-out refresh, then Redis is skipped for retry_after between probes).
        assert elapsed < 6 * (2 * 0.3 + 0.5) + 3.0
        status = s.stats()["cache"]
        assert status["state"] == "down" and status["counters"]["fallbacks"] >= 6
        assert sum("unreachable" in r.getMessage() for r in caplog.records) == 1  # said once per outage

        # Behind the partition, another process (no tier) moves the conversation on.
        with store.turn(cid) as t:
            t.state["reason"] = "Produto chegou quebrado"
            t.append({"text": "Produto chegou quebrado"})

        netns.heal()
        time.sleep(0.6)  # past retry_after: the next call probes Redis
        with s.turn(cid) as t:
            # Redis still holds what it had before the partition: the store must not serve it.
            assert t.state["reason"] == "Produto chegou quebrado"
            assert t.events[-1].payload == {"text": "Produto chegou quebrado"}
            t.append({"text": "after"})
        assert s.stats()["cache"]["counters"]["recoveries"] >= 1
        assert any("answers again" in r.getMessage() for r in caplog.records)

    texts = [e.payload["text"] for e in store.list_events(cid)]
    assert texts == [
        "Oi, quero reembolso no pedido #12345", "meu@email.com", *(f"during {i}" for i in range(6)),
        "Produto chegou quebrado", "after",
    ]
    assert [e.seq for e in store.list_events(cid)] == list(range(1, len(texts) + 1))
