"""LangMem's memory tools on pgagentstate's LangGraph store: an agent that remembers across threads.

The agent is a LangGraph ReAct agent with LangMem's ``manage_memory`` and ``search_memory`` tools over
:class:`pgagentstate.langgraph.PostgresStore` with a semantic index. It runs offline: the embedder is
pgagentstate's deterministic ``HashEmbeddings`` and the model is a scripted one (pass a real chat model and
embeddings when you have keys). Run: ``python examples/langmem_memory.py [DSN]``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt import create_react_agent
from langmem import create_manage_memory_tool, create_search_memory_tool  # type: ignore[import-untyped]

from pgagentstate import HashEmbeddings
from pgagentstate.langgraph import PostgresStore

NAMESPACE = ("memories", "{langgraph_user_id}")


class ScriptedModel(GenericFakeChatModel):
    """Replies from a script; tool calls are part of it. Accepts bind_tools like a real chat model."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        del tools, kwargs
        return self


def script() -> Iterator[AIMessage | str]:
    # Thread 1: the customer gives the email; the agent stores it.
    yield AIMessage("", tool_calls=[{"name": "manage_memory", "id": "c1",
                                     "args": {"content": "customer email is meu@email.com", "action": "create"}}])
    yield AIMessage("Anotado: meu@email.com.")
    # Thread 2, a new conversation: the agent searches its memory before answering.
    yield AIMessage("", tool_calls=[{"name": "search_memory", "id": "c2", "args": {"query": "customer email"}}])
    yield AIMessage("Vou enviar o comprovante para meu@email.com.")


def run(dsn: str | None, schema: str = "pgagentstate") -> list[str]:
    """Two threads of one user; returns the agent's last reply of each."""
    index = {"dims": 256, "embed": HashEmbeddings(256), "fields": ["content"]}
    with PostgresStore.from_conn_string(dsn, schema=schema, index=index) as store:
        store.setup()
        tools = [create_manage_memory_tool(NAMESPACE), create_search_memory_tool(NAMESPACE)]
        agent = create_react_agent(ScriptedModel(messages=script()), tools=tools, store=store)
        user = f"cliente-{uuid.uuid4().hex[:6]}"
        replies = []
        for text in ("meu email é meu@email.com", "vai mandar o comprovante por email?"):
            config: RunnableConfig = {"configurable": {"langgraph_user_id": user, "thread_id": uuid.uuid4().hex}}
            out = agent.invoke({"messages": [("user", text)]}, config)
            replies.append(str(out["messages"][-1].content))
        return replies


if __name__ == "__main__":
    for reply in run(sys.argv[1] if len(sys.argv) > 1 else None):
        print(reply)
