"""A change to the LangGraph saver, A/B in one process: two threads of one graph alternate turn by turn.

    .venv/bin/python tools/ab_langgraph.py VARIANT [--rounds 4] [--turns 50] [--durability async] [--dsn DSN]

VARIANT is ``null`` (A against A: the harness's own spread), ``no-deflate`` (checkpoint bodies, turn inputs
and task writes stored without deflating), or ``MODULE:FUNCTION``, a function importable from MODULE (a
throwaway file on PYTHONPATH will do) that returns two callables: ``on()`` applies the variant (patches the
adapter or the core), ``off()`` undoes it. One ``PostgresCheckpointer`` serves both sides; each round grows
one thread per side to ``--turns`` turns of ``benchmarks/bench_langgraph.py``'s 3-node graph, B's turns
with the variant on, the two sides alternating turn by turn (who goes first flips every turn) so that both
see the same machine. LangGraph returns from an invoke once its puts are done, so a variant switched
between invokes applies to the whole of B's. Per round, B / A: the median invoke time, and the saver's
thread CPU (inside get_tuple, put and put_writes, whichever thread runs them); then the medians over rounds.

Single runs of bench_langgraph.py move by 5-15% here; this resolves a few percent. Measured with it on
2026-12-06 (4 rounds each, load 0.49-0.99): ``null`` 1.02x invoke and 0.99x CPU, the harness's own spread;
``no-deflate`` 0.93x invoke and 0.90x CPU, as four earlier runs of the same method had found (0.91-0.95x,
0.91x; docs/dev/langgraph-benchmark-log.md).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_langgraph as bench  # noqa: E402

from pgagentstate.langgraph import PostgresCheckpointer, _codec  # noqa: E402

Toggle = tuple[Callable[[], None], Callable[[], None]]


def null() -> Toggle:
    return (lambda: None), (lambda: None)


def no_deflate() -> Toggle:
    packed = _codec._compress

    def on() -> None:
        _codec._compress = lambda typ, data: (typ, data)

    def off() -> None:
        _codec._compress = packed

    return on, off


BUILTIN: dict[str, Callable[[], Toggle]] = {"null": null, "no-deflate": no_deflate}


def variant(name: str) -> Toggle:
    if name in BUILTIN:
        return BUILTIN[name]()
    module, _, function = name.partition(":")
    if not function:
        raise SystemExit(f"{name!r}: expected one of {sorted(BUILTIN)} or MODULE:FUNCTION")
    toggle: Toggle = getattr(importlib.import_module(module), function)()
    return toggle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("variant")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--durability", default="async", choices=sorted(bench.TARGETS))
    parser.add_argument("--dsn", default=bench.DSN)
    args = parser.parse_args()
    on, off = variant(args.variant)
    schema = f"ab_langgraph_{uuid.uuid4().hex[:8]}"
    try:
        with PostgresCheckpointer.from_conn_string(args.dsn, schema=schema, max_size=bench.POOL) as saver:
            saver.setup()
            # LangGraph returns from an invoke once its puts are done: what the meter gained during an
            # invoke is that side's.
            meter = bench.CpuMeter(saver)
            graph = bench.graph_builder().compile(checkpointer=saver)
            wall_ratios, cpu_ratios = [], []
            for r in range(args.rounds):
                times: dict[str, list[float]] = {"A": [], "B": []}
                cpu = {"A": 0.0, "B": 0.0}
                for turn in range(args.turns):
                    for side in ("A", "B") if turn % 2 == 0 else ("B", "A"):
                        (on if side == "B" else off)()
                        config: Any = {"configurable": {"thread_id": f"{side}-{r}"}}
                        t0, c0 = time.perf_counter(), meter.seconds
                        graph.invoke(bench.user_message(turn), config, durability=args.durability)
                        times[side].append(time.perf_counter() - t0)
                        cpu[side] += meter.seconds - c0
                off()
                a, b = statistics.median(times["A"]), statistics.median(times["B"])
                wall_ratios.append(b / a)
                cpu_ratios.append(cpu["B"] / cpu["A"])
                per = 1000 / args.turns
                print(f"round {r}: invoke A {a * 1000:.2f} ms, B {b * 1000:.2f} ms, B/A {b / a:.3f}; saver CPU "
                      f"A {cpu['A'] * per:.2f} ms, B {cpu['B'] * per:.2f} ms per invoke, "
                      f"B/A {cpu_ratios[-1]:.3f}", flush=True)
            print(f"{args.variant}: invoke B/A {statistics.median(wall_ratios):.3f}, saver CPU B/A "
                  f"{statistics.median(cpu_ratios):.3f} (medians of {args.rounds} rounds)")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
