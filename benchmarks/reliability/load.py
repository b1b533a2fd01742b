"""Load (and faults under load): N concurrent customers play the full refund dialogue against W worker processes.

Everything on loopback, on a throwaway Postgres cluster of its own (tools/pg_cluster.py), never the machine's
main server. Prints one JSON line per scenario and, with ``--out``, appends it to a JSON-lines file; ``--svg``
writes the latency distribution of the first scenario.

    .venv/bin/python benchmarks/reliability/load.py --conversations 200 --workers 4 \\
        --faults none kill9 terminate restart payment --out docs/reliability-load.jsonl --svg docs/img/load-latency.svg

Faults: ``kill9`` a random worker every 2 s (restarted 0.3 s later); ``terminate`` every application connection
(pg_terminate_backend) every second; ``restart`` Postgres (stop -m immediate, start 1 s later) every 5 s, at most
twice; ``payment`` 15% of refund calls time out (after doing the refund) and 15% answer 500.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests" / "reliability"), str(Path(__file__).resolve().parent)]

import psycopg  # noqa: E402
from pg_cluster import PgCluster, temp_root  # noqa: E402
from svgplot import line_chart  # noqa: E402
from world import Services, Workers, drive, every, step_attempts, verify  # noqa: E402

from pgagentstate import AsyncStateStore, StateStore  # noqa: E402


async def scenario(cluster: PgCluster, args: argparse.Namespace, fault: str) -> dict[str, Any]:
    dsn = cluster.dsn()
    schema = f"load_{fault}_{int(time.time())}"
    with StateStore(dsn, schema=schema, max_size=1) as s:
        s.setup()
    services = Services(latency=args.api_latency)
    if fault == "payment":
        services.timeout_rate, services.error_rate = 0.15, 0.15
    services.start()
    convs = [f"{fault}-{i:05d}" for i in range(args.conversations)]
    rng = random.Random(11)
    fault_times: list[float] = []
    restarts = 0

    with Workers(args.workers, dsn=dsn, schema=schema, services_url=services.url, pool=args.pool,
                 lease=3.0, pool_check=args.pool_check) as pool:  # fmt: skip

        async def inject() -> None:
            nonlocal restarts
            fault_times.append(time.monotonic())
            if fault == "kill9":
                i = rng.randrange(len(pool.ports))
                pool.kill9(i)
                await asyncio.sleep(0.3)
                await asyncio.to_thread(pool.start, i)
            elif fault == "terminate":
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name LIKE 'pgas-worker-%'"
                    )
            elif fault == "restart" and restarts < 2:
                restarts += 1
                await asyncio.to_thread(cluster.stop, "immediate")
                await asyncio.sleep(1.0)
                await asyncio.to_thread(cluster.start)

        period = {"kill9": 2.0, "terminate": 1.0, "restart": 5.0}.get(fault)
        run = drive(lambda: pool.ports, convs, think=args.think, deadline=args.deadline, client_timeout=30)
        if period is None:
            result = await run
        else:
            async with every(period, inject):
                result = await run
        kills = pool.kills
    async with AsyncStateStore(dsn, schema=schema) as store:
        problems = await verify(store, services, convs, result.failed)
        attempts = await step_attempts(store, convs)
    services.stop()
    recoveries = [result.recovery_after(t) for t in fault_times]
    summary = {
        "scenario": fault,
        "workers": args.workers,
        "pool_check": args.pool_check,
        **result.summary(),
        "failed": len(result.failed),
        "unanswered_messages": result.failed[:10],
        "broken_promises": len(problems),
        "examples_of_broken": problems[:5],
        "refunds_paid": sum(services.refunds.values()),
        "emails_sent": sum(services.emails.values()),
        "max_refunds_per_conversation": max(services.refunds.values(), default=0),
        "max_emails_per_conversation": max(services.emails.values(), default=0),
        "faults": len(fault_times),
        "worker_kills": kills,
        "recovery_s_max": round(max(recoveries), 2) if recoveries else None,
        "step_attempts": dict(attempts),
        "service_requests": dict(services.requests),
        "machine": f"{platform.machine()} {platform.system()} cpus={__import__('os').cpu_count()}",
    }
    summary["_latencies"] = result.latencies
    return summary


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pool", type=int, default=8, help="connections per worker process")
    parser.add_argument("--think", type=float, default=0.2, help="mean customer typing time between messages (s)")
    parser.add_argument("--api-latency", type=float, default=0.05, help="payment/email API processing time (s)")
    parser.add_argument("--deadline", type=float, default=240)
    parser.add_argument("--pool-check", choices=["core", "none", "drain"], default="core")
    parser.add_argument("--faults", nargs="+", default=["none"],
                        choices=["none", "kill9", "terminate", "restart", "payment"])  # fmt: skip
    parser.add_argument("--out", type=Path)
    parser.add_argument("--svg", type=Path)
    args = parser.parse_args()
    with temp_root("pgas-load-") as root:
        cluster = PgCluster.create(root, max_connections="200")
        for i, fault in enumerate(args.faults):
            summary = await scenario(cluster, args, fault)
            latencies = summary.pop("_latencies")
            print(json.dumps(summary), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(summary) + "\n")
            if args.svg and i == 0 and latencies:
                ordered = sorted(latencies)
                pts = [(100 * (k + 1) / len(ordered), ordered[k] * 1000) for k in range(len(ordered))]
                step = max(1, len(pts) // 200)
                line_chart(
                    args.svg,
                    f"Turn latency, {args.conversations} concurrent refund dialogues, {args.workers} workers",
                    {fault: [*pts[::step], pts[-1]]},
                    xlabel="percentile of turns",
                    ylabel="turn latency (ms), customer's view",
                    ylog=True,
                    ymin=None,
                )


if __name__ == "__main__":
    asyncio.run(main())
