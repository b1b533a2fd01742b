"""Fixtures for the ADK adapter tests.

The session contract tests run against three implementations of ``BaseSessionService``:
ADK's ``InMemorySessionService`` and ``DatabaseSessionService`` (on the same Postgres, in a schema of its
own) prove the tests check the real contract; ``PostgresSessionService`` is ours.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from google.adk.sessions import BaseSessionService, InMemorySessionService

from pgagentstate.connect import dsn_url

# pytest runs with --import-mode=importlib: make this folder's helper module (adk_samples) importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))

IMPLEMENTATIONS = ["in_memory", "database", "pgagentstate"]
# ADK's in-memory service keeps no storage revision, so it cannot tell a stale session object.
PERSISTENT = ["database", "pgagentstate"]


def _dsn(request: pytest.FixtureRequest) -> str:
    """The test database: the suite's ``dsn`` fixture, else the local server."""
    try:
        return str(request.getfixturevalue("dsn"))
    except pytest.FixtureLookupError:
        return os.environ.get("PGAGENTSTATE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def sqlalchemy_url(dsn: str, search_path: str) -> str:
    """``postgresql+psycopg://`` URL for ADK's DatabaseSessionService, confined to one schema."""
    base = dsn_url(dsn, "postgresql+psycopg")
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options={quote(f'-csearch_path={search_path}')}"


@pytest.fixture
def peer_schema(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A throwaway schema for ADK's DatabaseSessionService: (dsn, schema)."""
    dsn = _dsn(request)
    name = f"adk_peer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    yield dsn, name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{name}" CASCADE')


async def make_service(kind: str, request: pytest.FixtureRequest) -> Any:
    if kind == "in_memory":
        return InMemorySessionService()
    if kind == "database":
        from google.adk.sessions import DatabaseSessionService

        dsn, schema = request.getfixturevalue("peer_schema")
        return DatabaseSessionService(sqlalchemy_url(dsn, schema))
    if kind == "pgagentstate":
        try:
            from pgagentstate.adk import PostgresSessionService
        except ImportError as exc:  # the core is not there yet
            pytest.skip(f"pgagentstate.adk not importable: {exc}")
        # A service that owns its store (as in production); the schema is migrated by the fixture.
        return PostgresSessionService(_dsn(request), schema=request.getfixturevalue("schema"))
    raise AssertionError(kind)


@pytest.fixture(params=IMPLEMENTATIONS)
async def session_service(request: pytest.FixtureRequest) -> AsyncIterator[BaseSessionService]:
    service = await make_service(request.param, request)
    yield service
    close = getattr(service, "close", None)
    if close is not None:
        await close()


@pytest.fixture(params=PERSISTENT)
async def persistent_service(request: pytest.FixtureRequest) -> AsyncIterator[BaseSessionService]:
    service = await make_service(request.param, request)
    yield service
    close = getattr(service, "close", None)
    if close is not None:
        await close()


@pytest.fixture(params=["in_memory", "pgagentstate"])
async def memory_service(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """ADK's InMemoryMemoryService (the reference) and ours."""
    if request.param == "in_memory":
        from google.adk.memory import InMemoryMemoryService

        yield InMemoryMemoryService()
        return
    from pgagentstate.adk import PostgresMemoryService

    service = PostgresMemoryService(_dsn(request), schema=request.getfixturevalue("schema"))
    yield service
    await service.close()


@pytest.fixture
async def pg_services(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any]]:
    """Our session and memory services on one fresh schema."""
    from pgagentstate.adk import PostgresMemoryService, PostgresSessionService

    dsn, schema = _dsn(request), request.getfixturevalue("schema")
    sessions = PostgresSessionService(dsn, schema=schema)
    memory = PostgresMemoryService(dsn, schema=schema)
    yield sessions, memory
    await sessions.close()
    await memory.close()
