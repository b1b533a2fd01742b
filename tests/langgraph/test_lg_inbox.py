"""A LangGraph graph run through the durable inbox: a turn whose worker failed after a node's checkpoint
resumes from that checkpoint (the node is not run again, the input is not added twice)."""

from __future__ import annotations

import operator
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from pgagentstate import InboxMessage, StateStore
from pgagentstate.langgraph import PostgresCheckpointer, run_message


class Turn(TypedDict):
    log: Annotated[list[str], operator.add]


def test_a_resumed_turn_continues_from_the_last_checkpoint(dsn: str, schema: str,
                                                            saver: PostgresCheckpointer) -> None:
    calls = {"pay": 0, "answer": 0}

    def pay(state: Turn) -> dict[str, Any]:
        calls["pay"] += 1
        return {"log": ["paid"]}

    def answer(state: Turn) -> dict[str, Any]:
        calls["answer"] += 1
        if calls["answer"] == 1:
            raise RuntimeError("the worker died here")  # after pay's checkpoint
        return {"log": ["answered"]}

    builder = StateGraph(Turn)
    builder.add_node("pay", pay)
    builder.add_node("answer", answer)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=saver)

    def handler(m: InboxMessage) -> list[str]:
        out: list[str] = run_message(graph, m, {"log": [m.message["text"]]}, durability="sync")["log"]
        return out

    with StateStore(dsn, schema=schema, max_size=2) as store:
        store.accept("thread-1", {"text": "refund"}, key="m1")
        store.accept("thread-1", {"text": "again"}, key="m2")
        inbox = store.inbox(retry_delay=0.01, poll=0.05)
        while [m.status for m in store.list_messages("thread-1")] != ["done", "done"]:
            inbox.work(handler, until_idle=True)
            time.sleep(0.02)
        first, second = store.list_messages("thread-1")
    assert first.attempts == 2 and first.result == ["refund", "paid", "answered"]
    assert second.attempts == 1 and second.result == ["refund", "paid", "answered", "again", "paid", "answered"]
    assert calls == {"pay": 2, "answer": 3}  # pay once per message: the resumed turn did not pay again


def test_a_turn_that_finished_before_its_worker_died_is_not_run_again(dsn: str, schema: str,
                                                                       saver: PostgresCheckpointer) -> None:
    runs: list[str] = []

    def answer(state: Turn) -> dict[str, Any]:
        runs.append("answer")
        return {"log": ["answered"]}

    builder = StateGraph(Turn)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=saver)
    recorded: list[bool] = []

    def handler(m: InboxMessage) -> list[str]:
        out: list[str] = run_message(graph, m, {"log": [m.message["text"]]}, durability="sync")["log"]
        if not recorded:
            recorded.append(True)
            raise RuntimeError("the worker died before recording the outcome")
        return out

    with StateStore(dsn, schema=schema, max_size=2) as store:
        store.accept("thread-2", {"text": "oi"}, key="m1")
        inbox = store.inbox(retry_delay=0.01, poll=0.05)
        while [m.status for m in store.list_messages("thread-2")] != ["done"]:
            inbox.work(handler, until_idle=True)
            time.sleep(0.02)
        [done] = store.list_messages("thread-2")
    assert (done.attempts, done.result) == (2, ["oi", "answered"])
    assert runs == ["answer"]  # the finished run's values were returned, not run again
