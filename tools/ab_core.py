"""Two versions of the core in one process: a change's effect on client CPU and turns/s, A/B.

    .venv/bin/python tools/ab_core.py <commit> [--what turn,op,async] [--rounds 30] [--dsn DSN]

Separate runs of a benchmark differ by about ±15% on this machine (which core each connection's server
process lands on, the garbage collector's state, the caches), more than most changes to the library's
client code make. This loads the core of ``<commit>`` (``git archive`` of ``core/pgagentstate``, imported as
the package ``pgagentstate_base``; the core imports itself by relative imports only) next to the working
tree's, gives each its own store and conversations, and alternates blocks of calls, client and server
pinned as in ``benchmarks/bench_core.py --pin``. Medians of the blocks:

- ``turn``: a sync turn at 20 messages (load, 2 appends, 2 state keys), thread CPU per turn;
- ``op``: ``get_conversation``, thread CPU per call (the store's driver around one small statement);
- ``async``: the async store, 200 conversations on a pool of 10, turns/s and process CPU per turn.

Measured with it on 2026-12-06 against eea76b0 (three runs started at load 0.75-0.94): the day's driver
changes took ``turn`` to 0.96x (0.94-0.98), ``op`` to 0.96x (0.94-0.97) and ``async`` to 1.01x (1.00-1.07),
where single benchmark runs could not tell the two apart.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from pinning import pinned  # noqa: E402

import pgagentstate  # noqa: E402

BLOCK = 200  # calls per block (sync measures)
SLICE = 1.5  # seconds per block (async)


def load_base(commit: str, into: Path) -> ModuleType:
    """The core of ``commit`` as the package ``pgagentstate_base``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "core/pgagentstate"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "core" / "pgagentstate").rename(into / "pgagentstate_base")
    sys.path.insert(0, str(into))
    return importlib.import_module("pgagentstate_base")


def history(pkg: ModuleType, size: int = 20) -> list[Any]:
    return [pkg.NewEvent({"role": "agent", "text": f"message {k} " + "x" * 80}, author="agent") for k in range(size)]


def create(pkg: ModuleType, store: Any) -> str:
    cid = f"ab-{uuid.uuid4().hex[:10]}"
    store.create_conversation(cid, channel="whatsapp")
    store.append_events(cid, history(pkg))
    store.put_state(pkg.StateRef.conversation(cid, "state"), {"workflow_step": 0, "context_data": {}})
    return cid


def turn(store: Any, cid: str, i: int) -> None:
    with store.turn(cid) as t:
        seen = len(t.events)
        t.append({"role": "customer", "text": f"message {i}"}, author="customer")
        t.append({"role": "agent", "text": f"answer {i} ({seen} messages of context)"}, author="agent")
        t.state["external_calls"] = [{"api": "payment", "n": i}]
        t.state["workflow_step"] = i


def sync_blocks(sides: dict[str, ModuleType], dsn: str, what: str, rounds: int) -> dict[str, list[float]]:
    stores = {name: pkg.StateStore(dsn, schema="ab_core") for name, pkg in sides.items()}
    for store in stores.values():
        store.setup()
    convs = {name: [create(sides[name], store) for _ in range(20)] for name, store in stores.items()}
    out: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in sorted(sides, reverse=bool(r % 2)):
            store, cids = stores[name], convs[name]
            start = time.thread_time_ns()
            for i in range(BLOCK):
                if what == "turn":
                    turn(store, cids[i % 20], i)
                else:
                    store.get_conversation(cids[i % 20])
            out[name].append((time.thread_time_ns() - start) / BLOCK / 1000)
    for store in stores.values():
        store.close()
    return out


async def async_blocks(sides: dict[str, ModuleType], dsn: str, rounds: int) -> dict[str, list[float]]:
    async def acreate(pkg: ModuleType, store: Any) -> str:
        cid = f"ab-{uuid.uuid4().hex[:10]}"
        await store.create_conversation(cid, channel="whatsapp")
        await store.append_events(cid, history(pkg))
        await store.put_state(pkg.StateRef.conversation(cid, "state"), {"workflow_step": 0, "context_data": {}})
        return cid

    async def aturn(store: Any, cid: str, i: int) -> None:
        async with store.turn(cid) as t:
            t.append({"role": "customer", "text": f"message {i}"}, author="customer")
            t.append({"role": "agent", "text": f"answer {i} ({len(t.events)} messages)"}, author="agent")
            t.state["external_calls"] = [{"api": "payment", "n": i}]
            t.state["workflow_step"] = i

    async def window(store: Any, cids: list[str]) -> float:
        stop, done = time.perf_counter() + SLICE, 0

        async def worker(cid: str) -> None:
            nonlocal done
            i = 0
            while time.perf_counter() < stop:
                await aturn(store, cid, i)
                i, done = i + 1, done + 1

        await asyncio.gather(*(worker(c) for c in cids))
        return done / SLICE

    stores = {name: pkg.AsyncStateStore(dsn, schema="ab_core", min_size=10, max_size=10) for name, pkg in sides.items()}
    convs = {name: [await acreate(sides[name], store) for _ in range(200)] for name, store in stores.items()}
    out: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in sorted(sides, reverse=bool(r % 2)):
            out[name].append(await window(stores[name], convs[name]))
    for store in stores.values():
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commit")
    parser.add_argument("--what", default="turn,op,async")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGAGENTSTATE_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, pinned(args.dsn) as how:
        print(how, f"(load {os.getloadavg()[0]:.2f})")
        sides = {"base": load_base(args.commit, Path(tmp)), "work": pgagentstate}
        for what in args.what.split(","):
            if what == "async":
                blocks, unit = asyncio.run(async_blocks(sides, args.dsn, max(4, args.rounds // 3))), "turns/s"
            else:
                blocks, unit = sync_blocks(sides, args.dsn, what, args.rounds), "us CPU"
            # The first two blocks of each side warm caches and plans.
            med = {name: statistics.median(v[2:]) for name, v in blocks.items()}
            print(
                f"{what:6s} base {med['base']:8.1f} {unit}   work {med['work']:8.1f} {unit}   "
                f"work/base {med['work'] / med['base']:.3f}"
            )


if __name__ == "__main__":
    main()
