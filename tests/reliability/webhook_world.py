"""Load on the examples' WhatsApp webhook service: many customers, each framework's refund agent, faults.

The pieces are the demo's own (examples/refund): :class:`refund.cluster.Cluster` starts the
payment, email and WhatsApp Cloud API stand-ins (threads of this process, their records in SQLite), N webhook
worker processes (``python -m refund.webhook --framework F``) and the round-robin proxy. This module
adds what a load run needs on top:

- ``play``: N customers (asyncio tasks) each play the full refund dialogue as signed WhatsApp webhook posts
  through the proxy, one message after the answer to the previous one. A message is delivered **at least
  once**: anything but a 200 (a 502 from a worker killed mid-request, a 500, a client timeout) means "deliver
  the same message (same ``wamid``) again", as the WhatsApp Cloud API does.
- ``Fault`` injectors: kill -9 of a random worker (restarted by a "supervisor" 0.3 s later), pg_terminate_backend
  of every application connection, a Postgres crash and restart, a payment API that times out or answers 500.
- ``verify``: reads the store's event log and the services' own records back and lists every broken promise:
  each customer message stored once, in order, each followed by its replies; each reply sent to WhatsApp exactly
  once (counted at the send side, in the WhatsApp stand-in's records); exactly one refund (for the customer's
  order) and one email (to the customer's address) per conversation; the four workflow steps completed; the
  email asked once; the last answer gives the email from memory.

Every customer has their own phone number, order number and email, so a mix-up between conversations under load
would show as a wrong order or address in the payment or email records.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import random
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from world import Acknowledged

from refund.agents import channel_conversation_id
from refund.cluster import APP_SECRET, Cluster, Worker
from refund.dialogue import ASK_EMAIL

HERE = Path(__file__).resolve().parent


class LoadCluster(Cluster):
    """The demo's cluster, its workers started through ``webhook_worker.py`` (the demo's app, with a bound on
    concurrent turns per worker; ``max_turns=0`` runs it exactly as ``python -m refund.webhook``)."""

    def __init__(self, *args: Any, max_turns: int = 3, backlog: int = 1024, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_turns = max_turns
        if backlog:
            # The proxy and the services are stdlib ThreadingHTTPServers, whose listen backlog is 5: with 200
            # customers connecting at once the kernel overflows it (SYN cookies), the server resets the connection
            # and the customer sees a ReadError (then redelivers). A real load balancer listens with a deep
            # backlog; so do these (listen() again on a listening socket only resizes its queue).
            for server in (self.proxy, self.payment, self.email, self.whatsapp):
                server._server.socket.listen(backlog)

    def spawn(self, w: Worker) -> None:
        with w.log.open("ab") as log:
            w.proc = subprocess.Popen(
                [sys.executable, str(HERE / "webhook_worker.py"), "--framework", self.framework,
                 "--port", str(w.port), "--name", w.name, "--max-turns", str(self.max_turns)],
                env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip


# The seed's dialogue (refund.dialogue.SCRIPT) with a per-customer order and email; the offsets are
# seconds on the simulated clock (WhatsApp's message timestamps), the last message "5 minutes later".
BASE_TS = 1_780_000_000


def script(n: int) -> list[tuple[int, str]]:
    return [
        (0, f"Oi, quero reembolso no pedido #{order_of(n)}"),
        (40, email_of(n)),
        (80, "Produto chegou quebrado"),
        (110, "Obrigado!"),
        (410, "Você vai enviar email com comprovante do reembolso?"),
    ]


def order_of(n: int) -> str:
    return str(20000 + n)


def email_of(n: int) -> str:
    return f"cliente{n}@example.com"


def customer_of(tag: str, n: int) -> str:
    """A WhatsApp number per customer; ``tag`` (digits) keeps runs in one schema apart."""
    return f"55{tag}{n:05d}"


def wamid_of(customer: str, k: int) -> str:
    return f"wamid.{customer}.{k}"


@dataclass
class PlayResult(Acknowledged):
    conversations: int
    messages: int  # customer messages answered with a 200
    seconds: float
    latencies: list[float]  # per answered message: first delivery attempt to the 200
    acks: list[float]  # monotonic time of each 200
    redeliveries: int
    failures: Counter[str]  # why deliveries were not answered with a 200 (status or exception)
    unanswered: list[str]  # wamids never answered before the deadline
    replies: dict[str, list[str]] = field(default_factory=dict)  # wamid -> replies in the (last) 200
    workers_seen: Counter[str] = field(default_factory=Counter)

    @property
    def turns_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "conversations": self.conversations,
            "turns": self.messages,
            "seconds": round(self.seconds, 2),
            "turns_per_s": round(self.turns_per_second, 2),
            "p50_ms": round(self.percentile(50) * 1000, 1),
            "p95_ms": round(self.percentile(95) * 1000, 1),
            "p99_ms": round(self.percentile(99) * 1000, 1),
            "max_ms": round(max(self.latencies, default=0) * 1000, 1),
            "mean_ms": round(statistics.fmean(self.latencies) * 1000, 1) if self.latencies else None,
            "redeliveries": self.redeliveries,
            "delivery_failures": dict(self.failures),
            "unanswered": len(self.unanswered),
            "answered_by": dict(sorted(self.workers_seen.items())),
        }


async def play(
    cluster: Cluster,
    n: int,
    *,
    tag: str,
    think: float = 0.2,
    stagger: float = 0.0,
    client_timeout: float = 90.0,
    deadline: float = 300.0,
    seed: int = 1,
) -> PlayResult:
    """``n`` customers play the dialogue concurrently through ``cluster``'s proxy; at-least-once delivery."""
    import httpx

    rng = random.Random(seed)
    latencies: list[float] = []
    acks: list[float] = []
    failures: Counter[str] = Counter()
    unanswered: list[str] = []
    replies: dict[str, list[str]] = {}
    workers_seen: Counter[str] = Counter()
    redeliveries = 0
    stop_at = time.monotonic() + deadline
    url = f"{cluster.proxy.url}/webhook"
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)

    async with httpx.AsyncClient(limits=limits) as client:

        async def customer(i: int) -> None:
            nonlocal redeliveries
            phone = customer_of(tag, i)
            if stagger:
                await asyncio.sleep(stagger * i)
            for k, (offset, text) in enumerate(script(i)):
                if think and k:
                    await asyncio.sleep(rng.uniform(0, 2 * think))  # the customer types
                wamid = wamid_of(phone, k)
                body = cluster.webhook_body(phone, text, BASE_TS + offset, wamid)
                signature = "sha256=" + hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
                headers = {"Content-Type": "application/json", "X-Hub-Signature-256": signature}
                t0 = time.monotonic()
                while True:
                    try:
                        resp = await client.post(url, content=body, headers=headers, timeout=client_timeout)
                        if resp.status_code == 200:
                            data = resp.json()
                            replies[wamid] = list(data["replies"])
                            workers_seen[str(data["worker"])] += 1
                            break
                        failures[f"HTTP {resp.status_code}"] += 1
                    except httpx.HTTPError as exc:
                        failures[type(exc).__name__] += 1
                    redeliveries += 1
                    if time.monotonic() > stop_at:
                        unanswered.append(wamid)
                        return
                    await asyncio.sleep(0.3)  # WhatsApp backs off before delivering again
                now = time.monotonic()
                latencies.append(now - t0)
                acks.append(now)

        start = time.monotonic()
        await asyncio.gather(*(customer(i) for i in range(n)))
        seconds = time.monotonic() - start
    return PlayResult(n, len(latencies), seconds, latencies, acks, redeliveries, failures, unanswered, replies,
                      workers_seen)  # fmt: skip


