"""Core benchmark: a turn against the brief's naive code and against the physical floor.

    .venv/bin/python benchmarks/bench_core.py [--dsn DSN] [--runs 3] [--only latency,floor,...] [--quick]

A turn is the brief's "load state -> process -> save state": load the conversation, its newest 20 messages
and its state; append the customer's message and the agent's reply; save the state (two keys changed).
The naive code is the brief's, written plainly with psycopg: three tables (conversations,
conversation_messages, conversation_state), one transaction of 3 SELECTs (the whole history, as the brief
does), 2 INSERTs and 2 UPDATEs. Each section interleaves the sides (the order flips every iteration) so that
a shared machine's noise hits both alike; every run prints its figures, and the summary gives the median of
the runs. Sections:

  latency     turn time at 20 / 200 / 1,000 / 5,000 messages of history, ours / naive, sync and async
              stores (target <= 0.6x at every size)
  floor       turn time / one raw single-row INSERT in autocommit, one round trip and one WAL flush
              (target <= 2.2x); and the same two statements a turn sends (turn_load, turn_save) from a
              bare psycopg connection with their parameters built beforehand: the schema's own bound
              (bare / floor) and the library's cost on top of it (ours / bare)
  cpu         client CPU per turn (CPU time of the calling thread, kernel included), ours and naive
  throughput  turns/s from one process (asyncio, a pool of 10 connections per side) at 10 / 200 / 1,000
              concurrent conversations, ours / naive (target >= 1.5x, p99 latency no worse), and ours at
              10,000 vs 10 messages of history (flat)
  append      one append + state patch in one version-checked statement (the adapters' append path) /
              the floor (target <= 1.5x)
  history     reading the last 20 messages at 10 / 1,000 / 10,000 of history (10,000 within 1.3x of 10)

DSN: --dsn, else $PGAGENTSTATE_BENCH_DSN, else postgresql://postgres@127.0.0.1:5432/postgres. Everything
lives in two throwaway schemas, dropped at the end.

--rtt MS puts a network between both sides and Postgres: every connection goes through the tests' fault proxy
(tools/fault_proxy.py) in latency mode, MS/2 each way. Loopback round trips cost ~0.03 ms here, so the default
run measures server and client work; a server in another zone or behind a pooler is 0.3-1 ms away, and there
a turn's round trips (2 for ours, 9 for the naive code) dominate. The proxy forwards in one thread per
direction per connection, which the throughput section's 20 connections would contend on: use it with
--only latency.

--pin runs this process on CPU 0 and the local server's processes on CPU 1 (benchmarks/pinning.py): on
loopback a round trip costs ~0.04 ms when a connection's server process shares the client's core and
~0.08 ms when it does not, luck that lasts as long as the connection, so sides with their own connections
can draw different luck for a whole run. Pinned, every connection pays the cross-core round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from pgagentstate import AsyncStateStore, NewEvent, StateRef, StateStore, queries
from pgagentstate.ops import events as event_ops
from pgagentstate.ops import state as state_ops

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from fault_proxy import FaultProxy
from pinning import pinned

SIZES = (20, 200, 1_000, 5_000)
POOL = 10  # connections per side in the throughput section (the store's default max_size)

NAIVE_DDL = """
CREATE TABLE {s}.conversations (
    conversation_id uuid PRIMARY KEY, customer_id uuid NOT NULL, channel varchar(50) NOT NULL,
    status varchar(50) NOT NULL, created_at timestamp DEFAULT now(), updated_at timestamp DEFAULT now());
CREATE INDEX ON {s}.conversations (customer_id);
CREATE INDEX ON {s}.conversations (channel);
CREATE INDEX ON {s}.conversations (status);
CREATE TABLE {s}.conversation_messages (
    message_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id uuid NOT NULL REFERENCES {s}.conversations (conversation_id),
    sender varchar(50) NOT NULL, message_text text NOT NULL, timestamp timestamp DEFAULT now());
CREATE INDEX ON {s}.conversation_messages (conversation_id);
CREATE TABLE {s}.conversation_state (
    state_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    conversation_id uuid NOT NULL REFERENCES {s}.conversations (conversation_id),
    workflow_step int, workflow_status varchar(50), context_data jsonb, external_calls jsonb,
    last_error varchar(500), updated_at timestamp DEFAULT now());
