"""Hostile input at the core's and each adapter's public entry points: every call either round-trips
exactly or raises a typed error, writes nothing half-way, and leaves other conversations untouched."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgagentstate import AsyncStateStore, NewEvent, PgAgentStateError, StateRef, StateStore
from pgagentstate.codec import check_id

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Lone surrogates: what json.loads makes of half an emoji ("\\ud83d") from any client; UTF-8 cannot hold them.
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
HOSTILE_TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(["\x00", "\ue000", "0", "E", "'", '"', "\\", ";", "\U0010ffff", "😀", "\u202e"])),
    st.text(alphabet=st.one_of(SURROGATES, st.sampled_from(["a", "😀", "界"])), min_size=1),
    st.sampled_from(["", "x" * 600, "'; DROP TABLE pgagentstate.events; --", "other-tenant-conv", "\x00", "a\x1fb"]),
    st.sampled_from(["界" * 200, "\ud83d", "ok\udc00", "\ud83d\ude00"]),
)
# Around the limit (64), where recursive walks used to fail (~330), and past the interpreter's recursion limit.
DEEP = st.builds(
    lambda n, kind: _nest(n, kind),
    st.one_of(st.integers(50, 120), st.integers(300, 1200), st.just(5000)),
    st.sampled_from(["dict", "list", "tuple"]),
)
ODD_VALUES = st.sampled_from([math.nan, math.inf, {1, 2}, object(), b"bytes", 1e308, -0.0, 2**70, (1, 2)])
JSON_ISH = (
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT | ODD_VALUES,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(HOSTILE_TEXT, children, max_size=4),
        max_leaves=12,
    )
    | DEEP
)


def _nest(n: int, kind: str = "dict") -> Any:
    value: Any = "bottom"
    for _ in range(n):
        value = {"k": value} if kind == "dict" else [value] if kind == "list" else (value,)
    return value


def _normalise(value: Any) -> Any:
    """What a JSON round trip of ``value`` gives (tuples become lists)."""
    if isinstance(value, tuple | list):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    return value


@pytest.fixture
def sentinel(store: StateStore) -> StateStore:
    store.create_conversation("sentinel")
    store.append_events("sentinel", [NewEvent({"keep": "me"})])
    store.put_state(StateRef.conversation("sentinel"), {"keep": True})
    store.with_tenant("other-tenant").create_conversation("other-tenant-conv")
    return store


def _sentinel_intact(store: StateStore) -> None:
    assert [e.payload for e in store.list_events("sentinel")] == [{"keep": "me"}]
    assert store.get_state(StateRef.conversation("sentinel")).data == {"keep": True}  # type: ignore[union-attr]
    assert store.with_tenant("other-tenant").list_events("other-tenant-conv") == []


@FUZZ
@given(
    conversation_id=HOSTILE_TEXT,
    payloads=st.lists(JSON_ISH | DEEP, min_size=1, max_size=3),
    kind=HOSTILE_TEXT,
    author=HOSTILE_TEXT,
)
def test_core_append(
    sentinel: StateStore,
    fingerprint: Callable[[], dict[str, str]],
    conversation_id: str,
    payloads: list[Any],
    kind: str,
    author: str,
) -> None:
    store = sentinel.with_tenant(f"fuzz-{uuid.uuid4().hex[:8]}")
    before = fingerprint()
    try:
        store.ensure_conversation(conversation_id)
    except PgAgentStateError:
        assert fingerprint() == before
        _sentinel_intact(sentinel)
        return
    before = fingerprint()
    try:
        stored = store.append_events(conversation_id, [NewEvent(p, kind=kind, author=author) for p in payloads])
    except PgAgentStateError:
        assert fingerprint() == before  # nothing half-written, anywhere
    else:
        expected = [_normalise(p) for p in payloads]
        assert [e.payload for e in stored] == expected
        back = store.list_events(conversation_id)
        assert [e.payload for e in back] == expected and [(e.kind, e.author) for e in back] == [(kind, author)] * len(
            back
        )
    _sentinel_intact(sentinel)


@FUZZ
@given(data=st.dictionaries(HOSTILE_TEXT, JSON_ISH, max_size=4) | JSON_ISH, name=HOSTILE_TEXT)
def test_core_state(sentinel: StateStore, fingerprint: Callable[[], dict[str, str]], data: Any, name: str) -> None:
    store = sentinel.with_tenant(f"fuzz-{uuid.uuid4().hex[:8]}")
    store.create_conversation("c")
    before = fingerprint()
    try:
        check_id(name)
    except PgAgentStateError:
        with pytest.raises(PgAgentStateError):
            store.put_state(StateRef.conversation("c", name), data)
        assert fingerprint() == before
        _sentinel_intact(sentinel)
        return
    try:
        doc = store.put_state(StateRef.conversation("c", name), data)
    except PgAgentStateError:
        assert fingerprint() == before
    else:
        assert doc.data == _normalise(data) == store.get_state(StateRef.conversation("c", name)).data  # type: ignore[union-attr]
    _sentinel_intact(sentinel)


@FUZZ
@given(namespace=st.lists(HOSTILE_TEXT, max_size=3), key=HOSTILE_TEXT, value=JSON_ISH, query=HOSTILE_TEXT)
def test_core_memory(
    sentinel: StateStore,
    fingerprint: Callable[[], dict[str, str]],
    namespace: list[str],
    key: str,
    value: Any,
    query: str,
) -> None:
    store = sentinel.with_tenant(f"fuzz-{uuid.uuid4().hex[:8]}")
    before = fingerprint()
    try:
        stored = store.put_memory(namespace, key, value)
    except PgAgentStateError:
        assert fingerprint() == before
    else:
        assert stored.value == _normalise(value)
        assert store.get_memory(namespace, key).value == _normalise(value)  # type: ignore[union-attr]
        store.search_memory(namespace, query=query)  # any query text is safe
    _sentinel_intact(sentinel)


@FUZZ
@given(
    items=st.lists(st.dictionaries(HOSTILE_TEXT, JSON_ISH, max_size=3) | JSON_ISH, min_size=1, max_size=3),
    session_id=HOSTILE_TEXT,
)
async def test_openai_agents_session(dsn: str, schema: str, items: list[Any], session_id: str) -> None:
    from pgagentstate.openai_agents import PostgresSession

    async with AsyncStateStore(dsn, schema=schema, tenant=f"fuzz-{uuid.uuid4().hex[:8]}") as store:
        try:
            session = PostgresSession(session_id, store=store)
        except PgAgentStateError:
            return
        try:
            await session.add_items(items)
        except PgAgentStateError:
            assert await session.get_items() == []
        else:
            assert await session.get_items() == [_normalise(i) for i in items]


@FUZZ
@given(state=st.dictionaries(HOSTILE_TEXT, JSON_ISH, max_size=4), session_id=HOSTILE_TEXT, user_id=HOSTILE_TEXT)
async def test_adk_session_service(dsn: str, schema: str, state: dict[str, Any], session_id: str, user_id: str) -> None:
    from pgagentstate.adk import PostgresSessionService

    async with AsyncStateStore(dsn, schema=schema, tenant=f"fuzz-{uuid.uuid4().hex[:8]}") as store:
        service = PostgresSessionService(store=store, setup=False)
        try:
            created = await service.create_session(app_name="app", user_id=user_id, session_id=session_id, state=state)
        except PgAgentStateError:
            listing = await service.list_sessions(app_name="app", user_id=None)
            assert listing.sessions == []
        else:
            got = await service.get_session(app_name="app", user_id=user_id, session_id=created.id)
            assert got is not None
            from pydantic_core import to_jsonable_python

            # ADK's own database service stores the JSON form of rich values (sets become lists...).
            expected = {k: to_jsonable_python(v) for k, v in state.items() if not k.startswith("temp:")}
            assert got.state == expected


@FUZZ
@given(
    namespace=st.lists(HOSTILE_TEXT, min_size=1, max_size=3),
    key=HOSTILE_TEXT,
    value=st.dictionaries(HOSTILE_TEXT, JSON_ISH, max_size=3),
)
def test_langgraph_store(dsn: str, schema: str, namespace: list[str], key: str, value: dict[str, Any]) -> None:
    from langgraph.store.base import InvalidNamespaceError

    from pgagentstate.langgraph import PostgresStore

    with StateStore(dsn, schema=schema, tenant=f"fuzz-{uuid.uuid4().hex[:8]}") as core:
        lg = PostgresStore(store=core)
        try:
            lg.put(tuple(namespace), key, value)
        except (PgAgentStateError, InvalidNamespaceError):  # LangGraph's own check of namespaces comes first
            assert lg.search(()) == []
        else:
            item = lg.get(tuple(namespace), key)
            assert item is not None and item.value == _normalise(value)
