"""A call made inside the caller's own lock blocks, when those locks hold every pooled connection, can never
get a connection: it fails at once with PoolDeadlock (not retryable) instead of a retryable ConnectionLost
after the pool's timeout, whose retry waited again (issue 14, item 12)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgagentstate import AsyncStateStore, InvalidInput, PoolDeadlock, StateStore


@pytest.fixture
def small_pool(dsn: str) -> Iterator[ConnectionPool]:
    # A short pool timeout only so that the old behaviour (wait, then ConnectionLost) fails this test quickly.
    with ConnectionPool(dsn, min_size=1, max_size=2, timeout=3, kwargs={"autocommit": True}) as pool:
        yield pool


def test_a_call_inside_locks_that_hold_every_connection(small_pool: ConnectionPool, schema: str) -> None:
    store = StateStore(small_pool, schema=schema)
    store.create_conversation("c")
    with store.conversation_lock("c"):
        assert store.get_conversation("c") is not None  # one of two connections held: fine
        with store.advisory_lock("job"):
            with pytest.raises(PoolDeadlock) as info:
                store.get_conversation("c")
            assert not info.value.retryable
            with pytest.raises(PoolDeadlock):
                store.with_tenant("other").get_conversation("c")  # a clone shares the pool
        assert store.get_conversation("c") is not None
    assert store.get_conversation("c") is not None


def test_a_single_connection_store(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        store = StateStore(conn, schema=schema)
        store.create_conversation("c")
        with store.conversation_lock("c"), pytest.raises(PoolDeadlock):
            store.get_conversation("c")
        assert store.get_conversation("c") is not None


async def test_another_tasks_lock_is_waited_for(dsn: str, schema: str) -> None:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}) as pool:
        store = AsyncStateStore(pool, schema=schema)
        await store.create_conversation("c")
        locked = asyncio.Event()

        async def holder() -> None:
            async with store.conversation_lock("c"):
                locked.set()
                await asyncio.sleep(0.2)  # the other task is waiting for the connection meanwhile

        task = asyncio.create_task(holder())
        await locked.wait()
        assert await store.get_conversation("c") is not None  # waited for the holder: not a deadlock
        await task
        async with store.conversation_lock("c"):
            with pytest.raises(PoolDeadlock):
                await store.get_conversation("c")


def test_lock_timeout_must_be_a_duration(store: StateStore) -> None:
    for bad in (float("nan"), -1, "5"):
        with pytest.raises(InvalidInput) as info, store.conversation_lock("c", timeout=bad):  # type: ignore[arg-type]
            pass
        assert info.value.path == "timeout"
