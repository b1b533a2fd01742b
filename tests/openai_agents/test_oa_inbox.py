"""An Agents SDK agent run through the durable inbox: a turn that died after its tool paid is rolled back in
the session and run again; the ledger replays the payment."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from pgagentstate import AsyncStateStore, InboxMessage
from pgagentstate.openai_agents import PostgresSession, idempotent_function_tool, run_message


async def test_a_resumed_turn_is_rolled_back_and_replayed(astore: AsyncStateStore) -> None:
    charges: list[str] = []

    @idempotent_function_tool(astore)
    async def refund(order_id: str) -> str:
        """Refund an order.

        Args:
            order_id: The order number.
        """
        charges.append(order_id)
        return f"refund #{len(charges)} for {order_id}"

    call = function_call("refund", {"order_id": "12345"}, call_id="call_1")
    model = ScriptedModel([[call], RuntimeError("the worker died after the refund"),
                           [call], [assistant_message("Reembolso feito.")]])
    agent: Agent[Any] = Agent(name="support", instructions="", tools=[refund], model=model)

    async def handler(m: InboxMessage) -> str:
        session = PostgresSession(m.conversation_id, store=astore)
        result = await run_message(agent, m, session, m.message["text"],
                                   context={"conversation_id": m.conversation_id})
        return str(result.final_output)

    await astore.accept("wa:1", {"text": "refund 12345"}, key="m1")
    inbox = astore.inbox(retry_delay=0.01, poll=0.05)
    while [m.status for m in await astore.list_messages("wa:1")] != ["done"]:
        await inbox.work(handler, until_idle=True)
        await asyncio.sleep(0.02)
    [done] = await astore.list_messages("wa:1")
    assert (done.attempts, done.result) == (2, "Reembolso feito.")
    assert charges == ["12345"]  # paid once
    items = await PostgresSession("wa:1", store=astore).get_items()
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    assert len(users) == 1  # the crashed attempt's input was rolled back
    assert sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call") == 1
    model.assert_complete()
