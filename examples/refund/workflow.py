"""The refund as a durable workflow: understand -> verify_policy -> process_refund -> send_confirmation.

Every step is recorded in the core's workflow table (``run_step`` / ``start_step`` / ``complete_step``), so
a retry — the same process after a payment timeout, or another worker after a crash — resumes at the
step that did not finish instead of starting over. The payment and the email go through the core's
idempotency ledger (``run_once``) with the ledger key sent as the API's ``Idempotency-Key``: a crash
between the call and the record re-sends the same key, and the API answers with the refund it already
made instead of paying twice.

These are the agents' tools in all three frameworks; the frameworks only decide when to call them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgagentstate import AsyncStateStore, StateRef

from .dialogue import CHECK_POLICY, PROCESS_REFUND, SEND_CONFIRMATION

STEPS = ("understand", "verify_policy", "process_refund", "send_confirmation")
CRASH_POINTS = ("before_payment", "after_payment", "after_record")
CRASH_ENV = "PGAGENTSTATE_DEMO_CRASH"  # a token file holding a crash point: the first process there stops
POLICY_DAYS = 30
DELIVERED_DAYS_AGO = 3
REFUND_AMOUNT = 500.0  # the order's value in the demo's catalogue


class ApiError(Exception):
    """An HTTP call to a demo service failed (timeout, 5xx, refused)."""


@dataclass(frozen=True)
class ServiceUrls:
    """Where the payment, email and WhatsApp Cloud APIs listen."""

    payment: str
    email: str
    whatsapp: str = ""

    def env(self) -> dict[str, str]:
        return {
            "PGAGENTSTATE_DEMO_PAYMENT_URL": self.payment,
            "PGAGENTSTATE_DEMO_EMAIL_URL": self.email,
            "PGAGENTSTATE_DEMO_WHATSAPP_URL": self.whatsapp,
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ServiceUrls:
        return cls(
            env["PGAGENTSTATE_DEMO_PAYMENT_URL"],
            env["PGAGENTSTATE_DEMO_EMAIL_URL"],
            env.get("PGAGENTSTATE_DEMO_WHATSAPP_URL", ""),
        )


def _post(url: str, body: Mapping[str, Any], key: str, timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result
    except urllib.error.HTTPError as exc:
        raise ApiError(f"HTTP {exc.code} from {url}") from exc
    except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
        raise ApiError(f"no answer from {url} ({exc})") from exc


async def post_json(url: str, body: Mapping[str, Any], *, key: str, timeout: float = 1.0) -> dict[str, Any]:
    """POST JSON with an ``Idempotency-Key``; :class:`ApiError` on timeouts and HTTP errors."""
    return await asyncio.to_thread(_post, url, body, key, timeout)


async def crash_point(name: str) -> None:
    """Stop here, once, if the demo asked for a crash at ``name``: the demo kills -9 this process.

    ``$PGAGENTSTATE_DEMO_CRASH`` names a token file holding the crash point; the demo (re)arms it by
    writing the file. The token is taken with an atomic rename, so of several workers only the first to
    get there stops. It writes its pid next to the token for the killer and waits; if nobody kills it
    within 10 s it kills itself (a crash is what was asked for).
    """
    token = os.environ.get(CRASH_ENV, "")
    try:
        if not token or Path(token).read_text().strip() != name:
            return
        os.rename(token, f"{token}.taken")
    except FileNotFoundError:
        return
    Path(f"{token}.paused.tmp").write_text(f"{os.getpid()} {name}")
    os.rename(f"{token}.paused.tmp", f"{token}.paused")
    await asyncio.sleep(10)
    os.kill(os.getpid(), signal.SIGKILL)


def facts_ref(conversation_id: str) -> StateRef:
    """The refund's facts and outcome as one versioned state document (its history is the audit trail)."""
    return StateRef.conversation(conversation_id, "refund")


