"""Connections: DSN, connection or pool; dead connections replaced; restarts survived."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgagentstate import AsyncStateStore, ConnectionLost, NewEvent, StateStore


def test_store_on_a_single_connection(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit: the store must still commit
        store = StateStore(conn, schema=schema)
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent(1), NewEvent(2)])
    with StateStore(dsn, schema=schema) as other:
        assert [e.payload for e in other.list_events("c1")] == [1, 2]


async def test_async_store_on_a_single_connection(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        store = AsyncStateStore(conn, schema=schema)
        await store.create_conversation("c1")
        assert (await store.get_conversation("c1")) is not None


def test_store_on_a_pool_leaves_the_pool_open(dsn: str, schema: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        with StateStore(pool, schema=schema) as store:
            store.create_conversation("c1")
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


async def test_async_store_on_a_pool(dsn: str, schema: str) -> None:
    async with (
        AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool,
        AsyncStateStore(pool, schema=schema) as store,
    ):
        await store.create_conversation("c1")
        assert (await store.get_conversation("c1")) is not None


def test_from_conn_string_and_environment(dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with StateStore.from_conn_string(dsn, schema=schema) as store:
        store.create_conversation("c1")
    monkeypatch.setenv("PGAGENTSTATE_DSN", dsn)
    with StateStore(schema=schema) as store:
        assert store.get_conversation("c1") is not None


def _terminate_others(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'victim'"
        ).fetchall()
        return len(rows)


def test_idle_connections_killed_by_the_server_are_replaced(dsn: str, schema: str) -> None:
    victim = psycopg.conninfo.make_conninfo(dsn, application_name="victim")
    with StateStore(victim, schema=schema, min_size=3, max_size=3) as store:
        store.create_conversation("c1")
        for _ in range(3):
            store.get_conversation("c1")
        assert _terminate_others(dsn) >= 1
        time.sleep(0.2)
        # Every operation after the kill succeeds: dead idle connections are noticed at checkout.
        for i in range(10):
            store.append_events("c1", [NewEvent(i)])
        assert len(store.list_events("c1")) == 10


def test_an_operation_in_flight_fails_with_a_retryable_error(dsn: str, schema: str) -> None:
    victim = psycopg.conninfo.make_conninfo(dsn, application_name="victim")
    with StateStore(victim, schema=schema, max_size=2) as store:
        store.create_conversation("c1")
        with pytest.raises(ConnectionLost) as info, store.conversation_lock("c1"):
            assert _terminate_others(dsn) >= 1
            time.sleep(0.2)
        assert info.value.retryable
        store.append_events("c1", [NewEvent("after")])
        assert [e.payload for e in store.list_events("c1")] == ["after"]


@pytest.mark.parametrize("sync", [True, False])
def test_a_read_on_a_connection_that_died_unseen_runs_again(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """A pooled connection can die without the idle check seeing it (the server's goodbye or the proxy's
    reset arrives just after the checkout: 3 runs in 12 of the failover test on a loaded machine). A read
    that fails on it runs once more on a new connection; a write fails with ConnectionLost, for the caller
    to retry (it may have committed)."""
    from pgagentstate import connect

    victim = psycopg.conninfo.make_conninfo(dsn, application_name="victim")
    monkeypatch.setattr(connect, "idle_connection_is_dead", lambda conn: conn.closed)
    module = "pgagentstate.sync" if sync else "pgagentstate.aio"
    monkeypatch.setattr(f"{module}.idle_connection_is_dead", lambda conn: conn.closed)

    async def scenario() -> tuple[int, bool]:
        store: Any = StateStore(victim, schema=schema, min_size=1, max_size=1) if sync else AsyncStateStore(
            victim, schema=schema, min_size=1, max_size=1
        )

        async def call(name: str, *args: Any) -> Any:
            result = getattr(store, name)(*args)
            return result if sync else await result

        try:
            await call("create_conversation", "c1")
            await call("append_events", "c1", [NewEvent("before")])
            assert _terminate_others(dsn) == 1
            time.sleep(0.2)
            read = len(await call("list_events", "c1"))  # a read: run again on a new connection
            assert _terminate_others(dsn) == 1
            time.sleep(0.2)
            try:
                await call("append_events", "c1", [NewEvent("lost")])
                lost = False
            except ConnectionLost:
                lost = True
            return read, lost
        finally:
            if sync:
                store.close()
            else:
                await store.close()

    read, write_lost = asyncio.run(scenario())
    assert read == 1
    assert write_lost


def test_no_store_wide_lock_on_a_pool(dsn: str, schema: str) -> None:
    """Four threads each hold a conversation lock at the same time; a store-wide lock would deadlock."""
    with StateStore(dsn, schema=schema, max_size=4) as store:
        barrier = threading.Barrier(4, timeout=20)
        errors: list[BaseException] = []

        def hold(i: int) -> None:
            try:
                with store.conversation_lock(f"c{i}"):
                    barrier.wait()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=hold, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_conversation_lock_serialises_and_times_out(store: StateStore) -> None:
    from pgagentstate import ConflictError

    with store.conversation_lock("c1"):
        with pytest.raises(ConflictError), store.conversation_lock("c1", timeout=0.2):
            pass
        with store.conversation_lock("c2", timeout=0.2):
            pass


@pytest.mark.slow
def test_server_restart_mid_run_loses_nothing_committed() -> None:
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver import _commands

    # Not under pytest's tmp_path: run as root, pgserver's server runs as another user, and every pytest
    # session on the machine sets /tmp/pytest-of-root back to 0700 (pg_ctl then failed with "Permission
    # denied" when another session started during this test).
    home = tempfile.TemporaryDirectory(prefix="pgagentstate-restart-")
    server = pgserver.get_server(Path(home.name) / "pg", cleanup_mode="stop")
    try:
        with StateStore(server.get_uri(), schema="restart", max_size=2) as store:
            store.setup()
            store.create_conversation("c1")
            committed: list[int] = []
            lost = 0
            stop = threading.Event()

            def writer() -> None:
                nonlocal lost
                i = 0
                while not stop.is_set():
                    try:
                        store.append_events("c1", [NewEvent({"i": i}, event_id=f"e{i}")])
                        committed.append(i)
                        i += 1
                    except ConnectionLost:
                        lost += 1
                        time.sleep(0.05)  # the same event id is retried: idempotent

            t = threading.Thread(target=writer)
            t.start()
            time.sleep(0.5)
            _commands.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user,
                             timeout=60)
            time.sleep(1.0)
            stop.set()
            t.join(timeout=30)
            stored = [e.payload["i"] for e in store.list_events("c1")]
            assert len(committed) > 10
            assert set(committed) <= set(stored)
            assert stored == sorted(stored) and len(stored) == len(set(stored))
            # After the restart the pool works again without the caller doing anything.
            store.append_events("c1", [NewEvent("after restart")])
    finally:
        server.cleanup()
        home.cleanup()


def test_history_reads_go_to_the_replica_and_turns_stay_on_the_primary(dsn: str, schema: str) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as replica:
        with StateStore(dsn, schema=schema, replica=replica) as store:
            store.create_conversation("c1")

            def replica_requests() -> int:
                return int(replica.get_stats().get("requests_num", 0))

            before = replica_requests()
            store.append_events("c1", [NewEvent(1)])
            with store.turn("c1") as turn:  # a turn's load must be fresh: primary
                turn.append(2)
            store.load_conversation("c1")
            assert replica_requests() == before
            assert [e.payload for e in store.list_events("c1")] == [1, 2]
            store.list_event_payloads("c1")
            store.list_conversations()
            assert replica_requests() == before + 3
        assert not replica.closed  # a pool passed in stays open


def test_named_advisory_locks_are_per_tenant(store: StateStore) -> None:
    from pgagentstate import ConflictError

    with store.advisory_lock("gc"):
        with pytest.raises(ConflictError), store.advisory_lock("gc", timeout=0.2):
            pass
        with store.with_tenant("other").advisory_lock("gc", timeout=0.2):
            pass  # another tenant's job is independent
        with store.conversation_lock("gc", timeout=0.2):
            pass  # a conversation's lock is another lock


def test_a_store_used_from_many_event_loops_leaves_no_connection_behind(dsn: str, schema: str) -> None:
    """Each loop gets a pool of its own, closed when that loop shuts down (asyncio.run cancels its tasks:
    psycopg_pool's own close() then failed before closing any connection, and its reconnection attempts
    kept the shutdown waiting for minutes)."""
    import asyncio
    import gc

    from pgagentstate import AsyncStateStore

    def mine() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'leak-check'"
            ).fetchone()
            assert row is not None
            return int(row[0])

    store = AsyncStateStore(f"{dsn}{'&' if '?' in dsn else '?'}application_name=leak-check", schema=schema)
    for _ in range(4):
        asyncio.run(store.get_conversation("nobody"))
    # A closed connection's server process exits a moment later: wait for it (bounded), not for a time.
    # A pool that grew while its first connection was being made left the second half-made at shutdown,
    # kept open by the log record of its cancellation (pytest keeps them): 1 run in 3 before the pool
    # waited for its first connection.
    gc.collect()
    left = mine()
    for _ in range(100):
        if left == 0:
            break
        time.sleep(0.05)
        left = mine()
    assert left == 0
    asyncio.run(store.close())


def test_the_stores_own_pool_bounds_a_silent_server_with_tcp_deadlines(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that vanished from the network must cost a call seconds, not libpq's defaults (minutes for
    unacknowledged data, hours for a request whose answer never comes): the store's own pool connects with
    keepalives, tcp_user_timeout and connect_timeout unless the DSN says otherwise (tests/reliability/
    test_partitions.py takes a real link down)."""
    from pgagentstate.connect import POOL_WAIT, TCP_DEADLINES

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    with StateStore(dsn, schema=schema, min_size=1, max_size=1) as store:
        store.list_conversations()
        pool = store._source._pools[None].pool
        assert pool.timeout == POOL_WAIT
        with pool.connection() as conn:
            params = conn.info.get_parameters()
    for key, value in TCP_DEADLINES.items():  # libpq keeps them for a Unix socket too (and ignores them)
        assert params.get(key) == str(value), (key, params)

    # What the DSN sets wins.
    chosen = f"{dsn}{'&' if '?' in dsn else '?'}keepalives_idle=30" if "://" in dsn else f"{dsn} keepalives_idle=30"
    with StateStore(chosen, schema=schema, min_size=1, max_size=1) as store:
        store.list_conversations()
        with store._source._pools[None].pool.connection() as conn:
            assert conn.info.get_parameters().get("keepalives_idle") == "30"


