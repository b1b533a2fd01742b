"""Where PostgresCheckpointer does better than langgraph-checkpoint-postgres, one test each."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_graphs import State, cfg, three_nodes
from psycopg import sql
from psycopg_pool import ConnectionPool

from pgagentstate import AsyncStateStore, StateStore
from pgagentstate.errors import NotFound, VersionConflict
from pgagentstate.langgraph import PostgresCheckpointer


def put(saver: PostgresCheckpointer, thread: str, parent: str | None, step: int = 0) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if parent:
        conf["checkpoint_id"] = parent
    cp = empty_checkpoint()
    return dict(saver.put({"configurable": conf}, cp, {"source": "loop", "step": step, "parents": {}}, {}))


def test_two_writers_from_the_same_head_cannot_both_win(saver: PostgresCheckpointer) -> None:
    saver.setup()
    root = put(saver, "race", None, step=-1)["configurable"]["checkpoint_id"]
    winner = put(saver, "race", root)["configurable"]["checkpoint_id"]
    with pytest.raises(VersionConflict) as err:
        put(saver, "race", root)  # loaded the same head as the winner: a silent fork with PostgresSaver
    assert (err.value.expected, err.value.actual) == (root, winner)
    assert [t.checkpoint["id"] for t in saver.list(cfg("race"))] == [winner, root]


def test_two_first_turns_of_a_new_thread_cannot_both_win(saver: PostgresCheckpointer) -> None:
    saver.setup()
    put(saver, "new", None, step=-1)
    with pytest.raises(VersionConflict):
        put(saver, "new", None, step=-1)


def test_a_parentless_checkpoint_after_the_first_is_a_branch(saver: PostgresCheckpointer) -> None:
    """A run with durability="exit" saves only its last checkpoint, with no parent on a new thread: it claims
    the thread when the thread is empty (see the race below); put into a thread in use, it is a branch (as
    LangGraph's conformance suite does), not a conflict."""
    saver.setup()
    first = put(saver, "exit", None, step=2)["configurable"]["checkpoint_id"]
    second = put(saver, "exit", None, step=5)["configurable"]["checkpoint_id"]
    assert [t.checkpoint["id"] for t in saver.list(cfg("exit"))] == [second, first]


def race_two_invokes(saver: PostgresCheckpointer, thread: str, durability: Any) -> dict[str, BaseException | None]:
    """Two invokes of ``thread`` that both load its head (None for a new thread) before either saves."""
    graph = three_nodes().compile(checkpointer=saver)
    barrier = threading.Barrier(2)
    real_get_tuple = saver.get_tuple

    def get_tuple_then_wait(config: Any) -> Any:
        found = real_get_tuple(config)
        if threading.current_thread().name.startswith(thread):
            barrier.wait(timeout=30)  # both runs have loaded the head before either saves
        return found

    saver.get_tuple = get_tuple_then_wait  # type: ignore[method-assign]
    results: dict[str, BaseException | None] = {}

    def run(name: str) -> None:
        try:
            graph.invoke({"messages": [HumanMessage(name)]}, cfg(thread), durability=durability)
            results[name] = None
        except BaseException as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=(f"{thread}-{i}",), name=f"{thread}-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    saver.get_tuple = real_get_tuple  # type: ignore[method-assign]
    return results


def assert_one_won_and_no_fork(saver: PostgresCheckpointer, thread: str, results: dict[str, Any]) -> None:
    errors = [e for e in results.values() if e is not None]
    assert len(results) == 2 and len(errors) == 1 and isinstance(errors[0], VersionConflict)
    history = list(saver.list(cfg(thread)))
    parents = [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None for t in history]
    assert len(parents) == len(set(parents))  # no checkpoint has two children, and there is one root: no fork


def test_concurrent_runs_on_one_thread_raise_instead_of_forking(saver: PostgresCheckpointer) -> None:
    """Two invokes of the same thread that load the same head: one finishes, the other gets
    VersionConflict, and the thread stays one chain."""
    saver.setup()
    three_nodes().compile(checkpointer=saver).invoke({"messages": [HumanMessage("hello")]}, cfg("double"))
    assert_one_won_and_no_fork(saver, "double", race_two_invokes(saver, "double", "sync"))


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_two_first_runs_of_a_new_thread_cannot_both_win(saver: PostgresCheckpointer, durability: Any) -> None:
    saver.setup()
    thread = f"first-{durability}"
    assert_one_won_and_no_fork(saver, thread, race_two_invokes(saver, thread, durability))


def test_a_write_after_delete_thread_does_not_resurrect_it(saver: PostgresCheckpointer) -> None:
    saver.setup()
    head = put(saver, "gone", None, step=-1)
    saver.delete_thread("gone")
    saver.put_writes(cast(RunnableConfig, head), [("messages", "late")], "task-1")  # a run still in flight
    with pytest.raises(NotFound):
        put(saver, "gone", head["configurable"]["checkpoint_id"])
    assert saver.get_tuple(cfg("gone")) is None
    store = saver._stores.sync_store()
    assert store is not None and store.get_conversation("gone") is None
    # A new run on the same thread id starts a new chain.
    put(saver, "gone", None, step=-1)
    assert saver.get_tuple(cfg("gone")) is not None


class SlowFirstCheckpoint(StateStore):
    """Stores a new chain's first checkpoint 0.3 s late, as a loaded machine may: LangGraph saves a run's
    writes in the background, so they then reach the database before the checkpoint that revives the thread."""

    def put_snapshot(self, conversation_id: str, snapshot_id: str, **kw: Any) -> None:
        if kw.get("parent_id") is None:
            time.sleep(0.3)
        super().put_snapshot(conversation_id, snapshot_id, **kw)


class AsyncSlowFirstCheckpoint(AsyncStateStore):
    async def put_snapshot(self, conversation_id: str, snapshot_id: str, **kw: Any) -> None:
        if kw.get("parent_id") is None:
            await asyncio.sleep(0.3)
        await super().put_snapshot(conversation_id, snapshot_id, **kw)


def ask_email(state: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [AIMessage(interrupt("your email?"))]}


def interrupting_graph(saver: PostgresCheckpointer) -> Any:
    return StateGraph(State).add_node("ask", ask_email).add_edge(START, "ask").compile(checkpointer=saver)


def test_a_new_run_after_delete_thread_keeps_its_writes(dsn: str, schema: str) -> None:
    """delete_thread, then a new run of the same thread id (durability "async", LangGraph's default): the
    run's writes, its interrupt among them, are kept although they reach the database before its first
    checkpoint. They were dropped as late writes of the deleted run, and the interrupt was lost."""
    with SlowFirstCheckpoint(dsn, schema=schema) as core:
        saver = PostgresCheckpointer(store=core)
        saver.setup()
        graph = interrupting_graph(saver)
        graph.invoke({"messages": [HumanMessage("refund")]}, cfg("again"), durability="async")
        saver.delete_thread("again")
        graph.invoke({"messages": [HumanMessage("refund")]}, cfg("again"), durability="async")
        assert [i.value for i in graph.get_state(cfg("again")).interrupts] == ["your email?"]
        out = graph.invoke(Command(resume="meu@email.com"), cfg("again"), durability="async")
        assert out["messages"][-1].content == "meu@email.com"


async def test_a_new_async_run_after_delete_thread_keeps_its_writes(dsn: str, schema: str) -> None:
    async with AsyncSlowFirstCheckpoint(dsn, schema=schema) as core:
        saver = PostgresCheckpointer(store=core)
        await saver.asetup()
        graph = interrupting_graph(saver)
        await graph.ainvoke({"messages": [HumanMessage("refund")]}, cfg("again"), durability="async")
        await saver.adelete_thread("again")
        await graph.ainvoke({"messages": [HumanMessage("refund")]}, cfg("again"), durability="async")
        assert [i.value for i in (await graph.aget_state(cfg("again"))).interrupts] == ["your email?"]


def test_no_instance_lock_workers_proceed_while_one_waits(dsn: str, schema: str) -> None:
    """8 workers share one saver on a pool. Worker 0's put is held up inside Postgres (its thread's row is
    locked by another session); the 7 others complete meanwhile. A saver-wide lock would stall them."""
    with ConnectionPool(dsn, min_size=2, max_size=8, kwargs={"autocommit": True}) as pool:
        saver = PostgresCheckpointer(pool, schema=schema)
        saver.setup()
        heads = {f"w{i}": put(saver, f"w{i}", None, step=-1) for i in range(8)}
        with psycopg.connect(dsn) as blocker:
            blocker.execute(sql.SQL("SELECT 1 FROM {}.conversations WHERE id = 'w0' FOR UPDATE")
                            .format(sql.Identifier(schema)))
            with ThreadPoolExecutor(8) as ex:
                stuck = ex.submit(put, saver, "w0", heads["w0"]["configurable"]["checkpoint_id"])
                others = [ex.submit(put, saver, f"w{i}", heads[f"w{i}"]["configurable"]["checkpoint_id"])
                          for i in range(1, 8)]
                for f in others:
                    f.result(timeout=60)
                assert not stuck.done()
                blocker.rollback()
                stuck.result(timeout=60)


def stored_chunks(dsn: str, schema: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*), coalesce(sum(octet_length(data)), 0) FROM {}.snapshot_chunks")
                           .format(sql.Identifier(schema))).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def test_a_growing_message_list_is_stored_once(saver: PostgresCheckpointer, dsn: str, schema: str) -> None:
    """50 turns: every message is stored once (one chunk each), not once per checkpoint."""
    saver.setup()
    graph = three_nodes().compile(checkpointer=saver)
    for turn in range(50):
        graph.invoke({"messages": [HumanMessage(f"message number {turn} " + "x" * 200)]}, cfg("long"))
    messages = graph.get_state(cfg("long")).values["messages"]
    assert len(messages) == 100
    serde = JsonPlusSerializer()
    message_bytes = sum(len(serde.dumps_typed(m)[1]) for m in messages)
    chunks, chunk_bytes = stored_chunks(dsn, schema)
    # One chunk per message, one per turn's input (the __start__ channel), three distinct "visits" strings.
    assert chunks <= 100 + 50 + 3 + 5
    # Storing the list per version, as PostgresSaver does, would take ~50x the final list.
    assert chunk_bytes < 2 * message_bytes


