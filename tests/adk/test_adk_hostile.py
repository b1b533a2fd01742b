"""Hostile input at the ADK session service: typed errors naming the argument, and nothing written (issue 14:
a half-created session, lone surrogates, ids of the wrong type, blank or too long, NaN timestamps)."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from google.adk.events import Event

from pgagentstate import AsyncStateStore, InvalidId, InvalidInput, InvalidPayload, PgAgentStateError, StateRef
from pgagentstate.adk import PostgresSessionService

SURROGATE = json.loads('"\\ud83d"')


class StepIsInt:
    """A state schema: ``step``, when present, is an int (any other key is free)."""

    def validate_document(self, data: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(data.get("step", 0), int):
            raise ValueError("step must be an int")
        return dict(data)

    validate_patch = validate_document


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.fixture
async def service(dsn: str, schema: str) -> AsyncIterator[PostgresSessionService]:
    async with AsyncStateStore(dsn, schema=schema, state_schemas={"state": StepIsInt()}) as store:
        yield PostgresSessionService(store=store, setup=False)


@pytest.mark.parametrize(
    "state",
    [
        {"step": "not a number"},  # rejected by the document's schema, after validation of the JSON
        {"step": 1, "note": SURROGATE},
        {"step": 1, "user:name": SURROGATE},
        {"step": 1, "app:flag": {"deep": SURROGATE}},
        {"step": 1, "deep": _nested(300)},  # too deep for pydantic's serialiser, degraded or not
    ],
    ids=["schema", "surrogate", "user surrogate", "app surrogate", "too deep"],
)
async def test_create_session_is_all_or_nothing(
    service: PostgresSessionService, fingerprint: Callable[[], dict[str, str]], state: dict[str, Any]
) -> None:
    before = fingerprint()
    with pytest.raises(PgAgentStateError):
        await service.create_session(app_name="app", user_id="u", session_id="s1", state=state)
    assert fingerprint() == before
    assert (await service.list_sessions(app_name="app")).sessions == []
    # The retry with a good state creates the session (it used to get AlreadyExistsError).
    session = await service.create_session(
        app_name="app", user_id="u", session_id="s1", state={"step": 2, "user:name": "ann", "app:flag": True}
    )
    got = await service.get_session(app_name="app", user_id="u", session_id="s1")
    assert got is not None and got.state == session.state == {"step": 2, "user:name": "ann", "app:flag": True}


async def test_create_session_writes_the_state_documents(service: PostgresSessionService) -> None:
    await service.create_session(app_name="app", user_id="u", session_id="s", state={"step": 1, "user:n": 1})
    store = await service.store()
    conv = await store.get_conversation(service.conversation_id("app", "u", "s"))
    assert conv is not None and conv.version >= 1
    assert (await store.get_state(StateRef.user("app", "u"))).data == {"n": 1}  # type: ignore[union-attr]


BAD_IDS: list[tuple[str, dict[str, Any], type[PgAgentStateError], str]] = [
    ("session_id int", {"session_id": 5}, InvalidId, "session_id"),
    ("user_id int", {"user_id": 7}, InvalidId, "user_id"),
    ("blank session_id", {"session_id": "  "}, InvalidId, "session_id"),
    ("surrogate session_id", {"session_id": "s" + SURROGATE}, InvalidId, "session_id"),
    ("surrogate user_id", {"user_id": SURROGATE}, InvalidId, "user_id"),
    ("long CJK session_id", {"session_id": "会话" * 40}, InvalidId, "session_id"),  # 240 bytes, 720 encoded
]


@pytest.mark.parametrize(("args", "error", "path"), [b[1:] for b in BAD_IDS], ids=[b[0] for b in BAD_IDS])
async def test_bad_ids_are_typed_errors_naming_the_argument(
    service: PostgresSessionService,
    fingerprint: Callable[[], dict[str, str]],
    args: dict[str, Any],
    error: type[PgAgentStateError],
    path: str,
) -> None:
    before = fingerprint()
    call = {"app_name": "app", "user_id": "u", "session_id": "s", **args}
    with pytest.raises(error) as info:
        await service.create_session(**call)
    assert info.value.path == path  # type: ignore[attr-defined]
    with pytest.raises(error):
        await service.get_session(**call)
    with pytest.raises(error):
        await service.delete_session(**call)
    assert fingerprint() == before


async def test_nan_event_timestamp_is_a_typed_error(
    service: PostgresSessionService, fingerprint: Callable[[], dict[str, str]]
) -> None:
    session = await service.create_session(app_name="app", user_id="u", session_id="s")
    before = fingerprint()
    with pytest.raises(InvalidInput) as info:
        await service.append_event(session, Event(author="user", timestamp=math.nan))
    assert info.value.path == "event.timestamp"
    with pytest.raises(InvalidId):
        await service.append_event(session, Event(author="user" + SURROGATE))
    with pytest.raises(InvalidPayload):
        await service.append_event(session, Event(author="user", branch=SURROGATE))
    assert fingerprint() == before