CREATE INDEX ON {s}.conversation_state (conversation_id);
CREATE INDEX ON {s}.conversation_state (workflow_status);
CREATE TABLE {s}.floor_events (id bigserial PRIMARY KEY, payload jsonb);
"""


class Naive:
    """The brief's process_customer_message, with its queries as written there."""

    def __init__(self, schema: str) -> None:
        q = {
            "conv": "SELECT * FROM {s}.conversations WHERE conversation_id = %s",
            "messages": "SELECT * FROM {s}.conversation_messages WHERE conversation_id = %s ORDER BY timestamp",
            "state": "SELECT * FROM {s}.conversation_state WHERE conversation_id = %s",
            "insert": "INSERT INTO {s}.conversation_messages (conversation_id, sender, message_text)"
            " VALUES (%s, %s, %s)",
            "calls": "UPDATE {s}.conversation_state SET external_calls = %s WHERE conversation_id = %s",
            "step": "UPDATE {s}.conversation_state SET workflow_step = %s WHERE conversation_id = %s",
        }
        self.schema_id = sql.Identifier(schema)
        self.q = {k: sql.SQL(v).format(s=self.schema_id) for k, v in q.items()}

    def turn(self, conn: psycopg.Connection[Any], cid: uuid.UUID, i: int) -> int:
        q = self.q
        with conn.transaction():
            conn.execute(q["conv"], (cid,)).fetchone()
            messages = conn.execute(q["messages"], (cid,)).fetchall()
            conn.execute(q["state"], (cid,)).fetchone()
            reply = agent_reply(i, len(messages))
            conn.execute(q["insert"], (cid, "customer", f"message {i}"))
            conn.execute(q["insert"], (cid, "agent", reply))
            conn.execute(q["calls"], (Jsonb([{"api": "payment", "n": i}]), cid))
            conn.execute(q["step"], (i, cid))
        return len(messages)

    async def aturn(self, conn: psycopg.AsyncConnection[Any], cid: uuid.UUID, i: int) -> int:
        q = self.q
        async with conn.transaction():
            await (await conn.execute(q["conv"], (cid,))).fetchone()
            messages = await (await conn.execute(q["messages"], (cid,))).fetchall()
            await (await conn.execute(q["state"], (cid,))).fetchone()
            reply = agent_reply(i, len(messages))
            await conn.execute(q["insert"], (cid, "customer", f"message {i}"))
            await conn.execute(q["insert"], (cid, "agent", reply))
            await conn.execute(q["calls"], (Jsonb([{"api": "payment", "n": i}]), cid))
            await conn.execute(q["step"], (i, cid))
        return len(messages)

    def create(self, conn: psycopg.Connection[Any], size: int) -> uuid.UUID:
        """A conversation with ``size`` messages of history and its state row."""
        cid = uuid.uuid4()
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.conversations (conversation_id, customer_id, channel, status) "
                "VALUES (%s, %s, 'whatsapp', 'active')"
            ).format(s=self.schema_id),
            (cid, uuid.uuid4()),
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {s}.conversation_state (conversation_id, workflow_step, context_data) "
                "VALUES (%s, 0, '{{}}')"
            ).format(s=self.schema_id),
            (cid,),
        )
        with conn.cursor() as cur:
            cur.executemany(self.q["insert"], [(cid, sender(k), history_text(k)) for k in range(size)])
        conn.commit()
        return cid


def agent_reply(i: int, seen: int) -> str:
    return f"answer {i} ({seen} messages of context)"


def sender(k: int) -> str:
    return "customer" if k % 2 else "agent"


def history_text(k: int) -> str:
    return f"message {k} " + "x" * 80


def history(size: int) -> list[NewEvent]:
    return [NewEvent({"role": sender(k), "text": history_text(k)}, author=sender(k)) for k in range(size)]


