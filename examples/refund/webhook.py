"""A WhatsApp Cloud API-shaped webhook service: a plain ASGI app, one per worker process.

``GET /webhook`` answers Meta's verification handshake (``hub.mode``, ``hub.verify_token``,
``hub.challenge``); ``POST /webhook`` takes the ``whatsapp_business_account`` payload, hands each text
message to the configured framework's refund agent and sends the replies through the Cloud API's
``POST /v21.0/{phone-number-id}/messages``. With an app secret, ``X-Hub-Signature-256`` is checked.

Nothing lives in the worker's memory between requests, so any worker can take any message of any
conversation. WhatsApp delivers at least once (it retries until it gets a 200), so each message is
recorded under its ``wamid`` (a second delivery is not a second message) and marked started before the
agent runs: a delivery of a message whose first attempt died mid-turn resumes that turn (``retry=True``).
Turns of one conversation are serialised across workers with the core's ``conversation_lock``.

With ``PGAGENTSTATE_DEMO_INBOX=1`` the worker needs no redelivery at all: ``POST /webhook`` only stores
each message in the core's durable inbox (``store.accept``, keyed by its ``wamid``) and answers 200 at
once; every worker runs inbox workers (``store.inbox().work``) that take each conversation's messages in
order, one turn at a time, and send the replies. A worker killed mid-turn stops renewing its lease, and
another worker resumes the turn when the lease (``PGAGENTSTATE_DEMO_INBOX_LEASE`` seconds) runs out.

A customer's conversation is WhatsApp's customer service window: a message more than 24 hours after the
customer's previous one starts their next conversation (``whatsapp:<number>~2``...), a new history for the
agent. After each answered message the webhook wakes pgagentstate's distillation worker (one NOTIFY): in
its own process, the worker turns the conversation into facts in the customer's long-term memory, which is
how the agent of the next conversation knows the email without asking.

Run a worker from examples/: ``python -m refund.webhook --framework langgraph --port 8201`` (DSN, schema,
tenant and service URLs from the environment; see :func:`main`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

from pgagentstate import (
    Accepted,
    AsyncInbox,
    AsyncStateStore,
    ConnectionLost,
    InboxMessage,
    NewEvent,
    RedisTier,
    StateRef,
)

from .agents import RefundAgent, channel_conversation_id, load_agent
from .workflow import ServiceUrls, post_json

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

GRAPH_VERSION = "v21.0"
WINDOW = timedelta(hours=24)  # WhatsApp's customer service window


def channel_ref(conversation_id: str) -> StateRef:
    """Per-conversation delivery bookkeeping: ``turn:<wamid>`` -> started / answered (with the replies)."""
    return StateRef.conversation(conversation_id, "channel")


def customer_ref(customer: str) -> StateRef:
    """Which conversation the customer is in: ``{"conversation": n, "last": <their latest message, ISO>}``."""
    return StateRef.user("refunds", customer, "whatsapp")


def conversation_number(current: Mapping[str, object] | None, sent_at: datetime) -> int:
    """The customer's conversation for a message sent at ``sent_at``: the current one, or the next when
    the window closed (no message from the customer for 24 hours)."""
    if not current:
        return 1
    n = int(str(current["conversation"]))
    return n + 1 if sent_at - datetime.fromisoformat(str(current["last"])) > WINDOW else n


class WebhookService:
    """Handles WhatsApp messages with one refund agent; ``make_agent`` is called at start-up."""

    def __init__(
        self,
        store: AsyncStateStore,
        make_agent: Callable[[AsyncStateStore], RefundAgent],
        urls: ServiceUrls,
        *,
        worker: str,
        verify_token: str = "pgagentstate-demo",
        app_secret: str | None = None,
        max_concurrent_turns: int = 3,
        inbox_lease: float | None = None,
    ) -> None:
        self.store = store
        self.make_agent = make_agent
        self.urls = urls
        self.worker = worker
        self.verify_token = verify_token
        self.app_secret = app_secret
        self._agent: RefundAgent | None = None
        # A turn holds its conversation's lock on one pooled connection while the agent needs others from
        # the same pool: without a bound, a burst of turns takes every connection for locks and each then
        # waits for the pool's timeout (seen in the webhook load test: 6 turns on a pool of 6).
        self._turns = asyncio.Semaphore(max(1, max_concurrent_turns))
        # Inbox mode: the webhook only accepts; these workers run the turns (as many at once as above).
        self.inbox: AsyncInbox | None = None
        if inbox_lease is not None:
            self.inbox = store.inbox(lease=inbox_lease, concurrency=max(1, max_concurrent_turns), poll=0.1)
        self._working: asyncio.Future[int] | None = None

    @property
    def agent(self) -> RefundAgent:
        if self._agent is None:
            self._agent = self.make_agent(self.store)
        return self._agent

    async def handle_message(self, phone_number_id: str, message: dict[str, Any]) -> list[str]:
        """One inbound text message: record it once, run (or resume) the agent's turn, send the replies.

        A turn whose connection died (server restart, terminated backend) is resumed once here rather
        than answered with a 500 and left to WhatsApp's redelivery back-off: the turn marks make it safe.
        """
        async with self._turns:
            try:
                return await self._handle_message(phone_number_id, message)
            except ConnectionLost:
                return await self._handle_message(phone_number_id, message)

    async def accept(self, phone_number_id: str, message: dict[str, Any]) -> Accepted:
        """Inbox mode: store the message durably (once per ``wamid``); a worker will run its turn."""
        customer = str(message["from"])
        return await self.store.accept(
            channel_conversation_id(customer),
            {"phone_number_id": phone_number_id, "message": message},
            key=str(message["id"]),
            app="refunds",
            framework=self.agent.framework,
            channel="whatsapp",
            user_id=customer,
        )

    async def run_turn(self, claimed: InboxMessage) -> dict[str, Any]:
        """Inbox mode: the turn of one accepted message, on whichever worker claimed it. The inbox runs one
        turn at a time per conversation, so no lock is taken; a turn resumed after its worker died finds
        its "started" mark and resumes (the agent's tools replay what was paid)."""
        replies = await self._handle_message(claimed.message["phone_number_id"], claimed.message["message"], lock=False)
        return {"replies": replies, "worker": self.worker}

    async def _handle_message(self, phone_number_id: str, message: dict[str, Any], *, lock: bool = True) -> list[str]:
        customer, wamid, text = str(message["from"]), str(message["id"]), str(message["text"]["body"])
        sent_at = datetime.fromtimestamp(int(message.get("timestamp") or 0) or datetime.now(UTC).timestamp(), UTC)
        current = await self.store.get_state(customer_ref(customer))
        n = conversation_number(current.data if current else None, sent_at)
        cid = channel_conversation_id(customer, n)
        ref, mark_key = channel_ref(cid), f"turn:{wamid}"
        await self.store.ensure_conversation(
            cid, framework=self.agent.framework, channel="whatsapp", user_id=customer, app="refunds"
        )
        serialised = self.store.conversation_lock(cid, timeout=60) if lock else contextlib.nullcontext()
        async with serialised:
            loaded = await self.store.load_conversation(cid, limit=0, states=[ref])
            marks = loaded.states[0].data if loaded.states and loaded.states[0] else {}
            mark = marks.get(mark_key)
            if mark is not None and mark.get("status") == "answered":
                replies: list[str] = list(mark["replies"])  # a redelivery of an answered message
            else:
                await self.store.append_events(
                    cid,
                    [
                        NewEvent(
                            {"role": "customer", "text": text, "wamid": wamid},
                            author="customer",
                            event_id=wamid,
                            created_at=sent_at,
                        )
                    ],
                    state_patches=[
                        (ref, {mark_key: {"status": "started", "worker": self.worker}}),
                        (customer_ref(customer), {"conversation": n, "last": sent_at.isoformat()}),
                    ],
                )
                replies = await self.agent.respond(customer, text, retry=mark is not None, conversation=n)
                await self.store.append_events(
                    cid,
                    [
                        NewEvent(
                            {"role": "agent", "text": reply, "worker": self.worker},
                            author="agent",
                            event_id=f"{wamid}:reply:{i}",
                            created_at=sent_at + timedelta(seconds=1 + i),
                        )
                        for i, reply in enumerate(replies)
                    ],
                    state_patches=[
                        (ref, {mark_key: {"status": "answered", "worker": self.worker, "replies": replies}})
                    ],
                )
                await self.store.request_distill(cid)  # the after-turn hook: distilled elsewhere, not here
            await self._deliver(cid, phone_number_id, customer, wamid, replies)
        return replies

    async def _deliver(self, cid: str, phone_number_id: str, customer: str, wamid: str, replies: list[str]) -> None:
        """Send the replies through the Cloud API, each once (a redelivery does not text the customer twice)."""
        if not self.urls.whatsapp:
            return
        url = f"{self.urls.whatsapp}/{GRAPH_VERSION}/{phone_number_id}/messages"
        for i, reply in enumerate(replies):
            body = {
                "messaging_product": "whatsapp",
                "recipient_type": "individual",
                "to": customer,
                "type": "text",
                "text": {"preview_url": False, "body": reply},
            }

            async def post(key: str, body: dict[str, Any] = body) -> dict[str, Any]:
                return await post_json(url, body, key=key, timeout=5.0)

            _: dict[str, Any] = await self.store.run_once(
                f"{cid}/out/{wamid}/{i}", post, api="whatsapp", request=body, conversation_id=cid, lease=5.0
            )

    # --- ASGI ----------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path == "/healthz":
            await _json(send, 200, {"worker": self.worker, "pid": os.getpid(), "framework": self.agent.framework})
        elif path == "/webhook" and method == "GET":
            query = parse_qs(scope.get("query_string", b"").decode())
            if query.get("hub.mode") == ["subscribe"] and query.get("hub.verify_token") == [self.verify_token]:
                await _text(send, 200, query.get("hub.challenge", [""])[0])
            else:
                await _text(send, 403, "verification failed")
        elif path == "/webhook" and method == "POST":
            body = await _body(receive)
            await self._webhook(scope, body, send)
        else:
            await _json(send, 404, {"error": f"no route {method} {path}"})

    async def _webhook(self, scope: Scope, body: bytes, send: Send) -> None:
        if self.app_secret is not None:
            headers = dict(scope.get("headers", []))
            signature = headers.get(b"x-hub-signature-256", b"").decode()
            expected = "sha256=" + hmac.new(self.app_secret.encode(), body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(signature, expected):
                await _json(send, 401, {"error": "bad X-Hub-Signature-256"})
                return
        try:
            payload = json.loads(body)
            changes = [c["value"] for e in payload["entry"] for c in e["changes"] if c.get("field") == "messages"]
        except (ValueError, KeyError, TypeError):
            await _json(send, 400, {"error": "not a whatsapp_business_account webhook"})
            return
        replies: list[str] = []
        accepted: list[int] = []
        for value in changes:
            phone_number_id = str(value.get("metadata", {}).get("phone_number_id", "demo"))
            for message in value.get("messages", []):
                if message.get("type") != "text":
                    continue
                if self.inbox is not None:
                    accepted.append((await self.accept(phone_number_id, message)).seq)
                else:
                    replies += await self.handle_message(phone_number_id, message)
        # WhatsApp only looks at the status; the replies are there for people reading along.
        await _json(send, 200, {"worker": self.worker, "pid": os.getpid(), "replies": replies, "accepted": accepted})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                try:
                    _ = self.agent
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": f"{type(exc).__name__}: {exc}"})
                    return
                if self.inbox is not None:
                    self._working = asyncio.ensure_future(self.inbox.work(self.run_turn))
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                if self.inbox is not None and self._working is not None:
                    self.inbox.stop()  # turns under way finish and are recorded first
                    await self._working
                if self._agent is not None:
                    await self._agent.aclose()
                await self.store.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        event = await receive()
        chunks.append(event.get("body", b""))
        if not event.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, data: Any) -> None:
    await _respond(send, status, json.dumps(data, ensure_ascii=False).encode(), b"application/json")


async def _text(send: Send, status: int, text: str) -> None:
    await _respond(send, status, text.encode(), b"text/plain; charset=utf-8")


def build_app(framework: str, *, worker: str, env: MutableMapping[str, str] = os.environ) -> WebhookService:
    """The app of one worker, configured from the environment: ``PGAGENTSTATE_DSN``,
    ``PGAGENTSTATE_DEMO_SCHEMA``, ``PGAGENTSTATE_DEMO_TENANT``, the service URLs, ``WHATSAPP_APP_SECRET``, and
    ``PGAGENTSTATE_DEMO_REDIS`` (a Redis tier's URL, with ``PGAGENTSTATE_REDIS_SECRET``), and
    ``PGAGENTSTATE_DEMO_INBOX=1`` (inbox mode, with ``PGAGENTSTATE_DEMO_INBOX_LEASE`` seconds of lease)."""
    redis_url = env.get("PGAGENTSTATE_DEMO_REDIS")  # examples/demo.py --redis: Redis in front of Postgres
    store = AsyncStateStore(
        env.get("PGAGENTSTATE_DSN"),
        schema=env.get("PGAGENTSTATE_DEMO_SCHEMA", "pgagentstate"),
        tenant=env.get("PGAGENTSTATE_DEMO_TENANT", "default"),
        max_size=6,
        cache=RedisTier(redis_url, secret=env.get("PGAGENTSTATE_REDIS_SECRET"), scratchpad=True) if redis_url else None,
    )
    urls = ServiceUrls.from_env(env)
    inbox = env.get("PGAGENTSTATE_DEMO_INBOX") == "1"
    inbox_lease = float(env.get("PGAGENTSTATE_DEMO_INBOX_LEASE", "3")) if inbox else None
    return WebhookService(
        store,
        lambda s: load_agent(framework, s, urls),
        urls,
        worker=worker,
        app_secret=env.get("WHATSAPP_APP_SECRET") or None,
        inbox_lease=inbox_lease,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one webhook worker (uvicorn).")
    parser.add_argument("--framework", default="core")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default=f"worker-{os.getpid()}")
    args = parser.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print("the webhook workers need uvicorn: pip install 'pgagentstate[all]'", file=sys.stderr)
        return 3
    app = build_app(args.framework, worker=args.name)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", lifespan="on", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
