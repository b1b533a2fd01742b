"""idempotent_function_tool: a tool's side effect runs once per key across retried and repeated runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunContextWrapper, Runner
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic import BaseModel

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import PostgresSession, StateContext, idempotent_function_tool, tool_call_key


class Payments:
    """A fake payment provider that counts how often money actually moved."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, float]] = []
        self.fail_next = 0

    def refund(self, order_id: str, amount: float) -> str:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("provider timeout")
        self.charges.append((order_id, amount))
        return f"refund #{len(self.charges)} of {amount:.2f} for {order_id}"


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


def refund_tool(store: AsyncStateStore, payments: Payments, **kw: Any) -> FunctionTool:
    @idempotent_function_tool(store, **kw)
    async def refund(order_id: str, amount: float) -> str:
        """Refund an order.

        Args:
            order_id: The order number.
            amount: How much to refund.
        """
        await asyncio.sleep(0)
        return payments.refund(order_id, amount)

    return refund


async def invoke(tool: FunctionTool, call_id: str, context: Any = None, **arguments: Any) -> Any:
    args = json.dumps(arguments)
    ctx = ToolContext(context=context, tool_name=tool.name, tool_call_id=call_id, tool_arguments=args)
    return await tool.on_invoke_tool(ctx, args)


async def test_schema_is_the_functions_own(store: AsyncStateStore) -> None:
    tool = refund_tool(store, Payments())
    assert tool.name == "refund"
    assert tool.description == "Refund an order."
    props = tool.params_json_schema["properties"]
    assert set(props) == {"order_id", "amount"}
    assert props["order_id"]["description"] == "The order number."
    assert props["amount"]["type"] == "number"


async def test_a_retried_run_does_not_pay_twice(store: AsyncStateStore) -> None:
    payments = Payments()
    tool = refund_tool(store, payments)
    call = function_call("refund", {"order_id": "12345", "amount": 19.9}, call_id="call_r1")
    model = ScriptedModel([[call], RuntimeError("model API went away after the refund")])
    agent: Agent[Any] = Agent(name="support", instructions="", tools=[tool], model=model)
    ctx = StateContext(user_id="cust-42", conversation_id="whatsapp:+5511")
    with pytest.raises(RuntimeError, match="went away"):
        await Runner.run(agent, "refund 12345", context=ctx, session=PostgresSession("whatsapp:+5511", store=store))
    assert payments.charges == [("12345", 19.9)]

    # The retry replays the same model decision (same tool call id): the refund is not paid again and the
    # model sees the first call's result.
    model.extend([[call], [assistant_message("Reembolso feito.")]])
    result = await Runner.run(agent, "refund 12345", context=ctx,
                              session=PostgresSession("whatsapp:+5511", store=store))
    assert result.final_output == "Reembolso feito."
    assert payments.charges == [("12345", 19.9)]
    outputs = [i for i in result.to_input_list() if i.get("type") == "function_call_output"]
    assert outputs[-1]["output"] == "refund #1 of 19.90 for 12345"  # type: ignore[typeddict-item]
    entry = await store.get_ledger_entry(tool_call_key_for("whatsapp:+5511", "refund", "call_r1"))
    assert entry is not None and entry.conversation_id == "whatsapp:+5511" and entry.duplicate_hits >= 1
    model.assert_complete()


def tool_call_key_for(cid: str, tool: str, call_id: str) -> str:
    ctx = ToolContext(context={"conversation_id": cid}, tool_name=tool, tool_call_id=call_id, tool_arguments="{}")
    return tool_call_key(ctx)


async def test_default_key_is_per_tool_call(store: AsyncStateStore) -> None:
    payments = Payments()
    tool = refund_tool(store, payments)
    assert await invoke(tool, "c1", order_id="1", amount=1.0) == "refund #1 of 1.00 for 1"
    assert await invoke(tool, "c1", order_id="1", amount=1.0) == "refund #1 of 1.00 for 1"
    assert await invoke(tool, "c2", order_id="1", amount=1.0) == "refund #2 of 1.00 for 1"
    # The same call id in another conversation is another call.
    await invoke(tool, "c1", {"conversation_id": "other"}, order_id="1", amount=1.0)
    assert len(payments.charges) == 3


