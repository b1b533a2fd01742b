"""The refund agent as a LangGraph graph: an ``agent`` node (the model) and a ``tools`` node, compiled with
:class:`~pgagentstate.langgraph.PostgresCheckpointer` (the conversation) and
:class:`~pgagentstate.langgraph.PostgresStore` (the customer's profile, long-term).

The model is :class:`ScriptedRefundModel` (the shared dialogue rules as a ``BaseChatModel`` that emits tool
calls), or ``ChatOpenAI`` when ``OPENAI_API_KEY`` is set and ``langchain-openai`` is installed. The tools are
the durable refund workflow of :mod:`pgagentstate.demo.workflow`.

A turn whose worker died is resumed the LangGraph way: the thread's last checkpoint says which node is
next, and ``ainvoke(None, config)`` continues from there.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig

from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from pgagentstate import AsyncStateStore
from pgagentstate.demo.agents import tools_for, use_real_model
from pgagentstate.demo.dialogue import CHECK_POLICY, INSTRUCTIONS, Msg, Reply, decide, openai_tools
from pgagentstate.demo.workflow import ServiceUrls

from .checkpointer import PostgresCheckpointer
from .store import PostgresStore


def to_dialogue(messages: Sequence[BaseMessage]) -> list[Msg]:
    """LangChain messages as the dialogue rules read them."""
    out: list[Msg] = []
    for m in messages:
        if isinstance(m, HumanMessage):
            out.append(Msg("customer", str(m.content)))
        elif isinstance(m, AIMessage):
            out += [Msg("tool_call", tool=c["name"], args=c["args"]) for c in m.tool_calls]
            if m.content and not m.tool_calls:
                out.append(Msg("agent", str(m.content)))
        elif isinstance(m, ToolMessage):
            try:
                result = json.loads(str(m.content))
            except ValueError:
                result = {"error": str(m.content)}
            out.append(Msg("tool_result", tool=m.name or "", result=result))
    return out


class ScriptedRefundModel(BaseChatModel):
    """A chat model that follows the refund dialogue's rules: no API key, deterministic."""

    @property
    def _llm_type(self) -> str:
        return "pgagentstate-scripted-refund"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # the script knows the tools already

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        decision = decide(to_dialogue(messages))
        if isinstance(decision, Reply):
            message = AIMessage(content=decision.text)
        else:
            call = {"name": decision.name, "args": decision.args, "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


def default_model() -> Runnable[LanguageModelInput, BaseMessage]:
    """``ChatOpenAI`` with the tools bound when a key is set (and langchain-openai installed), else the script."""
    if use_real_model("OPENAI_API_KEY"):
        try:
            from langchain_openai import ChatOpenAI  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            pass
        else:
            model = ChatOpenAI(model=os.environ.get("PGAGENTSTATE_DEMO_OPENAI_MODEL", "gpt-4.1-mini"))
            bound: Runnable[LanguageModelInput, BaseMessage] = model.bind_tools(openai_tools())
            return bound
    return ScriptedRefundModel()


class LangGraphRefundAgent:
    """The refund graph, one thread per WhatsApp customer (``langgraph:<customer>``)."""

    framework = "langgraph"

    def __init__(self, store: AsyncStateStore, urls: ServiceUrls,
                 model: Runnable[LanguageModelInput, BaseMessage] | None = None) -> None:
        self.store = store
        self.urls = urls
        self.model = model or default_model()
        self.checkpointer = PostgresCheckpointer(store=store)
        self.memory = PostgresStore(store=store)
        self.graph = self._build()

    def _build(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        async def agent(state: MessagesState) -> dict[str, Any]:
            reply = await self.model.ainvoke([SystemMessage(INSTRUCTIONS), *state["messages"]])
            return {"messages": [reply]}

        async def tools(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
            customer = str(config["configurable"]["customer"])
            refund = tools_for(self.store, self.urls, customer)
            last = state["messages"][-1]
            assert isinstance(last, AIMessage)
            out: list[BaseMessage] = []
            for call in last.tool_calls:
                result = await refund.call(call["name"], call["args"])
                if call["name"] == CHECK_POLICY and "error" not in result:
                    # Long-term memory: the profile outlives this thread (a new order, a new conversation).
                    profile = {"email": call["args"].get("email"), "last_order": call["args"].get("order_id")}
                    await self.memory.aput(("customers", customer), "profile", profile)
                out.append(ToolMessage(json.dumps(result), tool_call_id=call["id"] or "", name=call["name"]))
            return {"messages": out}

        def route(state: MessagesState) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", tools)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["tools", END])
        builder.add_edge("tools", "agent")
        return builder.compile(checkpointer=self.checkpointer, store=self.memory)

    def config(self, customer: str) -> RunnableConfig:
        return {"configurable": {"thread_id": f"langgraph:{customer}", "customer": customer}}

    async def respond(self, customer: str, text: str, *, retry: bool = False) -> list[str]:
        config = self.config(customer)
        snapshot = await self.graph.aget_state(config)
        messages: list[BaseMessage] = list(snapshot.values.get("messages", []))
        last_human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        if retry and last_human is not None and last_human.content == text:
            # The first attempt got this message into the thread. Its run is unfinished when the last
            # checkpoint still has tasks: continue from there. Not `snapshot.next`, which leaves out tasks
            # whose writes were saved: a run that died right after saving its input's writes shows the
            # message in `values` and nothing `next`, though no node ran (the customer got no reply, and the
            # message never reached a checkpoint of its own).
            if snapshot.tasks:
                await self.graph.ainvoke(None, config, durability="sync")
        else:
            await self.graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability="sync")
        messages = list((await self.graph.aget_state(config)).values["messages"])
        start = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        return [str(m.content) for m in messages[start + 1:] if isinstance(m, AIMessage) and m.content
                and not m.tool_calls]

    async def aclose(self) -> None:
        return None


def build_agent(store: AsyncStateStore, urls: ServiceUrls, **options: Any) -> LangGraphRefundAgent:
    """The entry point ``pgagentstate.demo`` looks for."""
    return LangGraphRefundAgent(store, urls, **options)