def verify(store: Any, cluster: Cluster, n: int, *, tag: str, played: PlayResult) -> tuple[list[str], dict[str, Any]]:
    """Every broken promise (empty when all held), and counts read back from the store and the services.

    ``store`` is a sync :class:`~pgagentstate.StateStore` on the run's schema and tenant.
    """
    problems: list[str] = []
    refunds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    emails: dict[str, list[dict[str, Any]]] = defaultdict(list)
    sent: dict[str, list[str]] = defaultdict(list)  # wamid -> reply keys sent to WhatsApp
    sent_text: dict[str, str] = {}
    for e in cluster.payment.ledger.effects():
        refunds[str(e["key"]).split("/", 1)[0]].append(e)
    for e in cluster.email.ledger.effects():
        emails[str(e["key"]).split("/", 1)[0]].append(e)
    for e in cluster.whatsapp.ledger.effects():
        # key: "<cid>/out/<wamid>/<i>"
        _cid, _out, wamid, index = str(e["key"]).rsplit("/", 3)
        sent[wamid].append(index)
        # A send recorded without its text shows as a mismatch below, not as a crash here.
        sent_text[f"{wamid}:reply:{index}"] = str(e["request"].get("text", {}).get("body"))
    counts: Counter[str] = Counter()
    step_attempts: Counter[str] = Counter()
    for i in range(n):
        phone = customer_of(tag, i)
        cid = channel_conversation_id(phone)
        events = store.list_events(cid)
        counts["events"] += len(events)
        if [e.seq for e in events] != list(range(1, len(events) + 1)):
            problems.append(f"{cid}: event seqs not contiguous")
        wamids = [wamid_of(phone, k) for k in range(len(script(i)))]
        customer_ids = [e.event_id for e in events if e.payload.get("role") == "customer"]
        if customer_ids != wamids:
            problems.append(f"{cid}: customer messages stored {customer_ids} != sent {wamids}")
        # Each message is followed by its replies, ids "<wamid>:reply:<i>", before the next message.
        expected: list[str] = []
        for w in wamids:
            expected.append(w)
            expected += [f"{w}:reply:{j}" for j in range(len(played.replies.get(w, [])))]
        if [e.event_id for e in events] != expected:
            problems.append(f"{cid}: events {[e.event_id for e in events]} != {expected}")
        agent_text = {e.event_id: str(e.payload.get("text")) for e in events if e.payload.get("role") == "agent"}
        for w in wamids:
            if w in played.replies and not played.replies[w]:
                problems.append(f"{w}: answered with no reply (the customer heard nothing)")
            stored = [agent_text.get(f"{w}:reply:{j}") for j in range(len(played.replies.get(w, [])))]
            if w in played.replies and stored != played.replies[w]:
                problems.append(f"{w}: answered {played.replies[w]} but stored {stored}")
            keys = sorted(sent.get(w, []))
            if keys != [str(j) for j in range(len(played.replies.get(w, [])))]:
                problems.append(f"{w}: sent to WhatsApp as replies {keys}, stored {len(played.replies.get(w, []))}")
            for j in keys:
                if sent_text.get(f"{w}:reply:{j}") != agent_text.get(f"{w}:reply:{j}"):
                    problems.append(f"{w}: reply {j} sent differs from the one stored")
            counts["whatsapp_sent"] += len(keys)
        replies = [r for w in wamids for r in played.replies.get(w, [])]
        if sum(r == ASK_EMAIL for r in replies) != 1:
            problems.append(f"{cid}: the email was asked {sum(r == ASK_EMAIL for r in replies)} times")
        last = played.replies.get(wamids[-1], [""])
        if not last or email_of(i) not in last[-1] or "comprovante" not in last[-1]:
            problems.append(f"{cid}: the last answer does not give the email from memory: {last}")
        r, m = refunds.get(cid, []), emails.get(cid, [])
        if len(r) != 1 or r[0]["request"].get("order_id") != order_of(i):
            problems.append(f"{cid}: refunds {[x['request'] for x in r]}")
        if len(m) != 1 or m[0]["request"].get("to") != email_of(i):
            problems.append(f"{cid}: emails {[x['request'].get('to') for x in m]}")
        steps = store.get_workflow(cid)
        if sorted(s.step for s in steps) != sorted(
            ("understand", "verify_policy", "process_refund", "send_confirmation")
        ) or any(s.status != "completed" for s in steps):
            problems.append(f"{cid}: steps {[(s.step, s.status) for s in steps]}")
        for s in steps:
            step_attempts[s.step] += s.attempts
    known = {channel_conversation_id(customer_of(tag, i)) for i in range(n)}
    stray = (set(refunds) | set(emails)) - known
    if stray:
        problems.append(f"refunds or emails for unknown conversations: {sorted(stray)[:5]}")
    figures = {
        "events_stored": counts["events"],
        "whatsapp_replies_sent": counts["whatsapp_sent"],
        "refunds_paid": sum(len(v) for k, v in refunds.items() if k in known),
        "emails_sent": sum(len(v) for k, v in emails.items() if k in known),
        "max_refunds_per_conversation": max((len(v) for v in refunds.values()), default=0),
        "max_emails_per_conversation": max((len(v) for v in emails.values()), default=0),
        "step_attempts": dict(step_attempts),
        "payment_api": cluster.payment.ledger.stats(),
        "email_api": cluster.email.ledger.stats(),
        "whatsapp_api": cluster.whatsapp.ledger.stats(),
    }
    return problems, figures


