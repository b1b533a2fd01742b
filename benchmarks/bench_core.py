"""Core benchmark: the cost of a durable turn commit against the physical floor, and of loading the
recent history as the history grows.

    .venv/bin/python benchmarks/bench_core.py [--dsn DSN] [--rounds N]

1. One append + state change in one transaction, version-checked (``append_events`` with
   ``expected_seq`` and a state patch: one statement), interleaved with the floor: a raw single-row
   ``INSERT`` + ``COMMIT`` from psycopg on the same server. Target: <= 1.5x the floor.
2. Loading a conversation's last 20 messages with 10, 1,000 and 10,000 messages of history.
   Target: 10,000 within 1.3x of 10.
Ratios, not absolute times: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid

import psycopg

from pgagentstate import NewEvent, StateRef, StateStore


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_commit(store: StateStore, dsn: str, rounds: int) -> dict[str, float]:
    cid = f"bench-{uuid.uuid4().hex[:8]}"
    store.create_conversation(cid)
    ref = StateRef.conversation(cid)
    with psycopg.connect(dsn) as floor:
        # A regular (logged) table: a temporary one would skip the WAL flush that every durable commit pays.
        floor.execute(
            psycopg.sql.SQL("CREATE TABLE {}.floor_events (id bigserial PRIMARY KEY, payload jsonb)").format(
                psycopg.sql.Identifier(store.schema)
            )
        )
        floor.commit()
        insert = psycopg.sql.SQL("INSERT INTO {}.floor_events (payload) VALUES (%s::jsonb)").format(
            psycopg.sql.Identifier(store.schema)
        )
        ours: list[float] = []
        raw: list[float] = []
        payload = {"role": "customer", "text": "meu@email.com", "channel": "whatsapp"}
        text = json.dumps(payload)
        for i in range(rounds):
            t0 = time.perf_counter()
            store.append_events(cid, [NewEvent(payload)], expected_seq=i, state_patches=[(ref, {"turn": i})])
            t1 = time.perf_counter()
            floor.execute(insert, (text,))
            floor.commit()
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            raw.append(t2 - t1)
    store.delete_conversation(cid)
    return {"ours_ms": median_ms(ours), "floor_ms": median_ms(raw), "ratio": median_ms(ours) / median_ms(raw)}


def bench_history(store: StateStore, dsn: str, rounds: int) -> dict[str, float]:
    out: dict[str, float] = {}
    cids = {}
    for size in (10, 1_000, 10_000):
        cid = f"hist-{size}-{uuid.uuid4().hex[:6]}"
        store.create_conversation(cid)
        for start in range(0, size, 500):
            store.append_events(
                cid, [NewEvent({"n": n, "text": "x" * 80}) for n in range(start, min(size, start + 500))]
            )
        cids[size] = cid
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ANALYZE {}.events").format(psycopg.sql.Identifier(store.schema)))
    samples: dict[int, list[float]] = {size: [] for size in cids}
    for _ in range(rounds):
        for size, cid in cids.items():  # interleaved
            t0 = time.perf_counter()
            events = store.list_events(cid, limit=20)
            samples[size].append(time.perf_counter() - t0)
            assert len(events) == min(20, size)
    for size, cid in cids.items():
        out[f"last20_at_{size}_ms"] = median_ms(samples[size])
        store.delete_conversation(cid)
    out["ratio_10000_vs_10"] = out["last20_at_10000_ms"] / out["last20_at_10_ms"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with StateStore(args.dsn, schema=schema, max_size=2) as store:
        store.setup()
        try:
            commit = bench_commit(store, args.dsn, args.rounds)
            history = bench_history(store, args.dsn, args.rounds // 2)
        finally:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(psycopg.sql.Identifier(schema)))
    print(
        f"append + state CAS, one transaction: {commit['ours_ms']:.3f} ms; raw INSERT+COMMIT floor: "
        f"{commit['floor_ms']:.3f} ms; ratio {commit['ratio']:.2f}x (target <= 1.5x)"
    )
    print(
        f"last 20 messages at 10 / 1,000 / 10,000 of history: {history['last20_at_10_ms']:.3f} / "
        f"{history['last20_at_1000_ms']:.3f} / {history['last20_at_10000_ms']:.3f} ms; "
        f"10,000 vs 10: {history['ratio_10000_vs_10']:.2f}x (target <= 1.3x)"
    )
    print(json.dumps({"commit": commit, "history": history}))


if __name__ == "__main__":
    main()
