"""A small, complete world for reliability runs: refund agent workers, payment and email APIs, customers.

- ``Services``: payment and email HTTP APIs (loopback, one thread per request) that honour an
  ``Idempotency-Key`` header like Stripe: the first request with a key does the work, a repeat replays the
  stored answer. They count what they did per conversation, so "paid twice" is counted from the outside.
  Faults: ``timeout_rate`` (the refund is made but the answer comes too late: the caller cannot know) and
  ``error_rate`` (a 500 without doing anything).
- A worker process (``python world.py worker ...``): an HTTP endpoint ``POST /message`` that runs one customer
  message as one turn of the core-only refund agent (``store.turn`` + ``run_step`` + ``run_once``), retrying
  retryable failures itself. Nothing lives in a worker's memory between messages: any worker can take any
  message of any conversation.
- ``Workers``: starts N worker processes, kills (-9) and restarts them.
- ``drive``: customers (asyncio tasks) play the refund dialogue, one message after the reply to the previous
  one, delivering at least once: a timeout or a dead worker means "send it again to the next worker", like the
  WhatsApp Cloud API does.
- ``verify``: reads the store and the services back and lists every broken promise.

The dialogue: refund for order #N -> email -> "it arrived broken" (policy, refund, confirmation email) ->
"will the receipt be emailed?" (answered from memory, nothing sent again).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKFLOW = "refund"
STEPS = ("understand", "verify_policy", "process_refund", "send_confirmation")
PAYMENT_TIMEOUT = 1.0  # the worker's HTTP timeout toward the payment and email APIs


# --- the outside world: payment and email APIs --------------------------------------------------------------


@dataclass
class Services:
    """Payment (``POST /refunds``) and email (``POST /emails``) APIs honouring ``Idempotency-Key``."""

    timeout_rate: float = 0.0
    error_rate: float = 0.0
    slow_seconds: float = 1.6  # how late a "timeout" answers: longer than PAYMENT_TIMEOUT
    latency: float = 0.0  # processing time of every call: half before the effect, half after it
    seed: int = 7
    host: str = "127.0.0.1"  # where it listens (workers in a network namespace reach it over their link)
    refunds: Counter[str] = field(default_factory=Counter)  # conversation -> refunds made
    emails: Counter[str] = field(default_factory=Counter)  # conversation -> emails sent
    requests: Counter[str] = field(default_factory=Counter)  # what the APIs answered, by kind
    _answers: dict[tuple[str, str], tuple[str, dict[str, Any]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> Services:
        services = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if services.latency:
                    time.sleep(services.latency / 2)
                status, answer, delay = services._handle(self.path, self.headers.get("Idempotency-Key"), body)
                delay += services.latency / 2
                if delay:
                    time.sleep(delay)
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the caller gave up (timeout): the work is done all the same
                    pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _handle(self, path: str, key: str | None, body: bytes) -> tuple[int, dict[str, Any], float]:
        kind = {"/refunds": "refund", "/emails": "email"}.get(path)
        if kind is None or not key:
            return 400, {"error": "unknown endpoint or missing Idempotency-Key"}, 0.0
        request = json.loads(body)
        digest = json.dumps(request, sort_keys=True)
        with self._lock:
            seen = self._answers.get((kind, key))
            if seen is not None:
                if seen[0] != digest:
                    self.requests[f"{kind}_422"] += 1
                    return 422, {"error": "Idempotency-Key reused with another request"}, 0.0
                self.requests[f"{kind}_replayed"] += 1
                return 200, {**seen[1], "replayed": True}, 0.0
            fault = None
            if kind == "refund":
                roll = self._rng.random()
                if roll < self.timeout_rate:
                    fault = "timeout"
                elif roll < self.timeout_rate + self.error_rate:
                    fault = "error"
            if fault == "error":
                self.requests[f"{kind}_500"] += 1
                return 500, {"error": "payment processor unavailable"}, 0.0
            answer = {"id": f"{kind}_{uuid.uuid4().hex[:10]}", "conversation": request["conversation"]}
            self._answers[(kind, key)] = (digest, answer)
            (self.refunds if kind == "refund" else self.emails)[request["conversation"]] += 1
            self.requests[f"{kind}_done"] += 1
            if fault == "timeout":
                self.requests[f"{kind}_late"] += 1
                return 200, answer, self.slow_seconds
            return 200, answer, 0.0


# --- the agent: one customer message = one turn --------------------------------------------------------------


def script(order: int) -> list[str]:
    return [
        f"Hi, I want a refund for order #{order}",
        f"customer{order}@example.com",
        "It arrived broken",
        "Will the receipt be emailed to me?",
    ]


class PaymentFailed(Exception):
    """The payment or email API answered an error or did not answer in time."""


async def _post(http: Any, url: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    try:
        resp = await http.post(url, json=body, headers={"Idempotency-Key": key}, timeout=PAYMENT_TIMEOUT)
    except httpx.HTTPError as exc:
        raise PaymentFailed(f"{url}: {type(exc).__name__}") from exc
    if resp.status_code != 200:
        raise PaymentFailed(f"{url}: HTTP {resp.status_code}")
    return dict(resp.json())


async def agent_turn(store: Any, http: Any, services_url: str, cid: str, msg_id: str, text: str, lease: float) -> str:
    """Run one message as one turn. A redelivered message gets the reply stored the first time."""
    async with store.turn(cid, create=True, recent=8, app="refunds", channel="whatsapp") as turn:
        replies: dict[str, str] = turn.state.setdefault("replies", {})
        if msg_id in replies:
            return replies[msg_id]
        turn.append({"role": "customer", "text": text}, author="customer", event_id=msg_id)
        s = turn.state
        if "order" not in s:
            s["order"] = int(text.split("#")[1])
            reply = "Sorry to hear that. What is the email on the order?"
        elif "email" not in s:
            s["email"] = text.strip()
            reply = "Thanks. What was wrong with the order?"
        elif "reason" not in s:
            s["reason"] = text
            reply = await _refund(store, http, services_url, cid, s, lease)
        else:
            reply = f"Yes: the receipt went to {s['email']} when the refund was paid. Shall I send it again?"
        turn.append({"role": "agent", "text": reply}, author="agent", event_id=f"{msg_id}.reply")
        replies[msg_id] = reply
        return reply


async def _refund(store: Any, http: Any, services_url: str, cid: str, s: dict[str, Any], lease: float) -> str:
    """understand -> verify policy -> process refund -> send confirmation, each a durable step."""
    body = {"conversation": cid, "order": s["order"], "amount": 42.0}

    async def understand() -> dict[str, Any]:
        return {"intent": "refund", "order": s["order"], "reason": s["reason"]}

    async def verify_policy() -> dict[str, Any]:
        return {"eligible": "broken" in s["reason"], "policy": "damaged-on-arrival"}

    async def pay() -> dict[str, Any]:
        result: dict[str, Any] = await store.run_once(
            f"refund:{cid}",
            lambda key: _post(http, f"{services_url}/refunds", key, body),
            api="payments",
            request=body,
            conversation_id=cid,
            lease=lease,
        )
        return result

    async def confirm() -> dict[str, Any]:
        mail = {"conversation": cid, "to": s["email"], "template": "refund-receipt"}
        result: dict[str, Any] = await store.run_once(
            f"email:{cid}",
            lambda key: _post(http, f"{services_url}/emails", key, mail),
            api="email",
            request=mail,
            conversation_id=cid,
            lease=lease,
        )
        return result

    fns: Sequence[Callable[[], Awaitable[dict[str, Any]]]] = (understand, verify_policy, pay, confirm)
    results = [
        await store.run_step(cid, WORKFLOW, name, fn, position=i, lease=lease)
        for i, (name, fn) in enumerate(zip(STEPS, fns, strict=True))
    ]
    s["refund_id"] = results[2]["id"]
    return f"Refund {results[2]['id']} paid; a receipt is on its way to {s['email']}."


# --- the worker process ---------------------------------------------------------------------------------------


@dataclass
class WorkerStats:
    handled: int = 0
    retries: Counter[str] = field(default_factory=Counter)


async def handle_with_retries(
    store: Any, http: Any, services_url: str, cid: str, msg_id: str, text: str, lease: float, stats: WorkerStats
) -> tuple[str, dict[str, int]]:
    """Retry what a transient fault broke (conflicts, lost connections, a failed payment call)."""
    from pgagentstate import PgAgentStateError

    seen: Counter[str] = Counter()
    delay = 0.02
    deadline = time.monotonic() + 120
    while True:
        try:
            reply = await agent_turn(store, http, services_url, cid, msg_id, text, lease)
            stats.handled += 1
            return reply, dict(seen)
        except (PgAgentStateError, PaymentFailed, OSError) as exc:
            name = type(exc).__name__
            if isinstance(exc, PgAgentStateError) and not exc.retryable:
                name = f"NOT_RETRYABLE:{name}:{exc}"[:200]
            seen[name] += 1
            stats.retries[name] += 1
            if time.monotonic() > deadline:
                raise
        except Exception as exc:  # psycopg_pool.PoolTimeout and the like: report, then retry
            name = f"OTHER:{type(exc).__name__}"
            # An error no caller could know to retry: its traceback goes to the worker's log, to be found.
            traceback.print_exc(file=sys.stderr)
            seen[name] += 1
            stats.retries[name] += 1
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, 0.5)


async def experimental_pool(dsn: str, size: int, pgbouncer: bool, mode: str) -> Any:
    """Pools other than the one the core builds from a DSN, to compare recovery after mass disconnects.

    ``none``: no checkout check (a dead connection surfaces as ConnectionLost on first use; the caller retries).
    ``drain``: dead idle connections are discarded at checkout in a loop that does not sleep (the change proposed
    for the core: psycopg_pool's own ``check=`` loop sleeps 1, 2, 4, 8... seconds between failed checks).
    """
    from psycopg_pool import AsyncConnectionPool

    from pgagentstate.connect import idle_connection_is_dead, pool_kwargs

    class DrainingPool(AsyncConnectionPool):
        async def getconn(self, timeout: float | None = None) -> Any:
            conn = await super().getconn(timeout)
            for _ in range(self.max_size):
                if not idle_connection_is_dead(conn):
                    break
                await conn.close()
                await self.putconn(conn)
                conn = await super().getconn(timeout)
            return conn

    cls = DrainingPool if mode == "drain" else AsyncConnectionPool
    pool = cls(dsn, min_size=1, max_size=size, kwargs=pool_kwargs(pgbouncer=pgbouncer), open=False)
    await pool.open()
    return pool


def _dump_tasks() -> None:
    """Every task's await chain, innermost last (Task.print_stack shows only the outermost frame)."""
    for task in asyncio.all_tasks():
        print(f"--- {task.get_name()}", file=sys.stderr)
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
            if frame is not None:
                print(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}", file=sys.stderr)
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    sys.stderr.flush()


async def serve_worker(args: argparse.Namespace) -> None:
    import httpx

    from pgagentstate import AsyncStateStore

    stats = WorkerStats()
    pool: Any = None
    if args.pool_check != "core":
        pool = await experimental_pool(args.dsn, args.pool, args.pgbouncer, args.pool_check)
    store = AsyncStateStore(pool or args.dsn, schema=args.schema, max_size=args.pool, pgbouncer=args.pgbouncer)
    http = httpx.AsyncClient()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "POST" and path == "/message":
                    m = json.loads(body)
                    t0 = time.perf_counter()
                    try:
                        reply, retries = await handle_with_retries(
                            store, http, args.services, m["conversation"], m["id"], m["text"], args.lease, stats
                        )
                        status = 200
                        answer: dict[str, Any] = {
                            "reply": reply,
                            "retries": retries,
                            "seconds": time.perf_counter() - t0,
                        }
                    except Exception as exc:
                        status, answer = 503, {"error": f"{type(exc).__name__}: {exc}"}
                else:
                    status, answer = 200, {"worker": args.name, "handled": stats.handled, "retries": stats.retries}
                data = json.dumps(answer).encode()
                head_out = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                writer.write(head_out.encode() + b"\r\n" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_client, args.host, args.port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)  # for a hung run: where is every task waiting?
    print("ready", flush=True)
    async with server:
        await stop.wait()
    await http.aclose()
    await store.close()
    if pool is not None:
        await pool.close()


# --- the driver side: workers, customers, faults, verification ------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Workers:
    """N worker processes on fixed ports; a killed one can be restarted on its port."""

    def __init__(
        self,
        n: int,
        *,
        dsn: str,
        schema: str,
        services_url: str,
        pool: int = 5,
        lease: float = 3.0,
        pgbouncer: bool = False,
        pool_check: str = "core",
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        """``host``: the address the workers listen on; ``prefix``: a command prefix to start them with (``ip
        netns exec NAME`` runs them in a network namespace)."""
        self.pool_check = pool_check
        self.host, self.prefix = host, list(prefix)
        # Workers' stderr (pool warnings while Postgres is down, tracebacks) goes to files, not the test output;
        # kept only when $RELIABILITY_LOG_DIR names where.
        self._keep_logs = bool(os.environ.get("RELIABILITY_LOG_DIR"))
        self.log_dir = Path(os.environ.get("RELIABILITY_LOG_DIR") or tempfile.mkdtemp(prefix="pgas-workers-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        self.dsn, self.schema, self.services_url = dsn, schema, services_url
        self.pool, self.lease, self.pgbouncer = pool, lease, pgbouncer
        self.kills = 0

    def start(self, i: int, wait: bool = True) -> None:
        dsn = f"{self.dsn} application_name=pgas-worker-{i}"
        cmd = [
            *self.prefix, sys.executable, str(HERE / "world.py"), "worker", "--name", f"w{i}", "--host", self.host,
            "--port", str(self.ports[i]),
            "--dsn", dsn, "--schema", self.schema, "--services", self.services_url,
            "--pool", str(self.pool), "--lease", str(self.lease), "--pool-check", self.pool_check,
        ]  # fmt: skip
        if self.pgbouncer:
            cmd.append("--pgbouncer")
        with (self.log_dir / f"w{i}.log").open("ab") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        self.procs[i] = proc
        if wait:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != b"ready":
                raise RuntimeError(f"worker {i} did not start: {line!r} (log in {self.log_dir})")

    def start_all(self) -> Workers:
        for i in range(len(self.ports)):
            self.start(i, wait=False)
        for i, proc in enumerate(self.procs):
            assert proc is not None and proc.stdout is not None
            for _ in range(3):
                if proc.stdout.readline().strip() == b"ready":
                    break
                # The free port picked for it was taken meanwhile (free_port() only asks the kernel for
                # one): pick another and start the worker again.
                proc.wait(10)
                self.ports[i] = free_port()
                self.start(i, wait=False)
                proc = self.procs[i]
                assert proc is not None and proc.stdout is not None
            else:
                raise RuntimeError(f"worker {i} did not start (log in {self.log_dir})")
        return self

    def kill9(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.kills += 1

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if not self._keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> Workers:
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


class Acknowledged:
    """What a run result derives from its ``latencies`` (seconds per answered message) and ``acks`` (monotonic
    time of each answer)."""

    latencies: list[float]
    acks: list[float]

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    def recovery_after(self, t: float) -> float:
        """Seconds from ``t`` to the first answer after it."""
        later = [a for a in self.acks if a > t]
        return (min(later) - t) if later else float("inf")


@dataclass
class RunResult(Acknowledged):
    conversations: int
    turns: int
    seconds: float
    latencies: list[float]  # seconds, per acknowledged customer message, first send to reply
    acks: list[float]  # monotonic time of each acknowledgement
    redeliveries: int
    retries: Counter[str]
    failed: list[str]
    server_seconds: list[float] = field(default_factory=list)  # per answered delivery, inside the worker

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        inside = statistics.median(self.server_seconds) * 1000 if self.server_seconds else None
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "seconds": round(self.seconds, 2),
            "turns_per_s": round(self.turns_per_second, 1),
            "p50_ms": round(self.percentile(50) * 1000, 1),
            "p95_ms": round(self.percentile(95) * 1000, 1),
            "p99_ms": round(self.percentile(99) * 1000, 1),
            "max_ms": round(max(self.latencies, default=0) * 1000, 1),
            "mean_ms": round(statistics.fmean(self.latencies) * 1000, 1) if self.latencies else None,
            "in_worker_p50_ms": None if inside is None else round(inside, 1),
            "redeliveries": self.redeliveries,
            "retries": dict(self.retries),
            "failed": self.failed,
        }


async def drive(
    ports_of: Callable[[], list[int]],
    conversations: Sequence[str],
    *,
    client_timeout: float = 15.0,
    deadline: float = 180.0,
    stagger: float = 0.0,
    think: float = 0.0,
    seed: int = 1,
    host: str = "127.0.0.1",
) -> RunResult:
    """Every customer plays the dialogue; a message is re-sent (to the next worker) until it is answered."""
    import httpx

    latencies: list[float] = []
    acks: list[float] = []
    retries: Counter[str] = Counter()
    failed: list[str] = []
    server_seconds: list[float] = []
    redeliveries = 0
    rr = 0
    rng = random.Random(seed)
    stop_at = time.monotonic() + deadline
    limits = httpx.Limits(max_connections=len(conversations) + 10, max_keepalive_connections=len(conversations) + 10)

    async with httpx.AsyncClient(limits=limits) as client:

        async def customer(n: int, cid: str) -> None:
            nonlocal rr, redeliveries
            if stagger:
                await asyncio.sleep(stagger * n)
            for k, text in enumerate(script(10000 + n)):
                if think and k:
                    await asyncio.sleep(rng.uniform(0, 2 * think))  # the customer types
                msg = {"conversation": cid, "id": f"{cid}.m{k}", "text": text}
                t0 = time.monotonic()
                while True:
                    ports = ports_of()
                    port = ports[rr % len(ports)]
                    rr += 1
                    try:
                        resp = await client.post(f"http://{host}:{port}/message", json=msg, timeout=client_timeout)
                        if resp.status_code == 200:
                            answer = resp.json()
                            retries.update(answer["retries"])
                            server_seconds.append(answer["seconds"])
                            break
                    except httpx.HTTPError:
                        pass
                    redeliveries += 1
                    if time.monotonic() > stop_at:
                        failed.append(msg["id"])
                        return
                    await asyncio.sleep(0.1)
                now = time.monotonic()
                latencies.append(now - t0)
                acks.append(now)

        start = time.monotonic()
        await asyncio.gather(*(customer(n, cid) for n, cid in enumerate(conversations)))
        seconds = time.monotonic() - start
    return RunResult(
        conversations=len(conversations),
        turns=len(latencies),
        seconds=seconds,
        latencies=latencies,
        acks=acks,
        redeliveries=redeliveries,
        retries=retries,
        failed=failed,
        server_seconds=server_seconds,
    )


async def verify(
    store: Any, services: Services, conversations: Sequence[str], unanswered: Sequence[str] = ()
) -> list[str]:
    """Every broken promise, as text (empty when all held).

    ``unanswered``: message ids the customers gave up on (``RunResult.failed``). Their conversations are checked
    for what was acknowledged before them (nothing acknowledged lost, nothing paid twice), not for completion.
    """
    problems: list[str] = []
    gave_up = {m.rsplit(".m", 1)[0]: int(m.rsplit(".m", 1)[1]) for m in unanswered}
    for n, cid in enumerate(conversations):
        events = await store.list_events(cid)
        ids = [e.event_id for e in events]
        answered = gave_up.get(cid, 4)
        want = [x for k in range(answered) for x in (f"{cid}.m{k}", f"{cid}.m{k}.reply")]
        if (ids[: len(want)] if cid in gave_up else ids) != want:
            problems.append(f"{cid}: events {ids} != {want}")
        if [e.seq for e in events] != list(range(1, len(events) + 1)):
            problems.append(f"{cid}: seqs not contiguous")
        if services.refunds[cid] > 1 or services.emails[cid] > 1:
            problems.append(f"{cid}: {services.refunds[cid]} refunds and {services.emails[cid]} emails")
        if cid in gave_up:
            continue
        state = await store.get_state(_state_ref(cid))
        if state is None or state.data.get("email") != f"customer{10000 + n}@example.com":
            problems.append(f"{cid}: state lost the email: {state.data if state else None}")
        steps = {s.step: s for s in await store.get_workflow(cid, WORKFLOW)}
        if sorted(steps) != sorted(STEPS) or any(s.status != "completed" for s in steps.values()):
            problems.append(f"{cid}: steps {[(s.step, s.status) for s in steps.values()]}")
        if services.refunds[cid] != 1:
            problems.append(f"{cid}: {services.refunds[cid]} refunds paid")
        if services.emails[cid] != 1:
            problems.append(f"{cid}: {services.emails[cid]} confirmation emails sent")
    extra = set(services.refunds) - set(conversations)
    if extra:
        problems.append(f"refunds for unknown conversations: {sorted(extra)[:5]}")
    return problems


def _state_ref(cid: str) -> Any:
    from pgagentstate import StateRef

    return StateRef.conversation(cid)


async def step_attempts(store: Any, conversations: Sequence[str]) -> Counter[str]:
    """Total attempts per step name over all conversations (1 each when nothing had to be redone)."""
    total: Counter[str] = Counter()
    for cid in conversations:
        for s in await store.get_workflow(cid, WORKFLOW):
            total[s.step] += s.attempts
    return total


@contextlib.asynccontextmanager
async def every(seconds: float, action: Callable[[], Awaitable[None]]) -> Any:
    """Run ``action`` every ``seconds`` in the background for the duration of the block, on the clock: an
    action's own duration (a killed worker's restart, ~0.5 s) does not stretch the period, so a run of a
    given length sees the same number of faults on a fast or a slow machine."""

    async def loop() -> None:
        due = time.monotonic()
        while True:
            due = max(due + seconds, time.monotonic())
            await asyncio.sleep(due - time.monotonic())
            await action()

    task = asyncio.create_task(loop())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--name", default="w")
    w.add_argument("--host", default="127.0.0.1")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--dsn", required=True)
    w.add_argument("--schema", required=True)
    w.add_argument("--services", required=True)
    w.add_argument("--pool", type=int, default=5)
    w.add_argument("--lease", type=float, default=3.0)
    w.add_argument("--pgbouncer", action="store_true")
    w.add_argument("--pool-check", choices=["core", "none", "drain"], default="core")
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        asyncio.run(serve_worker(args))


if __name__ == "__main__":
    main(sys.argv[1:])
