"""Soak: the refund webhook under load for minutes, with faults drawn at random, then a check over the whole history.

N customers at a time (default 200) play the refund dialogue through the demo's proxy to 4 webhook workers for M
minutes (default 20), round after round; a fault every ``--fault-every`` seconds on average, drawn from
``--faults`` (kill -9 of a worker, pg_terminate_backend of every client, a Postgres crash, payment API timeouts
and 500s). Every message sent and acknowledged, every event stored, every state version stored or read and every
side effect performed goes into one history, which tests/reliability/history.py checks: each acknowledged message
stored exactly once and in order, contiguous logs, state versions that only go up, each side effect at most once,
every turn answered. Everything on loopback, on a throwaway Postgres cluster of its own (tools/pg_cluster.py).
The pieces are in tests/reliability/soak_world.py; the short version runs in CI (tests/reliability/test_soak.py).

    .venv/bin/python benchmarks/reliability/soak.py --conversations 200 --minutes 20 \\
        --out docs/reliability-soak.jsonl --svg docs/img/soak-latency.svg

One JSON line (printed, and appended to ``--out``); exit status 1 when any anomaly was found.
``partition`` (the workers' path to Postgres blackholed or reset through tools/fault_proxy.py for 1-30 s) is
drawn by default. ``--ha`` (or ``PGAGENTSTATE_HA=1``) runs Postgres as a Patroni pair (tools/patroni_cluster.py)
and adds ``failover``: kill -9 of the leader's whole node, Patroni promotes the synchronous standby, the killed
node comes back as the new standby; the Postgres crash fault is left out then (Patroni restarts its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
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
from soak_world import FAULTS, PLANNED, FaultContext, FaultFn, SoakConfig, register_fault, run_soak, summary  # noqa: E402
from svgplot import line_chart  # noqa: E402
from webhook_world import percentiles_ms  # noqa: E402


class HaPostgres:
    """A Patroni pair seen the way run_soak sees a server: its DSN (multi-host, the writable one), its ports."""

    def __init__(self, pair: Any) -> None:
        self.pair = pair
        self.ports = [n.port for n in pair.nodes]

    def dsn(self) -> str:
        return str(self.pair.dsn(connect_timeout="2"))

    def start(self) -> None:
        """Patroni restarts its own Postgres."""


def failover(ctx: FaultContext) -> FaultFn:
    """kill -9 of the leader's node (Patroni and Postgres); Patroni promotes the synchronous standby by itself;
    then the killed node is started again and rejoins as the standby (a fresh base backup if it diverged)."""
    pair = ctx.pg.pair

    async def fault() -> None:
        old = await asyncio.to_thread(pair.leader)
        if old is None:
            return
        new = next(n for n in pair.nodes if n is not old)
        began = time.monotonic()
        await asyncio.to_thread(old.kill9)
        try:
            while await asyncio.to_thread(pair.leader) is not new:
                if time.monotonic() - began > 60:
                    raise TimeoutError("no promotion within 60 s")
                await asyncio.sleep(0.1)
            ctx.figures.setdefault("failover_promoted_after_s", []).append(round(time.monotonic() - began, 2))
            await asyncio.to_thread(old.start)
            await asyncio.to_thread(pair.wait, {new.name: "leader", old.name: "sync_standby"}, 180)
            ctx.figures.setdefault("failover_rejoined_after_s", []).append(round(time.monotonic() - began, 2))
        except Exception as exc:  # the run goes on; the report says so
            ctx.figures.setdefault("failover_errors", []).append(str(exc)[:300])  # type: ignore[arg-type]

    return fault


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200, help="customers at a time")
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--framework", default="langgraph", choices=("langgraph", "adk", "openai_agents", "core"))
    parser.add_argument("--faults", nargs="+", choices=[*sorted(FAULTS), *PLANNED],
                        help=f"default: {' '.join(sorted(FAULTS))} (--ha: failover, not restart)")  # fmt: skip
    parser.add_argument("--fault-every", type=float, default=6.0, help="mean seconds between faults")
    parser.add_argument("--partition-seconds", type=float, nargs=2, default=(1.0, 30.0), metavar=("LOW", "HIGH"))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--round-deadline", type=float, default=300.0,
                        help="seconds after a round began when a customer gives up on a message")  # fmt: skip
    parser.add_argument("--think", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ha", action="store_true", default=os.environ.get("PGAGENTSTATE_HA", "") in ("1", "true"),
                        help="Postgres as a Patroni pair, with the failover fault")  # fmt: skip
    parser.add_argument("--out", type=Path)
    parser.add_argument("--svg", type=Path)
    args = parser.parse_args()
    if args.faults is None:
        args.faults = [f for f in sorted(FAULTS) if f != "restart"] + ["failover"] if args.ha else sorted(FAULTS)
    if args.ha:
        register_fault("failover", failover)
    config = SoakConfig(conversations=args.conversations, minutes=args.minutes, framework=args.framework,
                        faults=tuple(args.faults), fault_every=args.fault_every, workers=args.workers,
                        think=args.think, seed=args.seed, partition_seconds=tuple(args.partition_seconds),
                        round_deadline=args.round_deadline)  # fmt: skip
    with temp_root("pgas-soak-") as root:
        if args.ha:
            from patroni_cluster import PatroniPair

            with PatroniPair(root) as pair:
                soak = await run_soak(HaPostgres(pair), config, Path(tempfile.mkdtemp(prefix="soak-")))
        else:
            pg = PgCluster.create(root, max_connections="200")
            try:
                soak = await run_soak(pg, config, Path(tempfile.mkdtemp(prefix="soak-")))
            finally:
                pg.stop("fast")
    figures = summary(soak)
    figures["load_average"] = [round(x, 2) for x in os.getloadavg()]
    figures["machine"] = f"{platform.machine()} {platform.system()} cpus={os.cpu_count()}"
    print(json.dumps(figures), flush=True)
    if args.out:
        with args.out.open("a") as f:
            f.write(json.dumps(figures) + "\n")
    if args.svg and soak.latencies:
        line_chart(
            args.svg,
            f"Soak: turn latency, {args.conversations} dialogues at a time for {figures['minutes']} min, "
            f"{figures['faults_injected']} random faults",
            {f"{args.framework}, {figures['turns']} turns": percentiles_ms(soak.latencies)},
            xlabel="percentile of turns",
            ylabel="turn latency (ms), customer's view",
            ylog=True,
            ymin=None,
        )
    return 1 if figures["anomalies"] else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
