"""A soak: the refund webhook under load for minutes, faults drawn at random, then one check over the whole history.

The pieces are webhook_world's (the demo's services, webhook workers and proxy; ``play``; ``verify``; the fault
injectors). On top of them:

- **Load**: ``conversations`` customers at a time play the refund dialogue (5 messages, at-least-once delivery);
  when a round is over, the next round's customers (new numbers, new conversations) start, until ``minutes``
  are up. Every message sent, whether and how it was acknowledged, is recorded.
- **Faults**: one every ``fault_every`` seconds on average (exponential gaps, so they land anywhere in a turn),
  each drawn from ``faults``: ``kill9`` (a worker, restarted 0.3 s later), ``terminate`` (pg_terminate_backend of
  every client), ``restart`` (Postgres ``stop -m immediate``, WAL replay, back 1 s later), ``payment`` (the
  payment API times out or answers 500 on 30% + 30% of calls for 3 s), ``partition`` (the workers reach Postgres
  through a fault-injecting TCP proxy, ``tools/fault_proxy.py``, which blackholes or resets every connection for
  ``partition_seconds``, 1-30 s by default). ``failover`` needs an HA setup: ``benchmarks/reliability/soak.py``
  registers it with :func:`register_fault` when asked (see ``FaultContext`` for what a fault gets).
- **State reads**: during the run a sampler reads the refund state's version of random live conversations, so that
  a version lost in a crash (read, then gone) shows as a regression.
- **Check**: history.check over every message, event, state version, read and side effect, plus webhook_world's
  ``verify`` per round (one refund and one email per conversation, for the right order and address, the four
  workflow steps completed, each reply sent to WhatsApp once); its problems count as ``promise`` anomalies.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fault_proxy import FaultProxy
from history import Anomaly, History, Message, check
from webhook_world import (
    LoadCluster,
    PlayResult,
    customer_of,
    kill_random_worker,
    play,
    restart_postgres,
    script,
    terminate_app_connections,
    verify,
    wamid_of,
)

from refund.agents import channel_conversation_id
from refund.workflow import facts_ref

FaultFn = Callable[[], Awaitable[None]]
STRAY = "refunds or emails for unknown conversations"


@dataclass
class FaultContext:
    """What a fault factory gets: the Postgres cluster (tools/pg_cluster.PgCluster), the demo's cluster of
    services and workers, a DSN of Postgres itself (not through the proxy), the run's random source, a dict for
    its own figures, the fault proxy between the workers and Postgres and the run's configuration."""

    pg: Any
    cluster: LoadCluster
    dsn: str
    rng: random.Random
    figures: dict[str, list[float]]
    proxy: ProxySet | None = None
    config: SoakConfig | None = None


class ProxySet:
    """A fault proxy in front of each server (one, or the nodes of an HA pair), switched together."""

    def __init__(self, ports: list[int]) -> None:
        self.proxies = [FaultProxy("127.0.0.1", port) for port in ports]

    def dsn(self) -> str:
        hosts = ",".join("127.0.0.1" for _ in self.proxies)
        ports = ",".join(str(p.port) for p in self.proxies)
        multi = " target_session_attrs=read-write" if len(self.proxies) > 1 else ""
        return f"host={hosts} port={ports} user=postgres dbname=postgres{multi}"

    def set(self, mode: str) -> None:
        for proxy in self.proxies:
            proxy.set(mode)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()


def _kill9(ctx: FaultContext) -> FaultFn:
    return kill_random_worker(ctx.cluster, ctx.rng)


def _terminate(ctx: FaultContext) -> FaultFn:
    return terminate_app_connections(ctx.dsn, ctx.figures.setdefault("connections_terminated", []))  # type: ignore[arg-type]


def _restart(ctx: FaultContext) -> FaultFn:
    return restart_postgres(ctx.pg, ctx.figures.setdefault("postgres_down_s", []), times=1_000_000)


