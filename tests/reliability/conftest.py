"""Fixtures for the reliability tests: throwaway Postgres clusters (never the machine's main server when
something gets killed), a private PgBouncer, the payment/email services and a fresh schema on a cluster."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# pytest runs with --import-mode=importlib: make the helper modules importable, and the examples' refund
# application (examples/refund), whose webhook service the load tests drive.
for path in (ROOT / "tools", Path(__file__).resolve().parent, ROOT / "examples"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import pg_cluster  # noqa: E402
from pg_cluster import PgCluster  # noqa: E402
from world import Services  # noqa: E402


def _skip_unless_clusters() -> None:
    why = pg_cluster.available()
    if why:
        pytest.skip(why)


@pytest.fixture
def cluster_root() -> Iterator[Path]:
    _skip_unless_clusters()
    with pg_cluster.temp_root() as root:
        yield root


@pytest.fixture
def cluster(cluster_root: Path) -> PgCluster:
    """A fresh single Postgres server of our own (fine to kill, restart or terminate connections on)."""
    return PgCluster.create(cluster_root)


@pytest.fixture
def services() -> Iterator[Services]:
    svc = Services().start()
    yield svc
    svc.stop()


def migrated_schema(dsn: str) -> str:
    from pgagentstate import StateStore

    name = f"r_{uuid.uuid4().hex[:10]}"
    with StateStore(dsn, schema=name, min_size=1, max_size=1) as s:
        s.setup()
    return name
