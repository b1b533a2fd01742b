"""The refund agent on LangGraph: a graph checkpointed in Postgres, a customer profile in the store.

    python examples/langgraph_refund_agent.py [DSN]

The graph (agent node + tools node, compiled with ``PostgresCheckpointer`` and ``PostgresStore``) is
``pgagentstate.langgraph.refund_agent`` — shipped with the package so ``pgagentstate demo`` can run it.
Here it is driven through LangGraph's own API: one ``ainvoke`` per customer message on the thread.
"""

from __future__ import annotations

from _common import run
from langchain_core.messages import AIMessage, HumanMessage

from pgagentstate import AsyncStateStore
from pgagentstate.demo.workflow import ServiceUrls
from pgagentstate.langgraph.refund_agent import LangGraphRefundAgent


async def handle(store: AsyncStateStore, urls: ServiceUrls, customer: str, text: str) -> list[str]:
    graph = LangGraphRefundAgent(store, urls).graph  # a new graph object: its memory is the checkpointer
    config = {"configurable": {"thread_id": f"langgraph:{customer}", "customer": customer}}
    before = len((await graph.aget_state(config)).values.get("messages", []))
    result = await graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability="sync")
    return [str(m.content) for m in result["messages"][before:]
            if isinstance(m, AIMessage) and m.content and not m.tool_calls]


if __name__ == "__main__":
    run("LangGraph refund agent", handle)
