"""An ADK agent run through the durable inbox: a turn that died after its tool paid is rewound and run
again (the customer's message is in the model's context once), and the ledger replays the payment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from pgagentstate import AsyncStateStore, InboxMessage
from pgagentstate.adk import PostgresSessionService, run_message


class PayingLlm(BaseLlm):
    """Calls ``pay``, then answers; the first answer fails (the worker died after the payment)."""

    model: str = "scripted-paying"
    seen: list[list[str]] = []  # noqa: RUF012 - pydantic copies the default per instance
    failures: list[str] = ["the worker died after the payment"]  # noqa: RUF012

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents or []
        self.seen.append([p.text for c in contents if c.role == "user" for p in c.parts or [] if p.text])
        if not any(p.function_response for c in contents for p in c.parts or []):
            call = types.FunctionCall(name="pay", args={}, id=f"adk-{uuid.uuid4().hex[:8]}")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        if self.failures:
            raise RuntimeError(self.failures.pop())
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="Reembolso feito.")]))


async def test_a_resumed_turn_is_rewound_and_replayed(dsn: str, schema: str, astore: AsyncStateStore) -> None:
    charges: list[str] = []

    async def pay() -> dict[str, Any]:
        """Pay the refund."""

        async def charge(key: str) -> dict[str, Any]:
            charges.append(key)
            return {"transaction_id": "txn_1"}

        receipt: dict[str, Any] = await astore.run_once("wa:1/pay", charge, conversation_id="wa:1")
        return receipt

    llm = PayingLlm()
    runner = Runner(app_name="refunds", agent=LlmAgent(name="support", model=llm, tools=[pay]),
                    session_service=PostgresSessionService(dsn, schema=schema))

    async def handler(m: InboxMessage) -> list[str]:
        content = types.Content(role="user", parts=[types.Part(text=m.message["text"])])
        events = await run_message(runner, m, content, user_id="cliente")
        return [p.text for e in events if e.is_final_response() and e.content for p in e.content.parts or []
                if p.text]

    await astore.accept("wa:1", {"text": "quero reembolso"}, key="m1")
    inbox = astore.inbox(retry_delay=0.01, poll=0.05)
    try:
        while [m.status for m in await astore.list_messages("wa:1")] != ["done"]:
            await inbox.work(handler, until_idle=True)
            await asyncio.sleep(0.02)
    finally:
        await runner.close()
    [done] = await astore.list_messages("wa:1")
    assert (done.attempts, done.result) == (2, ["Reembolso feito."])
    assert charges == ["wa:1/pay"]  # paid once
    assert llm.seen[-1] == ["quero reembolso"]  # the rewound attempt's message is not in the context twice


async def test_a_turn_that_finished_before_its_worker_died_is_not_run_again(
    dsn: str, schema: str, astore: AsyncStateStore
) -> None:
    llm = PayingLlm(failures=[])

    async def pay() -> dict[str, Any]:
        """Pay the refund."""
        return {"transaction_id": "txn_1"}

    runner = Runner(app_name="refunds", agent=LlmAgent(name="support", model=llm, tools=[pay]),
                    session_service=PostgresSessionService(dsn, schema=schema))
    died: list[bool] = []

    async def handler(m: InboxMessage) -> list[str]:
        content = types.Content(role="user", parts=[types.Part(text=m.message["text"])])
        events = await run_message(runner, m, content, user_id="cliente")
        if not died:
            died.append(True)
            raise RuntimeError("the worker died before recording the outcome")
        return [p.text for e in events if e.is_final_response() and e.content for p in e.content.parts or []
                if p.text]

    await astore.accept("wa:2", {"text": "quero reembolso"}, key="m1")
    inbox = astore.inbox(retry_delay=0.01, poll=0.05)
    try:
        while [m.status for m in await astore.list_messages("wa:2")] != ["done"]:
            await inbox.work(handler, until_idle=True)
            await asyncio.sleep(0.02)
    finally:
        await runner.close()
    [done] = await astore.list_messages("wa:2")
    assert (done.attempts, done.result) == (2, ["Reembolso feito."])
    assert len(llm.seen) == 2  # the model was called for the one run only (a tool call, then the answer)
