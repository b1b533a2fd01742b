"""Fixtures for the OpenAI Agents SDK adapter tests.

`session_factory` is parameterised over implementations so the same contract tests run against the
SDK's own SQLiteSession (proving they test the real contract) and against PostgresSession.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import SQLiteSession, set_tracing_disabled
from agents.memory import Session

# pytest runs with --import-mode=importlib: make this folder's helper module (oa_samples) importable.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from oa_samples import SessionFactory

set_tracing_disabled(True)


@pytest.fixture(params=["sqlite", "postgres"])
async def session_factory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionFactory]:
    """Returns `make(session_id, session_settings=None) -> Session`; every session shares one backend."""
    made: list[Any] = []
    if request.param == "sqlite":
        db = tmp_path / "sessions.db"

        def make_sqlite(session_id: str, session_settings: Any = None) -> Session:
            s = SQLiteSession(session_id, db, session_settings=session_settings)
            made.append(s)
            return s

        yield make_sqlite
        for s in made:
            s.close()
        return

    from pgagentstate import AsyncStateStore
    from pgagentstate.openai_agents import PostgresSession

    # `schema` is a sync fixture (a fresh migrated schema); async fixtures cannot be requested from here.
    astore = AsyncStateStore(request.getfixturevalue("dsn"), schema=request.getfixturevalue("schema"))

    def make_pg(session_id: str, session_settings: Any = None) -> Session:
        s = PostgresSession(session_id, store=astore, session_settings=session_settings)
        made.append(s)
        return s

    yield make_pg
    for s in made:
        with contextlib.suppress(Exception):
            await s.aclose()
    await astore.close()
