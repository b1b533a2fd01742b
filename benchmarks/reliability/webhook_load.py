"""Load (and faults under load) on the examples' WhatsApp webhook service, for each framework's refund agent.

N concurrent customers (default 200) each play the full refund dialogue (5 messages: order, email, reason,
thanks, "5 minutes later" the receipt question) as signed WhatsApp Cloud API webhook posts through the demo's
round-robin proxy to 4 webhook worker processes (``refund.webhook``'s app in examples/, see
``tests/reliability/webhook_worker.py``), with the demo's payment, email and WhatsApp stand-ins. Each message is
delivered at least once (redelivered on anything but a 200). Everything on loopback, on a throwaway Postgres
cluster of its own (tools/pg_cluster.py), never the machine's main server. After each run the store's event log
and the services' records are checked (tests/reliability/webhook_world.py: ``verify``).

    .venv/bin/python benchmarks/reliability/webhook_load.py --conversations 200 \\
        --frameworks langgraph adk openai_agents --faults none \\
        --out docs/reliability-webhook.jsonl --svg docs/img/webhook-latency.svg

Faults: ``kill9`` a random worker every 3 s (restarted 0.3 s later); ``terminate`` every client connection
(pg_terminate_backend) every 1.5 s; ``restart`` Postgres (stop -m immediate, start 1 s later) every 6 s, twice;
``payment`` 15% of refund calls time out (after doing the refund) and 15% answer 500. One JSON line per run
(printed, and appended to ``--out``); ``--svg`` plots the latency distribution of every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [
    str(ROOT / "tools"),
    str(ROOT / "tests" / "reliability"),
    str(Path(__file__).resolve().parent),
    str(ROOT / "examples"),
]

from pg_cluster import PgCluster, temp_root  # noqa: E402
from svgplot import line_chart  # noqa: E402
from webhook_world import FAULTS, RunConfig, percentiles_ms, run_scenario  # noqa: E402

FRAMEWORKS = ("langgraph", "adk", "openai_agents")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3, help="concurrent turns per worker (0: unbounded)")
    parser.add_argument("--think", type=float, default=0.2, help="mean customer typing time between messages (s)")
    parser.add_argument("--deadline", type=float, default=400)
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=[*FRAMEWORKS, "core"])
    parser.add_argument("--faults", nargs="+", default=["none"], choices=FAULTS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--svg", type=Path)
    parser.add_argument("--plot", choices=FRAMEWORKS, help="plot only this framework's runs (one line per fault)")
    args = parser.parse_args()
    series: dict[str, Sequence[tuple[float, float]]] = {}
    failed = 0
    with temp_root("pgas-webhook-load-") as root:
        pg = PgCluster.create(root, max_connections="200")
        for fault in args.faults:
            for k, framework in enumerate(args.frameworks):
                config = RunConfig(framework, args.conversations, fault, workers=args.workers,
                                   think=args.think, deadline=args.deadline, max_turns=args.max_turns)  # fmt: skip
                workdir = Path(tempfile.mkdtemp(prefix=f"wl-{framework}-{fault}-"))
                summary: dict[str, Any] = await run_scenario(pg, config, workdir, tag=f"{k}{args.faults.index(fault)}")
                latencies = summary.pop("_latencies")
                summary.pop("problems")
                summary["machine"] = f"{platform.machine()} {platform.system()} cpus={os.cpu_count()}"
                failed += bool(summary["broken_promises"] or summary["unanswered"])
                print(json.dumps(summary), flush=True)
                if args.out:
                    with args.out.open("a") as f:
                        f.write(json.dumps(summary) + "\n")
                if latencies and args.plot in (None, framework):
                    series[f"{framework} / {fault}"] = percentiles_ms(latencies)
                if args.svg and series:
                    line_chart(
                        args.svg,
                        f"Turn latency through the WhatsApp webhook, {args.conversations} concurrent dialogues, "
                        f"{args.workers} workers",
                        series,
                        xlabel="percentile of turns",
                        ylabel="turn latency (ms), customer's view",
                        ylog=True,
                        ymin=None,
                    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
