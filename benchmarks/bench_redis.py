"""The Redis tier: does it pay for itself? A turn's load, a whole turn, and the scratchpad, with and without it.

    .venv/bin/python benchmarks/bench_redis.py [--dsn DSN] [--redis URL] [--runs 3] [--iterations 200]

Sections (each interleaves the two sides, the order flipping every iteration, so a shared machine's noise
hits both alike; every run prints its figures, the summary gives the median of the runs' medians):

  load     a turn's load (StateStore.turn's load: conversation, newest 20 events, state) from Postgres /
           from Redis, at 20 and 1,000 messages of history; and the whole history (recent=None) at 1,000
  turn     a whole turn (load, two events appended, state changed, commit) without / with the tier
           (with it: the load from Redis, the commit in Postgres plus the entry rewritten in Redis)
  scratch  put_scratch and get_scratch: the Postgres scratchpad / the Redis one

Target (issue 21): the load >= 2x faster with the tier and a whole turn faster; if not, the tier stays off
by default (it is: a store has no tier unless given one). DSN: --dsn, else $PGAGENTSTATE_BENCH_DSN, else
postgresql://postgres@127.0.0.1:5432/postgres. Redis: --redis, else a redis-server of the benchmark's own
on a free loopback port (in memory, no persistence). Everything lives in a throwaway schema.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

import psycopg
from psycopg import sql

from pgagentstate import NewEvent, RedisTier, StateStore

MESSAGE = {"role": "user", "content": "Oi, quero reembolso no pedido #12345, o produto chegou quebrado."}


def start_redis() -> tuple[str, subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server not found (apt-get install redis-server), or pass --redis URL")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.3)
    return f"redis://127.0.0.1:{port}/0", proc, workdir


def seed(store: StateStore, cid: str, n: int) -> None:
    store.create_conversation(cid)
    for i in range(0, n, 200):
        store.append_events(cid, [NewEvent(MESSAGE, author="customer") for _ in range(min(200, n - i))])
    with store.turn(cid) as t:
        t.state.update({"email": "meu@email.com", "pedido_id": "12345", "status": "awaiting_reason"})


def interleave(sides: dict[str, Callable[[], object]], iterations: int) -> dict[str, float]:
    """Median seconds per call of each side, the order flipping every iteration."""
    names = list(sides)
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm up: prepared statements, connections, the entry in Redis
        for _ in range(5):
            sides[n]()
    for i in range(iterations):
        for n in names if i % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            sides[n]()
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in times.items()}


def run_once(pg: StateStore, cached: StateStore, iterations: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for n, recent in ((20, 20), (1_000, 20), (1_000, None)):
        a, b = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
        seed(pg, a, n)
        seed(cached, b, n)

        def load(store: StateStore, cid: str, recent: int | None = recent) -> None:
            turn = store.turn(cid, recent=recent)  # type: ignore[arg-type]
            turn.load()

        label = f"load {n} msgs, recent={'all' if recent is None else recent}"
        out[label] = interleave({"postgres": lambda a=a: load(pg, a), "redis": lambda b=b: load(cached, b)}, iterations)
    for n in (20, 1_000):
        a, b = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
        seed(pg, a, n)
        seed(cached, b, n)

        def turn(store: StateStore, cid: str) -> None:
            with store.turn(cid) as t:
                t.append({"role": "user", "content": "Você vai enviar email com comprovante?"}, author="customer")
                t.append({"role": "assistant", "content": "Sim, já enviei para meu@email.com."}, author="agent")
                t.state["turns"] = t.state.get("turns", 0) + 1

        out[f"turn {n} msgs (+2 per turn)"] = interleave(
            {"postgres": lambda a=a: turn(pg, a), "redis": lambda b=b: turn(cached, b)}, iterations
        )
    cid = f"bench-{uuid.uuid4().hex[:8]}"
    pg.create_conversation(cid)
    note = {"plan": ["check policy", "refund"], "order": "12345", "amount": 500}
    out["scratch put"] = interleave(
        {
            "postgres": lambda: pg.put_scratch(cid, "plan", note, ttl=600),
            "redis": lambda: cached.put_scratch(cid, "plan", note, ttl=600),
        },
        iterations,
    )
    out["scratch get"] = interleave(
        {"postgres": lambda: pg.get_scratch(cid, "plan"), "redis": lambda: cached.get_scratch(cid, "plan")},
        iterations,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    parser.add_argument("--redis", default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    proc = workdir = None
    url = args.redis
    if url is None:
        url, proc, workdir = start_redis()
    schema = f"bench_redis_{uuid.uuid4().hex[:8]}"
    tier = RedisTier(url, secret=os.urandom(32), scratchpad=True)
    print(f"load average before: {os.getloadavg()}")
    try:
        with StateStore(args.dsn, schema=schema) as pg, StateStore(args.dsn, schema=schema, cache=tier) as cached:
            pg.setup()
            runs = []
            for r in range(args.runs):
                res = run_once(pg, cached, args.iterations)
                runs.append(res)
                print(f"run {r + 1} (load {os.getloadavg()[0]:.2f}):")
                for label, sides in res.items():
                    p, c = sides["postgres"], sides["redis"]
                    print(f"  {label:34s} postgres {p * 1e6:8.0f} us  redis {c * 1e6:8.0f} us  speedup {p / c:5.2f}x")
            print(f"summary: median of {args.runs} runs, {args.iterations} interleaved iterations each")
            for label in runs[0]:
                p = statistics.median(run[label]["postgres"] for run in runs)
                c = statistics.median(run[label]["redis"] for run in runs)
                ratios = [run[label]["postgres"] / run[label]["redis"] for run in runs]
                print(
                    f"  {label:34s} postgres {p * 1e6:8.0f} us  redis {c * 1e6:8.0f} us  "
                    f"speedup {statistics.median(ratios):5.2f}x (runs: {', '.join(f'{x:.2f}' for x in ratios)})"
                )
            print(f"cache counters: {cached.stats()['cache']['counters']}")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        tier.close()
        if proc is not None:
            proc.kill()
            proc.wait()
            shutil.rmtree(workdir or "", ignore_errors=True)
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