def _payment(ctx: FaultContext, rate: float = 0.3, seconds: float = 3.0) -> FaultFn:
    async def fault() -> None:
        faults = ctx.cluster.payment.faults
        faults.timeout_rate = faults.error_rate = rate
        try:
            await asyncio.sleep(seconds)
        finally:
            faults.timeout_rate = faults.error_rate = 0.0

    return fault


def _partition(ctx: FaultContext) -> FaultFn:
    """Cut the network between the workers and Postgres for ``partition_seconds`` (uniform): ``blackhole``
    (connections stay open, no byte passes: a hung middlebox, bounded by the store's deadline) or ``reset``
    (every connection and every new one reset: the store's ServerRefused)."""
    low, high = ctx.config.partition_seconds if ctx.config else (1.0, 30.0)

    async def fault() -> None:
        assert ctx.proxy is not None
        mode = ctx.rng.choice(("blackhole", "reset"))
        seconds = ctx.rng.uniform(low, high)
        ctx.proxy.set(mode)
        try:
            await asyncio.sleep(seconds)
        finally:
            ctx.proxy.set("pass")
        ctx.figures.setdefault(f"partition_{mode}_s", []).append(round(seconds, 1))

    return fault


#: name -> factory. ``failover`` is not here: it needs a primary with a managed standby (Patroni), which
#: benchmarks/reliability/soak.py brings when asked (register_fault).
FAULTS: dict[str, Callable[[FaultContext], FaultFn]] = {
    "kill9": _kill9,
    "terminate": _terminate,
    "restart": _restart,
    "payment": _payment,
    "partition": _partition,
}
PLANNED = ("failover",)


def register_fault(name: str, factory: Callable[[FaultContext], FaultFn]) -> None:
    """Add a fault the soak can draw (e.g. ``failover`` from an HA setup); the factory is called once per run."""
    FAULTS[name] = factory


@dataclass
class SoakConfig:
    conversations: int = 200  # at a time
    minutes: float = 20.0
    framework: str = "langgraph"
    faults: tuple[str, ...] = ("kill9", "terminate", "restart", "payment", "partition")
    fault_every: float = 6.0  # mean seconds between two faults
    partition_seconds: tuple[float, float] = (1.0, 30.0)  # a partition lasts between these (uniform)
    workers: int = 4
    max_turns: int = 3
    think: float = 0.2
    round_deadline: float = 300.0  # a message unanswered this long after its round began counts as unanswered
    sample_every: float = 0.05
    seed: int = 1


@dataclass
class FaultRecord:
    name: str
    at: float  # seconds since the start
    seconds: float


@dataclass
class Soak:
    config: SoakConfig
    history: History = field(default_factory=History)
    faults: list[FaultRecord] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    promises: list[str] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


async def _faults(ctx: FaultContext, config: SoakConfig, start: float, out: list[FaultRecord]) -> None:
    actions = {name: FAULTS[name](ctx) for name in config.faults}
    while True:
        await asyncio.sleep(ctx.rng.expovariate(1 / config.fault_every))
        name = ctx.rng.choice(config.faults)
        t0 = time.monotonic()
        await actions[name]()
        out.append(FaultRecord(name, t0 - start, time.monotonic() - t0))


async def _sample(dsn: str, schema: str, tenant: str, live: list[str], every: float, out: list[Any]) -> None:
    """Read the refund state's version of a random live conversation every ``every`` s; errors (faults) skip."""
    from pgagentstate import AsyncStateStore

    rng = random.Random(7)
    store = AsyncStateStore(dsn, schema=schema, tenant=tenant, min_size=1, max_size=1)
    try:
        while True:
            await asyncio.sleep(every)
            if not live:
                continue
            cid = rng.choice(live)
            with contextlib.suppress(Exception):
                doc = await asyncio.wait_for(store.get_state(facts_ref(cid)), 5.0)
                if doc is not None:
                    out.append((f"{cid}/refund", time.monotonic(), doc.version))
    finally:
        await store.close()


