"""What ADK's own services do, and its own tests check, that a swap to ours must not change (issue 16).

The session tests run against ADK's InMemorySessionService and DatabaseSessionService too (on the same
Postgres), which proves they test ADK's behaviour rather than our reading of it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from adk_samples import text_event
from google.adk.events import Event, EventActions
from google.adk.memory import InMemoryMemoryService
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from pgagentstate import InvalidInput, InvalidPayload
from pgagentstate.adk import PostgresMemoryService, PostgresSessionService

APP = "shop"


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


async def reload(service: BaseSessionService, s: Session) -> Session:
    got = await service.get_session(app_name=s.app_name, user_id=s.user_id, session_id=s.id)
    assert got is not None
    return got


# ---------------------------------------------------------------- last_update_time


async def test_created_session_equals_the_one_read_back(session_service: BaseSessionService) -> None:
    for state in ({"k": "v"}, {"k": "v", "user:u": 1, "app:a": 2}, None):
        s = await session_service.create_session(app_name=APP, user_id=uid(), state=state)
        assert await reload(session_service, s) == s


async def test_last_update_time_is_the_last_events_timestamp(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"k": 1})
    await session_service.append_event(s, text_event("user", "hi", timestamp=1700000000.123))
    assert s.last_update_time == 1700000000.123
    got = await reload(session_service, s)
    assert got.last_update_time == 1700000000.123
    assert got == s
    # Also when the last event itself is not read back.
    await session_service.append_event(s, text_event("agent", "hello", timestamp=1700000050.5))
    for config in (GetSessionConfig(num_recent_events=0), GetSessionConfig(after_timestamp=1800000000.0)):
        got = await session_service.get_session(app_name=APP, user_id=s.user_id, session_id=s.id, config=config)
        assert got is not None and got.events == []
        assert got.last_update_time == 1700000050.5


async def test_events_with_small_timestamps_read_back_equal(session_service: BaseSessionService) -> None:
    """ADK's own test_get_session_with_config and test_append_event_complete: timestamps 1, 2, 3..."""
    s = await session_service.create_session(app_name=APP, user_id=uid())
    for i in range(1, 4):
        await session_service.append_event(s, Event(author="user", timestamp=i))
    got = await reload(session_service, s)
    assert [e.timestamp for e in got.events] == [1, 2, 3]
    assert got.last_update_time == 3
    assert got == s


# ---------------------------------------------------------------- state that is not JSON


def _lambda_event() -> Event:
    return Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hi")]),
        actions=EventActions(state_delta={"callback": lambda: 1, "ok": 2, "user:when": {"n": 1}}),
    )


async def test_a_state_value_that_is_not_json_is_stored_degraded(
    session_service: BaseSessionService, caplog: pytest.LogCaptureFixture
) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"fn": print, "plain": 1})
    got = await reload(session_service, s)
    assert got.state["plain"] == 1
    persistent = "InMemory" not in type(session_service).__name__
    if persistent:
        assert isinstance(got.state["fn"], str)  # a string stands in for what JSON cannot hold
    with caplog.at_level(logging.WARNING):
        await session_service.append_event(s, _lambda_event())
    got = await reload(session_service, s)
    assert len(got.events) == 1  # the turn is not lost
    assert (got.state["ok"], got.state["user:when"]) == (2, {"n": 1})
    if persistent:
        assert isinstance(got.state["callback"], str)
        assert any("callback" in r.getMessage() or r.exc_info for r in caplog.records)


