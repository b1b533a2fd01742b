"""Real LangGraph graphs on PostgresCheckpointer: every runtime path the checkpointer serves."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import Command, interrupt
from lg_graphs import State, cfg, three_nodes

from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore


def test_invoke_resumes_the_thread(saver: PostgresCheckpointer) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("hi")]}, cfg("t"))
    out = graph.invoke({"messages": [HumanMessage("again")]}, cfg("t"))
    assert [m.content for m in out["messages"]] == ["hi", "echo: hi", "again", "echo: again"]
    assert out["visits"] == ["prepare", "respond", "audit"] * 2
    # Threads are core conversations, visible to pgagentstate tools.
    sync = saver._stores.sync_store()
    assert sync is not None
    conv = sync.get_conversation("t")
    assert conv is not None and conv.framework == "langgraph"


async def test_ainvoke_and_astream(asaver: PostgresCheckpointer) -> None:
    graph = three_nodes().compile(checkpointer=asaver)
    await graph.ainvoke({"messages": [HumanMessage("one")]}, cfg("a"))
    nodes = [next(iter(chunk)) async for chunk in graph.astream({"messages": [HumanMessage("two")]}, cfg("a"))]
    assert nodes == ["prepare", "respond", "audit"]
    state = await graph.aget_state(cfg("a"))
    assert [m.content for m in state.values["messages"]] == ["one", "echo: one", "two", "echo: two"]
    history = [s async for s in graph.aget_state_history(cfg("a"))]
    assert len(history) == 10  # input + 4 loop checkpoints per invoke


def test_stream_get_state_history_and_update_state(saver: PostgresCheckpointer) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    chunks = list(graph.stream({"messages": [HumanMessage("x")]}, cfg("s"), stream_mode="values"))
    assert [m.content for m in chunks[-1]["messages"]] == ["x", "echo: x"]
    history = list(graph.get_state_history(cfg("s")))
    assert [h.metadata["step"] for h in history] == [3, 2, 1, 0, -1]
    assert all(h.parent_config is not None for h in history[:-1])
    graph.update_state(cfg("s"), {"messages": [HumanMessage("edited")]}, as_node="audit")
    state = graph.get_state(cfg("s"))
    assert state.values["messages"][-1].content == "edited"
    assert state.metadata["source"] == "update"


def test_time_travel_forks_are_allowed(saver: PostgresCheckpointer) -> None:
    """Replaying, branching with update_state, and re-running with new input from an old checkpoint are
    deliberate forks: they succeed, unlike a writer racing another one (see test_lg_advantages)."""
    graph = three_nodes().compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("first")]}, cfg("tt"))
    graph.invoke({"messages": [HumanMessage("second")]}, cfg("tt"))
    old = next(h for h in graph.get_state_history(cfg("tt")) if h.metadata["step"] == 3 and
               len(h.values["messages"]) == 2)
    # replay from the old checkpoint
    graph.invoke(None, old.config)
    # branch with update_state on the old checkpoint, then continue the branch
    branch = graph.update_state(old.config, {"messages": [HumanMessage("branch")]}, as_node="prepare")
    out = graph.invoke(None, branch)
    assert [m.content for m in out["messages"]][-2:] == ["branch", "echo: branch"]
    # new input on an old checkpoint
    out = graph.invoke({"messages": [HumanMessage("other")]}, old.config)
    assert [m.content for m in out["messages"]] == ["first", "echo: first", "other", "echo: other"]
    assert graph.get_state(cfg("tt")).values["messages"][-1].content == "echo: other"


def interrupting() -> Any:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "approve?"})
        return {"messages": [AIMessage(content=f"approved={answer}")], "visits": ["ask"]}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder


def test_interrupt_and_resume(saver: PostgresCheckpointer) -> None:
    graph = interrupting().compile(checkpointer=saver)
    first = graph.invoke({"messages": [HumanMessage("refund please")]}, cfg("i"))
    assert first["__interrupt__"][0].value == {"question": "approve?"}
    assert graph.get_state(cfg("i")).next == ("ask",)
    out = graph.invoke(Command(resume="yes"), cfg("i"))
    assert out["messages"][-1].content == "approved=yes"
    assert graph.get_state(cfg("i")).next == ()


async def test_interrupt_and_resume_async_in_a_new_saver(dsn: str, schema: str) -> None:
    async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as one:
        graph = interrupting().compile(checkpointer=one)
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, cfg("ia"))
    # another process (a new saver) resumes the interrupted run
    async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as two:
        graph = interrupting().compile(checkpointer=two)
        out = await graph.ainvoke(Command(resume="later"), cfg("ia"))
        assert out["messages"][-1].content == "approved=later"


def test_subgraph_namespaces(saver: PostgresCheckpointer) -> None:
    sub = interrupting().compile()

    def before(state: State) -> dict[str, Any]:
        return {"visits": ["before"]}

    builder: Any = StateGraph(State)
    builder.add_node("before", before)
    builder.add_node("sub", sub)
    builder.add_edge(START, "before")
    builder.add_edge("before", "sub")
    builder.add_edge("sub", END)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("go")]}, cfg("sg"))
    state = graph.get_state(cfg("sg"), subgraphs=True)
    assert state.tasks[0].state is not None
    assert state.tasks[0].state.next == ("ask",)  # the subgraph's own checkpoint, in its namespace
    out = graph.invoke(Command(resume="ok"), cfg("sg"))
    assert out["messages"][-1].content == "approved=ok"
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(None) if
                  t.config["configurable"]["thread_id"] == "sg"}
    assert "" in namespaces and any(ns.startswith("sub:") for ns in namespaces)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_durability_modes(saver: PostgresCheckpointer, durability: Literal["sync", "async", "exit"]) -> None:
    graph = three_nodes().compile(checkpointer=saver)
    thread = f"d-{durability}"
    graph.invoke({"messages": [HumanMessage("1")]}, cfg(thread), durability=durability)
    out = graph.invoke({"messages": [HumanMessage("2")]}, cfg(thread), durability=durability)
    assert [m.content for m in out["messages"]] == ["1", "echo: 1", "2", "echo: 2"]
    saved = list(graph.get_state_history(cfg(thread)))
    assert len(saved) == (2 if durability == "exit" else 10)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_durability_modes_async(asaver: PostgresCheckpointer,
                                      durability: Literal["sync", "async", "exit"]) -> None:
    graph = three_nodes().compile(checkpointer=asaver)
    thread = f"ad-{durability}"
    await graph.ainvoke({"messages": [HumanMessage("1")]}, cfg(thread), durability=durability)
    out = await graph.ainvoke({"messages": [HumanMessage("2")]}, cfg(thread), durability=durability)
    assert [m.content for m in out["messages"]] == ["1", "echo: 1", "2", "echo: 2"]


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return f"order {order_id} shipped"


class ScriptedModel(BaseChatModel):
    """Calls lookup_order for the user's order, then answers from the tool result. No API, deterministic."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"Your {last.content}.")
        else:
            order = str(last.content).split("#")[-1].strip()
            reply = AIMessage(content="", tool_calls=[
                {"name": "lookup_order", "args": {"order_id": order}, "id": f"call-{len(messages)}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_create_react_agent_with_tools_and_store(saver: PostgresCheckpointer, lg_store: PostgresStore) -> None:
    from langgraph.prebuilt import create_react_agent

    lg_store.setup()
    agent = create_react_agent(ScriptedModel(), [lookup_order], checkpointer=saver, store=lg_store)
    out = agent.invoke({"messages": [HumanMessage("where is order #12345")]}, cfg("agent"))
    assert out["messages"][-1].content == "Your order 12345 shipped."
    assert isinstance(out["messages"][2], ToolMessage)
    out = agent.invoke({"messages": [HumanMessage("and #777")]}, cfg("agent"))
    assert len(out["messages"]) == 8  # the first exchange was restored from Postgres
    assert out["messages"][-1].content == "Your order 777 shipped."


def test_graph_uses_the_store(saver: PostgresCheckpointer, lg_store: PostgresStore) -> None:
    lg_store.setup()

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("users", "u1", "facts"), "email", {"text": "customer email is meu@email.com"})
        found = store.search(("users", "u1"), query="email")
        return {"messages": [AIMessage(content=found[0].value["text"])]}

    builder: Any = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(checkpointer=saver, store=lg_store)
    out = graph.invoke({"messages": [HumanMessage("my email is meu@email.com")]}, cfg("mem"))
    assert out["messages"][-1].content == "customer email is meu@email.com"
    item = lg_store.get(("users", "u1", "facts"), "email")
    assert item is not None and item.value["text"].endswith("meu@email.com")
