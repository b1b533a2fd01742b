"""Connections made the way PostgresSaver's docs require (``autocommit=True, prepare_threshold=0,
row_factory=dict_row``), as one connection or as a pool's ``kwargs``, sync and async: every entry point of
the saver and the store works on them, on a fresh schema and on an existing one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

#: What langgraph-checkpoint-postgres's README tells users to pass.
DOCUMENTED = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


@contextmanager
def sync_conn(dsn: str, kind: str) -> Iterator[Any]:
    if kind == "conn":
        with psycopg.connect(dsn, **DOCUMENTED) as conn:  # type: ignore[arg-type]
            yield conn
    else:
        with ConnectionPool(dsn, min_size=1, max_size=4, kwargs=DOCUMENTED) as pool:
            yield pool


@asynccontextmanager
async def async_conn(dsn: str, kind: str) -> AsyncIterator[Any]:
    if kind == "conn":
        async with await psycopg.AsyncConnection.connect(dsn, **DOCUMENTED) as conn:  # type: ignore[arg-type]
            yield conn
    else:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=4, kwargs=DOCUMENTED) as pool:
            yield pool


def _graph(saver: PostgresCheckpointer) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda s: {"messages": [("ai", f"{len(s['messages'])} so far")]})
    builder.add_edge(START, "echo")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("kind", ["conn", "pool"])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "existing"])
def test_saver_on_documented_connections(dsn: str, schema: str, kind: str, fresh: bool) -> None:
    target = f"{schema}_new" if fresh else schema
    try:
        with sync_conn(dsn, kind) as conn:
            saver = PostgresCheckpointer(conn, schema=target)
            saver.setup()
            saver.setup()  # again, on the schema it just made
            graph = _graph(saver)
            config = {"configurable": {"thread_id": "t1"}}
            graph.invoke({"messages": [("user", "hi")]}, config)
            assert len(graph.get_state(config).values["messages"]) == 2
            assert len(list(saver.list(config))) == 3
            assert len(list(graph.get_state_history(config))) == 3
            put = saver.put({"configurable": {"thread_id": "t2", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
            saver.put_writes(put, [("ch", 1)], task_id="task")
            found = saver.get_tuple(put)
            assert found is not None and found.pending_writes == [("task", "ch", 1)]
            saver.delete_thread("t2")
            assert saver.get_tuple(put) is None
    finally:
        if fresh:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{target}" CASCADE')


@pytest.mark.parametrize("kind", ["conn", "pool"])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "existing"])
async def test_async_saver_on_documented_connections(dsn: str, schema: str, kind: str, fresh: bool) -> None:
    target = f"{schema}_new" if fresh else schema
    try:
        async with async_conn(dsn, kind) as conn:
            saver = PostgresCheckpointer(conn, schema=target)
            await saver.setup()
            await saver.setup()
            graph = _graph(saver)
            config = {"configurable": {"thread_id": "t1"}}
            await graph.ainvoke({"messages": [("user", "hi")]}, config)
            assert len((await graph.aget_state(config)).values["messages"]) == 2
            assert len([c async for c in saver.alist(config)]) == 3
            put = await saver.aput({"configurable": {"thread_id": "t2", "checkpoint_ns": ""}}, empty_checkpoint(),
                                   {}, {})
            await saver.aput_writes(put, [("ch", 1)], task_id="task")
            found = await saver.aget_tuple(put)
            assert found is not None and found.pending_writes == [("task", "ch", 1)]
    finally:
        if fresh:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{target}" CASCADE')


@pytest.mark.parametrize("kind", ["conn", "pool"])
def test_store_on_documented_connections(dsn: str, schema: str, kind: str) -> None:
    with sync_conn(dsn, kind) as conn:
        store = PostgresStore(conn, schema=schema, ttl={"default_ttl": 10, "refresh_on_read": True})
        store.setup()
        store.put(("users", "u1"), "lang", {"text": "prefers portuguese"})
        item = store.get(("users", "u1"), "lang")
        assert item is not None and item.value == {"text": "prefers portuguese"}
        assert [i.key for i in store.search(("users",), query="portuguese")] == ["lang"]
        assert store.list_namespaces(prefix=("users",)) == [("users", "u1")]
        store.delete(("users", "u1"), "lang")
        assert store.get(("users", "u1"), "lang") is None


@pytest.mark.parametrize("kind", ["conn", "pool"])
async def test_async_store_on_documented_connections(dsn: str, schema: str, kind: str) -> None:
    async with async_conn(dsn, kind) as conn:
        store = PostgresStore(conn, schema=schema, ttl={"default_ttl": 10, "refresh_on_read": True})
        await store.setup()
        await store.aput(("users", "u1"), "lang", {"text": "prefers portuguese"})
        item = await store.aget(("users", "u1"), "lang")
        assert item is not None and item.value == {"text": "prefers portuguese"}
        assert [i.key for i in await store.asearch(("users",), query="portuguese")] == ["lang"]
        assert await store.alist_namespaces(prefix=("users",)) == [("users", "u1")]


def test_saver_on_a_connection_in_pipeline_mode(dsn: str, schema: str) -> None:
    """``PostgresSaver(conn, pipe=conn.pipeline())``, as upstream's "pipe" fixture makes it: the connection
    is in pipeline mode, so a statement's result (and error) only arrives at the next sync. A first put
    that names a checkpoint id the new thread lacks fails on its first statement and is retried; that
    error surfaced in the next, unrelated call (upstream's test_search[pipe], test_null_chars[pipe])."""
    with psycopg.connect(dsn, **DOCUMENTED) as conn, conn.pipeline() as pipe:  # type: ignore[arg-type]
        saver = PostgresCheckpointer(conn, pipe=pipe, schema=schema)
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "1"}}
        stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        found = saver.get_tuple(stored)
        assert found is not None and found.metadata["source"] == "input"
        assert [t.config for t in saver.list(None)] == [stored]


async def test_async_saver_on_a_connection_in_pipeline_mode(dsn: str, schema: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(dsn, **DOCUMENTED) as conn,  # type: ignore[arg-type]
        conn.pipeline() as pipe,
    ):
        saver = PostgresCheckpointer(conn, pipe=pipe, schema=schema)
        config = {"configurable": {"thread_id": "t1", "checkpoint_ns": "", "checkpoint_id": "1"}}
        stored = await saver.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        found = await saver.aget_tuple(stored)
        assert found is not None and found.metadata["source"] == "input"
