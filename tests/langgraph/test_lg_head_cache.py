"""The head cache: a saver answers get_tuple of a thread it stored last from what it stored, after one
small statement that checks the head is still that very version; anything another writer changed is read
from the database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import CheckpointTuple
from lg_graphs import cfg, three_nodes

from pgagentstate import AsyncStateStore, StateStore
from pgagentstate.langgraph import PostgresCheckpointer


@pytest.fixture
def other(dsn: str, schema: str) -> Iterator[PostgresCheckpointer]:
    """Another process's saver on the same threads (nothing kept)."""
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, head_cache=0) as s:
        yield s


@pytest.fixture
def full_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads whose checkpoint was read whole from the database (the path the cache saves)."""
    seen: list[str] = []
    for cls in (StateStore, AsyncStateStore):
        real = cls.get_snapshot

        def spy(self: Any, conversation_id: str, *args: Any, real: Any = real, **kwargs: Any) -> Any:
            seen.append(conversation_id)
            return real(self, conversation_id, *args, **kwargs)

        monkeypatch.setattr(cls, "get_snapshot", spy)
    return seen


def same(a: CheckpointTuple | None, b: CheckpointTuple | None) -> None:
    assert a is not None and b is not None
    assert a.config == b.config and a.parent_config == b.parent_config
    assert a.checkpoint == b.checkpoint
    assert a.metadata == b.metadata
    assert a.pending_writes == b.pending_writes


def turn(saver: PostgresCheckpointer, thread: str, text: str) -> None:
    three_nodes().compile(checkpointer=saver).invoke({"messages": [HumanMessage(text)]}, cfg(thread))


def test_a_thread_this_saver_stored_last_is_not_read_back_whole(
    saver: PostgresCheckpointer, other: PostgresCheckpointer, full_reads: list[str]
) -> None:
    for t in range(3):
        turn(saver, "k1", f"turn {t}")
    full_reads.clear()
    mine = saver.get_tuple(cfg("k1"))
    assert full_reads == []
    theirs = other.get_tuple(cfg("k1"))
    assert full_reads == ["k1"]
    same(mine, theirs)
    assert mine is not None and mine.checkpoint is not saver.get_tuple(cfg("k1")).checkpoint  # type: ignore[union-attr]
    # Fresh objects every read: a caller that mutates what it got changes nothing for the next one.
    mine.checkpoint["channel_values"]["messages"].append(HumanMessage("mutated"))
    same(saver.get_tuple(cfg("k1")), theirs)


def test_what_another_writer_changed_is_read_from_the_database(
    saver: PostgresCheckpointer, other: PostgresCheckpointer, full_reads: list[str]
) -> None:
    turn(saver, "k2", "mine")
    # Pending writes of the kept head, stored by another saver: fetched with the head check.
    head = saver.get_tuple(cfg("k2"))
    assert head is not None
    other.put_writes(head.config, [("messages", [HumanMessage("pending")])], task_id="t1")
    full_reads.clear()
    same(saver.get_tuple(cfg("k2")), other.get_tuple(cfg("k2")))
    assert full_reads == ["k2"]  # only the other saver's
    assert [w[1] for w in head.pending_writes] == [] and len(saver.get_tuple(cfg("k2")).pending_writes) == 1  # type: ignore[union-attr]
    # The thread continued elsewhere: the new head is read.
    turn(other, "k2", "theirs")
    full_reads.clear()
    got = saver.get_tuple(cfg("k2"))
    assert full_reads == ["k2"]
    assert got is not None and [m.content for m in got.checkpoint["channel_values"]["messages"]][-2:] == [
        "theirs", "echo: theirs"]
    # The same checkpoint stored again by another writer (same id, new contents): the stamp differs.
    turn(saver, "k2", "again")
    head = saver.get_tuple(cfg("k2"))
    assert head is not None and head.parent_config is not None
    changed = {**head.checkpoint, "channel_values": {**head.checkpoint["channel_values"], "summary": "redone"}}
    other.put(head.parent_config, changed, head.metadata, {"summary": "99.0"})  # type: ignore[arg-type]
    full_reads.clear()
    got = saver.get_tuple(cfg("k2"))
    assert full_reads == ["k2"] and got is not None
    assert got.checkpoint["channel_values"]["summary"] == "redone"
    # Deleted elsewhere: gone.
    other.delete_thread("k2")
    assert saver.get_tuple(cfg("k2")) is None


def test_async_saver_keeps_heads_too(dsn: str, schema: str, full_reads: list[str]) -> None:
    async def scenario() -> tuple[CheckpointTuple | None, CheckpointTuple | None]:
        async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as s:
            graph = three_nodes().compile(checkpointer=s)
            for t in range(2):
                await graph.ainvoke({"messages": [HumanMessage(f"turn {t}")]}, cfg("k3"))
            full_reads.clear()
            mine = await s.aget_tuple(cfg("k3"))
            assert full_reads == []
        async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as fresh:
            return mine, await fresh.aget_tuple(cfg("k3"))

    mine, theirs = asyncio.run(scenario())
    same(mine, theirs)


def test_the_cache_is_bounded_by_bytes(dsn: str, schema: str, full_reads: list[str]) -> None:
    threads = [f"b{i}" for i in range(9)]  # ~12.5 KB kept each: 9 do not fit in 100 KB, 7 do
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, head_cache=100_000) as s:
        for thread in threads:
            for t in range(2):
                turn(s, thread, f"{thread} turn {t} " + "x" * 3000)
        full_reads.clear()
        for thread in reversed(threads):
            assert s.get_tuple(cfg(thread)) is not None
        assert "b0" in full_reads and "b8" not in full_reads and "b2" not in full_reads


def test_turns_served_by_processes_in_turn_stop_paying_for_the_check(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without affinity, each process's kept head is stale at its next turn; the check would cost a round
    trip before every full read. After a few stale entries the saver goes straight to the full read, and
    checks again once in a while."""
    checks: list[str] = []
    real = StateStore.get_snapshot_head

    def spy(self: Any, conversation_id: str, *args: Any, **kwargs: Any) -> Any:
        checks.append(conversation_id)
        return real(self, conversation_id, *args, **kwargs)

    monkeypatch.setattr(StateStore, "get_snapshot_head", spy)
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as a, \
            PostgresCheckpointer.from_conn_string(dsn, schema=schema) as b:  # fmt: skip
        for t in range(40):  # a, b, a, b...: every get_tuple of either finds the other's head
            turn(a if t % 2 == 0 else b, "rr", f"turn {t}")
        # 38 stale heads: 4 checks per saver use up its credit (8 measured), then 1 lookup in 16 checks.
        assert 6 <= len(checks) <= 12
        got = a.get_tuple(cfg("rr"))
        assert got is not None and got.checkpoint["channel_values"]["messages"][-1].content == "echo: turn 39"
        # Back to one process: the checks come back and answer from what it kept.
        for t in range(40, 80):
            turn(a, "rr", f"turn {t}")
        checks.clear()
        for _ in range(3):
            turn(a, "rr", "again")
        assert len(checks) == 3
