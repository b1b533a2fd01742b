"""The BaseSessionService contract, as ADK's own services show it.

Every test runs against ADK's InMemorySessionService and DatabaseSessionService too, which proves it
tests the real contract rather than our reading of it; tests about stale session objects run only
against the persistent services (the in-memory one keeps no revision to compare).
"""

from __future__ import annotations

import time
import uuid

import pytest
from adk_samples import dump, rich_event, text_event
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.sessions import BaseSessionService, DatabaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig

APP = "shop"


def uid() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


async def reload(service: BaseSessionService, s: Session, **config: object) -> Session:
    got = await service.get_session(
        app_name=s.app_name,
        user_id=s.user_id,
        session_id=s.id,
        config=GetSessionConfig(**config) if config else None,  # type: ignore[arg-type]
    )
    assert got is not None
    return got


# ---------------------------------------------------------------- create / get


async def test_create_without_id_generates_one(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(app_name=APP, user_id=user)
    assert isinstance(s, Session)
    assert isinstance(s.id, str) and s.id
    assert (s.app_name, s.user_id, s.state, s.events) == (APP, user, {}, [])
    other = await session_service.create_session(app_name=APP, user_id=user)
    assert other.id != s.id
    got = await reload(session_service, s)
    assert (got.id, got.app_name, got.user_id, got.state, got.events) == (s.id, APP, user, {}, [])


async def test_create_with_id_and_initial_state(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(
        app_name=APP, user_id=user, session_id="conv_12345", state={"email": "a@b.c", "n": 1}
    )
    assert s.id == "conv_12345"
    assert s.state == {"email": "a@b.c", "n": 1}
    got = await reload(session_service, s)
    assert got.state == {"email": "a@b.c", "n": 1}


async def test_create_duplicate_id_raises_already_exists(session_service: BaseSessionService) -> None:
    user = uid()
    await session_service.create_session(app_name=APP, user_id=user, session_id="dup", state={"a": 1})
    with pytest.raises(AlreadyExistsError):
        await session_service.create_session(app_name=APP, user_id=user, session_id="dup", state={"a": 2})
    got = await session_service.get_session(app_name=APP, user_id=user, session_id="dup")
    assert got is not None and got.state == {"a": 1}


async def test_same_session_id_for_other_user_or_app_is_another_session(
    session_service: BaseSessionService,
) -> None:
    u1, u2 = uid(), uid()
    a = await session_service.create_session(app_name=APP, user_id=u1, session_id="s", state={"who": 1})
    b = await session_service.create_session(app_name=APP, user_id=u2, session_id="s", state={"who": 2})
    c = await session_service.create_session(app_name="other", user_id=u1, session_id="s", state={"who": 3})
    await session_service.append_event(a, text_event("user", "only in a"))
    assert [e.content.parts[0].text for e in (await reload(session_service, a)).events] == ["only in a"]  # type: ignore[index,union-attr]
    assert (await reload(session_service, b)).events == []
    assert (await reload(session_service, b)).state == {"who": 2}
    assert (await reload(session_service, c)).state == {"who": 3}


async def test_get_missing_session_returns_none(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(app_name=APP, user_id=user)
    assert await session_service.get_session(app_name=APP, user_id=user, session_id="nope") is None
    assert await session_service.get_session(app_name=APP, user_id=uid(), session_id=s.id) is None
    assert await session_service.get_session(app_name="other-app", user_id=user, session_id=s.id) is None


async def test_initial_state_prefixes(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(
        app_name=APP,
        user_id=user,
        state={"plain": 1, "app:brand": "acme", "user:lang": "pt", "temp:scratch": "x"},
    )
    expected = {"plain": 1, "app:brand": "acme", "user:lang": "pt"}
    assert s.state == expected
    assert (await reload(session_service, s)).state == expected
    assert await session_service.get_user_state(app_name=APP, user_id=user) == {"lang": "pt"}


# ---------------------------------------------------------------- events


async def test_append_and_get_events_in_order(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    texts = [f"m{i}" for i in range(5)]
    for i, t in enumerate(texts):
        returned = await session_service.append_event(s, text_event("user" if i % 2 == 0 else "bot", t))
        assert returned.content.parts[0].text == t  # type: ignore[union-attr,index]
    assert [e.content.parts[0].text for e in s.events] == texts  # type: ignore[union-attr,index]
    got = await reload(session_service, s)
    assert [e.content.parts[0].text for e in got.events] == texts  # type: ignore[union-attr,index]
    assert [e.id for e in got.events] == [e.id for e in s.events]


async def test_event_payload_round_trips_whole(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    ev = rich_event()
    before = dump(ev)
    await session_service.append_event(s, ev)
    got = await reload(session_service, s)
    assert len(got.events) == 1
    assert dump(got.events[0]) == before
    assert got.events[0].long_running_tool_ids == {"fc-0", "fc-1"}
    assert got.events[0].get_function_calls()[0].args == {"order": 12345}


async def test_partial_events_are_not_stored(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    partial = text_event("bot", "stream chun", partial=True, state_delta={"k": 1})
    returned = await session_service.append_event(s, partial)
    assert returned is partial
    assert s.events == []
    got = await reload(session_service, s)
    assert got.events == []
    assert "k" not in got.state


async def test_num_recent_events(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    for i in range(6):
        await session_service.append_event(s, text_event("user", f"m{i}"))
    got = await reload(session_service, s, num_recent_events=2)
    assert [e.content.parts[0].text for e in got.events] == ["m4", "m5"]  # type: ignore[union-attr,index]
    assert (await reload(session_service, s, num_recent_events=0)).events == []
    assert len((await reload(session_service, s, num_recent_events=100)).events) == 6
    with pytest.raises(ValueError):
        GetSessionConfig(num_recent_events=-1)


async def test_after_timestamp_keeps_events_at_or_after(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    base = time.time() - 100
    for i in range(5):
        await session_service.append_event(s, text_event("user", f"m{i}", timestamp=base + i))
    got = await reload(session_service, s, after_timestamp=base + 2)
    assert [e.content.parts[0].text for e in got.events] == ["m2", "m3", "m4"]  # type: ignore[union-attr,index]
    got = await reload(session_service, s, after_timestamp=base + 2, num_recent_events=2)
    assert [e.content.parts[0].text for e in got.events] == ["m3", "m4"]  # type: ignore[union-attr,index]
    assert (await reload(session_service, s, after_timestamp=base + 10)).events == []
    assert [e.timestamp for e in (await reload(session_service, s)).events] == [base + i for i in range(5)]


async def test_append_to_deleted_session_raises_not_found(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(app_name=APP, user_id=user)
    await session_service.delete_session(app_name=APP, user_id=user, session_id=s.id)
    with pytest.raises(SessionNotFoundError):
        await session_service.append_event(s, text_event("user", "hello?"))


async def test_last_update_time_follows_appends(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    created = (await reload(session_service, s)).last_update_time
    assert created == pytest.approx(time.time(), abs=30)
    ev = await session_service.append_event(s, text_event("user", "hi"))
    assert s.last_update_time == pytest.approx(ev.timestamp, abs=1)
    got = await reload(session_service, s)
    assert got.last_update_time >= created
    assert got.last_update_time == pytest.approx(ev.timestamp, abs=1)


# ---------------------------------------------------------------- state


async def test_state_delta_updates_session_state(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"keep": 1, "over": 1})
    await session_service.append_event(s, text_event("bot", "a", state_delta={"over": 2, "new": [1, 2]}))
    expected = {"keep": 1, "over": 2, "new": [1, 2]}
    assert s.state == expected
    assert (await reload(session_service, s)).state == expected


async def test_state_values_replaced_whole_not_deep_merged(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    await session_service.append_event(s, text_event("bot", "a", state_delta={"d": {"a": 1, "b": 1}}))
    await session_service.append_event(s, text_event("bot", "b", state_delta={"d": {"c": 3}}))
    assert (await reload(session_service, s)).state == {"d": {"c": 3}}


async def test_none_in_state_delta_is_stored_as_null(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"k": 1})
    await session_service.append_event(s, text_event("bot", "a", state_delta={"k": None, "user:u": None}))
    got = await reload(session_service, s)
    assert "k" in got.state and got.state["k"] is None
    assert "user:u" in got.state and got.state["user:u"] is None


async def test_temp_state_is_never_persisted(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid())
    ev = text_event("bot", "a", state_delta={"temp:draft": "x", "kept": 1})
    returned = await session_service.append_event(s, ev)
    # visible to the rest of the invocation through the in-memory session ...
    assert s.state["temp:draft"] == "x"
    # ... but trimmed from the event and absent from storage
    assert "temp:draft" not in returned.actions.state_delta
    got = await reload(session_service, s)
    assert "temp:draft" not in got.state
    assert got.state == {"kept": 1}
    assert got.events[0].actions.state_delta == {"kept": 1}


async def test_app_and_user_state_shared_across_sessions(session_service: BaseSessionService) -> None:
    u1, u2 = uid(), uid()
    s1 = await session_service.create_session(app_name=APP, user_id=u1)
    s1b = await session_service.create_session(app_name=APP, user_id=u1)
    s2 = await session_service.create_session(app_name=APP, user_id=u2)
    await session_service.append_event(
        s1, text_event("bot", "a", state_delta={"app:motd": "hi", "user:email": "a@b.c", "mine": 1})
    )
    assert s1.state == {"app:motd": "hi", "user:email": "a@b.c", "mine": 1}
    assert (await reload(session_service, s1)).state == {"app:motd": "hi", "user:email": "a@b.c", "mine": 1}
    assert (await reload(session_service, s1b)).state == {"app:motd": "hi", "user:email": "a@b.c"}
    assert (await reload(session_service, s2)).state == {"app:motd": "hi"}
    assert await session_service.get_user_state(app_name=APP, user_id=u1) == {"email": "a@b.c"}
    assert await session_service.get_user_state(app_name=APP, user_id=u2) == {}
    # a session created later sees them too, and other apps do not
    s3 = await session_service.create_session(app_name=APP, user_id=u1)
    assert s3.state == {"app:motd": "hi", "user:email": "a@b.c"}
    other = await session_service.create_session(app_name="other-app", user_id=u1)
    assert other.state == {}


async def test_get_user_state_without_any_state(session_service: BaseSessionService) -> None:
    assert await session_service.get_user_state(app_name=APP, user_id=uid()) == {}


async def test_returned_session_is_a_copy(session_service: BaseSessionService) -> None:
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"a": 1})
    got = await reload(session_service, s)
    got.state["a"] = 999
    got.events.append(text_event("user", "not stored"))
    again = await reload(session_service, s)
    assert again.state == {"a": 1}
    assert again.events == []


# ---------------------------------------------------------------- list / delete


async def test_list_sessions_of_one_user_without_events(session_service: BaseSessionService) -> None:
    u1, u2 = uid(), uid()
    a = await session_service.create_session(app_name=APP, user_id=u1, state={"n": "a", "user:x": 1})
    b = await session_service.create_session(app_name=APP, user_id=u1, state={"n": "b"})
    await session_service.create_session(app_name=APP, user_id=u2)
    await session_service.append_event(a, text_event("user", "hi"))
    listed = (await session_service.list_sessions(app_name=APP, user_id=u1)).sessions
    assert {s.id for s in listed} == {a.id, b.id}
    assert all(s.events == [] for s in listed)
    by_id = {s.id: s for s in listed}
    assert by_id[a.id].state == {"n": "a", "user:x": 1}
    assert by_id[b.id].state == {"n": "b", "user:x": 1}
    # oldest update first: a was updated after b was created
    assert [s.id for s in listed] == [b.id, a.id]


async def test_list_sessions_of_all_users(session_service: BaseSessionService) -> None:
    app = f"app-{uuid.uuid4().hex[:6]}"
    u1, u2 = uid(), uid()
    a = await session_service.create_session(app_name=app, user_id=u1, state={"user:k": 1})
    b = await session_service.create_session(app_name=app, user_id=u2)
    await session_service.create_session(app_name="elsewhere", user_id=u1)
    listed = (await session_service.list_sessions(app_name=app)).sessions
    assert {(s.user_id, s.id) for s in listed} == {(u1, a.id), (u2, b.id)}
    assert {s.id: s.state for s in listed} == {a.id: {"user:k": 1}, b.id: {}}
    assert (await session_service.list_sessions(app_name="no-such-app")).sessions == []
    assert (await session_service.list_sessions(app_name=app, user_id="nobody")).sessions == []


async def test_delete_session(session_service: BaseSessionService) -> None:
    user = uid()
    s = await session_service.create_session(app_name=APP, user_id=user, state={"user:keep": 1})
    keep = await session_service.create_session(app_name=APP, user_id=user)
    await session_service.append_event(s, text_event("user", "hi"))
    await session_service.delete_session(app_name=APP, user_id=user, session_id=s.id)
    assert await session_service.get_session(app_name=APP, user_id=user, session_id=s.id) is None
    assert [x.id for x in (await session_service.list_sessions(app_name=APP, user_id=user)).sessions] == [keep.id]
    # user state outlives the session; deleting again (or a missing one) is not an error
    assert await session_service.get_user_state(app_name=APP, user_id=user) == {"keep": 1}
    await session_service.delete_session(app_name=APP, user_id=user, session_id=s.id)
    # the id can be reused, starting empty
    again = await session_service.create_session(app_name=APP, user_id=user, session_id=s.id)
    assert (await reload(session_service, again)).events == []


# ---------------------------------------------------------------- stale session objects


async def test_appending_with_a_stale_session_raises(persistent_service: BaseSessionService) -> None:
    svc = persistent_service
    s = await svc.create_session(app_name=APP, user_id=uid(), state={"n": 0})
    first = await reload(svc, s)
    second = await reload(svc, s)
    await svc.append_event(first, text_event("user", "one", state_delta={"n": 1}))
    with pytest.raises(StaleSessionError, match="modified in storage since it was loaded"):
        await svc.append_event(second, text_event("user", "two", state_delta={"n": 2}))
    got = await reload(svc, s)
    assert [e.content.parts[0].text for e in got.events] == ["one"]  # type: ignore[union-attr,index]
    assert got.state == {"n": 1}
    # reloading is the way out
    await svc.append_event(got, text_event("user", "two", state_delta={"n": 2}))
    assert (await reload(svc, s)).state == {"n": 2}


async def test_session_object_stays_fresh_across_its_own_appends(
    persistent_service: BaseSessionService,
) -> None:
    svc = persistent_service
    s = await svc.create_session(app_name=APP, user_id=uid())
    for i in range(3):
        await svc.append_event(s, text_event("user", f"m{i}", state_delta={"i": i}))
    partial_view = await reload(svc, s, num_recent_events=1)
    await svc.append_event(partial_view, text_event("bot", "after a partial load"))
    assert len((await reload(svc, s)).events) == 4


async def test_listed_session_objects_detect_staleness_too(persistent_service: BaseSessionService) -> None:
    svc = persistent_service
    user = uid()
    s = await svc.create_session(app_name=APP, user_id=user)
    (listed,) = (await svc.list_sessions(app_name=APP, user_id=user)).sessions
    await svc.append_event(s, text_event("user", "from elsewhere"))
    with pytest.raises(StaleSessionError):
        await svc.append_event(listed, text_event("user", "from the listed copy"))


async def test_redelivered_event_is_stored_once(session_service: BaseSessionService) -> None:
    if isinstance(session_service, DatabaseSessionService):
        pytest.skip("ADK's DatabaseSessionService fails with IntegrityError; its in-memory service (and ours) "
                    "store a re-delivered event once")
    s = await session_service.create_session(app_name=APP, user_id=uid(), state={"n": 0})
    ev = text_event("bot", "once", state_delta={"n": 1, "user:hits": 1})
    await session_service.append_event(s, ev)
    await session_service.append_event(s, ev)  # a retried call with the same event
    assert [e.id for e in s.events] == [ev.id]
    got = await reload(session_service, s)
    assert [e.id for e in got.events] == [ev.id]
    assert got.state == {"n": 1, "user:hits": 1}