async def test_our_log_names_the_degraded_key(pg_services: tuple[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    sessions, _ = pg_services
    s = await sessions.create_session(app_name=APP, user_id=uid())
    with caplog.at_level(logging.WARNING, logger="pgagentstate.adk"):
        await sessions.append_event(s, _lambda_event())
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("pgagentstate")]
    assert any("'callback'" in m and "string" in m for m in messages), messages


async def test_strict_state_refuses_and_writes_nothing(dsn: str, schema: str) -> None:
    async with PostgresSessionService(dsn, schema=schema, strict_state=True) as sessions:
        with pytest.raises(InvalidPayload) as info:
            await sessions.create_session(app_name=APP, user_id="u", session_id="s", state={"fn": print})
        assert info.value.path == "fn"
        assert await sessions.get_session(app_name=APP, user_id="u", session_id="s") is None
        s = await sessions.create_session(app_name=APP, user_id="u", session_id="s2")
        with pytest.raises(InvalidPayload) as info:
            await sessions.append_event(s, _lambda_event())
        assert info.value.path == "callback"
        got = await reload(sessions, s)
        assert (got.events, got.state) == ([], {})


# ---------------------------------------------------------------- several threads, each with its own loop


def _in_threads(n: int, work: Callable[[int], Coroutine[Any, Any, None]], *, together: bool) -> list[BaseException]:
    """Run ``work(i)`` with ``asyncio.run`` in ``n`` threads (all at once, or one after the other)."""
    errors: list[BaseException] = []

    def target(i: int) -> None:
        try:
            asyncio.run(work(i))
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
        if not together:
            t.join(timeout=120)
    for t in threads:
        t.join(timeout=120)
    hung = [t for t in threads if t.is_alive()]
    return errors + [TimeoutError(f"{len(hung)} thread(s) never finished")] * bool(hung)


@pytest.mark.parametrize("together", [False, True], ids=["one_after_another", "at_once"])
def test_services_work_from_threads_with_their_own_loops(dsn: str, schema: str, together: bool) -> None:
    sessions = PostgresSessionService(dsn, schema=schema)
    memory = PostgresMemoryService(dsn, schema=schema)
    user = uid()

    async def work(i: int) -> None:
        s = await sessions.create_session(app_name=APP, user_id=user, session_id=f"s{i}")
        await sessions.append_event(s, text_event("user", f"parcel number {i}"))
        await memory.add_session_to_memory(await reload(sessions, s))

    assert _in_threads(4, work, together=together) == []

    async def check() -> None:
        listed = await sessions.list_sessions(app_name=APP, user_id=user)
        assert sorted(x.id for x in listed.sessions) == [f"s{i}" for i in range(4)]
        found = await memory.search_memory(app_name=APP, user_id=user, query="parcel")
        assert len(found.memories) == 4
        await sessions.close()
        await memory.close()

    asyncio.run(check())


def test_memory_service_from_threads_like_adk_in_memory() -> None:
    """The reference: ADK's InMemoryMemoryService is used this way in ADK's own tests."""
    memory = InMemoryMemoryService()

    async def work(i: int) -> None:
        await memory.add_session_to_memory(
            Session(id=f"s{i}", app_name=APP, user_id="u", events=[text_event("user", f"parcel {i}")])
        )

    assert _in_threads(3, work, together=False) == []


# ---------------------------------------------------------------- what users of DatabaseSessionService type


async def test_db_url_as_database_session_service(dsn: str, schema: str) -> None:
    url = dsn.replace("postgresql://", "postgresql+asyncpg://", 1)
    async with PostgresSessionService(db_url=url, schema=schema) as sessions:
        s = await sessions.create_session(app_name=APP, user_id="u", session_id="s")
    async with PostgresSessionService(url, schema=schema) as sessions:  # positional, as DatabaseSessionService(url)
        assert await reload(sessions, s) == s


def test_bad_arguments_are_refused_when_the_service_is_built() -> None:
    """Before anything starts (with no DSN, the first call would start an embedded server)."""
    with pytest.raises(InvalidInput) as info:
        PostgresSessionService(db_url="sqlite+aiosqlite:///sessions.db")
    assert info.value.path == "db_url"
    with pytest.raises(TypeError, match="pool_size"):
        PostgresSessionService(pool_size=5)  # one of SQLAlchemy's engine options
    with pytest.raises(TypeError, match="echo"):
        PostgresMemoryService(echo=True)
    with pytest.raises(ValueError, match="db_url"):
        PostgresSessionService("postgresql://a/b", db_url="postgresql://a/b")
