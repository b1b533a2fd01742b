"""pytest plugin (``-p lg_checkpointer_plugin``) for LangGraph's own graph tests: their Postgres checkpointer
fixtures yield our ``PostgresCheckpointer`` on a fresh schema, and only those variants run.

LangGraph's ``tests/conftest.py`` builds ``sync_checkpointer`` / ``async_checkpointer`` from context managers
it imports from ``tests/conftest_checkpointer.py`` (``_checkpointer_postgres``, ``_checkpointer_postgres_aio``).
When that conftest registers, this plugin rebinds those names in it to ours: nothing of upstream is copied.
Tests that take no checkpointer, or another one (memory, sqlite), a Redis cache or upstream's Postgres
store (both want LangGraph's docker services) are deselected.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgagentstate import StateStore
from pgagentstate.langgraph import PostgresCheckpointer

ROOT = Path(__file__).resolve().parents[2]
#: The upstream fixture params we run, per fixture: one variant per API (the pool and pipeline variants
#: exercise PostgresSaver's connection handling, which ours shares between all of them).
RUN = {"sync_checkpointer": "postgres", "async_checkpointer": "postgres_aio"}


def _dsn() -> str:
    env = os.environ.get("PGAGENTSTATE_TEST_DSN")
    if env:
        return env
    from pgagentstate.embedded import embedded_dsn

    return embedded_dsn(ROOT / ".pgagentstate" / "test-pg")


class _Schema:
    """One fresh schema for the run, dropped at its end; each test gets a fresh tenant in it (the core
    scopes every statement by tenant), which isolates tests as well as a schema each and saves applying
    the migrations ~400 times."""

    dsn: str | None = None
    name = f"t_{uuid.uuid4().hex[:12]}"

    @classmethod
    def get(cls) -> tuple[str, str, str]:
        if cls.dsn is None:
            dsn = _dsn()
            with StateStore(dsn, schema=cls.name, min_size=1, max_size=1) as setup_store:
                setup_store.setup()
            cls.dsn = dsn
        return cls.dsn, cls.name, f"t{uuid.uuid4().hex[:12]}"

    @classmethod
    def drop(cls) -> None:
        if cls.dsn is not None:
            with psycopg.connect(cls.dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(cls.name)))


@contextmanager
def _ours_sync() -> Iterator[PostgresCheckpointer]:
    dsn, schema, tenant = _Schema.get()
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, tenant=tenant) as saver:
        yield saver


@asynccontextmanager
async def _ours_async() -> AsyncIterator[PostgresCheckpointer]:
    dsn, schema, tenant = _Schema.get()
    async with PostgresCheckpointer.from_conn_string(dsn, schema=schema, tenant=tenant) as saver:
        yield saver


def pytest_unconfigure(config: pytest.Config) -> None:
    _Schema.drop()


def pytest_plugin_registered(plugin: Any, manager: pytest.PytestPluginManager) -> None:
    if getattr(plugin, "__name__", "") == "tests.conftest":
        plugin._checkpointer_postgres = _ours_sync
        plugin._checkpointer_postgres_aio = _ours_async


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        ours = any(params.get(fixture) == variant for fixture, variant in RUN.items())
        services = params.get("cache") == "redis" or params.get("sync_store", params.get("async_store")) not in (
            None, "in_memory")
        (keep if ours and not services else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
