"""The demo's moving parts for one framework: services, two webhook workers, the load balancer, the
distillation worker.

:class:`Cluster` starts the payment/email/WhatsApp services (threads of this process, their records in
SQLite files), two worker processes (``python -m refund.webhook``, run from examples/), the round-robin proxy
and pgagentstate's distillation worker (``python -m pgagentstate.ui.distill_worker --follow``);
:meth:`Cluster.deliver` plays WhatsApp: it posts a signed webhook and delivers again while the answer is
not a 200. A watcher kills -9 the worker that stops at the requested crash point, and restarts it the
way a process supervisor would.

With ``no_redelivery=True`` the workers run in inbox mode (see :mod:`refund.webhook`) and WhatsApp is
played as a channel that never delivers a message twice: :meth:`Cluster.deliver` posts it once, then
waits for its turn's outcome in the durable inbox. A worker killed mid-turn is recovered by the inbox
itself (another worker takes the turn over when its lease runs out), not by a redelivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pgagentstate import StateStore

from .agents import channel_conversation_id
from .proxy import RoundRobinProxy
from .services import Faults, Service
from .workflow import CRASH_ENV, CRASH_POINTS, ServiceUrls

EXAMPLES = Path(__file__).resolve().parents[1]  # the workers import refund.* and <framework>_agent from here
APP_SECRET = "demo-app-secret"
PHONE_NUMBER_ID = "106540352242922"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Delivery:
    """What happened to one webhook delivery (with WhatsApp's retries)."""

    status: int
    replies: list[str]
    worker: str
    attempts: list[str] = field(default_factory=list)  # one line per failed attempt


@dataclass
class Worker:
    name: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None


class Cluster:
    """Everything one framework's run needs; use as a context manager."""

    def __init__(
        self,
        framework: str,
        workdir: Path,
        *,
        dsn: str,
        schema: str,
        tenant: str,
        crash_at: str | None = None,
        payment_faults: list[str] | None = None,
        workers: int = 2,
        on_event: Callable[[str], None] = lambda line: None,
        no_redelivery: bool = False,
        inbox_lease: float = 3.0,
    ) -> None:
        self.framework = framework
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.on_event = on_event
        self.payment = Service(
            "payment", workdir / "payment.sqlite", faults=Faults(next=list(payment_faults or [])), on_fault=on_event
        )
        self.email = Service("email", workdir / "email.sqlite")
        self.whatsapp = Service("whatsapp", workdir / "whatsapp.sqlite")
        self.urls = ServiceUrls(self.payment.url, self.email.url, self.whatsapp.url)
        self.token = workdir / "crash-token"
        if crash_at:
            self.arm(crash_at)
        self.kills: list[str] = []
        self.env = {
            **os.environ,
            **self.urls.env(),
            "PGAGENTSTATE_DSN": dsn,
            "PGAGENTSTATE_DEMO_SCHEMA": schema,
            "PGAGENTSTATE_DEMO_TENANT": tenant,
            "WHATSAPP_APP_SECRET": APP_SECRET,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH", "")) if p),
        }
        self.env[CRASH_ENV] = str(self.token)
        self.no_redelivery = no_redelivery
        self._store: StateStore | None = None
        if no_redelivery:
            self.env["PGAGENTSTATE_DEMO_INBOX"] = "1"
            self.env["PGAGENTSTATE_DEMO_INBOX_LEASE"] = str(inbox_lease)
            self._store = StateStore(dsn, schema=schema, tenant=tenant, min_size=1, max_size=1)
        self.workers = [Worker(f"w{i + 1}", free_port(), workdir / f"w{i + 1}.log") for i in range(workers)]
        self.proxy = RoundRobinProxy([f"127.0.0.1:{w.port}" for w in self.workers])
        # Distillation runs beside the webhook workers, never in their requests: pgagentstate's own worker,
        # woken by the webhook's request_distill after each answered message (or every 5 s).
        self.distiller = Worker("distiller", 0, workdir / "distiller.log")
        self.distiller_argv = [
            sys.executable, "-m", "pgagentstate.ui.distill_worker", "--follow", "--poll", "5",
            "--schema", schema, "--tenant", tenant,  # the DSN from $PGAGENTSTATE_DSN (self.env)
        ]
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        for svc in (self.payment, self.email, self.whatsapp):
            svc.start()
        self.proxy.start()
        for w in self.workers:
            self.spawn(w)
        with self.distiller.log.open("ab") as log:
            self.distiller.proc = subprocess.Popen(self.distiller_argv, env=self.env, stdout=log,
                                                   stderr=subprocess.STDOUT)
        self._watcher = threading.Thread(target=self._watch, name="crash-watcher", daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for w in [*self.workers, self.distiller]:
            self.stop_worker(w)
        self.proxy.stop()
        for svc in (self.payment, self.email, self.whatsapp):
            svc.stop()
        if self._store is not None:
            self._store.close()

    def arm(self, point: str) -> None:
        """The next worker to reach ``point`` (one of ``CRASH_POINTS``) stops there and is killed -9."""
        if point not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}; one of {CRASH_POINTS}")
        tmp = self.token.with_suffix(".tmp")
        tmp.write_text(point)
        tmp.rename(self.token)

    def spawn(self, w: Worker) -> None:
        with w.log.open("ab") as log:
            w.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "refund.webhook",
                    "--framework",
                    self.framework,
                    "--port",
                    str(w.port),
                    "--name",
                    w.name,
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def restart(self) -> None:
        """Stop every worker and start them again (a deploy): nothing survives in their memory."""
        for w in self.workers:
            self.stop_worker(w)
        for w in self.workers:
            self.spawn(w)
        self.wait_ready()

    def stop_worker(self, w: Worker) -> None:
        if w.proc is not None and w.proc.poll() is None:
            w.proc.terminate()
            try:
                w.proc.wait(5)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()

    def kill(self, w: Worker) -> None:
        """kill -9: no shutdown hooks, no flushing, connections dropped mid-transaction."""
        if w.proc is not None and w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGKILL)
            w.proc.wait()

    def wait_ready(self, timeout: float = 45.0) -> None:
        deadline = time.monotonic() + timeout
        for i, w in enumerate(self.workers):
            moves = 0
            while True:
                if w.proc is not None and w.proc.poll() is not None:
                    if "address already in use" in self.log_tail(w, 5) and moves < 3:
                        # free_port() only asked the kernel for a free port; someone took it meanwhile.
                        moves += 1
                        w.port = free_port()
                        self.proxy.upstreams[i] = f"127.0.0.1:{w.port}"
                        self.spawn(w)
                        continue
                    raise RuntimeError(f"worker {w.name} exited with {w.proc.returncode}:\n{self.log_tail(w)}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{w.port}/healthz", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {w.name} did not start:\n{self.log_tail(w)}")
                time.sleep(0.1)

    def log_tail(self, w: Worker, lines: int = 30) -> str:
        try:
            return "\n".join(w.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _watch(self) -> None:
        """Kill -9 whichever worker stopped at the crash point, then restart it (a supervisor's job)."""
        paused = Path(f"{self.token}.paused")
        while not self._stop.is_set():
            if paused.exists():
                pid_text, point = paused.read_text().split()
                paused.unlink()
                victim = next((w for w in self.workers if w.proc is not None and w.proc.pid == int(pid_text)), None)
                if victim is not None:
                    self.on_event(f"kill -9 {victim.name} (pid {pid_text}) stopped at '{point}', mid-refund")
                    self.kill(victim)
                    self.kills.append(f"{victim.name} (pid {pid_text}) at {point}")
                    self.spawn(victim)
            self._stop.wait(0.02)

    # --- WhatsApp's side -----------------------------------------------------------------------------

    def webhook_body(self, customer: str, text: str, timestamp: int, wamid: str) -> bytes:
        payload = {
            "object": "whatsapp_business_account",
            "entry": [
                {
                    "id": "WHATSAPP_BUSINESS_ACCOUNT_ID",
                    "changes": [
                        {
                            "field": "messages",
                            "value": {
                                "messaging_product": "whatsapp",
                                "metadata": {"display_phone_number": "15550000000", "phone_number_id": PHONE_NUMBER_ID},
                                "contacts": [{"profile": {"name": "Cliente"}, "wa_id": customer}],
                                "messages": [
                                    {
                                        "from": customer,
                                        "id": wamid,
                                        "timestamp": str(timestamp),
                                        "type": "text",
                                        "text": {"body": text},
                                    }
                                ],
                            },
                        }
                    ],
                }
            ],
        }
        return json.dumps(payload, ensure_ascii=False).encode()

    def deliver(
        self, customer: str, text: str, timestamp: int | None = None, *, wamid: str | None = None,
        give_up_after: float = 45.0,
    ) -> Delivery:
        """POST the message webhook through the load balancer; deliver again until a 200, like WhatsApp
        (which keeps retrying for much longer than ``give_up_after`` seconds). With ``no_redelivery``:
        post it once, then wait for the turn's outcome in the inbox."""
        wamid = wamid or f"wamid.{uuid.uuid4().hex.upper()}"
        timestamp = int(time.time()) if timestamp is None else timestamp
        body = self.webhook_body(customer, text, timestamp, wamid)
        signature = "sha256=" + hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
        failures: list[str] = []
        deadline = time.monotonic() + give_up_after
        while True:
            request = urllib.request.Request(
                f"{self.proxy.url}/webhook",
                data=body,
                method="POST",
                headers={"Content-Type": "application/json", "X-Hub-Signature-256": signature},
            )
            try:
                with urllib.request.urlopen(request, timeout=90) as response:
                    data: dict[str, Any] = json.loads(response.read())
                    if self.no_redelivery:
                        return self.await_turn(customer, wamid, give_up_after)
                    return Delivery(200, list(data["replies"]), str(data["worker"]), failures)
            except urllib.error.HTTPError as exc:
                if self.no_redelivery:
                    raise RuntimeError(f"the webhook did not accept the message (HTTP {exc.code})") from exc
                detail = exc.read().decode(errors="replace")[:120]
                upstream = exc.headers.get("X-Upstream", "?")
                name = next((w.name for w in self.workers if upstream.endswith(f":{w.port}")), upstream)
                failures.append(f"HTTP {exc.code} from {name}: {detail}")
                if exc.code == 502:
                    self.on_event(f"delivery failed (HTTP 502, {name} died); WhatsApp delivers again")
                elif exc.code != 503:  # 503: no worker up yet (one restarting); anything else is a bug
                    raise RuntimeError(f"webhook refused the message: {failures[-1]}") from exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"message not delivered in {give_up_after} s: {failures}")
            time.sleep(0.3)

    def await_turn(self, customer: str, wamid: str, timeout: float) -> Delivery:
        """Wait until the inbox recorded the turn of message ``wamid`` (whichever worker ran it)."""
        assert self._store is not None
        cid = channel_conversation_id(customer)
        deadline = time.monotonic() + timeout
        while True:
            msg = self._store.get_message(cid, wamid)
            if msg is not None and msg.status == "done":
                return Delivery(200, list(msg.result["replies"]), str(msg.result["worker"]))
            if msg is not None and msg.status == "failed":
                raise RuntimeError(f"the turn of {wamid} failed: {msg.error}")
            if time.monotonic() > deadline:
                status = "not accepted" if msg is None else f"{msg.status}, {msg.attempts} attempts"
                raise RuntimeError(f"message {wamid} not answered in {timeout} s ({status})")
            time.sleep(0.05)
