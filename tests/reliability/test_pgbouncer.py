"""The refund workload through PgBouncer in transaction-pooling mode (Debian's pgbouncer, a private instance in
front of a private cluster). The whole test suites through PgBouncer: .ci/pgbouncer.sh and docs/reliability.md."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from conftest import migrated_schema
from pg_cluster import PgCluster
from pgbouncer import PgBouncer, available
from world import Services, Workers, drive, every, verify

from pgagentstate import AsyncStateStore

SERVER_POOL = 4


@pytest.fixture
def bouncer(cluster: PgCluster) -> Iterator[PgBouncer]:
    why = available()
    if why:
        pytest.skip(why)
    with PgBouncer(server_port=cluster.port, pool_size=SERVER_POOL) as b:
        yield b


def _server_backends(cluster: PgCluster) -> int:
    return int(cluster.psql("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")) - 1


async def _run(bouncer: PgBouncer, services: Services, tag: str, fault: object = None) -> dict[str, object]:
    schema = migrated_schema(bouncer.dsn())
    convs = [f"{tag}-{i:04d}" for i in range(40)]
    # 4 workers x 5 pooled client connections = 20 clients over SERVER_POOL server connections.
    with Workers(4, dsn=bouncer.dsn(), schema=schema, services_url=services.url, lease=2.0, pgbouncer=True) as pool:
        if fault is None:
            result = await drive(lambda: pool.ports, convs, stagger=0.1, think=0.3, deadline=90)
        else:
            async with every(0.7, fault):  # type: ignore[arg-type]
                result = await drive(lambda: pool.ports, convs, stagger=0.1, think=0.3, deadline=90)
    async with AsyncStateStore(bouncer.dsn(), schema=schema, pgbouncer=True) as store:
        problems = await verify(store, services, convs)
    figures = {**result.summary(), "service_requests": dict(services.requests)}
    print(f"\n{tag}: {json.dumps(figures, indent=1)}")
    assert not result.failed, f"messages never answered: {result.failed[:10]}"
    assert not problems, "\n".join(problems[:20])
    return figures


async def test_refund_dialogues_through_transaction_pooling(
    cluster: PgCluster, bouncer: PgBouncer, services: Services
) -> None:
    figures = await _run(bouncer, services, "pgb")
    retries = figures["retries"]
    assert isinstance(retries, dict)
    assert not [k for k in retries if k.startswith(("NOT_RETRYABLE", "OTHER"))], retries
    assert _server_backends(cluster) <= SERVER_POOL
    pools = [p for p in bouncer.show("POOLS") if p["database"] == "postgres"]
    assert pools and pools[0]["pool_mode"] == "transaction"


async def test_server_connections_killed_behind_pgbouncer(
    cluster: PgCluster, bouncer: PgBouncer, services: Services
) -> None:
    """PgBouncer absorbs dead idle server connections; a transaction in flight fails, and must fail with an
    error the caller knows to retry (ConnectionLost), never a generic DatabaseError."""
    killed: list[int] = []

    async def terminate_server_connections() -> None:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND usename = 'postgres'"
                " AND application_name <> 'psql'"
            ).fetchall()
        killed.append(len(rows))

    figures = await _run(bouncer, services, "pgbkill", terminate_server_connections)
    print(f"server connections terminated per round: {killed}")
    assert sum(killed) >= 10
    retries = figures["retries"]
    assert isinstance(retries, dict)
    not_retryable = {k: v for k, v in retries.items() if k.startswith(("NOT_RETRYABLE", "OTHER"))}
    assert not not_retryable, f"errors a caller could not know to retry: {not_retryable}"
