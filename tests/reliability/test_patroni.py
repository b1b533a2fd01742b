"""Failover under a real HA manager: Patroni (with etcd) runs a primary and a synchronous standby; the test
kills the primary's machine (kill -9 of Patroni and of its Postgres) under load, Patroni promotes the standby
by itself, and the workers find the new primary through their multi-host DSN (``target_session_attrs=
read-write``). Figures: acknowledged turns lost (must be 0), duplicate side effects (must be 0), seconds from
the kill to Patroni's promotion and to the first answer.

Opt-in (``PGAGENTSTATE_HA=1``): about 46 s on this 2-CPU machine (etcd and two Patroni nodes start in ~15 s,
the run itself ~30 s). Skipped with the reason when Patroni or etcd is not installed
(``apt-get install patroni etcd-server``). ``tools/patroni_cluster.py`` says how the pair is configured.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import psycopg
import pytest
from conftest import migrated_schema
from world import Services, Workers, drive, verify

from pgagentstate import AsyncStateStore


def _accepts_connections(port: int) -> bool:
    try:
        psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=2").close()
    except psycopg.OperationalError:
        return False
    return True


pytestmark = pytest.mark.skipif(
    os.environ.get("PGAGENTSTATE_HA", "").lower() not in ("1", "true", "yes", "on"),
    reason="the Patroni failover test is opt-in (PGAGENTSTATE_HA=1, ~46 s)",
)


async def test_patroni_promotes_the_synchronous_standby_when_the_primary_dies_under_load(cluster_root: Path) -> None:
    import patroni_cluster

    why = patroni_cluster.unavailable()
    if why:
        pytest.skip(why)
    with patroni_cluster.PatroniPair(cluster_root) as pair:
        old, new = pair.nodes
        assert pair.leader() is old
        dsn = pair.dsn(connect_timeout="2")
        schema = migrated_schema(dsn)
        services = Services(latency=0.3).start()  # payments in flight when the primary dies
        convs = [f"pat-{i:04d}" for i in range(40)]
        failover: dict[str, float] = {}
        try:
            with Workers(3, dsn=dsn, schema=schema, services_url=services.url, lease=2.0) as workers:

                async def kill_the_primary() -> None:
                    await asyncio.sleep(3.0)
                    await asyncio.to_thread(old.kill9)
                    failover["killed_at"] = time.monotonic()  # every process of the node has had its SIGKILL
                    assert not await asyncio.to_thread(_accepts_connections, old.port)
                    # Nobody promotes by hand: Patroni on the standby notices the leader key expire.
                    while await asyncio.to_thread(pair.leader) is not new:
                        await asyncio.sleep(0.1)
                    failover["promoted_at"] = time.monotonic()

                task = asyncio.create_task(kill_the_primary())
                result = await drive(lambda: workers.ports, convs, stagger=0.15, think=0.5, deadline=150)
                await asyncio.wait_for(task, 60)
            async with AsyncStateStore(dsn, schema=schema, max_size=2) as store:
                problems = await verify(store, services, convs)
        finally:
            services.stop()
        assert new.pg.psql("SELECT pg_is_in_recovery()") == "f"
        timeline = new.status().get("timeline")

    acked_before_kill = sum(1 for a in result.acks if a < failover["killed_at"])
    figures = {
        **result.summary(),
        "acked_before_kill": acked_before_kill,
        "promotion_s": round(failover["promoted_at"] - failover["killed_at"], 2),
        "first_ack_after_kill_s": round(result.recovery_after(failover["killed_at"]), 2),
        "first_ack_after_promotion_s": round(result.recovery_after(failover["promoted_at"]), 2),
        # An answer right after the kill may be to a turn that committed before it: this one is not.
        "first_answer_to_a_message_sent_after_kill_s": round(
            min(a for a, lat in zip(result.acks, result.latencies, strict=True) if a - lat > failover["killed_at"])
            - failover["killed_at"],
            2,
        ),
        "new_timeline": timeline,
        "refunds": sum(services.refunds.values()),
        "emails": sum(services.emails.values()),
        "service_requests": dict(services.requests),
    }
    print(f"\npatroni failover: {json.dumps(figures, indent=1)}")
    assert acked_before_kill > 0, "the kill came before any load"
    assert not result.failed, result.failed[:10]
    # Every turn acknowledged (before the kill too) is stored on the new primary, once and in order, and every
    # refund and email was made exactly once: verify() reads it all back.
    assert not problems, "\n".join(problems[:20])
    assert not [k for k in result.retries if k.startswith(("NOT_RETRYABLE", "OTHER"))], result.retries
