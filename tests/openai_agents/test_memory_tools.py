"""memory_tools / memory_instructions: long-term memory scoped by the user in the run context."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, Runner
from agents.exceptions import UserError
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

from pgagentstate import AsyncStateStore
from pgagentstate.openai_agents import PostgresSession, StateContext, memory_instructions, memory_tools
from pgagentstate.openai_agents.memory import DEFAULT_NAMESPACE, remember_fact


@pytest.fixture
async def store(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


async def call(tool: FunctionTool, context: Any, **arguments: Any) -> Any:
    """Invoke a tool the way the Runner does."""
    args = json.dumps(arguments)
    ctx = ToolContext(context=context, tool_name=tool.name, tool_call_id="call_x", tool_arguments=args)
    return await tool.on_invoke_tool(ctx, args)


def by_name(tools: list[FunctionTool]) -> dict[str, FunctionTool]:
    return {t.name: t for t in tools}


async def test_tools_and_their_schemas(store: AsyncStateStore) -> None:
    tools = by_name(memory_tools(store))
    assert set(tools) == {"remember", "recall", "forget"}
    assert set(tools["remember"].params_json_schema["properties"]) == {"topic", "fact"}
    assert set(tools["recall"].params_json_schema["properties"]) == {"query"}
    assert "ctx" not in tools["forget"].params_json_schema["properties"]


async def test_remember_recall_forget(store: AsyncStateStore) -> None:
    t = by_name(memory_tools(store))
    alice = StateContext(user_id="alice")
    assert "meu@email.com" in await call(t["remember"], alice, topic="Email", fact="meu@email.com")
    await call(t["remember"], alice, topic="order 12345", fact="arrived broken; refund requested")
    await call(t["remember"], alice, topic="email ", fact="meu@email.com")  # same topic, duplicate fact
    assert "meu@email.com" in await call(t["recall"], alice, query="email")
    assert "refund requested" in await call(t["recall"], alice, query="broken order")
    assert "meu@email.com" in await call(t["recall"], alice, query="")
    memory = await store.get_memory((*DEFAULT_NAMESPACE, "alice"), "email")
    assert memory is not None and memory.value["facts"] == ["meu@email.com"] and memory.user_id == "alice"
    assert memory.version == 1
    assert await call(t["forget"], alice, topic="email", fact="old@email.com") == "Nothing to forget."
    assert await call(t["forget"], alice, topic="EMAIL", fact="meu@email.com") == "Forgotten."
    assert "meu@email.com" not in await call(t["recall"], alice, query="email")
    assert await call(t["forget"], alice, topic="order 12345", fact="") == "Forgotten."
    assert await call(t["recall"], alice, query="order") == "No memories found."


async def test_users_and_tenants_are_isolated(store: AsyncStateStore) -> None:
    t = by_name(memory_tools(store))
    await call(t["remember"], {"user_id": "alice"}, topic="email", fact="alice@x.com")
    await call(t["remember"], {"user_id": "alice", "tenant": "acme"}, topic="email", fact="alice@acme.com")
    assert await call(t["recall"], {"user_id": "bob"}, query="email") == "No memories found."
    assert "alice@acme.com" not in await call(t["recall"], {"user_id": "alice"}, query="email")
    assert "alice@x.com" not in await call(t["recall"], {"user_id": "alice", "tenant": "acme"}, query="email")
    assert await store.with_tenant("acme").get_memory((*DEFAULT_NAMESPACE, "alice"), "email") is not None


async def test_missing_identity_is_a_clear_error(store: AsyncStateStore) -> None:
    t = by_name(memory_tools(store))
    with pytest.raises(UserError, match="user_id"):  # the application's bug: the run fails loudly
        await call(t["recall"], None, query="x")
    # The model's mistakes come back to it as a tool result it can act on.
    assert "topic must not be empty" in await call(t["remember"], {"user_id": "u"}, topic="  ", fact="x")
    agent: Agent[Any] = Agent(name="a", instructions=memory_instructions(store, "hi"),
                              model=ScriptedModel([[assistant_message("x")]]))
    with pytest.raises(UserError, match="user_id"):
        await Runner.run(agent, "hello")
    # A fixed user_id is the fallback for single-user apps.
    fixed = by_name(memory_tools(store, user_id="solo"))
    await call(fixed["remember"], None, topic="name", fact="Solo")
    assert "Solo" in await call(fixed["recall"], {}, query="name")


async def test_concurrent_writers_do_not_lose_facts(dsn: str, schema: str, store: AsyncStateStore) -> None:
    ns = (*DEFAULT_NAMESPACE, "alice")
    async with AsyncStateStore(dsn, schema=schema) as other:
        stores = (store, other)
        await asyncio.gather(*(
            remember_fact(stores[i % 2], ns, "alice", "preferences", f"likes thing {i}") for i in range(24)
        ))
    memory = await store.get_memory(ns, "preferences")
    assert memory is not None
    assert sorted(memory.value["facts"]) == sorted(f"likes thing {i}" for i in range(24))
    assert memory.version == 24  # every write is a new version; none overwrote another
    assert len(await store.search_memory(ns)) == 1


async def test_agent_remembers_across_conversations(store: AsyncStateStore) -> None:
    model = ScriptedModel([
        [function_call("remember", {"topic": "email", "fact": "Customer email is meu@email.com"}, call_id="m1")],
        [assistant_message("Anotado!")],
    ])
    agent: Agent[StateContext] = Agent(
        name="support",
        instructions=memory_instructions(store, "You are a support agent."),
        tools=memory_tools(store),
        model=model,
    )
    ctx = StateContext(user_id="cust-42")
    await Runner.run(agent, "meu email é meu@email.com", context=ctx,
                     session=PostgresSession("conv-1", store=store))
    first = model.calls[0].system_instructions
    assert first == "You are a support agent."  # nothing known yet

    # A new conversation days later: the memory is in the instructions before the model says anything.
    model.enqueue([assistant_message("Sim, para meu@email.com")])
    await Runner.run(agent, "vai enviar o comprovante por email?", context=ctx,
                     session=PostgresSession("conv-2", store=store))
    later = model.last_call.system_instructions if model.last_call else None
    assert later is not None and "Customer email is meu@email.com" in later
    # Another customer's agent does not see it.
    model.enqueue([assistant_message("Qual é seu email?")])
    await Runner.run(agent, "email?", context=StateContext(user_id="cust-7"),
                     session=PostgresSession("conv-3", store=store))
    other = model.last_call.system_instructions if model.last_call else None
    assert other == "You are a support agent."
    model.assert_complete()


async def test_instructions_rank_relevant_memories_first(store: AsyncStateStore) -> None:
    ns = (*DEFAULT_NAMESPACE, "u")
    for i in range(6):
        await remember_fact(store, ns, "u", f"topic {i}", f"filler fact number {i}")
    await remember_fact(store, ns, "u", "refund", "refund for order 12345 was approved")
    for i in range(6, 9):
        await remember_fact(store, ns, "u", f"topic {i}", f"filler fact number {i}")

    async def base(ctx: Any, agent: Agent[Any]) -> str:
        return f"Base for {agent.name}."

    model = ScriptedModel([[assistant_message("ok")]])
    agent: Agent[Any] = Agent(name="bot", instructions=memory_instructions(store, base, limit=2), model=model)
    await Runner.run(agent, "what about my refund?", context={"user_id": "u"})
    text = model.last_call.system_instructions if model.last_call else ""
    assert text is not None and text.startswith("Base for bot.")
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 2
    assert lines[0] == "- refund: refund for order 12345 was approved"


async def test_recall_by_meaning_with_an_embedder(store: AsyncStateStore) -> None:
    from pgagentstate import HashEmbeddings

    plain = by_name(memory_tools(store))
    semantic = by_name(memory_tools(store, embed=HashEmbeddings(64)))
    bob = StateContext(user_id="bob")
    await call(semantic["remember"], bob, topic="payments", fact="refunds go to the pix key 11-99999")
    await call(semantic["remember"], bob, topic="shipping", fact="parcels to Rua Augusta 10")
    # No memory has the word "refund": words alone match nothing (recall falls back to the newest topics);
    # by meaning the payments topic comes first.
    assert (await call(plain["recall"], bob, query="refund")).startswith("- shipping:")
    assert (await call(semantic["recall"], bob, query="refund")).startswith("- payments:")


async def test_instructions_stay_within_the_budget(store: AsyncStateStore) -> None:
    ns = (*DEFAULT_NAMESPACE, "u")
    await remember_fact(store, ns, "u", "refund", "refund for order 12345 was approved")
    await remember_fact(store, ns, "u", "refund", "the refund goes to the pix key 11-99999")
    await remember_fact(store, ns, "u", "email", "customer email is meu@email.com")
    model = ScriptedModel([[assistant_message("ok")], [assistant_message("ok")]])
    header = "Known:"
    tight = memory_instructions(store, "Base.", header=header, budget=60)
    agent: Agent[Any] = Agent(name="bot", instructions=tight, model=model)
    await Runner.run(agent, "what about my refund?", context={"user_id": "u"})
    text = model.last_call.system_instructions if model.last_call else ""
    assert text is not None
    memory_lines = text.split(header + "\n", 1)[1]
    assert len(memory_lines) <= 60
    # The most relevant topic first; it did not fit whole, so its newest fact is kept.
    assert memory_lines == "- refund: the refund goes to the pix key 11-99999"
    words = memory_instructions(store, "Base.", header=header, budget=12, count_tokens=lambda s: len(s.split()))
    agent = Agent(name="bot", instructions=words, model=model)
    await Runner.run(agent, "what about my refund?", context={"user_id": "u"})
    text = model.last_call.system_instructions if model.last_call else ""
    assert text is not None and sum(len(line.split()) for line in text.split(header + "\n", 1)[1].splitlines()) <= 12
