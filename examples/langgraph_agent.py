"""The refund agent as a LangGraph graph: an ``agent`` node (the model) and a ``tools`` node, compiled with
:class:`~pgagentstate.langgraph.PostgresCheckpointer` (the conversation) and
:class:`~pgagentstate.langgraph.PostgresStore` (long-term memory: the facts pgagentstate's distillation worker
found in the customer's earlier conversations, under ``("memories", customer)``; the agent node puts them in
the system message).

    python examples/langgraph_agent.py [DSN]

The model is ``ScriptedRefundModel`` (``refund/scripted_langgraph.py``: the shared dialogue rules as a
``BaseChatModel`` that emits tool calls), or ``ChatOpenAI`` when ``OPENAI_API_KEY`` is set and
``langchain-openai`` is installed. The tools are the durable refund workflow of ``refund/workflow.py``.

A turn whose worker died is resumed the LangGraph way: the thread's last checkpoint says which node is
next, and ``ainvoke(None, config)`` continues from there.
"""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from pgagentstate import AsyncStateStore
from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

from refund.agents import thread_key, tools_for, use_real_model
from refund.dialogue import INSTRUCTIONS, MEMORY_HEADER, openai_tools
from refund.in_process import run
from refund.scripted_langgraph import ScriptedRefundModel
from refund.workflow import ServiceUrls


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
    """The refund graph, one thread per WhatsApp conversation (``langgraph:<customer>``, then
    ``langgraph:<customer>~2``...)."""

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
        async def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
            # Long-term memory: what distillation found in the customer's earlier conversations (off the
            # request path, see pgagentstate.distill) outlives this thread.
            customer = str(config["configurable"]["customer"])
            memories = await self.memory.asearch(("memories", customer), limit=10)
            facts = [str(m.value["text"]) for m in memories if isinstance(m.value.get("text"), str)]
            system = INSTRUCTIONS + (f"\n{MEMORY_HEADER}\n" + "\n".join(facts) if facts else "")
            reply = await self.model.ainvoke([SystemMessage(system), *state["messages"]])
            return {"messages": [reply]}

        async def tools(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
            refund = tools_for(self.store, self.urls, str(config["configurable"]["thread"]))
            last = state["messages"][-1]
            assert isinstance(last, AIMessage)
            out: list[BaseMessage] = []
            for call in last.tool_calls:
                result = await refund.call(call["name"], call["args"])
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

    def config(self, customer: str, conversation: int = 1) -> RunnableConfig:
        thread = thread_key(customer, conversation)
        return {"configurable": {"thread_id": f"langgraph:{thread}", "thread": thread, "customer": customer}}

    async def respond(self, customer: str, text: str, *, retry: bool = False, conversation: int = 1) -> list[str]:
        config = self.config(customer, conversation)
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


AGENT = LangGraphRefundAgent  # what refund.agents.load_agent starts in a worker


if __name__ == "__main__":
    run("LangGraph refund agent", LangGraphRefundAgent)
