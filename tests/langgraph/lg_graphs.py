"""Graphs shared by the LangGraph adapter tests."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    visits: Annotated[list[str], operator.add]


def three_nodes() -> Any:
    """A StateGraph builder (typed Any: LangGraph's overloads want every State key in each input)."""
    def prepare(state: State) -> dict[str, Any]:
        return {"visits": ["prepare"]}

    def respond(state: State) -> dict[str, Any]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(content=f"echo: {last}")], "visits": ["respond"]}

    def audit(state: State) -> dict[str, Any]:
        return {"visits": ["audit"]}

    builder = StateGraph(State)
    builder.add_node("prepare", prepare)
    builder.add_node("respond", respond)
    builder.add_node("audit", audit)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "respond")
    builder.add_edge("respond", "audit")
    builder.add_edge("audit", END)
    return builder


def cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}
