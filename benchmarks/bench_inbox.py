"""Durable inbox benchmark: what accepting a message costs, and how fast workers drain a queue.

    .venv/bin/python benchmarks/bench_inbox.py [--dsn DSN] [--conversations 200] [--messages 5] [--workers 1,4]

- accept: one ``store.accept`` per message from one thread (one transaction of four pipelined statements):
  median and p99 latency, and the same for a redelivery (a duplicate: nothing written).
- drain: ``store.inbox(concurrency=N).work(noop, until_idle=True)`` over conversations x messages accepted
  up front: messages/s, with the order of every conversation checked afterwards (each is 1..messages).

DSN: --dsn, else $PGAGENTSTATE_BENCH_DSN, else postgresql://postgres@127.0.0.1:5432/postgres. Everything lives
in a throwaway schema, dropped at the end. Prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from pgagentstate import InboxMessage, StateStore


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_accept(store: StateStore, conversations: int, messages: int) -> dict[str, Any]:
    times, dup_times = [], []
    for m in range(messages):
        for c in range(conversations):
            began = time.perf_counter()
            store.accept(f"a{c}", {"text": f"message {m}"}, key=f"k{m}")
            times.append(time.perf_counter() - began)
    for c in range(conversations):
        began = time.perf_counter()
        store.accept(f"a{c}", {"text": "message 0"}, key="k0")
        dup_times.append(time.perf_counter() - began)
    return {
        "figure": "accept",
        "n": len(times),
        "p50_ms": round(statistics.median(times) * 1000, 3),
        "p99_ms": round(percentile(times, 0.99) * 1000, 3),
        "duplicate_p50_ms": round(statistics.median(dup_times) * 1000, 3),
    }


def bench_drain(store: StateStore, conversations: int, messages: int, workers: int) -> dict[str, Any]:
    store = store.with_tenant(f"drain-{workers}")  # a queue of its own: the workers see nothing else
    prefix = "d"
    for m in range(messages):
        for c in range(conversations):
            store.accept(f"{prefix}{c}", {"m": m + 1}, key=f"k{m}")
    seen: dict[str, list[int]] = {}
    guard = threading.Lock()

    def handler(msg: InboxMessage) -> None:
        with guard:
            seen.setdefault(msg.conversation_id, []).append(msg.message["m"])

    began = time.perf_counter()
    handled = store.inbox(concurrency=workers, poll=0.05).work(handler, until_idle=True)
    elapsed = time.perf_counter() - began
    in_order = all(v == list(range(1, messages + 1)) for v in seen.values()) and len(seen) == conversations
    return {
        "figure": "drain",
        "workers": workers,
        "messages": handled,
        "seconds": round(elapsed, 2),
        "messages_per_s": round(handled / elapsed, 1),
        "in_order": in_order,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGAGENTSTATE_BENCH_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--workers", default="1,4")
    args = parser.parse_args()
    schema = f"bench_inbox_{uuid.uuid4().hex[:8]}"
    try:
        with StateStore(args.dsn, schema=schema, max_size=10) as store:
            store.setup()
            print(json.dumps({"load_average": os.getloadavg()[0]}), flush=True)
            print(json.dumps(bench_accept(store.with_tenant("accept"), args.conversations, args.messages)), flush=True)
            for workers in (int(w) for w in args.workers.split(",")):
                print(json.dumps(bench_drain(store, args.conversations, args.messages, workers)), flush=True)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