def test_retention_prunes_idle_threads(saver: PostgresCheckpointer) -> None:
    saver.setup()
    graph = three_nodes().compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("old")]}, cfg("idle"))
    assert len(list(saver.list(cfg("idle")))) == 5
    assert saver.prune_idle(timedelta(days=1)) == 0  # written just now: not idle
    assert saver.prune_idle(timedelta(seconds=-1)) == 1
    assert len(list(saver.list(cfg("idle")))) == 1
    assert graph.get_state(cfg("idle")).values["messages"][-1].content == "echo: old"


def test_setup_is_safe_from_many_processes(dsn: str) -> None:
    schema = f"t_setup_{uuid.uuid4().hex[:10]}"
    code = (
        "import sys; from pgagentstate.langgraph import PostgresCheckpointer\n"
        "with PostgresCheckpointer.from_conn_string(sys.argv[1], schema=sys.argv[2]) as s: s.setup()\n"
    )
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code, dsn, schema], stderr=subprocess.PIPE)
                 for _ in range(6)]
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors
        with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as saver:
            put(saver, "after-setup", None, step=-1)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_chunks_sent_by_hash_are_resent_when_another_process_removed_them(dsn: str, schema: str) -> None:
    """A saver sends stored messages by hash only; if another saver deleted them meanwhile, the store
    refuses the put and the saver sends the bytes: nothing is lost."""
    m1, m2 = HumanMessage("first", id="m1"), HumanMessage("second", id="m2")

    def put_messages(saver: PostgresCheckpointer, messages: list[Any], version: str) -> None:
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        saver.put({"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}, cp,
                  {"source": "loop", "step": 0, "parents": {}}, {"messages": version})

    with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as one, \
            PostgresCheckpointer.from_conn_string(dsn, schema=schema) as two:
        one.setup()
        put_messages(one, [m1], "1")
        two.prune(["shared"], strategy="delete")  # m1's chunk is gone; `one` still believes it is stored
        put_messages(one, [m1, m2], "2")
        latest = one.get_tuple(cfg("shared"))
        assert latest is not None
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == ["first", "second"]
