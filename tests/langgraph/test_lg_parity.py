"""Behaviours LangGraph's own graph tests rely on (tests/upstream runs those), one focused test each."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Send, interrupt

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


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def graph_with_a_persistent_subgraph(saver: PostgresCheckpointer) -> Any:
    def ask(state: Notes) -> Notes:
        return {"notes": [f"answer:{interrupt('question')}"]}

    sub = (StateGraph(Notes).add_node("prepare", lambda s: {"notes": ["prepared"]}).add_node("ask", ask)
           .add_edge(START, "prepare").add_edge("prepare", "ask").compile(checkpointer=True))
    return (StateGraph(Notes).add_node("start", lambda s: {"notes": ["started"]}).add_node("sub", sub)
            .add_node("finish", lambda s: {"notes": ["finished"]})
            .add_edge(START, "start").add_edge("start", "sub").add_edge("sub", "finish")
            .compile(checkpointer=saver))


def test_replay_and_resume_with_a_persistent_subgraph(saver: PostgresCheckpointer) -> None:
    """Replaying the parent checkpoint before a persistent subgraph reruns the subgraph on a branch of its
    namespace (no VersionConflict), and resuming that replay with a new answer uses the new answer."""
    saver.setup()
    graph = graph_with_a_persistent_subgraph(saver)
    config: Any = {"configurable": {"thread_id": "sub"}}
    graph.invoke({"notes": []}, config)
    assert graph.invoke(Command(resume="old"), config)["notes"][-2:] == ["answer:old", "finished"]
    before_sub = next(s for s in graph.get_state_history(config) if s.next == ("sub",))

    replayed = graph.invoke(None, before_sub.config)
    assert [i.value for i in replayed["__interrupt__"]] == ["question"]
    result = graph.invoke(Command(resume="new"), config)
    # "started" twice: the subgraph's state starts as the parent's and its output is added to it.
    assert result["notes"] == ["started", "started", "prepared", "answer:new", "finished"]  # as PostgresSaver



def test_replay_from_before_a_persistent_subgraph_first_ran(saver: PostgresCheckpointer) -> None:
    """Replaying from before the subgraph's first run: its namespace has no checkpoint before the replay
    point, so the replayed subgraph starts a new root there — a deliberate branch, not a VersionConflict."""
    saver.setup()
    seen: list[list[str]] = []

    def count(state: Notes) -> Notes:
        seen.append(list(state["notes"]))
        return {"notes": ["counted"]}

    sub = StateGraph(Notes).add_node("count", count).add_edge(START, "count").compile(checkpointer=True)
    graph = (StateGraph(Notes).add_node("start", lambda s: {"notes": []}).add_node("sub", sub)
             .add_edge(START, "start").add_edge("start", "sub").compile(checkpointer=saver))
    config: Any = {"configurable": {"thread_id": "first"}}
    graph.invoke({"notes": []}, config)
    graph.invoke({"notes": []}, config)
    first_run = [s for s in graph.get_state_history(config) if s.next == ("sub",)][-1]

    seen.clear()
    graph.invoke(None, first_run.config, durability="sync")
    assert seen == [[]]  # the subgraph's state before the first run


def test_pending_sends_of_legacy_checkpoints_are_migrated(saver: PostgresCheckpointer) -> None:
    """A checkpoint of format v < 4 kept its sends as writes to its parent: reads move them into the
    __pregel_tasks channel, at the highest version of the checkpoint (as PostgresSaver does)."""
    saver.setup()
    root = {**empty_checkpoint(), "v": 4}
    parent = saver.put(conf("old"), root, {"source": "input", "step": -1, "parents": {}}, {})
    saver.put_writes(parent, [("__pregel_tasks", Send("n", 1)), ("__pregel_tasks", Send("n", 2))], task_id="t")
    legacy = {**empty_checkpoint(), "v": 3, "channel_versions": {"a": "a1.000001", "b": "a2.000002"},
              "channel_values": {"a": 1, "b": 2}}
    versions = dict(legacy["channel_versions"])
    child = saver.put(parent, legacy, {"source": "loop", "step": 0, "parents": {}}, versions)

    # read alone, and listed without and with its parent
    for got in (saver.get_tuple(child), *saver.list(conf("old"), limit=1), next(iter(saver.list(conf("old"))))):
        assert got is not None and got.config == child
        assert got.checkpoint["channel_values"]["__pregel_tasks"] == [Send("n", 1), Send("n", 2)]
        assert got.checkpoint["channel_versions"]["__pregel_tasks"] == "a2.000002"
    head = saver.get_tuple(parent)
    assert head is not None and "__pregel_tasks" not in head.checkpoint["channel_values"]  # v4: as stored