async def test_a_queue_longer_than_the_pool_timeout_waits_while_connections_come_back(dsn: str, schema: str) -> None:
    """psycopg_pool's timeout counts from the request, so a burst of many more tasks than connections
    failed its last tasks although connections kept coming back (upstream's test_large_batches_async:
    60,000 calls on 10 connections). A wait fails only when no connection came back for a whole timeout."""
    async with (
        AsyncConnectionPool(dsn, min_size=1, max_size=1, timeout=1.0, open=False) as pool,
        AsyncStateStore(pool, schema=schema) as store,
    ):
        async def hold(name: str, seconds: float) -> None:
            async with store.advisory_lock(name):
                await asyncio.sleep(seconds)

        first = asyncio.create_task(hold("first", 0.6))
        await asyncio.sleep(0.1)
        second = asyncio.create_task(hold("second", 0.9))  # queued before the call below
        await asyncio.sleep(0.1)
        # Waits ~1.4 s, more than the pool's timeout; the first connection came back 0.5 s into the wait.
        assert await store.get_memory(("n",), "k") is None
        await asyncio.gather(first, second)

        # Nothing comes back for a whole timeout: still a stall, reported as before.
        stall = asyncio.create_task(hold("stall", 1.6))
        await asyncio.sleep(0.1)
        with pytest.raises(ConnectionLost):
            await store.get_memory(("n",), "k")
        await stall