def _round_history(store: Any, cluster: LoadCluster, n: int, tag: str, played: PlayResult) -> History:
    h = History()
    for i in range(n):
        phone = customer_of(tag, i)
        cid = channel_conversation_id(phone)
        for k in range(len(script(i))):
            wamid = wamid_of(phone, k)
            if k and wamid_of(phone, k - 1) not in played.replies:
                break  # the customer stopped at the first message never answered: the rest was never sent
            acked = wamid in played.replies
            h.messages.append(Message(cid, wamid, k, acked, len(played.replies.get(wamid, []))))
        h.logs[cid] = [(e.seq, e.event_id, str(e.payload.get("role", ""))) for e in store.list_events(cid)]
        h.state_versions[f"{cid}/refund"] = sorted(d.version for d in store.state_history(facts_ref(cid)))
    return h


def _effects(cluster: LoadCluster, known: set[str]) -> list[tuple[str, str]]:
    """Side effects by what they are for, not by the key the caller sent: a refund or an email is one per
    conversation (and order / address), so a second one under another key is a duplicate; a WhatsApp reply is one
    per key (the stand-ins keep one effect per idempotency key by construction)."""
    out: list[tuple[str, str]] = []
    for e in cluster.payment.ledger.effects():
        out.append(("payment", f"{str(e['key']).split('/', 1)[0]} order {e['request'].get('order_id')}"))
    for e in cluster.email.ledger.effects():
        out.append(("email", f"{str(e['key']).split('/', 1)[0]} to {e['request'].get('to')}"))
    for e in cluster.whatsapp.ledger.effects():
        out.append(("whatsapp", str(e["key"])))
    return [x for x in out if x[1].split(" ", 1)[0].split("/", 1)[0] in known]


async def run_soak(pg: Any, config: SoakConfig, workdir: Path) -> Soak:
    """Run the soak on the Postgres ``pg`` (a tools/pg_cluster.PgCluster of its own: it gets crashed)."""
    import os

    from pgagentstate import StateStore

    unknown = [f for f in config.faults if f not in FAULTS]
    if unknown:
        planned = [f for f in unknown if f in PLANNED]
        hint = f" ({', '.join(planned)}: register_fault() from an HA setup)" if planned else ""
        raise ValueError(f"unknown faults {unknown}; known: {sorted(FAULTS)}{hint}")
    os.environ["PGAGENTSTATE_DEMO_SCRIPTED"] = "1"  # the workers inherit it: never a real model in a soak
    dsn = pg.dsn()
    # The workers reach Postgres through a fault proxy per server when partitions are drawn; everything else
    # (the schema, the sampler, the faults' own connections, the final check) talks to Postgres directly.
    # ``pg.ports``: the servers of an HA pair (a multi-host DSN that keeps the one taking writes).
    ports: list[int] = list(pg.ports) if hasattr(pg, "ports") else [pg.port]
    proxy = ProxySet(ports) if "partition" in config.faults else None
    workers_dsn = dsn if proxy is None else proxy.dsn()
    schema = f"soak_{uuid.uuid4().hex[:10]}"
    tenant = "soak"
    with StateStore(dsn, schema=schema, max_size=1) as s:
        s.setup()
    soak = Soak(config)
    rng = random.Random(config.seed)
    plays: list[tuple[str, PlayResult]] = []
    with contextlib.ExitStack() as stack:
        if proxy is not None:
            stack.callback(proxy.close)
        workers = {"workers": config.workers, "max_turns": config.max_turns}
        cluster = LoadCluster(config.framework, workdir, dsn=workers_dsn, schema=schema, tenant=tenant, **workers)
        stack.enter_context(cluster)
        await asyncio.to_thread(cluster.wait_ready, 120.0)
        ctx = FaultContext(pg, cluster, dsn, rng, {}, proxy, config)
        live: list[str] = []
        start = time.monotonic()
        stop_at = start + 60 * config.minutes
        background = [
            asyncio.create_task(_faults(ctx, config, start, soak.faults)),
            asyncio.create_task(_sample(dsn, schema, tenant, live, config.sample_every, soak.history.observed)),
        ]
        try:
            while time.monotonic() < stop_at:
                tag = f"{soak.rounds:04d}"
                live[:] = [channel_conversation_id(customer_of(tag, i)) for i in range(config.conversations)]
                played = await play(cluster, config.conversations, tag=tag, think=config.think,
                                    deadline=config.round_deadline, seed=config.seed + soak.rounds)  # fmt: skip
                plays.append((tag, played))
                soak.latencies += played.latencies
                soak.rounds += 1
        finally:
            for task in background:
                task.cancel()
            for task in background:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            cluster.payment.faults.timeout_rate = cluster.payment.faults.error_rate = 0.0
            await asyncio.to_thread(pg.start)  # a crash fault cancelled mid-way leaves it down
        soak.seconds = time.monotonic() - start
        soak.figures = {k: v for k, v in ctx.figures.items()}
        soak.figures["worker_kills"] = len(cluster.kills)
        soak.figures["redeliveries"] = sum(p.redeliveries for _, p in plays)
        soak.figures["delivery_failures"] = dict(sum((p.failures for _, p in plays), Counter()))
        with StateStore(dsn, schema=schema, tenant=tenant, max_size=2) as store:
            known: set[str] = set()
            for tag, played in plays:
                soak.history.extend(_round_history(store, cluster, config.conversations, tag, played))
                problems, _ = verify(store, cluster, config.conversations, tag=tag, played=played)
                # verify() takes every refund or email of another round for a stray one: checked once below
                soak.promises += [p for p in problems if not p.startswith(STRAY)]
                known |= {channel_conversation_id(customer_of(tag, i)) for i in range(config.conversations)}
            soak.history.effects = _effects(cluster, known)
            paid = {str(e["key"]).split("/", 1)[0] for e in cluster.payment.ledger.effects()}
            mailed = {str(e["key"]).split("/", 1)[0] for e in cluster.email.ledger.effects()}
            if (paid | mailed) - known:
                soak.promises.append(f"{STRAY}: {sorted((paid | mailed) - known)[:5]}")
    return soak


