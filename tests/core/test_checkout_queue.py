"""The async store's checkout queue: tasks wait for pooled connections in the store, not in psycopg_pool."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgagentstate import AsyncStateStore, StateRef
from pgagentstate.checkout_queue import CheckoutQueue


async def test_the_store_never_queues_inside_the_pool(dsn: str, schema: str) -> None:
    """200 concurrent turns on 4 connections: every request the pool sees finds a connection idle. In
    psycopg_pool's own queue a returned connection reaches its waiter 3-4 event-loop iterations later
    (a Condition under wait_for), each a pass over every ready task, which cost 0.15-0.3 ms of client
    CPU a turn and a third of the turns/s at 200-1,000 conversations (see checkout_queue)."""
    async with (
        AsyncConnectionPool(dsn, min_size=4, max_size=4, open=False) as pool,
        AsyncStateStore(pool, schema=schema) as store,
    ):
        await pool.wait()
        ids = [f"c{i}" for i in range(200)]
        for cid in ids:
            await store.create_conversation(cid)
        pool.pop_stats()

        async def turn(cid: str) -> None:
            async with store.turn(cid) as t:
                t.append({"text": "hi"})
                t.state["n"] = 1

        await asyncio.gather(*(turn(cid) for cid in ids))
        stats = pool.pop_stats()
        assert stats["requests_num"] >= 400  # a load and a save each
        assert stats.get("requests_queued", 0) == 0, stats
        for cid in ids:
            doc = await store.get_state(StateRef.conversation(cid))
            assert doc is not None and doc.data == {"n": 1}


async def test_holders_never_exceed_the_capacity_and_waiters_enter_in_arrival_order() -> None:
    queue = CheckoutQueue(lambda: 2, stall=5.0)
    inside: list[int] = []
    entered: list[int] = []
    most = 0

    async def use(i: int) -> None:
        nonlocal most
        async with queue:
            entered.append(i)
            inside.append(i)
            most = max(most, len(inside))
            await asyncio.sleep(0.01)
            inside.remove(i)

    tasks = []
    for i in range(10):
        tasks.append(asyncio.create_task(use(i)))
        await asyncio.sleep(0)  # each task reaches the queue before the next is made
    await asyncio.gather(*tasks)
    assert most == 2
    assert entered == list(range(10))


async def test_a_waiter_cancelled_before_or_after_its_turn_passes_its_place_on() -> None:
    queue = CheckoutQueue(lambda: 1, stall=5.0)
    got: list[str] = []

    async def use(name: str) -> None:
        async with queue:
            got.append(name)
            await asyncio.sleep(0.01)

    await queue.__aenter__()  # the one place, held here
    waiting = asyncio.create_task(use("cancelled while waiting"))
    handed = asyncio.create_task(use("cancelled after its turn came"))
    last = asyncio.create_task(use("last"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.sleep(0)
    # Leave and cancel the next waiter in the same step: its turn came, but it never resumes to take it.
    await queue.__aexit__(None, None, None)
    handed.cancel()
    await asyncio.wait_for(last, 1.0)
    assert got == ["last"]
    assert waiting.cancelled() and handed.cancelled()
    await asyncio.wait_for(queue.__aenter__(), 1.0)  # nothing leaked: the place is free again


async def test_a_wait_fails_only_when_nothing_came_back_for_the_stall_time() -> None:
    queue = CheckoutQueue(lambda: 1, stall=0.2)

    async def use(seconds: float) -> None:
        async with queue:
            await asyncio.sleep(seconds)

    # 12 x 0.05 s through one place: the last waits 0.55 s, more than the stall time, while it moves.
    await asyncio.gather(*(use(0.05) for _ in range(12)))

    holder = asyncio.create_task(use(1.0))
    await asyncio.sleep(0.01)
    started = time.monotonic()
    with pytest.raises(PoolTimeout, match=r"no pooled connection came back in 0\.2 s"):
        await use(0)
    assert 0.2 <= time.monotonic() - started < 0.6
    await holder
