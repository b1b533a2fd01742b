"""Faults during load: refund dialogues on worker processes while workers, connections, Postgres and the payment
API fail. After each: every conversation completes, nothing acknowledged is lost, no refund or email is repeated.

Each test runs its own Postgres cluster (tools/pg_cluster.py), so the kills never touch the machine's main server.
The figures (retries by kind, redeliveries, recovery time, latency) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from conftest import migrated_schema
from pg_cluster import PgCluster
from world import RunResult, Services, Workers, drive, every, step_attempts, verify

from pgagentstate import AsyncStateStore


def conversations(n: int, tag: str) -> list[str]:
    return [f"{tag}-{i:04d}" for i in range(n)]


async def scenario(
    cluster: PgCluster,
    services: Services,
    *,
    tag: str,
    workers: int = 4,
    n: int = 40,
    fault: Callable[[Workers], Awaitable[None]] | None = None,
    fault_every: float = 1.5,
    stagger: float = 0.15,
    think: float = 0.5,
    deadline: float = 60.0,
) -> tuple[RunResult, list[str], dict[str, Any]]:
    dsn = cluster.dsn()
    schema = migrated_schema(dsn)
    convs = conversations(n, tag)
    fault_times: list[float] = []
    with Workers(workers, dsn=dsn, schema=schema, services_url=services.url, lease=2.0) as pool:

        async def injected() -> None:
            assert fault is not None
            fault_times.append(time.monotonic())
            await fault(pool)

        if fault is None:
            result = await drive(lambda: pool.ports, convs, stagger=stagger, think=think, deadline=deadline)
        else:
            async with every(fault_every, injected):
                result = await drive(lambda: pool.ports, convs, stagger=stagger, think=think, deadline=deadline)
        kills = pool.kills
    async with AsyncStateStore(dsn, schema=schema) as store:
        problems = await verify(store, services, convs, result.failed)
        attempts = await step_attempts(store, convs)
    recoveries = [result.recovery_after(t) for t in fault_times]
    figures = {
        **result.summary(),
        "faults": len(fault_times),
        "worker_kills": kills,
        "recovery_s_max": round(max(recoveries), 2) if recoveries else None,
        "recovery_s_mean": round(sum(recoveries) / len(recoveries), 2) if recoveries else None,
        "step_attempts": dict(attempts),
        "service_requests": dict(services.requests),
    }
    print(f"\n{tag}: {json.dumps(figures, indent=1)}")
    return result, problems, figures


def assert_all_held(result: RunResult, problems: list[str], n: int) -> None:
    assert not result.failed, f"messages never answered: {result.failed[:10]}"
    assert result.turns == 4 * n
    assert not problems, "\n".join(problems[:20])
    not_retryable = {k: v for k, v in result.retries.items() if k.startswith(("NOT_RETRYABLE", "OTHER"))}
    assert not not_retryable, f"errors a caller could not know to retry: {not_retryable}"


async def test_no_faults_baseline(cluster: PgCluster, services: Services) -> None:
    result, problems, figures = await scenario(cluster, services, tag="base", workers=2, n=20, think=0.1)
    assert_all_held(result, problems, 20)
    assert result.redeliveries == 0
    assert figures["step_attempts"] == {"understand": 20, "verify_policy": 20, "process_refund": 20,
                                        "send_confirmation": 20}  # fmt: skip


async def test_workers_killed_9_every_few_seconds(cluster: PgCluster, services: Services) -> None:
    rng = random.Random(3)
    services.latency = 0.4  # payments and emails take time: kills land while they are in flight

    async def kill_one(pool: Workers) -> None:
        i = rng.randrange(len(pool.ports))
        pool.kill9(i)
        await asyncio.sleep(0.3)  # the supervisor (systemd, k8s) notices and restarts it
        await asyncio.to_thread(pool.start, i)

    result, problems, figures = await scenario(cluster, services, tag="kill9", fault=kill_one, fault_every=1.0)
    assert figures["worker_kills"] >= 5
    assert_all_held(result, problems, 40)
    # Some kills landed mid-refund (a step had to be run again), and still nothing was paid twice.
    attempts = figures["step_attempts"]
    assert attempts["process_refund"] + attempts["send_confirmation"] > 80


async def test_every_app_connection_terminated_repeatedly(cluster: PgCluster, services: Services) -> None:
    terminated: list[int] = []

    async def terminate_all(pool: Workers) -> None:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'pgas-worker-%'"
            ).fetchall()
        terminated.append(len(rows))

    result, problems, _ = await scenario(cluster, services, tag="terminate", fault=terminate_all,
                                               fault_every=0.7)  # fmt: skip
    print(f"backends terminated per round: {terminated}")
    assert sum(terminated) >= 10
    assert_all_held(result, problems, 40)


async def test_postgres_restarted_mid_run(cluster: PgCluster, services: Services) -> None:
    restarts: list[float] = []

    async def crash_restart(pool: Workers) -> None:
        if len(restarts) >= 2:
            return
        t0 = time.monotonic()
        # A crash (immediate: no checkpoint, WAL replay on start), then the server comes back after a second.
        await asyncio.to_thread(cluster.stop, "immediate")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.start)
        restarts.append(time.monotonic() - t0)

    result, problems, _ = await scenario(cluster, services, tag="restart", fault=crash_restart,
                                               fault_every=3.0)  # fmt: skip
    print(f"postgres down for: {[round(r, 2) for r in restarts]} s")
    assert len(restarts) >= 1
    assert_all_held(result, problems, 40)


async def test_payment_api_times_out_or_fails_for_a_share_of_calls(cluster: PgCluster) -> None:
    services = Services(timeout_rate=0.2, error_rate=0.2).start()
    try:
        result, problems, figures = await scenario(cluster, services, tag="payfail", think=0.2)
    finally:
        services.stop()
    assert services.requests["refund_late"] + services.requests["refund_500"] >= 5
    assert_all_held(result, problems, 40)
    attempts = figures["step_attempts"]
    # A failed payment is retried at step 3 without redoing steps 1-2.
    assert attempts["understand"] == attempts["verify_policy"] == 40
    assert attempts["process_refund"] > 40
