"""The core never depends on the row factory or prepare settings of a connection it is handed: connections
made as langgraph-checkpoint-postgres's README requires (``autocommit=True, prepare_threshold=0,
row_factory=dict_row``), one connection or a pool's ``kwargs``, sync and async."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgagentstate import AsyncStateStore, StateStore

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


@pytest.mark.parametrize("kind", ["conn", "pool"])
def test_core_store_on_documented_connections(dsn: str, schema: str, kind: str) -> None:
    """The core itself never depends on the row factory or prepare settings of a connection it is handed."""
    with sync_conn(dsn, kind) as conn:
        store = StateStore(conn, schema=f"{schema}_core")
        try:
            assert store.setup() != []
            assert store.setup() == []
            assert store.migration_status()[1] == []
            store.create_conversation("c1")
            with store.advisory_lock("job", timeout=5):  # its own statements on the connection it holds
                pass
            assert store.get_conversation("c1") is not None
        finally:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}_core" CASCADE')


@pytest.mark.parametrize("kind", ["conn", "pool"])
async def test_async_core_store_on_documented_connections(dsn: str, schema: str, kind: str) -> None:
    async with async_conn(dsn, kind) as conn:
        store = AsyncStateStore(conn, schema=f"{schema}_core")
        try:
            assert await store.setup() != []
            assert await store.setup() == []
            await store.create_conversation("c1")
            async with store.advisory_lock("job", timeout=5):
                pass
            assert await store.get_conversation("c1") is not None
        finally:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}_core" CASCADE')
