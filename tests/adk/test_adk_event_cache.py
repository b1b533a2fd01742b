"""The validated-event cache: a reloaded session gets equal events that it can change freely."""

from __future__ import annotations

from google.adk.events import Event
from google.genai import types

from pgagentstate import AsyncStateStore
from pgagentstate.adk import PostgresSessionService


async def test_reloaded_events_are_equal_and_independent(astore: AsyncStateStore) -> None:
    service = PostgresSessionService(store=astore)
    session = await service.create_session(app_name="shop", user_id="u1")
    event = Event(author="user", invocation_id="i1", content=types.Content(role="user", parts=[types.Part(text="oi")]))
    await service.append_event(session, event)
    first = await service.get_session(app_name="shop", user_id="u1", session_id=session.id)
    second = await service.get_session(app_name="shop", user_id="u1", session_id=session.id)
    assert first is not None and second is not None
    assert first.events == second.events == [event]
    assert first.events[0] is not second.events[0]
    first.events[0].author = "changed by the caller"
    third = await service.get_session(app_name="shop", user_id="u1", session_id=session.id)
    assert third is not None and third.events[0].author == "user"
