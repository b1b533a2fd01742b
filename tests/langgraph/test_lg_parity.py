"""Behaviours LangGraph's own graph tests rely on (tests/upstream runs those), one focused test each."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from pgagentstate.errors import NotFound
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


def test_first_put_of_a_new_thread_may_name_a_parent(saver: PostgresCheckpointer) -> None:
    """A config that names a checkpoint_id the thread never had (e.g. copied from elsewhere) starts the
    thread, as with PostgresSaver; only a deleted thread stays deleted."""
    saver.setup()
    got = put(saver, "new", "1f000000-0000-6000-8000-000000000000")
    assert saver.get_tuple(conf("new")) is not None
    assert got == {"configurable": {"thread_id": "new", "checkpoint_ns": "",
                                    "checkpoint_id": got["configurable"]["checkpoint_id"]}}
    saver.delete_thread("new")
    with pytest.raises(NotFound):
        put(saver, "new", got["configurable"]["checkpoint_id"])
    assert saver.get_tuple(conf("new")) is None


def test_configs_are_exactly_postgres_savers(saver: PostgresCheckpointer) -> None:
    """put, get_tuple and list return {thread_id, checkpoint_ns, checkpoint_id}, nothing else, whether
    the checkpoint is the head or not."""
    saver.setup()
    first = put(saver, "c", None, step=-1)
    second = put(saver, "c", first["configurable"]["checkpoint_id"])
    old = saver.get_tuple(first)
    assert old is not None and old.config == first
    assert [t.config for t in saver.list(conf("c"))] == [second, first]
    assert [t.parent_config for t in saver.list(conf("c"))] == [first, None]
