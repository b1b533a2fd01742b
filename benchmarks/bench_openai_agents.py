"""PostgresSession vs the Agents SDK's SQLAlchemySession (postgresql+psycopg, async), same Postgres, one run.

    python benchmarks/bench_openai_agents.py [--iterations 400]

DSN: $PGAGENTSTATE_BENCH_DSN, else postgresql://postgres@127.0.0.1:5432/postgres. Both sides get their own
tables (a throwaway schema for pgagentstate, uniquely named tables for the peer), dropped at the end.
Measurements are interleaved (peer and ours alternate, the order flipping every iteration) so that noise
from a shared machine hits both alike. Prints medians, p90s and ratios (ours / peer; lower is better).

Targets: add_items of 2 items <= 0.3x the peer, get_items() of a 100- and a 1,000-item history <= 0.35x,
pop_item <= 0.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import PostgresSession

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def two_items(i: int) -> list[Any]:
    """What the Runner adds per tool turn: a function call and its output."""
    return [
        {
            "arguments": f'{{"order_id":"{i}"}}',
            "call_id": f"call_{i}",
            "name": "lookup_order",
            "type": "function_call",
            "id": f"fc_{i}",
        },
        {"call_id": f"call_{i}", "output": f"order {i}: delivered broken", "type": "function_call_output"},
    ]


def history_item(i: int) -> Any:
    if i % 2:
        return {"role": "user", "content": f"Oi, mensagem {i} sobre o pedido #12345, chegou quebrado."}
    return {
        "id": f"msg_{i}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": f"Resposta {i}: vou verificar o reembolso.",
                "annotations": [],
                "logprobs": [],
            }
        ],
    }


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter_ns()
    await fn()
    return (time.perf_counter_ns() - t0) / 1e6


def summary(name: str, ours: list[float], peer: list[float], target: float | None) -> bool:
    mo, mp = statistics.median(ours), statistics.median(peer)
    p90o = statistics.quantiles(ours, n=10)[-1]
    p90p = statistics.quantiles(peer, n=10)[-1]
    ratio = mo / mp
    verdict = "" if target is None else (f"  target <= {target}x: {'PASS' if ratio <= target else 'FAIL'}")
    print(
        f"{name:<28} ours {mo:7.3f} ms (p90 {p90o:7.3f})   SQLAlchemySession {mp:7.3f} ms (p90 {p90p:7.3f})"
        f"   ratio {ratio:5.2f}x{verdict}"
    )
    return target is None or ratio <= target


async def main(iterations: int, warmup: int) -> int:
    dsn = os.environ.get("PGAGENTSTATE_BENCH_DSN", DEFAULT_DSN)
    suffix = uuid.uuid4().hex[:8]
    schema = f"bench_oa_{suffix}"
    sessions_table, messages_table = f"bench_sessions_{suffix}", f"bench_messages_{suffix}"
    engine = create_async_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    store = AsyncStateStore(dsn, schema=schema)
    try:
        await store.setup()

        def peer(sid: str) -> SQLAlchemySession:
            return SQLAlchemySession(
                sid, engine=engine, create_tables=True, sessions_table=sessions_table, messages_table=messages_table
            )

        def ours(sid: str) -> PostgresSession:
            return PostgresSession(sid, store=store)

        # Background data on both sides, then fresh planner statistics: production tables are neither empty
        # nor unanalyzed, and plans chosen for an empty table are not the ones that matter.
        for n in range(50):
            await peer(f"bg{n}").add_items([history_item(i) for i in range(20)])
            await ours(f"bg{n}").add_items([history_item(i) for i in range(20)])
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in (
                f'"{schema}".events',
                f'"{schema}".conversations',
                f'"{messages_table}"',
                f'"{sessions_table}"',
            ):
                conn.execute(f"ANALYZE {table}")

        # add_items of 2 items, appended to a growing session on each side.
        p_add, o_add = peer("add"), ours("add")
        await p_add.add_items(two_items(-1))
        await o_add.add_items(two_items(-1))
        add_o: list[float] = []
        add_p: list[float] = []
        for i in range(warmup + iterations):
            items = two_items(i)
            first, second = (p_add, o_add) if i % 2 else (o_add, p_add)
            t1 = await timed(functools.partial(first.add_items, items))
            t2 = await timed(functools.partial(second.add_items, items))
            if i >= warmup:
                (add_p if first is p_add else add_o).append(t1)
                (add_p if second is p_add else add_o).append(t2)

        # get_items() of a 100- and a 1,000-item history.
        gets: dict[int, tuple[list[float], list[float]]] = {}
        for size in (100, 1_000):
            p_get, o_get = peer(f"get{size}"), ours(f"get{size}")
            history = [history_item(i) for i in range(size)]
            await p_get.add_items(history)
            await o_get.add_items(history)
            assert await p_get.get_items() == await o_get.get_items() == history
            get_o: list[float] = []
            get_p: list[float] = []
            rounds = iterations if size == 100 else max(iterations // 4, 20)
            for i in range(warmup + rounds):
                first, second = (p_get, o_get) if i % 2 else (o_get, p_get)
                t1 = await timed(first.get_items)
                t2 = await timed(second.get_items)
                if i >= warmup:
                    (get_p if first is p_get else get_o).append(t1)
                    (get_p if second is p_get else get_o).append(t2)
            gets[size] = (get_o, get_p)
        p_get, o_get = peer("get100"), ours("get100")
        history = [history_item(i) for i in range(100)]

        # pop_item + add back (informational): the Runner's rewind path.
        pop_o: list[float] = []
        pop_p: list[float] = []
        for i in range(warmup + iterations // 2):
            for s, acc in ((p_get, pop_p), (o_get, pop_o)) if i % 2 else ((o_get, pop_o), (p_get, pop_p)):
                t = await timed(s.pop_item)
                await s.add_items([history[-1]])
                if i >= warmup:
                    acc.append(t)

        print(
            f"openai-agents sessions on {dsn.split('@')[-1]}, {iterations} interleaved iterations "
            f"(median, milliseconds; ratio = ours / peer)"
        )
        ok = summary("add_items (2 items)", add_o, add_p, 0.3)
        for size, (get_o, get_p) in gets.items():
            ok &= summary(f"get_items() of {size:,} items", get_o, get_p, 0.35)
        ok &= summary("pop_item", pop_o, pop_p, 0.5)
        return 0 if ok else 1
    finally:
        await store.close()
        await engine.dispose()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'DROP TABLE IF EXISTS "{messages_table}", "{sessions_table}" CASCADE')


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.iterations, args.warmup)))