@pytest.mark.parametrize("sync", [True, False])
def test_a_direct_connection_that_dies_before_its_call_is_not_handed_to_the_pool(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """While the pool has no connection ready after a restart, a call connects itself; the server can die
    again between that connect and the call (an immediate stop, 1 CI run in ~4 of the restart fault test).
    That connection was handed to the pool, which refused it with a ValueError no caller could know to
    retry. It is closed instead, and the call goes on with the next one."""
    module = __import__("pgagentstate.sync" if sync else "pgagentstate.aio", fromlist=["_reach"])
    real_reach = module._reach
    made: list[Any] = []

    def kill(conn: Any) -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        time.sleep(0.2)  # the server's goodbye has reached the socket

    if sync:

        def reach(conninfo: str, kwargs: dict[str, Any]) -> Any:
            conn = real_reach(conninfo, kwargs)
            made.append(conn)
            if len(made) == 1:
                kill(conn)
            return conn
    else:

        async def reach(conninfo: str, kwargs: dict[str, Any]) -> Any:  # type: ignore[misc]
            conn = await real_reach(conninfo, kwargs)
            made.append(conn)
            if len(made) == 1:
                await asyncio.to_thread(kill, conn)
            return conn

    monkeypatch.setattr(module, "_reach", reach)

    async def scenario() -> Any:
        pool: Any = (ConnectionPool if sync else AsyncConnectionPool)(dsn, min_size=1, max_size=1, open=False)
        if sync:
            pool.open(wait=True)
        else:
            await pool.open(wait=True)
        store: Any = (StateStore if sync else AsyncStateStore)(pool, schema=schema)
        held = pool.getconn() if sync else await pool.getconn()  # the pool has nothing ready
        store._source._trouble = True  # as after a dead connection was found
        try:
            got = store.get_conversation("nobody") if sync else await store.get_conversation("nobody")
            return got, len(store._source._direct)
        finally:
            if sync:
                pool.putconn(held)
                pool.close()
            else:
                await pool.putconn(held)
                await pool.close()

    got, direct_left = asyncio.run(scenario())
    assert got is None
    assert len(made) == 2 and made[0].closed and made[1].closed
    assert direct_left == 0
