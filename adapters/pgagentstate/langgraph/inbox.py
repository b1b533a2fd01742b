"""Run a LangGraph graph for a message claimed from the core's durable inbox (``store.inbox().work``).

    async def handler(message: InboxMessage) -> Any:
        state = await arun_message(graph, message, {"messages": [HumanMessage(message.message["text"])]})
        return state["messages"][-1].content

    await store.inbox(concurrency=4).work(handler)

The message's conversation is the thread, and every checkpoint of its run carries the delivery id in its
metadata (``inbox_delivery``). A turn taken over from a worker that died (``message.resumed``) continues
from the thread's last checkpoint when that checkpoint is this message's and still has tasks — the nodes
that finished are not run again, and the message is not added twice — returns the thread's values when the
run had finished (only recording the outcome was lost), and starts the run when it never reached a
checkpoint.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from langgraph.pregel import Pregel
from pgagentstate import InboxMessage

Graph = Pregel[Any, Any, Any, Any]  # a compiled graph (``builder.compile(checkpointer=...)``)
#: The checkpoint metadata key naming the inbox delivery a run belongs to.
DELIVERY_KEY = "inbox_delivery"


def message_config(message: InboxMessage, config: RunnableConfig | None = None) -> RunnableConfig:
    """``config`` with the message's conversation as ``thread_id`` (unless ``config`` names one) and its
    delivery id as ``inbox_delivery`` (which LangGraph copies into each checkpoint's metadata)."""
    base: dict[str, Any] = dict(config or {})
    configurable = {"thread_id": message.conversation_id, **base.get("configurable", {})}
    configurable[DELIVERY_KEY] = message.delivery_id
    base["configurable"] = configurable
    out: RunnableConfig = base  # type: ignore[assignment]
    return out


def _resume_point(snapshot: Any, message: InboxMessage) -> str:
    """``continue`` (this message's run stopped midway), ``finished`` (it ran to the end) or ``start``."""
    if (snapshot.metadata or {}).get(DELIVERY_KEY) != message.delivery_id:
        return "start"
    # Tasks, not `next`: a run that died right after saving its input's writes lists them as tasks only.
    return "continue" if snapshot.tasks else "finished"


async def arun_message(
    graph: Graph, message: InboxMessage, input: Any, config: RunnableConfig | None = None, **kwargs: Any
) -> Any:
    """``graph.ainvoke`` for the claimed ``message`` (see the module's docstring); ``kwargs`` go to
    ``ainvoke`` (e.g. ``durability="sync"``, so that each step's checkpoint is written before the next)."""
    cfg = message_config(message, config)
    if message.resumed:
        point = _resume_point(await graph.aget_state(cfg), message)
        if point == "continue":
            return await graph.ainvoke(None, cfg, **kwargs)
        if point == "finished":
            return (await graph.aget_state(cfg)).values
    return await graph.ainvoke(input, cfg, **kwargs)


def run_message(
    graph: Graph, message: InboxMessage, input: Any, config: RunnableConfig | None = None, **kwargs: Any
) -> Any:
    """The synchronous :func:`arun_message` (``graph.invoke``)."""
    cfg = message_config(message, config)
    if message.resumed:
        point = _resume_point(graph.get_state(cfg), message)
        if point == "continue":
            return graph.invoke(None, cfg, **kwargs)
        if point == "finished":
            return graph.get_state(cfg).values
    return graph.invoke(input, cfg, **kwargs)
