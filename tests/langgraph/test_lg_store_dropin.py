"""PostgresStore accepts what langgraph-checkpoint-postgres's PostgresStore / AsyncPostgresStore accept:
whole-batch validation with LangGraph's errors, ``from_conn_string(pipeline=, pool_config=)``, ``pipe=``,
``deserializer=``, and the TTL sweeper (``start_ttl_sweeper`` / ``stop_ttl_sweeper`` / ``sweep_ttl``)."""

from __future__ import annotations

import time

import psycopg
import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from pgagentstate.langgraph import PostgresStore

BAD = [("foo", ""), ("foo.bar",), ("foo", 1), ("foo", "*"), ("a\x1fb",)]


@pytest.mark.parametrize("namespace", BAD, ids=repr)
@pytest.mark.parametrize("kind", ["get", "put", "delete", "search", "list"])
def test_batch_is_checked_whole_before_anything_is_written(
    dsn: str, schema: str, namespace: tuple[object, ...], kind: str
) -> None:
    if kind in ("search", "list") and namespace == ("foo", "*"):
        pytest.skip("'*' is a wildcard in search prefixes and namespace patterns")
    op = {
        "get": GetOp(namespace, "k"),  # type: ignore[arg-type]
        "put": PutOp(namespace, "k", {"changed": True}),  # type: ignore[arg-type]
        "delete": PutOp(namespace, "k", None),  # type: ignore[arg-type]
        "search": SearchOp(namespace),  # type: ignore[arg-type]
        "list": ListNamespacesOp((MatchCondition("prefix", namespace),)),  # type: ignore[arg-type]
    }[kind]
    with PostgresStore.from_conn_string(dsn, schema=schema) as store:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(("valid",), "k", {}), op])
        assert store.get(("valid",), "k") is None  # nothing written


def test_a_string_match_path_is_one_label(dsn: str, schema: str) -> None:
    with PostgresStore.from_conn_string(dsn, schema=schema) as store:
        store.put(("docs", "public"), "k", {"v": 1})
        store.put(("docs", "private"), "k", {"v": 2})
        op = ListNamespacesOp((MatchCondition("suffix", "public"),))  # type: ignore[arg-type]
        assert store.batch([op]) == [[("docs", "public")]]


async def test_abatch_is_checked_whole(dsn: str, schema: str) -> None:
    async with PostgresStore.from_conn_string(dsn, schema=schema) as store:
        with pytest.raises(InvalidNamespaceError):
            await store.abatch([PutOp(("valid",), "k", {}), PutOp(("foo", ""), "k", {})])
        assert await store.aget(("valid",), "k") is None


def test_peer_constructor_and_from_conn_string(dsn: str, schema: str) -> None:
    with PostgresStore.from_conn_string(dsn, schema=schema, pipeline=True,
                                        pool_config={"min_size": 1, "max_size": 3, "kwargs": {}}) as store:
        store.put(("a",), "k", {"v": 1})
        assert store.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="pool_config"):
        PostgresStore.from_conn_string(dsn, schema=schema, pool_config={"max_sise": 3})
    with psycopg.connect(dsn, autocommit=True) as conn, conn.pipeline() as pipe:
        store = PostgresStore(conn, pipe=pipe, deserializer=lambda v: {"raw": v}, schema=schema)
        store.put(("a",), "k2", {"v": 2})
        assert store.get(("a",), "k").value == {"v": 1}  # type: ignore[union-attr]
        assert store.get(("a",), "k2").value == {"v": 2}  # type: ignore[union-attr]


def _expire(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE \"{schema}\".memories SET expires_at = now() - interval '1 second' WHERE key = 'old'")


def _rows(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".memories').fetchone()
        assert row is not None
        return int(row[0])


def test_sweep_ttl_and_sweeper(dsn: str, schema: str) -> None:
    ttl = {"default_ttl": 1.0, "sweep_interval_minutes": 0.001}  # a sweep every 60 ms
    with PostgresStore.from_conn_string(dsn, schema=schema, ttl=ttl) as store:
        store.put(("a",), "old", {"v": 1})
        store.put(("a",), "new", {"v": 2}, ttl=None)
        _expire(dsn, schema)
        assert store.sweep_ttl() == 1
        assert _rows(dsn, schema) == 1
        store.put(("a",), "old", {"v": 1})
        _expire(dsn, schema)
        done = store.start_ttl_sweeper()
        assert store.start_ttl_sweeper() is done  # one sweeper per store
        for _ in range(600):  # bounded: the sweeper runs every 60 ms
            if _rows(dsn, schema) == 1:
                break
            time.sleep(0.05)
        assert _rows(dsn, schema) == 1
        assert store.stop_ttl_sweeper(timeout=30)
        assert done.result(timeout=30) is None


async def test_async_sweeper_spelling(dsn: str, schema: str) -> None:
    async with PostgresStore.from_conn_string(dsn, schema=schema, ttl={"default_ttl": 1.0}) as store:
        await store.aput(("a",), "old", {"v": 1})
        _expire(dsn, schema)
        assert await store.sweep_ttl() == 1
        task = await store.start_ttl_sweeper(sweep_interval_minutes=10)
        assert await store.stop_ttl_sweeper(timeout=30)
        assert task.done()
