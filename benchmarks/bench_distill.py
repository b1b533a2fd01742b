"""Distillation: its throughput, and what it costs the turns of the conversations it distils.

    .venv/bin/python benchmarks/bench_distill.py [--dsn DSN] [--runs 3] [--conversations 20] [--rounds 50]

Issue 17's targets: distillation throughput (conversations/s, deterministic extractor), and its cost on the
turn latency of the conversation being distilled: none measurable, as it runs elsewhere.

throughput  one worker distils 300 conversations of two customer messages each, one after the other.
turn cost   two tenants of one schema, each with --conversations conversations, take turns alternately
            (who goes first flips every turn): a turn is the brief's load -> append the customer's message
            and the agent's reply -> save the state, then the adapters' after-turn hook
            (``request_distill``, one NOTIFY), timed together. A distillation worker, a process of its own
            (``python -m pgagentstate.ui.distill_worker --follow``), serves one tenant only: its
            conversations are distilled after every turn, while they take their next ones; the other
            tenant's are never distilled. Same tables, same machine, same noise: the ratio of the two
            tenants' turn times is what distilling a conversation costs its own turns. The customers'
            messages give the extractor work (an order number, an email that is new nearly every time it is
            said and so replaces the older fact, a reason after the agent asks for one, a preference).

After the timed turns the run waits for the worker to catch up and checks what it did: every conversation
of the distilled tenant distilled to its last position and holding facts, none of the other tenant's.
On this 2-core machine the worker also takes CPU from the turns of both tenants alike; in a deployment it
runs on another machine.

DSN: --dsn, else $PGAGENTSTATE_BENCH_DSN, else postgresql://postgres@127.0.0.1:5432/postgres. Everything
lives in a throwaway schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from pgagentstate import NewEvent, StateStore

DSN = os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DISTILLED, ALONE = "distilled", "alone"
#: How long the worker may take to catch up once the turns stop before the run fails.
CATCH_UP = 60.0


def throughput(store: StateStore, conversations: int = 300) -> float:
    """Conversations/s one worker distils (a set up store; its conversations are created here)."""
    convs = [f"c{uuid.uuid4().hex[:8]}" for _ in range(conversations)]
    for c in convs:
        store.create_conversation(c, user_id=c)
        store.append_events(c, [NewEvent({"role": "user", "content": f"pedido #{random.randint(1000, 9999)}"}),
                                NewEvent({"role": "user", "content": f"meu email é {c}@example.com"})])
    t = time.perf_counter()
    for c in convs:
        store.distill(c)
    return len(convs) / (time.perf_counter() - t)


def customer_says(cid: str, i: int) -> str:
    return (f"order #{1000 + i}", f"my email is {cid}.{i // 3}@example.com", "the parcel arrived broken",
            "I prefer email updates")[i % 4]


def agent_says(i: int) -> str:
    return "What is the reason for the refund?" if i % 4 == 1 else f"Noted, step {i}."


def turn(store: StateStore, cid: str, i: int) -> float:
    """One turn and the after-turn hook; ms."""
    t = time.perf_counter()
    with store.turn(cid) as tr:
        tr.append({"role": "customer", "text": customer_says(cid, i)}, author="customer")
        tr.append({"role": "agent", "text": agent_says(i)}, author="agent")
        tr.state["workflow_step"] = i
    store.request_distill(cid)
    return (time.perf_counter() - t) * 1000


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (Linux /proc), 0 where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _timed_turns(stores: dict[str, StateStore], convs: list[str], rounds: int) -> dict[str, float]:
    """Turns of both tenants, alternating (who goes first flips every turn); p50 and p99 of each, ms."""
    times: dict[str, list[float]] = {DISTILLED: [], ALONE: []}
    step = 0
    for r in range(rounds + 1):  # round 0 warms both sides up, untimed
        for c in convs:
            pair = (DISTILLED, ALONE) if step % 2 == 0 else (ALONE, DISTILLED)
            step += 1
            for tenant in pair:
                ms = turn(stores[tenant], c, r)
                if r:
                    times[tenant].append(ms)
    return {f"p{p}_{t}": pct(times[t], p) for t in (DISTILLED, ALONE) for p in (50, 99)}


def caught_up(store: StateStore) -> float:
    """Wait until the worker has distilled every conversation of ``store``'s tenant; the seconds it took."""
    t = time.perf_counter()
    while store.pending_distillations(1):
        if time.perf_counter() - t > CATCH_UP:
            raise RuntimeError(f"the worker did not catch up within {CATCH_UP:.0f} s")
        time.sleep(0.02)
    return time.perf_counter() - t


