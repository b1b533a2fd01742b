"""examples/demo.py --redis: the refund story with a Redis tier that is flushed, killed -9 and tampered with
between messages; the audit (email remembered, one refund, one email) still passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SERVER

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(SERVER is None, reason="redis-server is not installed")
def test_the_demo_with_the_redis_tier_and_its_failures(dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--framework", "core", "--redis", "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for fault in ("Redis: flushall", "Redis: kill -9 + restart", "Redis: tamper every value"):
        assert fault in out
    assert "PASS  refunds paid = 1" in out and "PASS  5 min later: answered with the known email" in out
