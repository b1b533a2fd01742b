"""Hostile input at PostgresSession (issue 14): a dict where a list of items belongs, lone surrogates, and a
run context that tries to pick the tenant of a tenant_isolation store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from agents import RunContextWrapper

from pgagentstate import AsyncStateStore, InvalidId, InvalidInput, InvalidPayload
from pgagentstate.openai_agents import PostgresSession

SURROGATE = json.loads('"\\ud83d"')


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


async def test_a_dict_is_not_a_list_of_items(store: AsyncStateStore, fingerprint: Callable[[], dict[str, str]]) -> None:
    session = PostgresSession("s", store=store)
    before = fingerprint()
    for call in (session.add_items, session.replace_items):
        with pytest.raises(InvalidInput) as info:
            await call({"role": "user", "content": "hi"})  # type: ignore[arg-type]
        assert info.value.path == "items"
    assert fingerprint() == before
    assert await session.get_items() == []


@pytest.mark.parametrize(
    ("items", "error"),
    [
        ([{"role": "user", "content": SURROGATE}], InvalidPayload),
        ([{"role": "user", "content": "ok"}, {"role": SURROGATE, "content": "x"}], InvalidId),
        ([{"type": SURROGATE}], InvalidId),
    ],
    ids=["content", "role", "type"],
)
async def test_lone_surrogates_in_items(
    store: AsyncStateStore, fingerprint: Callable[[], dict[str, str]], items: list[Any], error: type[Exception]
) -> None:
    session = PostgresSession("s", store=store)
    await session.add_items([{"role": "user", "content": "first"}])
    before = fingerprint()
    with pytest.raises(error):
        await session.add_items(items)
    assert fingerprint() == before
    with pytest.raises(InvalidId) as info:
        PostgresSession("s" + SURROGATE, store=store)
    assert info.value.path == "session_id"


async def test_run_context_cannot_pick_the_tenant_of_an_isolated_store(
    dsn: str, schema: str, fingerprint: Callable[[], dict[str, str]]
) -> None:
    async with AsyncStateStore(dsn, schema=schema, tenant="acme", tenant_isolation=True) as store:
        session = PostgresSession("s", store=store)
        before = fingerprint()
        for context in ({"tenant": "globex"}, {"tenant_id": "globex", "user_id": "u"}):
            wrapper = RunContextWrapper(context=context)
            with pytest.raises(InvalidInput) as info:
                await session.add_items([{"role": "user", "content": "hi"}], wrapper=wrapper)
            assert info.value.path == "tenant"
            with pytest.raises(InvalidInput):
                await session.get_items(wrapper=wrapper)
        assert fingerprint() == before
        # Its own tenant in the context is fine.
        await session.add_items(
            [{"role": "user", "content": "hi"}], wrapper=RunContextWrapper(context={"tenant": "acme"})
        )
        assert len(await session.get_items()) == 1
    # Without isolation the context still routes (the application's own choice of store).
    async with AsyncStateStore(dsn, schema=schema) as open_store:
        wrapper = RunContextWrapper(context={"tenant": "globex"})
        await PostgresSession("s", store=open_store).add_items([{"role": "user", "content": "g"}], wrapper=wrapper)
        assert len(await open_store.with_tenant("globex").list_events("s")) == 1


async def test_memory_and_idempotent_tools_cannot_pick_the_tenant_of_an_isolated_store(
    dsn: str, schema: str, fingerprint: Callable[[], dict[str, str]]
) -> None:
    from agents.tool_context import ToolContext

    from pgagentstate.openai_agents import idempotent_function_tool, memory_tools

    ran: list[str] = []

    async with AsyncStateStore(dsn, schema=schema, tenant="acme", tenant_isolation=True) as store:
        remember = next(t for t in memory_tools(store) if t.name == "remember")

        async def refund(order_id: str) -> str:
            ran.append(order_id)
            return "refunded"

        tool = idempotent_function_tool(store, refund, conversation_id="c1")
        before = fingerprint()
        for t, args in ((remember, {"topic": "email", "fact": "x@globex.com"}), (tool, {"order_id": "12345"})):
            ctx = ToolContext(context={"tenant": "globex", "user_id": "u"}, tool_name=t.name, tool_call_id="call_1",
                              tool_arguments=json.dumps(args))
            try:
                answer = await t.on_invoke_tool(ctx, json.dumps(args))
            except InvalidInput as exc:
                assert exc.path == "tenant"
            else:  # the SDK's default failure handler turns the error into a message for the model
                assert "error" in str(answer).lower(), answer
        assert ran == [] and fingerprint() == before
