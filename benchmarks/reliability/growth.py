"""Growth curves: the cost of a turn as a conversation's history grows, and throughput as workers are added.

1. History: conversations with 10, 100, 1,000 and 10,000 stored events; on each, ``--turns`` turns (load the
   newest 20 events and the state, append the customer's message and the reply, save the state), timed one by
   one. For contrast, the cost of reading the whole history (``list_events``) on the same conversations.
2. Workers: 1, 2, 4, 8, 16 processes, each running turns on conversations of its own for ``--seconds``;
   turns per second over all of them.

On a throwaway cluster of its own (tools/pg_cluster.py). Prints JSON, writes SVG plots with ``--svg-dir``.

    .venv/bin/python benchmarks/reliability/growth.py --out docs/reliability-growth.json --svg-dir docs/img
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(Path(__file__).resolve().parent)]

from pg_cluster import PgCluster, temp_root  # noqa: E402
from svgplot import line_chart  # noqa: E402

from pgagentstate import NewEvent, StateStore  # noqa: E402

SCHEMA = "growth"


def one_turn(store: StateStore, cid: str, i: int) -> None:
    with store.turn(cid, recent=20) as turn:
        turn.append({"role": "customer", "text": f"message {i}"}, author="customer")
        turn.append({"role": "agent", "text": f"answer {i}"}, author="agent")
        turn.state["turns"] = turn.state.get("turns", 0) + 1


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def history_curve(dsn: str, sizes: list[int], turns: int) -> list[dict[str, Any]]:
    rows = []
    with StateStore(dsn, schema=SCHEMA, max_size=2) as store:
        for size in sizes:
            cid = f"hist-{size}"
            store.create_conversation(cid)
            for start in range(0, size, 500):  # history as an agent would leave it: messages with some text
                chunk = [
                    NewEvent({"role": "customer" if k % 2 else "agent", "text": f"message {k} " + "x" * 120})
                    for k in range(start, min(size, start + 500))
                ]
                store.append_events(cid, chunk)
            for i in range(5):  # warm-up
                one_turn(store, cid, -i)
            times = []
            for i in range(turns):
                t0 = time.perf_counter()
                one_turn(store, cid, i)
                times.append(time.perf_counter() - t0)
            full = []
            for _ in range(max(3, min(20, 20000 // size))):
                t0 = time.perf_counter()
                store.list_events(cid)
                full.append(time.perf_counter() - t0)
            row = {
                "history": size,
                "turn_p50_ms": round(statistics.median(times) * 1000, 3),
                "turn_p95_ms": round(pct(times, 95) * 1000, 3),
                "full_history_read_p50_ms": round(statistics.median(full) * 1000, 3),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _worker(dsn: str, index: int, seconds: float, start_at: float, out: Any) -> None:
    with StateStore(dsn, schema=SCHEMA, min_size=1, max_size=1) as store:
        cids = [f"w{index}-{k}" for k in range(8)]
        for cid in cids:
            store.ensure_conversation(cid)
        one_turn(store, cids[0], -1)
        while time.time() < start_at:
            time.sleep(0.005)
        done, i = 0, 0
        end = start_at + seconds
        while time.time() < end:
            one_turn(store, cids[i % len(cids)], i)
            i += 1
            done += 1
        out.put(done)


def worker_curve(dsn: str, counts: list[int], seconds: float) -> list[dict[str, Any]]:
    rows = []
    ctx = mp.get_context("spawn")
    for n in counts:
        queue = ctx.Queue()
        start_at = time.time() + 2.0 + 0.15 * n  # everyone connected and warmed up before the clock starts
        procs = [ctx.Process(target=_worker, args=(dsn, f"{n}-{i}", seconds, start_at, queue)) for i in range(n)]
        for p in procs:
            p.start()
        total = sum(queue.get(timeout=seconds + 120) for _ in procs)
        for p in procs:
            p.join()
        row = {"workers": n, "turns_per_s": round(total / seconds, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--svg-dir", type=Path)
    args = parser.parse_args()
    with temp_root("pgas-growth-") as root:
        cluster = PgCluster.create(root)
        dsn = cluster.dsn()
        with StateStore(dsn, schema=SCHEMA, max_size=1) as s:
            s.setup()
        history = history_curve(dsn, args.sizes, args.turns)
        workers = worker_curve(dsn, args.workers, args.seconds)
    result = {"history": history, "workers": workers, "cpus": mp.cpu_count()}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.svg_dir:
        line_chart(
            args.svg_dir / "growth-history.svg",
            "Cost of a turn vs. stored history",
            {
                "turn p50 (load 20 + save)": [(r["history"], r["turn_p50_ms"]) for r in history],
                "turn p95": [(r["history"], r["turn_p95_ms"]) for r in history],
                "read the whole history (contrast)": [(r["history"], r["full_history_read_p50_ms"]) for r in history],
            },
            xlabel="events stored in the conversation",
            ylabel="milliseconds",
            xlog=True,
            ylog=True,
            ymin=None,
        )
        line_chart(
            args.svg_dir / "growth-workers.svg",
            f"Turn throughput vs. worker processes ({mp.cpu_count()} CPUs, Postgres on the same machine)",
            {"turns/s": [(r["workers"], r["turns_per_s"]) for r in workers]},
            xlabel="worker processes",
            ylabel="turns per second",
        )


if __name__ == "__main__":
    main()