# --- faults ------------------------------------------------------------------------------------------------------


FaultFn = Callable[[], Awaitable[None]]


def kill_random_worker(cluster: Cluster, rng: random.Random, restart_after: float = 0.3) -> FaultFn:
    """kill -9 of a random worker; a supervisor restarts it ``restart_after`` seconds later."""

    async def fault() -> None:
        victim = rng.choice(cluster.workers)
        await asyncio.to_thread(cluster.kill, victim)
        cluster.kills.append(victim.name)
        await asyncio.sleep(restart_after)
        cluster.spawn(victim)

    return fault


def terminate_app_connections(dsn: str, counts: list[int]) -> FaultFn:
    """pg_terminate_backend of every client connection but our own (on a cluster of the run's own)."""
    import psycopg

    def terminate() -> int:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
        return len(rows)

    async def fault() -> None:
        counts.append(await asyncio.to_thread(terminate))

    return fault


def restart_postgres(pg: Any, downtimes: list[float], *, times: int = 2, down_for: float = 1.0) -> FaultFn:
    """Crash Postgres (``pg_ctl stop -m immediate``: WAL replay on start) and start it ``down_for`` s later."""

    async def fault() -> None:
        if len(downtimes) >= times:
            return
        t0 = time.monotonic()
        await asyncio.to_thread(pg.stop, "immediate")
        await asyncio.sleep(down_for)
        await asyncio.to_thread(pg.start)
        downtimes.append(time.monotonic() - t0)

    return fault