def summary(soak: Soak) -> dict[str, Any]:
    report = check(soak.history)
    promises = [Anomaly("promise", "verify", p) for p in soak.promises]
    anomalies = report.anomalies + promises
    # verify() expects whole dialogues: a customer who gave up on a message (``unanswered``, e.g. at the round
    # deadline on a saturated machine) also breaks its conversation's promises; those are told apart here.
    gave_up = {a.subject.split(":", 1)[-1] for a in report.anomalies if a.kind == "unanswered"}
    on_gave_up = [a for a in promises if any(phone in a.detail for phone in gave_up)]
    others = [a for a in promises if a not in on_gave_up]
    ordered = sorted(soak.latencies)

    def pct(p: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000, 1) if ordered else None

    c = soak.config
    return {
        "framework": c.framework,
        "conversations_at_a_time": c.conversations,
        "minutes": round(soak.seconds / 60, 2),
        "rounds": soak.rounds,
        "conversations": soak.rounds * c.conversations,
        "workers": c.workers,
        "operations_checked": report.checked,
        "operations": report.operations,
        "faults_injected": len(soak.faults),
        "faults": dict(Counter(f.name for f in soak.faults)),
        "anomalies": len(anomalies),
        "anomalies_by_kind": dict(Counter(a.kind for a in anomalies)),
        "conversations_with_an_unanswered_message": len(gave_up),
        "promise_anomalies_on_those": len(on_gave_up),
        "examples_of_anomalies": [str(a) for a in [*report.anomalies[:5], *others[:5], *on_gave_up[:3]]],
        "turns": len(ordered),
        "turns_per_s": round(len(ordered) / soak.seconds, 2) if soak.seconds else None,
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "max_ms": pct(100),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 1) if ordered else None,
        **soak.figures,
    }