class RefundTools:
    """The refund tools of one customer conversation (``conversation_id``, created if missing).

    ``lease`` is how long a crashed payment claim blocks a retry before another worker takes it over;
    the API's idempotency key makes the takeover safe even if the first call is still in flight.
    """

    def __init__(
        self,
        store: AsyncStateStore,
        conversation_id: str,
        urls: ServiceUrls,
        *,
        http_timeout: float = 1.0,
        payment_attempts: int = 3,
        lease: float = 2.0,
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.urls = urls
        self.http_timeout = http_timeout
        self.payment_attempts = payment_attempts
        self.lease = lease

    @staticmethod
    def workflow(order_id: str) -> str:
        return f"refund:{order_id}"

    @property
    def facts_ref(self) -> StateRef:
        return facts_ref(self.conversation_id)

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run tool ``name``; failures come back as ``{"error": ...}`` for the model to read."""
        try:
            if name == CHECK_POLICY:
                return await self.check_refund_policy(str(args["order_id"]), str(args["email"]), str(args["reason"]))
            if name == PROCESS_REFUND:
                return await self.process_refund(str(args["order_id"]))
            if name == SEND_CONFIRMATION:
                return await self.send_confirmation(str(args["order_id"]), str(args["email"]))
        except (KeyError, ApiError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {"error": f"unknown tool {name!r}"}

    async def check_refund_policy(self, order_id: str, email: str, reason: str) -> dict[str, Any]:
        """Steps 1 and 2: record what the customer wants, then check the refund policy."""
        cid, wf = self.conversation_id, self.workflow(order_id)
        await self.store.ensure_conversation(cid, channel="whatsapp")

        async def understand() -> dict[str, Any]:
            facts = {"order_id": order_id, "email": email, "reason": reason, "status": "understood"}
            await self.store.patch_state(self.facts_ref, facts)
            return facts

        _: dict[str, Any] = await self.store.run_step(cid, wf, "understand", understand, position=1)

        async def verify() -> dict[str, Any]:
            # The demo's catalogue: every order was delivered DELIVERED_DAYS_AGO and is worth REFUND_AMOUNT.
            days = DELIVERED_DAYS_AGO
            policy = {
                "eligible": days <= POLICY_DAYS,
                "amount": REFUND_AMOUNT,
                "currency": "BRL",
                "why": f"entregue há {days} dias; prazo de {POLICY_DAYS} dias",
            }
            await self.store.patch_state(self.facts_ref, {"policy": policy, "status": "policy_ok"})
            return policy

        result: dict[str, Any] = await self.store.run_step(cid, wf, "verify_policy", verify, position=2)
        return result

    async def process_refund(self, order_id: str) -> dict[str, Any]:
        """Step 3: pay the refund once, retrying timeouts here without redoing steps 1 and 2."""
        cid, wf = self.conversation_id, self.workflow(order_id)
        steps = {s.step: s for s in await self.store.get_workflow(cid, wf)}
        policy = steps.get("verify_policy")
        if policy is None or policy.status != "completed":
            return {"error": f"call {CHECK_POLICY} first"}
        done = steps.get("process_refund")
        if done is not None and done.status == "completed":
            return dict(done.result)
        request = {
            "order_id": order_id,
            "amount": policy.result["amount"],
            "currency": policy.result["currency"],
            "reason": steps["understand"].result["reason"],
        }
        key = f"{cid}/{wf}/payment"

        async def pay(idempotency_key: str) -> dict[str, Any]:
            await crash_point("before_payment")
            receipt = await post_json(
                f"{self.urls.payment}/v1/refunds", request, key=idempotency_key, timeout=self.http_timeout
            )
            await crash_point("after_payment")
            return receipt

        last_error = ""
        for attempt in range(self.payment_attempts):
            await self.store.start_step(cid, wf, "process_refund", position=3)
            try:
                paid: dict[str, Any] = await self.store.run_once(
                    key, pay, api="payment", request=request, conversation_id=cid, lease=self.lease
                )
            except ApiError as exc:
                last_error = str(exc)
                await self.store.fail_step(cid, wf, "process_refund", last_error, position=3)
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            await crash_point("after_record")
            result = {
                "transaction_id": paid["transaction_id"],
                "amount": paid["amount"],
                "currency": paid["currency"],
                "status": paid["status"],
            }
            await self.store.patch_state(self.facts_ref, {"refund": result, "status": "refunded"})
            await self.store.complete_step(cid, wf, "process_refund", result, position=3)
            return result
        return {"error": f"payment failed after {self.payment_attempts} attempts: {last_error}"}

    async def send_confirmation(self, order_id: str, email: str) -> dict[str, Any]:
        """Step 4: email the receipt once."""
        cid, wf = self.conversation_id, self.workflow(order_id)
        steps = {s.step: s for s in await self.store.get_workflow(cid, wf)}
        refund = steps.get("process_refund")
        if refund is None or refund.status != "completed":
            return {"error": f"call {PROCESS_REFUND} first"}
        txn = refund.result

        async def send() -> dict[str, Any]:
            body = {
                "to": email,
                "subject": f"Comprovante de reembolso do pedido #{order_id}",
                "body": f"Reembolso {txn['transaction_id']}: {txn['amount']} {txn['currency']}.",
            }

            async def post(key: str) -> dict[str, Any]:
                return await post_json(f"{self.urls.email}/v1/emails", body, key=key, timeout=self.http_timeout)

            sent: dict[str, Any] = await self.store.run_once(
                f"{cid}/{wf}/email",
                post,
                api="email",
                request=body,
                conversation_id=cid,
                lease=self.lease,
            )
            result = {"message_id": sent["message_id"], "to": email, "sent_at": time.time()}
            await self.store.patch_state(self.facts_ref, {"receipt": result, "status": "receipt_sent"})
            return result

        result: dict[str, Any] = await self.store.run_step(cid, wf, "send_confirmation", send, position=4)
        return result
