"""Postgres's own streaming replication: history reads on a replica, and failover to a promoted standby.

Every test builds its own primary (initdb) and replica (pg_basebackup) with tools/pg_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import psycopg
from conftest import migrated_schema
from pg_cluster import PgCluster, wait_streaming
from world import Services, Workers, drive, verify

from pgagentstate import AsyncStateStore, NewEvent, StateStore


def _last_queries(cluster: PgCluster, app: str) -> list[str]:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        rows = conn.execute("SELECT query FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall()
    return [r[0] for r in rows]


def _wait_replayed(primary: PgCluster, replica: PgCluster, timeout: float = 10) -> None:
    lsn = primary.psql("SELECT pg_current_wal_lsn()")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if replica.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t":
            return
        time.sleep(0.05)
    raise TimeoutError("the replica did not catch up")


def test_history_reads_go_to_the_replica_and_a_turn_reads_the_primary(cluster_root: Path) -> None:
    primary = PgCluster.create(cluster_root)
    replica = primary.make_replica()
    wait_streaming(primary, "replica1")
    schema = migrated_schema(primary.dsn())
    with StateStore(
        primary.dsn(application_name="app-primary"),
        schema=schema,
        replica=replica.dsn(application_name="app-replica"),
        min_size=1,
        max_size=1,
    ) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"text": "hello"}, event_id="m1")])
        _wait_replayed(primary, replica)
        assert [e.payload for e in store.list_events("c1")] == [{"text": "hello"}]
        # The history read ran on the replica's connection, not on the primary's.
        assert any("events" in q for q in _last_queries(replica, "app-replica"))
        assert replica.psql("SELECT pg_is_in_recovery()") == "t"

        # Freeze the replica: it now lags by everything written after this point.
        replica.psql("SELECT pg_wal_replay_pause()")
        try:
            store.append_events("c1", [NewEvent({"text": "refund please"}, event_id="m2")])
            # History read: served by the (stale) replica, which is what a replica is for.
            assert [e.event_id for e in store.list_events("c1")] == ["m1"]
            replica_before = _last_queries(replica, "app-replica")
            # A turn must load fresh state before it writes: it reads the primary and sees m2.
            with store.turn("c1") as turn:
                assert [e.event_id for e in turn.events] == ["m1", "m2"]
                turn.append({"text": "what is your email?"}, event_id="m2.reply")
            assert [e.event_id for e in store.load_conversation("c1").events] == ["m1", "m2", "m2.reply"]
            assert any("events" in q for q in _last_queries(primary, "app-primary"))
            # Nothing of the turn reached the replica: its connection's last statement is the history read.
            assert _last_queries(replica, "app-replica") == replica_before
        finally:
            replica.psql("SELECT pg_wal_replay_resume()")
        _wait_replayed(primary, replica)
        assert [e.event_id for e in store.list_events("c1")] == ["m1", "m2", "m2.reply"]


async def test_failover_to_a_promoted_synchronous_standby_mid_load(cluster_root: Path) -> None:
    """kill -9 the primary under load, promote the synchronous standby; the workers (multi-host DSN,
    target_session_attrs=read-write) reconnect by themselves. No acknowledged turn is lost (synchronous
    replication), no refund or email is repeated (idempotency keys reach the payment API)."""
    primary = PgCluster.create(cluster_root, synchronous_standby_names="'replica1'", synchronous_commit="on")
    replica = primary.make_replica()
    wait_streaming(primary, "replica1")
    # A standby streams first as "async" and turns "sync" once caught up (a moment later; CI saw "async").
    deadline = time.monotonic() + 10
    while primary.psql("SELECT sync_state FROM pg_stat_replication") != "sync" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert primary.psql("SELECT sync_state FROM pg_stat_replication") == "sync"
    schema = migrated_schema(primary.dsn())
    multi_host = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{replica.port} user=postgres dbname=postgres "
        "target_session_attrs=read-write connect_timeout=2"
    )
    services = Services(latency=0.3).start()  # payments in flight when the primary dies
    convs = [f"fo-{i:04d}" for i in range(40)]
    failover: dict[str, float] = {}
    try:
        with Workers(3, dsn=multi_host, schema=schema, services_url=services.url, lease=2.0) as pool:

            async def fail_over() -> None:
                await asyncio.sleep(3.0)
                failover["killed_at"] = time.monotonic()
                await asyncio.to_thread(primary.kill9)
                await asyncio.sleep(0.5)  # the operator (or Patroni) notices and promotes
                await asyncio.to_thread(replica.promote)
                # The standby's configuration came from the primary with pg_basebackup, so it would wait for a
                # synchronous standby of its own that does not exist: commits would hang. Failover tools
                # (Patroni) lift that; so does the operator here.
                await asyncio.to_thread(replica.set, synchronous_standby_names="")
                failover["promoted_at"] = time.monotonic()

            task = asyncio.create_task(fail_over())
            result = await drive(lambda: pool.ports, convs, stagger=0.15, think=0.5, deadline=120)
            await task
        async with AsyncStateStore(multi_host, schema=schema) as store:
            problems = await verify(store, services, convs)
    finally:
        services.stop()
    assert replica.psql("SELECT pg_is_in_recovery()") == "f"
    acked_before_kill = sum(1 for a in result.acks if a < failover["killed_at"])
    figures = {
        **result.summary(),
        "acked_before_kill": acked_before_kill,
        "promotion_s": round(failover["promoted_at"] - failover["killed_at"], 2),
        "first_ack_after_kill_s": round(result.recovery_after(failover["killed_at"]), 2),
        "first_ack_after_promotion_s": round(result.recovery_after(failover["promoted_at"]), 2),
        "service_requests": dict(services.requests),
    }
    print(f"\nfailover: {json.dumps(figures, indent=1)}")
    assert acked_before_kill > 0, "the kill came before any load"
    assert not result.failed, result.failed[:10]
    assert not problems, "\n".join(problems[:20])
