"""Shared fixtures: a real Postgres for every test, and a fresh schema per test.

The server is ``$PGAGENTSTATE_TEST_DSN`` when set (CI sets it to the PostgreSQL on 127.0.0.1:5432), else
the embedded pgserver in ``.pgagentstate/test-pg`` (started once and reused across runs).

``PGAGENTSTATE_TEST_PARTITIONED=1``: the ``schema`` fixture hash-partitions the big tables of each fresh schema
(tools/partition_schema.py, 4 partitions each: enough to show pruning, few enough to stay quick), so that the
tests run unchanged on the layout docs/scaling.md describes. Tests that make their own schemas are not affected.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgagentstate import AsyncStateStore, StateStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def dsn() -> str:
    """DSN of the Postgres server the tests run against."""
    env = os.environ.get("PGAGENTSTATE_TEST_DSN")
    if env:
        return env
    from pgagentstate.embedded import embedded_dsn

    return embedded_dsn(ROOT / ".pgagentstate" / "test-pg")


def new_schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


PARTITIONED = os.environ.get("PGAGENTSTATE_TEST_PARTITIONED", "") not in ("", "0")


def partition_schema(dsn: str, schema: str, layout: str = "big", partitions: int = 4) -> list[str]:
    """Hash-partition ``schema``'s tables with tools/partition_schema.py (``layout``: big or conversation)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import partition_schema as tool

    with psycopg.connect(dsn, autocommit=True) as conn:
        return tool.partition(conn, schema, tool.LAYOUTS[layout], partitions)


@pytest.fixture
def schema(dsn: str) -> Iterator[str]:
    """A fresh schema with every migration applied (its big tables partitioned under
    ``PGAGENTSTATE_TEST_PARTITIONED``); dropped after the test."""
    name = new_schema_name()
    with StateStore(dsn, schema=name, min_size=1, max_size=1) as setup_store:
        setup_store.setup()
    if PARTITIONED:
        partition_schema(dsn, name)
    yield name
    drop_schema(dsn, name)


@pytest.fixture
def store(dsn: str, schema: str) -> Iterator[StateStore]:
    with StateStore(dsn, schema=schema) as s:
        yield s


@pytest.fixture
async def astore(dsn: str, schema: str) -> AsyncIterator[AsyncStateStore]:
    async with AsyncStateStore(dsn, schema=schema) as s:
        yield s


def table_fingerprint(dsn: str, schema: str) -> dict[str, str]:
    """Every table of ``schema`` as the md5 of its rows: equal fingerprints mean nothing was written."""
    out: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
        for (table,) in tables:
            rows = sql.SQL("SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {}.{} t")
            row = conn.execute(rows.format(sql.Identifier(schema), sql.Identifier(table))).fetchone()
            out[table] = row[0] if row else ""
    return out


@pytest.fixture
def fingerprint(dsn: str, schema: str) -> Callable[[], dict[str, str]]:
    """``fingerprint()``: the test schema's tables, to assert that a rejected call wrote nothing."""
    return lambda: table_fingerprint(dsn, schema)