async def test_business_key_dedupes_separate_decisions(store: AsyncStateStore) -> None:
    payments = Payments()
    tool = refund_tool(store, payments, key="refund:{order_id}")
    first = await invoke(tool, "c1", order_id="12345", amount=10.0)
    again = await invoke(tool, "c2", order_id="12345", amount=10.0)  # the model asked again, new call id
    assert first == again == "refund #1 of 10.00 for 12345"
    await invoke(tool, "c3", order_id="999", amount=10.0)
    assert payments.charges == [("12345", 10.0), ("999", 10.0)]
    # Same key, different request: refused (the model gets an error result), nothing is paid.
    out = await invoke(tool, "c4", order_id="12345", amount=99.0)
    assert "error" in str(out).lower()
    assert len(payments.charges) == 2


async def test_key_function_and_context_aware_sync_function(store: AsyncStateStore) -> None:
    seen: list[str] = []

    def key(ctx: ToolContext[Any], args: dict[str, Any]) -> str:
        return f"ship:{ctx.context['user_id']}:{args['sku']}"

    @idempotent_function_tool(store, key=key, name_override="ship_item")
    def ship(ctx: RunContextWrapper[Any], sku: str) -> dict[str, Any]:
        """Ship an item to the user."""
        assert isinstance(ctx, ToolContext)
        seen.append(ctx.tool_call_id)
        return {"sku": sku, "user": ctx.context["user_id"], "tracking": f"TRK{len(seen)}"}

    assert ship.name == "ship_item" and set(ship.params_json_schema["properties"]) == {"sku"}
    a = await invoke(ship, "c1", {"user_id": "u1"}, sku="A")
    b = await invoke(ship, "c2", {"user_id": "u1"}, sku="A")
    c = await invoke(ship, "c3", {"user_id": "u2"}, sku="A")
    assert a == b == {"sku": "A", "user": "u1", "tracking": "TRK1"}
    assert c["tracking"] == "TRK2"
    assert seen == ["c1", "c3"]


async def test_failures_are_not_recorded(store: AsyncStateStore) -> None:
    payments = Payments()
    payments.fail_next = 1
    tool = refund_tool(store, payments)
    out = await invoke(tool, "c1", order_id="1", amount=5.0)
    assert "error" in str(out).lower() and payments.charges == []
    assert await invoke(tool, "c1", order_id="1", amount=5.0) == "refund #1 of 5.00 for 1"
    assert await invoke(tool, "c1", order_id="1", amount=5.0) == "refund #1 of 5.00 for 1"
    assert len(payments.charges) == 1


async def test_concurrent_duplicates_run_once(dsn: str, schema: str, store: AsyncStateStore) -> None:
    calls = 0

    async with AsyncStateStore(dsn, schema=schema) as other:
        def make(s: AsyncStateStore) -> FunctionTool:
            @idempotent_function_tool(s, key="charge:{order_id}")
            async def charge(order_id: str) -> str:
                """Charge."""
                nonlocal calls
                calls += 1
                await asyncio.sleep(0.2)  # slow provider: duplicates arrive while the first is in flight
                return f"charged {order_id}"

            return charge

        tools = [make(store), make(other)]
        results = await asyncio.gather(*(invoke(tools[i % 2], f"c{i}", order_id="7") for i in range(6)))
    assert results == ["charged 7"] * 6
    assert calls == 1


class Receipt(BaseModel):
    order_id: str
    amount: float


async def test_structured_results_are_replayed_as_json(store: AsyncStateStore) -> None:
    @idempotent_function_tool(store)
    async def receipt(order_id: str) -> Receipt:
        """Make a receipt."""
        return Receipt(order_id=order_id, amount=1.5)

    first = await invoke(receipt, "c1", order_id="9")
    assert first == {"order_id": "9", "amount": 1.5}
    assert await invoke(receipt, "c1", order_id="9") == first


async def test_bad_configuration_is_rejected(store: AsyncStateStore) -> None:
    with pytest.raises(TypeError):
        idempotent_function_tool(store, key=42)(lambda: None)  # type: ignore[call-overload]
    tool = refund_tool(store, Payments(), key="refund:{missing}")
    out = await invoke(tool, "c1", order_id="1", amount=1.0)
    assert "error" in str(out).lower()