def turn_cost(dsn: str, schema: str, conversations: int, rounds: int, worker_on: bool = True) -> dict[str, float]:
    stores = {t: StateStore(dsn, schema=schema, tenant=t) for t in (DISTILLED, ALONE)}
    worker = None
    try:
        stores[DISTILLED].setup()
        convs = [f"conv-{k:03d}" for k in range(conversations)]
        for store in stores.values():
            for c in convs:
                store.ensure_conversation(c, user_id=f"customer-{c}")
                store.append_events(c, [NewEvent({"role": "customer", "text": "hello"}, author="customer")])
        if not worker_on:
            return _timed_turns(stores, convs, rounds) | {"positions": 0, "facts": 0, "caught_up": 0.0,
                                                          "worker_cpu_ms": 0.0}
        worker = subprocess.Popen(
            [sys.executable, "-m", "pgagentstate.ui.distill_worker", "--dsn", dsn, "--schema", schema,
             "--tenant", DISTILLED, "--follow", "--poll", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        caught_up(stores[DISTILLED])  # the worker is up: it distilled the first message of each conversation
        cpu_ready = cpu_seconds(worker.pid)
        percentiles = _timed_turns(stores, convs, rounds)
        lag = caught_up(stores[DISTILLED])
        worker_cpu = cpu_seconds(worker.pid) - cpu_ready
        worker.send_signal(signal.SIGINT)
        # (Interrupted mid-statement, the worker's pool logs that it discards that connection: not shown.)
        out, err = worker.communicate(timeout=30)
        if "distilled " not in out:
            raise RuntimeError(f"the worker ended with {worker.returncode}: {err}")
        positions = int(out.split("distilled ", 1)[1].split()[0]) - conversations  # the timed turns' only
        # What the worker did: every distilled conversation to its last position, with facts; none of the other's.
        with psycopg.connect(dsn, autocommit=True) as conn:
            done = conn.execute(
                sql.SQL("SELECT w.tenant_id, count(*) FILTER (WHERE w.seq = c.last_seq), sum(w.facts) "
                        "FROM {s}.conversations c JOIN {s}.distill_watermarks w "
                        "ON w.tenant_id = c.tenant_id AND w.conversation_id = c.id GROUP BY 1").format(
                    s=sql.Identifier(schema))).fetchall()
        by_tenant = {row[0]: (row[1], row[2]) for row in done}
        if by_tenant.get(DISTILLED, (0, 0))[0] != conversations or not by_tenant[DISTILLED][1] or ALONE in by_tenant:
            raise RuntimeError(f"the worker's work is not what it should be: {by_tenant}")
        return percentiles | {
            "positions": positions, "facts": by_tenant[DISTILLED][1], "caught_up": lag,
            "worker_cpu_ms": worker_cpu * 1000 / max(positions, 1),
        }
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        for store in stores.values():
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dsn", default=DSN)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=50, help="timed turns per conversation and run")
    parser.add_argument("--control", action="store_true",
                        help="no worker at all: the two tenants' ratio is then the harness's own spread")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    ratios: dict[str, list[float]] = {"p50": [], "p99": []}
    rates = []
    for run in range(args.runs):
        schema = f"bench_distill_{uuid.uuid4().hex[:8]}"
        try:
            with StateStore(args.dsn, schema=schema) as store:
                store.setup()
                rates.append(throughput(store))
            m = turn_cost(args.dsn, schema, args.conversations, args.rounds, worker_on=not args.control)
        finally:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        for p in ("p50", "p99"):
            ratios[p].append(m[f"{p}_distilled"] / m[f"{p}_alone"])
        print(f"run {run + 1}: throughput {rates[-1]:.0f} conversations/s; turns of distilled conversations "
              f"p50 {m['p50_distilled']:.2f} ms, p99 {m['p99_distilled']:.2f} ms; of the others p50 "
              f"{m['p50_alone']:.2f} ms, p99 {m['p99_alone']:.2f} ms; ratio p50 {ratios['p50'][-1]:.3f}, "
              f"p99 {ratios['p99'][-1]:.3f}; the worker distilled {m['positions']} positions during them "
              f"({m['facts']} facts in all, {m['worker_cpu_ms']:.1f} ms of its CPU each) and caught up "
              f"{m['caught_up'] * 1000:.0f} ms after the last turn; load {os.getloadavg()[0]:.2f}")
    print(f"distillation throughput: {statistics.median(rates):.0f} conversations/s (median of {args.runs})")
    print(f"turn time of distilled / never distilled conversations: p50 {statistics.median(ratios['p50']):.3f}, "
          f"p99 {statistics.median(ratios['p99']):.3f} (median of {args.runs}; target: none measurable)")


if __name__ == "__main__":
    main()