def ours(store: StateStore, cid: str, i: int) -> int:
    with store.turn(cid) as turn:
        reply = agent_reply(i, len(turn.events))
        turn.append({"role": "customer", "text": f"message {i}"}, author="customer")
        turn.append({"role": "agent", "text": reply}, author="agent")
        turn.state["external_calls"] = [{"api": "payment", "n": i}]
        turn.state["workflow_step"] = i
    return len(turn.events)


async def aours(store: AsyncStateStore, cid: str, i: int) -> int:
    async with store.turn(cid) as turn:
        reply = agent_reply(i, len(turn.events))
        turn.append({"role": "customer", "text": f"message {i}"}, author="customer")
        turn.append({"role": "agent", "text": reply}, author="agent")
        turn.state["external_calls"] = [{"api": "payment", "n": i}]
        turn.state["workflow_step"] = i
    return len(turn.events)


def ours_create(store: StateStore, size: int) -> str:
    """A conversation with ``size`` messages of history and its state document, as Naive.create makes one
    with its state row: a timed turn then updates a state on both sides (each conversation gets one timed
    turn at 20 messages, so without it every turn of ours created its document while the naive code updated
    a row)."""
    cid = f"c{size}-{uuid.uuid4().hex[:10]}"
    store.create_conversation(cid, channel="whatsapp")
    events = history(size)
    for start in range(0, size, 500):
        store.append_events(cid, events[start : start + 500])
    store.put_state(StateRef.conversation(cid, "state"), {"workflow_step": 0, "context_data": {}})
    return cid


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