@contextlib.asynccontextmanager
async def every(seconds: float, action: FaultFn, times: list[float], first_after: float | None = None) -> Any:
    """Run ``action`` every ``seconds`` in the background during the block; when each began goes in ``times``."""

    async def loop() -> None:
        await asyncio.sleep(seconds if first_after is None else first_after)
        while True:
            times.append(time.monotonic())
            await action()
            await asyncio.sleep(seconds)

    task = asyncio.create_task(loop())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def percentiles_ms(values: Sequence[float]) -> list[tuple[float, float]]:
    """(percentile, milliseconds) points of a latency distribution, at most ~200 of them, for a plot."""
    ordered = sorted(values)
    pts = [(100 * (k + 1) / len(ordered), ordered[k] * 1000) for k in range(len(ordered))]
    step = max(1, len(pts) // 200)
    return [*pts[::step], pts[-1]] if pts else []


# --- one run ------------------------------------------------------------------------------------------------------

FAULTS = ("none", "kill9", "terminate", "restart", "payment")


@dataclass
class RunConfig:
    framework: str
    conversations: int
    fault: str = "none"
    workers: int = 4
    think: float = 0.2
    stagger: float = 0.0
    deadline: float = 300.0
    kill_every: float = 3.0
    terminate_every: float = 1.5
    restart_every: float = 6.0
    restarts: int = 2
    payment_timeout_rate: float = 0.15
    payment_error_rate: float = 0.15
    max_turns: int = 3  # concurrent turns per worker (webhook_worker.py); 0 = the demo's worker as shipped
    backlog: int = 1024  # listen backlog of the proxy and services; 0 = the stdlib's 5, as shipped
    seed: int = 1


async def run_scenario(pg: Any, config: RunConfig, workdir: Any, tag: str) -> dict[str, Any]:
    """One framework, one fault, on the Postgres ``pg`` (a tools/pg_cluster.PgCluster): start the demo's services,
    ``config.workers`` webhook workers and the proxy; play; inject the fault; verify. Returns the figures, with
    ``problems`` (broken promises) and ``_latencies`` (seconds, for plots)."""
    import os
    import uuid

    from pgagentstate import StateStore

    if config.fault not in FAULTS:
        raise ValueError(f"unknown fault {config.fault!r}; one of {FAULTS}")
    os.environ["PGAGENTSTATE_DEMO_SCRIPTED"] = "1"  # the workers inherit it: never a real model in a load run
    dsn = pg.dsn()
    schema = f"wl_{uuid.uuid4().hex[:10]}"
    tenant = f"load-{config.framework}"
    with StateStore(dsn, schema=schema, max_size=1) as s:
        s.setup()
    rng = random.Random(config.seed)
    fault_times: list[float] = []
    terminated: list[int] = []
    downtimes: list[float] = []
    started = time.monotonic()
    with LoadCluster(config.framework, workdir, dsn=dsn, schema=schema, tenant=tenant, workers=config.workers,
                     max_turns=config.max_turns, backlog=config.backlog) as cluster:  # fmt: skip
        await asyncio.to_thread(cluster.wait_ready, 120.0)
        ready_s = time.monotonic() - started
        if config.fault == "payment":
            cluster.payment.faults.timeout_rate = config.payment_timeout_rate
            cluster.payment.faults.error_rate = config.payment_error_rate
        action: FaultFn | None = None
        period = 0.0
        if config.fault == "kill9":
            action, period = kill_random_worker(cluster, rng), config.kill_every
        elif config.fault == "terminate":
            action, period = terminate_app_connections(dsn, terminated), config.terminate_every
        elif config.fault == "restart":
            action, period = restart_postgres(pg, downtimes, times=config.restarts), config.restart_every
        run = play(cluster, config.conversations, tag=tag, think=config.think, stagger=config.stagger,
                   deadline=config.deadline, seed=config.seed)  # fmt: skip
        if action is None:
            played = await run
        else:
            async with every(period, action, fault_times):
                played = await run
        kills = list(cluster.kills)
        # Workers' logs, for a failed run: the last lines of each.
        logs = {w.name: cluster.log_tail(w, 8) for w in cluster.workers}
    with StateStore(dsn, schema=schema, tenant=tenant, max_size=2) as store:
        problems, figures = verify(store, cluster, config.conversations, tag=tag, played=played)
    if config.fault == "restart":
        # Recovery counts from the moment Postgres accepts connections again, not from the crash.
        fault_times = [t + d for t, d in zip(fault_times, downtimes, strict=False)]
    recoveries = [played.recovery_after(t) for t in fault_times]
    return {
        "framework": config.framework,
        "scenario": config.fault,
        "workers": config.workers,
        "max_turns_per_worker": config.max_turns,
        "listen_backlog": config.backlog or 5,
        **played.summary(),
        "broken_promises": len(problems),
        "examples_of_broken": problems[:5],
        **figures,
        "faults": len(fault_times),
        "worker_kills": len(kills),
        "connections_terminated": terminated,
        "postgres_down_s": [round(d, 2) for d in downtimes],
        "recovery_s_max": round(max(recoveries), 2) if recoveries else None,
        "recovery_s_mean": round(statistics.fmean(recoveries), 2) if recoveries else None,
        "startup_s": round(ready_s, 1),
        "worker_log_tails": logs if problems or played.unanswered else {},
        "problems": problems,
        "_latencies": played.latencies,
    }
