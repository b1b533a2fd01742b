"""Redis's failure modes, played against the demo's Redis tier (``examples/demo.py --redis``).

The demo's workers put a Redis tier in front of Postgres (``PGAGENTSTATE_DEMO_REDIS``); between customer
messages this module does to Redis what goes wrong with it in production — it crashes (kill -9, restarted
empty), its data vanishes (``FLUSHALL``: a TTL that expired, an eviction), and values are edited behind our back — while
the audit checks that the agent still remembered the email and paid once.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import redis

FAULTS = ("flushall", "kill -9 + restart", "tamper every value")


class RedisChaos:
    """A redis-server of the demo's own (in memory, on a free loopback port) and the faults done to it."""

    def __init__(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise SystemExit("--redis needs redis-server (apt-get install redis-server)")
        self.server = server
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.workdir = tempfile.mkdtemp(prefix="pgagentstate-demo-redis-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.done: list[str] = []
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)

    def fault(self, i: int) -> str:
        """Do the i-th fault (in turn: flush, crash, tamper); a line saying what was done."""
        name = FAULTS[i % len(FAULTS)]
        r = self.client()
        keys = r.keys("*")
        if name == "flushall":
            r.flushall()
        elif name == "kill -9 + restart":
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait(10)
            self.start()
        else:
            for k in keys:
                if r.type(k) == b"string":
                    value = bytearray(bytes(r.get(k) or b""))  # type: ignore[arg-type]
                    if value:
                        value[-1] ^= 0xFF
                        r.set(k, bytes(value))
        self.done.append(name)
        return f"Redis: {name} ({len(keys)} keys were there)"

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        shutil.rmtree(self.workdir, ignore_errors=True)
