"""PostgresStore under concurrent use: with TTL ``refresh_on_read``, searches that refresh expiries while
other threads put and delete the same items never deadlock in Postgres; many async calls gathered at once
run as many at a time as the pool has connections."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from typing import Any

from langgraph.store.base import PutOp

from pgagentstate import AsyncStateStore
from pgagentstate.errors import ConflictError
from pgagentstate.langgraph import PostgresStore

THREADS = 10
OPS_PER_THREAD = 160
KEYS = [f"k{i}" for i in range(8)]
NS = ("users", "u1")
WORDS = ["alpha", "beta", "gamma", "delta"]


def _value(rng: random.Random) -> dict[str, object]:
    # Texts that rank the items differently for each query word, and differently from recency.
    return {"n": rng.randint(0, 2), "text": " ".join(rng.sample(WORDS, rng.randint(1, 4)))}


def test_refreshing_searches_and_writes_do_not_deadlock(dsn: str, schema: str) -> None:
    ttl = {"default_ttl": 10.0, "refresh_on_read": True}
    with PostgresStore.from_conn_string(dsn, schema=schema, ttl=ttl, max_size=THREADS) as store:
        seed = random.Random(0)
        for k in KEYS:
            store.put(NS, k, _value(seed))
        conflicts: list[BaseException] = []
        others: list[BaseException] = []

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            actions: list[Callable[[], object]] = [
                lambda: store.search(NS, limit=len(KEYS)),  # newest first
                lambda: store.search(NS, query=rng.choice(WORDS), limit=len(KEYS)),  # by rank
                lambda: store.search(("users",), filter={"n": 1}, limit=len(KEYS)),
                lambda: store.put(NS, rng.choice(KEYS), _value(rng)),
                lambda: store.delete(NS, rng.choice(KEYS)),
            ]
            for _ in range(OPS_PER_THREAD):
                try:
                    rng.choice(actions)()
                except ConflictError as exc:  # a deadlock (or serialization failure) in Postgres
                    conflicts.append(exc)
                except Exception as exc:  # reported below
                    others.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "workers still running after 300 s"
        assert others == []
        assert conflicts == [], f"{len(conflicts)} of {THREADS * OPS_PER_THREAD} operations: {conflicts[0]}"


class _Counting(AsyncStateStore):
    """The core store, counting the put_memory calls in progress (a spy: the calls are real)."""

    inside = peak = 0

    async def put_memory(self, *args: Any, **kwargs: Any) -> Any:
        _Counting.inside += 1
        _Counting.peak = max(_Counting.peak, _Counting.inside)
        try:
            return await super().put_memory(*args, **kwargs)
        finally:
            _Counting.inside -= 1


async def test_gathered_calls_run_as_many_at_a_time_as_the_pool_has_connections(dsn: str, schema: str) -> None:
    """Upstream's test_large_batches_async gathers 60,000 calls: all of them started their work at once,
    and the event loop was too busy for the pool's first connection to open within its 10 s. Calls
    beyond the pool's size now wait before doing anything."""
    async with _Counting(dsn, schema=schema, max_size=2) as core:
        store = PostgresStore(store=core, max_size=2)
        await asyncio.gather(*(store.aput(NS, f"k{i}", {"i": i}) for i in range(50)))
        assert len(await store.asearch(NS, limit=100)) == 50
    assert _Counting.peak <= 2


def test_batches_putting_the_same_keys_in_other_orders_do_not_deadlock(dsn: str, schema: str) -> None:
    """A batch's consecutive puts are one statement, which locked its rows in the order given: two batches
    writing the same keys in opposite orders deadlocked (19 of 400 batches of 20 puts, 4 threads)."""
    keys = [f"k{i:02}" for i in range(20)]
    errors: list[Exception] = []
    with PostgresStore.from_conn_string(dsn, schema=schema, max_size=4) as store:

        def work(order: list[str]) -> None:
            for n in range(50):
                try:
                    store.batch([PutOp(NS, k, {"n": n}) for k in order])
                except ConflictError as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=work, args=(o,)) for o in (keys, keys[::-1], keys, keys[::-1])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
