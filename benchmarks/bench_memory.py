"""Long-term memory by meaning: pgagentstate's PostgresStore vs langgraph-checkpoint-postgres's PostgresStore
with the same index (HNSW, cosine, 384 dimensions), side by side on one Postgres with pgvector.

    .venv/bin/python benchmarks/bench_memory.py [--sizes 10000,100000] [--queries 200] [--rounds 3]

Postgres: $PGAGENTSTATE_BENCH_DSN, else the embedded server (pgvector 0.6). Each store gets a database of its
own; both load the same items (the same texts, embedded by the same deterministic HashEmbeddings) with
indexes built after the load, then searches run interleaved (peer, ours, in a rotating order) over the same
queries. Reported per size: search p50/p99 (ms) and recall@10 against exact search (pgvector's operator over
every row, no index) for each, and the ratio ours/peer; put with embedding of 1 and 100 items per batch;
distillation throughput (conversations/s, deterministic extractor). Medians over --rounds. Record the load.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore as PeerStore

from pgagentstate import HashEmbeddings, NewEvent, StateStore
from pgagentstate.langgraph import PostgresStore as OurStore

DIMS = 384
WORDS = [f"w{i}" for i in range(20_000)]


def server_dsn() -> str:
    env = os.environ.get("PGAGENTSTATE_BENCH_DSN")
    if env:
        return env
    from pathlib import Path

    from pgagentstate.embedded import embedded_dsn

    return embedded_dsn(Path(".pgagentstate/bench-pg"))


def database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    if "/postgres?" in admin:
        return admin.replace("/postgres?", f"/{name}?", 1)
    return admin.rsplit("/", 1)[0] + "/" + name


def texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=12)) for _ in range(n)]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def load(store: Any, items: list[str], batch: int = 500) -> None:
    for i in range(0, len(items), batch):
        store.batch([PutOp(("docs",), f"d{j}", {"text": items[j]}) for j in range(i, min(i + batch, len(items)))])


def exact_top(dsn: str, qvec: list[float], k: int = 10) -> list[str]:
    """The true nearest keys: pgvector's distance over every row of our table (no index: + 0)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT key FROM pgagentstate.memory_vectors ORDER BY "
            f"((embedding::vector({DIMS})) <=> %s::float8[]::vector({DIMS})) + 0 LIMIT %s",
            (qvec, k),
        ).fetchall()
    return [r[0] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    admin = server_dsn()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    emb = HashEmbeddings(DIMS)
    index = {"dims": DIMS, "embed": emb, "fields": ["text"]}
    for n in [int(s) for s in args.sizes.split(",")]:
        ours_dsn = database(admin, f"bench_mem_ours_{n}")
        peer_dsn = database(admin, f"bench_mem_peer_{n}")
        items = texts(n)
        with OurStore.from_conn_string(ours_dsn, index=index) as ours, \
                PeerStore.from_conn_string(peer_dsn, index=index) as peer:  # type: ignore[arg-type]
            ours.setup()
            peer.setup()
            t_ours = timed(lambda s=ours, it=items: load(s, it))  # type: ignore[misc]
            t_peer = timed(lambda s=peer, it=items: load(s, it))  # type: ignore[misc]
            print(f"n={n}: load ours {t_ours / 1000:.1f} s, peer {t_peer / 1000:.1f} s")
            for d in (ours_dsn, peer_dsn):
                with psycopg.connect(d, autocommit=True) as conn:
                    conn.execute("ANALYZE")
            rng = random.Random(n)
            queries = [" ".join(rng.choices(WORDS, k=6)) for _ in range(args.queries)]
            rounds: dict[str, list[tuple[float, float, float]]] = {"ours": [], "peer": []}
            truth = {q: exact_top(ours_dsn, emb.embed_query(q)) for q in queries}
            for r in range(args.rounds):
                times: dict[str, list[float]] = {"ours": [], "peer": []}
                hits: dict[str, int] = {"ours": 0, "peer": 0}
                for i, q in enumerate(queries):
                    order = [("ours", ours), ("peer", peer)] if (i + r) % 2 == 0 else [("peer", peer), ("ours", ours)]
                    for name, store in order:
                        t = time.perf_counter()
                        found = store.search(("docs",), query=q, limit=10)
                        times[name].append((time.perf_counter() - t) * 1000)
                        hits[name] += len({f.key for f in found} & set(truth[q]))
                for name in times:
                    recall = hits[name] / (10 * len(queries))
                    rounds[name].append((pct(times[name], 50), pct(times[name], 99), recall))
            med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in rounds.items()}
            for name, (p50, p99, recall) in med.items():
                print(f"n={n} search {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, recall@10 {recall:.3f}")
            print(f"n={n} search ours/peer: p50 {med['ours'][0] / med['peer'][0]:.2f}x, "
                  f"p99 {med['ours'][1] / med['peer'][1]:.2f}x")
            for batch in (1, 100):
                put: dict[str, list[float]] = {"ours": [], "peer": []}
                for r in range(args.rounds * 10):
                    new = texts(batch, seed=1000 + r)
                    pair: list[tuple[str, Any]] = [("ours", ours), ("peer", peer)]
                    for name, store in pair if r % 2 == 0 else pair[::-1]:
                        ops = [PutOp(("new",), f"{name}{r}-{j}", {"text": t}) for j, t in enumerate(new)]
                        put[name].append(timed(lambda s=store, o=ops: s.batch(o)))
                m = {k: statistics.median(v) for k, v in put.items()}
                print(f"n={n} put {batch}/batch: ours {m['ours']:.2f} ms, peer {m['peer']:.2f} ms, "
                      f"ours/peer {m['ours'] / m['peer']:.2f}x")
    distill_dsn = database(admin, "bench_mem_distill")
    with StateStore(distill_dsn) as store:
        store.setup()
        convs = [f"c{uuid.uuid4().hex[:8]}" for _ in range(300)]
        for c in convs:
            store.create_conversation(c, user_id=c)
            store.append_events(c, [NewEvent({"role": "user", "content": f"pedido #{random.randint(1000, 9999)}"}),
                                    NewEvent({"role": "user", "content": f"meu email é {c}@example.com"})])
        t = time.perf_counter()
        for c in convs:
            store.distill(c)
        elapsed = time.perf_counter() - t
        print(f"distill: {len(convs) / elapsed:.0f} conversations/s (one worker, deterministic extractor)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
