"""pytest plugin (``-p oa_swap_plugin``): the Agents SDK's own session tests with a Postgres session swapped in.

Loaded into a run of the SDK's sdist tests by ``test_openai_agents_suite.py``. Every test module's
``SQLiteSession``, ``AsyncSQLiteSession`` and ``SQLAlchemySession`` become a stand-in that builds, whatever
database the test names (a SQLite file, ``:memory:``, a SQLAlchemy engine or URL), a session on Postgres in a
schema of the test's own:

- ``PGAGENTSTATE_SWAP=peer``: the SDK's ``SQLAlchemySession`` (``postgresql+psycopg``, tables created);
- ``PGAGENTSTATE_SWAP=ours``: :class:`pgagentstate.openai_agents.PostgresSession` (schema migrated).

``PGAGENTSTATE_SWAP_DSN`` is the server. Tests of SQLite's own machinery (file locks, worker threads,
corrupt rows written with raw SQL) fail under both; the suite compares the two runs test by test.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

MODE = os.environ.get("PGAGENTSTATE_SWAP", "ours")
DSN = os.environ.get("PGAGENTSTATE_SWAP_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SWAPPED = ("SQLiteSession", "AsyncSQLiteSession", "SQLAlchemySession")

_schema: str | None = None
_store: Any = None  # ours: the test's AsyncStateStore, shared by its sessions


def _current_schema() -> str:
    assert _schema is not None, "a session built outside a test"
    return _schema


def _peer_url(schema: str) -> str:
    base = DSN.split("://", 1)[1]
    sep = "&" if "?" in base else "?"
    return f"postgresql+psycopg://{base}{sep}options={quote(f'-csearch_path={schema}')}"


def _session(session_id: str, session_settings: Any = None, **_ignored: Any) -> Any:
    """A session on the current test's schema; the database the test named is ignored."""
    schema = _current_schema()
    session: Any
    if MODE == "peer":
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.pool import NullPool

        session = SQLAlchemySession.from_url(
            session_id, url=_peer_url(schema), engine_kwargs={"poolclass": NullPool}, create_tables=True,
            session_settings=session_settings,
        )  # fmt: skip
    else:
        from pgagentstate.openai_agents import PostgresSession

        session = PostgresSession(session_id, store=_store, session_settings=session_settings)
    # The tests end with SQLiteSession's synchronous close(); neither Postgres session has one (their
    # connections close with the event loop).
    session.close = lambda: None
    return session


class _StandIn:
    """Called like SQLiteSession(session_id, db_path, ...) or SQLAlchemySession(session_id, engine=...)."""

    def __new__(cls, session_id: str, *args: Any, session_settings: Any = None, **kwargs: Any) -> Any:
        return _session(session_id, session_settings)

    @classmethod
    def from_url(cls, session_id: str, *, url: str, session_settings: Any = None, **kwargs: Any) -> Any:
        return _session(session_id, session_settings)


@pytest.fixture(autouse=True)
def _postgres_schema() -> Iterator[None]:
    """A schema for the test (migrated for ours), dropped after it."""
    global _schema, _store
    name = f"oa_{MODE}_{uuid.uuid4().hex[:10]}"
    if MODE == "peer":
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
    else:
        from pgagentstate import StateStore

        with StateStore(DSN, schema=name, min_size=1, max_size=1) as store:
            store.setup()
        from pgagentstate import AsyncStateStore

        # One small pool per event loop the test uses; closed after the test (a loop that is idle now,
        # such as the one Runner.run_sync keeps, closes it when it next runs).
        _store = AsyncStateStore(DSN, schema=name, min_size=1, max_size=2)
    _schema = name
    try:
        yield
    finally:
        if _store is not None:
            asyncio.run(_store.close())
        _schema, _store = None, None
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def pytest_collection_finish(session: pytest.Session) -> None:
    """Swap the session classes in every collected test module (their globals, as the tests name them)."""
    seen: set[str] = set()
    for item in session.items:
        module = getattr(item, "module", None)
        if module is None or module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for name in SWAPPED:
            if name in vars(module):
                setattr(module, name, _StandIn)


def pytest_report_header() -> str:
    return f"pgagentstate swap: {MODE} ({sys.version.split()[0]})"
