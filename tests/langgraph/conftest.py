"""Fixtures for the LangGraph adapter tests: savers and stores on a fresh schema of the test database."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

# pytest runs with --import-mode=importlib: make this folder's helper module (lg_graphs) importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def saver(dsn: str, schema: str) -> Iterator[PostgresCheckpointer]:
    """A checkpointer from a DSN: sync and async APIs both available."""
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as s:
        yield s


@pytest.fixture
async def asaver(dsn: str, schema: str) -> AsyncIterator[PostgresCheckpointer]:
    async with PostgresCheckpointer.from_conn_string(dsn, schema=schema) as s:
        yield s


@pytest.fixture
def lg_store(dsn: str, schema: str) -> Iterator[PostgresStore]:
    with PostgresStore.from_conn_string(dsn, schema=schema) as s:
        yield s