def conversations_for(size: int, turns: int) -> int:
    """Enough conversations that the turns grow each history by ~1% at most (a turn adds 2 messages),
    within ~200,000 stored messages per side."""
    return max(1, min(turns, 200_000 // size, turns * 2 * 100 // size or 1))


# --- sections ----------------------------------------------------------------------------------------


def bench_latency(env: Env, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in SIZES:
        n = conversations_for(size, rounds)
        mine = [ours_create(env.store, size) for _ in range(n)]
        theirs = [env.naive.create(env.conn, size) for _ in range(n)]
        env.analyze()
        for i in range(min(n, 10)):  # warm-up: caches, psycopg's prepared statements
            ours(env.store, mine[i], -i)
            env.naive.turn(env.conn, theirs[i], -i)
        a: list[float] = []
        b: list[float] = []
        for i in range(rounds):
            first, second = (0, 1) if i % 2 else (1, 0)
            for side in (first, second):
                t0 = time.perf_counter()
                if side:
                    ours(env.store, mine[i % n], i)
                else:
                    env.naive.turn(env.conn, theirs[i % n], i)
                (b if side else a).append(time.perf_counter() - t0)
        out[f"sync_{size}"] = {"ours_ms": ms(b), "naive_ms": ms(a), "ratio": ms(b) / ms(a)}
        out[f"async_{size}"] = asyncio.run(_async_latency(env, size, rounds, n))
    return out


async def _async_latency(env: Env, size: int, rounds: int, n: int) -> dict[str, float]:
    async with AsyncStateStore(env.dsn, schema=env.ours_schema) as store:
        conn = await psycopg.AsyncConnection.connect(env.dsn)
        try:
            mine = [ours_create(env.store, size) for _ in range(n)]
            theirs = [env.naive.create(env.conn, size) for _ in range(n)]
            env.analyze()
            for i in range(min(n, 10)):
                await aours(store, mine[i], -i)
                await env.naive.aturn(conn, theirs[i], -i)
            a: list[float] = []
            b: list[float] = []
            for i in range(rounds):
                first, second = (0, 1) if i % 2 else (1, 0)
                for side in (first, second):
                    t0 = time.perf_counter()
                    if side:
                        await aours(store, mine[i % n], i)
                    else:
                        await env.naive.aturn(conn, theirs[i % n], i)
                    (b if side else a).append(time.perf_counter() - t0)
        finally:
            await conn.close()
    return {"ours_ms": ms(b), "naive_ms": ms(a), "ratio": ms(b) / ms(a)}


class Bare:
    """A turn's two statements (turn_load, turn_save: the library's own SQL) sent from a bare psycopg
    connection, their parameters built before the clock starts: what this schema's turn costs with no
    library code around it. Bare / floor is the design's own bound; ours / bare is the library's cost."""

    def __init__(self, env: Env, cids: list[str], rounds: int, warmup: int) -> None:
        ctx = env.store.context
        schema = env.ours_schema
        self.load_q = queries.query("turn_load", schema)
        self.save_q = queries.query("turn_save", schema)
        self.cids = cids
        self.conn = psycopg.connect(env.dsn, autocommit=True)
        versions = {}
        for cid in cids:
            with env.store.turn(cid) as turn:  # the versions the bare turns start from
                pass
            versions[cid] = [turn.conversation.version, turn.state_version]
        self.loads: list[dict[str, Any]] = []
        self.saves: list[dict[str, Any]] = []
        for i in range(-warmup, rounds):
            cid = cids[i % len(cids)]
            v = versions[cid]
            prepared = event_ops.prepare_append(
                ctx,
                cid,
                [
                    NewEvent({"role": "customer", "text": f"message {i}"}, author="customer"),
                    NewEvent({"role": "agent", "text": agent_reply(i, 20)}, author="agent"),
                ],
                None,
            )
            data = {"external_calls": [{"api": "payment", "n": i}], "workflow_step": i}
            self.loads.append({"tenant": ctx.tenant, "id": cid, "limit": 20, "state_name": "state"})
            self.saves.append(
                {
                    "tenant": ctx.tenant,
                    "id": cid,
                    "expected_version": v[0],
                    "status": None,
                    "state_name": "state",
                    "state": state_ops.put_data(ctx, StateRef.conversation(cid, "state"), data),
                    "state_version": v[1],
                    **event_ops.rows_params(prepared),
                }
            )
            v[0] += 1
            v[1] += 1
        self.warmup = warmup

    def turn(self, i: int) -> None:
        k = i + self.warmup
        self.conn.execute(self.load_q, self.loads[k], prepare=True).fetchone()
        self.conn.execute(self.save_q, self.saves[k], prepare=True).fetchall()


def bench_floor_and_cpu(env: Env, rounds: int) -> dict[str, Any]:
    """Turns at 20 messages of history, raw INSERTs, naive turns and bare turns interleaved; wall and thread
    CPU time."""
    n = conversations_for(20, rounds)
    mine = [ours_create(env.store, 20) for _ in range(n)]
    theirs = [env.naive.create(env.conn, 20) for _ in range(n)]
    bare = Bare(env, [ours_create(env.store, 20) for _ in range(n)], rounds, 30)
    env.analyze()
    insert = sql.SQL("INSERT INTO {}.floor_events (payload) VALUES (%s::jsonb)").format(env.naive.schema_id)
    text = json.dumps({"role": "customer", "text": "meu@email.com", "channel": "whatsapp"})
    samples: dict[str, list[float]] = {"ours": [], "naive": [], "floor": [], "bare": []}
    cpu: dict[str, list[float]] = {"ours": [], "naive": [], "floor": [], "bare": []}
    with psycopg.connect(env.dsn, autocommit=True) as floor, bare.conn:
        steps: dict[str, Callable[[int], Any]] = {
            "ours": lambda i: ours(env.store, mine[i % n], i),
            "naive": lambda i: env.naive.turn(env.conn, theirs[i % n], i),
            "floor": lambda i: floor.execute(insert, (text,)),
            "bare": bare.turn,
        }
        for i in range(-30, 0):
            for step in steps.values():
                step(i)
        order = list(steps)
        for i in range(rounds):
            for name in order[i % 4 :] + order[: i % 4]:
                c0, t0 = time.thread_time(), time.perf_counter()
                steps[name](i)
                t1, c1 = time.perf_counter(), time.thread_time()
                samples[name].append(t1 - t0)
                cpu[name].append(c1 - c0)
    return {
        "floor": {
            "ours_ms": ms(samples["ours"]),
            "floor_ms": ms(samples["floor"]),
            "ratio": ms(samples["ours"]) / ms(samples["floor"]),
            "bare_ms": ms(samples["bare"]),
            "bare_ratio": ms(samples["bare"]) / ms(samples["floor"]),
            "ours_over_bare": ms(samples["ours"]) / ms(samples["bare"]),
            "naive_ms": ms(samples["naive"]),
            "bare_over_naive": ms(samples["bare"]) / ms(samples["naive"]),
        },
        "cpu": {f"{k}_ms": statistics.mean(v) * 1000 for k, v in cpu.items()},
    }


def bench_throughput(env: Env, seconds: float) -> dict[str, Any]:
    return asyncio.run(_throughput(env, seconds))


async def _throughput(env: Env, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with (
        AsyncStateStore(env.dsn, schema=env.ours_schema, min_size=POOL, max_size=POOL) as store,
        AsyncConnectionPool(env.dsn, min_size=POOL, max_size=POOL, open=False) as pool,
    ):
        await pool.open(wait=True)
        for concurrency in (10, 200, 1_000):
            per_task = max(1, 600 // concurrency)  # ~600+ conversations: histories grow ~1% a slice
            mine = [[ours_create(env.store, 20) for _ in range(per_task)] for _ in range(concurrency)]
            theirs = [[env.naive.create(env.conn, 20) for _ in range(per_task)] for _ in range(concurrency)]
            env.analyze()

            async def naive_turn(cid: Any, i: int) -> Any:
                async with pool.connection() as conn:
                    return await env.naive.aturn(conn, cid, i)

            slices: dict[str, list[tuple[float, float]]] = {"ours": [], "naive": []}
            for k in range(4):  # warm-up slice pair (short), then alternate ours / naive
                for name in ("ours", "naive") if k % 2 else ("naive", "ours"):
                    fn: Callable[[Any, int], Awaitable[Any]] = (
                        (lambda cid, i: aours(store, cid, i)) if name == "ours" else naive_turn
                    )
                    result = await _drive(fn, mine if name == "ours" else theirs, seconds if k else 1.0)
                    if k:
                        slices[name].append(result)
            o = statistics.median(r[0] for r in slices["ours"])
            p = statistics.median(r[0] for r in slices["naive"])
            out[f"c{concurrency}"] = {
                "ours_tps": o,
                "naive_tps": p,
                "ratio": o / p,
                "ours_p99_ms": statistics.median(r[1] for r in slices["ours"]),
                "naive_p99_ms": statistics.median(r[1] for r in slices["naive"]),
            }
        # Flat: ours at 10 concurrent conversations with 10 vs 10,000 messages of history.
        flat: dict[int, list[float]] = {10: [], 10_000: []}
        cids = {size: [[ours_create(env.store, size) for _ in range(2)] for _ in range(10)] for size in flat}
        env.analyze()
        for k in range(4):
            for size in (10, 10_000) if k % 2 else (10_000, 10):
                tps, _ = await _drive(lambda cid, i: aours(store, cid, i), cids[size], seconds if k else 1.0)
                if k:
                    flat[size].append(tps)
        small, big = statistics.median(flat[10]), statistics.median(flat[10_000])
        out["flat"] = {"tps_at_10": small, "tps_at_10000": big, "ratio_10_vs_10000": small / big}
    return out


async def _drive(
    turn: Callable[[Any, int], Awaitable[Any]], cids: list[list[Any]], seconds: float
) -> tuple[float, float]:
    """Run one task per entry of ``cids`` (each cycling through its conversations) for ``seconds``:
    (turns per second, p99 latency in ms)."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def task(mine: list[Any]) -> None:
        i = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await turn(mine[i % len(mine)], i)
            latencies.append(time.perf_counter() - t0)
            i += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(task(m) for m in cids))
    return len(latencies) / (time.perf_counter() - t0), pct(latencies, 99)


def bench_append(env: Env, rounds: int) -> dict[str, float]:
    cid = f"bench-{uuid.uuid4().hex[:8]}"
    env.store.create_conversation(cid)
    env.analyze()
    ref = StateRef.conversation(cid)
    insert = sql.SQL("INSERT INTO {}.floor_events (payload) VALUES (%s::jsonb)").format(env.naive.schema_id)
    ours_s: list[float] = []
    raw: list[float] = []
    payload = {"role": "customer", "text": "meu@email.com", "channel": "whatsapp"}
    text = json.dumps(payload)
    with psycopg.connect(env.dsn, autocommit=True) as floor:
        for i in range(rounds):
            t0 = time.perf_counter()
            env.store.append_events(cid, [NewEvent(payload)], expected_seq=i, state_patches=[(ref, {"turn": i})])
            t1 = time.perf_counter()
            floor.execute(insert, (text,))
            t2 = time.perf_counter()
            ours_s.append(t1 - t0)
            raw.append(t2 - t1)
    return {"ours_ms": ms(ours_s), "floor_ms": ms(raw), "ratio": ms(ours_s) / ms(raw)}


def bench_history(env: Env, rounds: int) -> dict[str, float]:
    cids = {size: ours_create(env.store, size) for size in (10, 1_000, 10_000)}
    env.analyze()
    samples: dict[int, list[float]] = {size: [] for size in cids}
    for _ in range(rounds):
        for size, cid in cids.items():
            t0 = time.perf_counter()
            events = env.store.list_events(cid, limit=20)
            samples[size].append(time.perf_counter() - t0)
            assert len(events) == min(20, size)
    out = {f"last20_at_{size}_ms": ms(v) for size, v in samples.items()}
    out["ratio_10000_vs_10"] = out["last20_at_10000_ms"] / out["last20_at_10_ms"]
    return out


class Env:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        suffix = uuid.uuid4().hex[:8]
        self.ours_schema, self.naive_schema = f"bench_ours_{suffix}", f"bench_naive_{suffix}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.naive_schema)))
            conn.execute(NAIVE_DDL.replace("{s}", f'"{self.naive_schema}"'))
        self.naive = Naive(self.naive_schema)
        self.store = StateStore(dsn, schema=self.ours_schema)
        self.store.setup()
        self.conn = psycopg.connect(dsn)

    def analyze(self) -> None:
        """ANALYZE both sides' tables once a section has made its conversations, as autovacuum does on a
        server in service (it is off on the Postgres here). Without it a connection keeps the plans it made
        while a table was nearly empty: the foreign-key check of every appended event stayed a sequential
        scan of conversations on the sync store's long-lived connection (its turn 1.41-1.50 ms against
        0.86-0.87 ms on a newer connection after 2,500 conversations; equal after ANALYZE)."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN (%s, %s)",
                (self.ours_schema, self.naive_schema),
            ).fetchall()
            for schema, table in tables:
                conn.execute(sql.SQL("ANALYZE {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))

    def close(self) -> None:
        self.conn.close()
        self.store.close()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for schema in (self.ours_schema, self.naive_schema):
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def one_run(dsn: str, only: set[str], quick: bool) -> dict[str, Any]:
    rounds = 200 if quick else 1000
    env = Env(dsn)
    out: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    try:
        if "latency" in only:
            out["latency"] = bench_latency(env, rounds // 2)
        if only & {"floor", "cpu"}:
            out.update(bench_floor_and_cpu(env, rounds))
        if "throughput" in only:
            out["throughput"] = bench_throughput(env, 1.0 if quick else 5.0)
        if "append" in only:
            out["append"] = bench_append(env, rounds)
        if "history" in only:
            out["history"] = bench_history(env, rounds // 2)
    finally:
        env.close()
    out["load_after"] = os.getloadavg()[0]
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-key median over runs, for every numeric leaf."""
    first = runs[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = median_of([r[key] for r in runs])
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def report(m: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    def each(path: list[str]) -> str:
        vals = []
        for r in runs:
            v: Any = r
            for p in path:
                v = v[p]
            vals.append(f"{v:.2f}")
        return ", ".join(vals)

    if "latency" in m:
        print("turn time, ours / naive (target <= 0.6x):")
        for key, v in m["latency"].items():
            print(
                f"  {key:<11} ours {v['ours_ms']:7.3f} ms  naive {v['naive_ms']:7.3f} ms  ratio {v['ratio']:.2f}x"
                f"  (runs: {each(['latency', key, 'ratio'])})  {verdict(v['ratio'] <= 0.6)}"
            )
    if "floor" in m:
        v = m["floor"]
        print(
            f"turn / raw INSERT in autocommit (target <= 2.2x): ours {v['ours_ms']:.3f} ms, floor "
            f"{v['floor_ms']:.3f} ms, {v['ratio']:.2f}x (runs: {each(['floor', 'ratio'])})"
            f"  {verdict(v['ratio'] <= 2.2)}"
        )
        print(
            f"  the same two statements from a bare connection (no library code): {v['bare_ms']:.3f} ms, "
            f"{v['bare_ratio']:.2f}x the floor (runs: {each(['floor', 'bare_ratio'])}), "
            f"{v['bare_over_naive']:.2f}x the naive turn (runs: {each(['floor', 'bare_over_naive'])}); "
            f"ours / bare {v['ours_over_bare']:.2f}x"
        )
    if "cpu" in m:
        v = m["cpu"]
        print(
            f"client CPU per turn: ours {v['ours_ms']:.3f} ms, naive {v['naive_ms']:.3f} ms, "
            f"raw INSERT {v['floor_ms']:.3f} ms, bare turn {v['bare_ms']:.3f} ms"
        )
    if "throughput" in m:
        print("throughput from one process, ours / naive (target >= 1.5x, p99 no worse):")
        for key, v in m["throughput"].items():
            if key == "flat":
                print(
                    f"  history 10 vs 10,000 messages: {v['tps_at_10']:.0f} vs {v['tps_at_10000']:.0f} turns/s, "
                    f"{v['ratio_10_vs_10000']:.2f}x (runs: {each(['throughput', 'flat', 'ratio_10_vs_10000'])})"
                )
                continue
            ok = v["ratio"] >= 1.5 and v["ours_p99_ms"] <= v["naive_p99_ms"]
            print(
                f"  {key:<6} ours {v['ours_tps']:7.0f}/s p99 {v['ours_p99_ms']:7.2f} ms"
                f"   naive {v['naive_tps']:7.0f}/s "
                f"p99 {v['naive_p99_ms']:7.2f} ms   {v['ratio']:.2f}x (runs: {each(['throughput', key, 'ratio'])})"
                f"  {verdict(ok)}"
            )
    if "append" in m:
        v = m["append"]
        print(
            f"append + state patch, one statement / raw INSERT (target <= 1.5x): {v['ours_ms']:.3f} / "
            f"{v['floor_ms']:.3f} ms, {v['ratio']:.2f}x  {verdict(v['ratio'] <= 1.5)}"
        )
    if "history" in m:
        v = m["history"]
        print(
            f"last 20 messages at 10 / 1,000 / 10,000 of history: {v['last20_at_10_ms']:.3f} / "
            f"{v['last20_at_1000_ms']:.3f} / {v['last20_at_10000_ms']:.3f} ms, 10,000 vs 10: "
            f"{v['ratio_10000_vs_10']:.2f}x  {verdict(v['ratio_10000_vs_10'] <= 1.3)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="latency,floor,cpu,throughput,append,history")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 1 s throughput slices (development)")
    parser.add_argument("--rtt", type=float, default=0.0, help="a network round trip of MS milliseconds (see above)")
    parser.add_argument("--pin", action="store_true", help="this process on CPU 0, the server on CPU 1 (see above)")
    args = parser.parse_args()
    only = set(args.only.split(","))
    dsn, proxy = args.dsn, None
    if args.rtt:
        target = psycopg.conninfo.conninfo_to_dict(dsn)
        proxy = FaultProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
        proxy.set("latency", delay=args.rtt / 2000)
        dsn = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)
    runs = []
    try:
        with pinned(dsn) if args.pin else nullcontext("not pinned") as placement:
            print(placement, flush=True)
            for k in range(args.runs):
                run = one_run(dsn, only, args.quick)
                print(json.dumps({"run": k + 1, **run}), flush=True)
                runs.append(run)
    finally:
        if proxy is not None:
            proxy.close()
    print(
        f"\nmedians of {len(runs)} runs (1-minute load average {runs[0]['load_before']:.2f} at the start, "
        f"{runs[-1]['load_after']:.2f} at the end{f'; {args.rtt} ms round trip' if args.rtt else ''}"
        f"{'; client and server pinned to CPUs 0 and 1' if args.pin else ''}):"
    )
    report(median_of(runs), runs)


if __name__ == "__main__":
    main()
