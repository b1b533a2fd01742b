"""Behaviours LangGraph's own graph tests rely on (tests/upstream runs those), one focused test each."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from pgagentstate.langgraph import PostgresCheckpointer


def conf(thread: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def put(saver: PostgresCheckpointer, thread: str, parent: str | None, step: int = 0) -> Any:
    return saver.put(conf(thread, parent), empty_checkpoint(), {"source": "loop", "step": step, "parents": {}}, {})


def test_several_special_writes_of_one_task_in_one_call(saver: PostgresCheckpointer) -> None:
    """Several interrupts (or resumes) of one task share their channel's fixed idx: as across calls, the
    last one is kept (PostgresSaver's upsert), instead of the statement failing on the duplicate row."""
    saver.setup()
    head = put(saver, "t", None, step=-1)
    saver.put_writes(head, [("__interrupt__", "a"), ("__interrupt__", "b")], task_id="task")
    saver.put_writes(head, [("__resume__", 1), ("__resume__", 2), ("x", "first"), ("x", "second")], task_id="t2")
    got = saver.get_tuple(head)
    assert got is not None
    assert sorted(got.pending_writes) == [("t2", "__resume__", 2), ("t2", "x", "first"), ("t2", "x", "second"),
                                          ("task", "__interrupt__", "b")]
