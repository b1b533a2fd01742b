"""Hostile input of every kind gets a typed error naming its path, and the database is byte for byte what it
was before the call (issue 14: lone surrogates, deep nesting, index-row sizes, argument types)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgagentstate import (
    InvalidId,
    InvalidInput,
    InvalidPayload,
    Limits,
    NewEvent,
    PayloadTooLarge,
    PgAgentStateError,
    SchemaError,
    StateRef,
    StateStore,
    VersionConflict,
)
from pgagentstate.sanitize import Sanitizer

SURROGATE = json.loads('"\\ud83d"')  # what json.loads makes of half an emoji from any client


@pytest.fixture
def unchanged(store: StateStore, fingerprint: Callable[[], dict[str, str]]) -> Iterator[Callable[[], None]]:
    """Seeds a conversation with events and state; the returned check asserts the database is as seeded."""
    store.create_conversation("c")
    store.append_events("c", [NewEvent({"keep": "me"}, event_id="e1")])
    store.put_state(StateRef.conversation("c"), {"a": 1, "b": 2, "ab": 3})
    store.put_memory(("n",), "k", {"v": 1})
    before = fingerprint()

    def check() -> None:
        assert fingerprint() == before

    yield check


def nest(depth: int, kind: str = "dict") -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": value} if kind == "dict" else [value] if kind == "list" else (value,)
    return value


# --- item 3: a string is one key -----------------------------------------------------------------------


def test_patch_state_delete_string_is_one_key(store: StateStore, unchanged: Callable[[], None]) -> None:
    ref = StateRef.conversation("c")
    assert store.patch_state(ref, delete="ab").data == {"a": 1, "b": 2}
    assert store.get_state(ref).data == {"a": 1, "b": 2}  # type: ignore[union-attr]
    assert store.patch_state(ref, delete=["a"]).data == {"b": 2}


def test_patch_state_delete_not_keys(store: StateStore, unchanged: Callable[[], None]) -> None:
    with pytest.raises(InvalidInput) as info:
        store.patch_state(StateRef.conversation("c"), delete=5)  # type: ignore[arg-type]
    assert info.value.path == "delete"
    with pytest.raises(InvalidId) as info:
        store.patch_state(StateRef.conversation("c"), delete=["a", 7])  # type: ignore[list-item]
    assert info.value.path == "delete[1]"
    unchanged()


# --- item 7: lone surrogates ---------------------------------------------------------------------------

S = SURROGATE
SURROGATE_CALLS: list[tuple[str, Callable[[StateStore], Any], type[PgAgentStateError], str]] = [
    ("conversation id", lambda s: s.create_conversation("x" + S), InvalidId, "conversation_id"),
    ("user id", lambda s: s.create_conversation("new", user_id=S), InvalidId, "user_id"),
    ("metadata", lambda s: s.update_conversation("c", metadata={"m": S}), InvalidPayload, "metadata.m"),
    (
        "event text",
        lambda s: s.append_events("c", [NewEvent({"t": ["ok", S]})]),
        InvalidPayload,
        "events[0].payload.t[1]",
    ),
    (
        "event key",
        lambda s: s.append_events("c", [NewEvent({"a": {S: 1}})]),
        InvalidPayload,
        r"events[0].payload.a.\ud83d",
    ),
    ("event kind", lambda s: s.append_events("c", [NewEvent({}, kind=S)]), InvalidId, "events[0].kind"),
    ("event id", lambda s: s.append_events("c", [NewEvent({}, event_id=S)]), InvalidId, "events[0].event_id"),
    ("state value", lambda s: s.patch_state(StateRef.conversation("c"), {"a": S}), InvalidPayload, "data.a"),
    ("state name", lambda s: s.put_state(StateRef.conversation("c", S), {}), InvalidId, "ref.name"),
    ("state delete", lambda s: s.patch_state(StateRef.conversation("c"), delete=[S]), InvalidId, "delete[0]"),
    ("namespace", lambda s: s.put_memory(("n", S), "k", {"v": 1}), InvalidId, "namespace[1]"),
    ("memory key", lambda s: s.put_memory(("n",), S, {"v": 1}), InvalidId, "key"),
    ("memory value", lambda s: s.put_memory(("n",), "k", {"v": S}), InvalidPayload, "value.v"),
    ("scratch", lambda s: s.put_scratch("c", "k", S), InvalidPayload, "value"),
    ("step result", lambda s: s.complete_step("c", "w", "s", {"r": S}), InvalidPayload, "result.r"),
    ("list kinds", lambda s: s.list_events("c", kinds=[S]), InvalidId, "kinds[0]"),
]


@pytest.mark.parametrize(
    ("call", "error", "path"), [c[1:] for c in SURROGATE_CALLS], ids=[c[0] for c in SURROGATE_CALLS]
)
def test_lone_surrogates_are_typed_errors_and_nothing_is_written(
    store: StateStore,
    unchanged: Callable[[], None],
    call: Callable[[StateStore], Any],
    error: type[PgAgentStateError],
    path: str,
) -> None:
    with pytest.raises(error) as info:
        call(store)
    assert info.value.path == path  # type: ignore[attr-defined]
    assert "surrogate" in str(info.value)
    unchanged()


def test_a_surrogate_pair_is_fine(store: StateStore) -> None:
    emoji = json.loads('"\\ud83d\\ude00"')
    store.create_conversation(emoji)
    (ev,) = store.append_events(emoji, [NewEvent({emoji: emoji})])
    assert store.list_events(emoji)[0].payload == ev.payload == {"😀": "😀"}


# --- item 8: nesting checked iteratively --------------------------------------------------------------


@pytest.mark.parametrize("depth", [331, 500, 1000, 5000])
@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_deep_nesting_is_a_typed_error(store: StateStore, unchanged: Callable[[], None], depth: int, kind: str) -> None:
    deep = nest(depth, kind)
    with pytest.raises(InvalidPayload, match="nested deeper than 64") as info:
        store.append_events("c", [NewEvent({"ok": 1}), NewEvent(deep)])
    assert info.value.path.startswith("events[1].payload")
    with pytest.raises(InvalidPayload, match="nested deeper"):
        store.put_state(StateRef.conversation("c"), {"deep": deep})
    with pytest.raises(InvalidPayload, match="nested deeper"):
        store.put_memory(("n",), "k", {"deep": deep})
    with pytest.raises(InvalidPayload, match="nested deeper"):
        store.complete_step("c", "w", "s", deep)
    unchanged()


def test_deep_nesting_with_a_sanitizer(dsn: str, schema: str, unchanged: Callable[[], None]) -> None:
    with (
        StateStore(dsn, schema=schema, sanitizer=Sanitizer()) as store,
        pytest.raises(InvalidPayload, match="nested deeper") as info,
    ):
        store.append_events("c", [NewEvent(nest(2000))])
    assert info.value.path == "events[0].payload"
    unchanged()


def test_run_once_with_a_deep_result_is_a_typed_error(store: StateStore) -> None:
    with pytest.raises(InvalidPayload, match="nested deeper"):
        store.run_once("k1", lambda key: nest(800))


# --- item 11: sizes in bytes, before Postgres' index row limit -------------------------------------------


def _cjk(n: int) -> str:
    rng = random.Random(n)  # incompressible: Postgres would compress a repeated character below the limit
    return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(n))


def test_ids_are_bounded_in_bytes(store: StateStore, unchanged: Callable[[], None]) -> None:
    long_id = _cjk(200)  # 200 characters, 600 bytes
    with pytest.raises(InvalidId, match="600 bytes") as info:
        store.create_conversation(long_id)
    assert info.value.path == "conversation_id"
    with pytest.raises(InvalidId, match="600 bytes") as info:
        store.put_state(StateRef.user(long_id, "u"), {})
    assert info.value.path == "app"
    unchanged()
    assert store.create_conversation(_cjk(170)).id == _cjk(170)  # 510 bytes: fits


def test_namespaces_are_bounded_in_bytes(store: StateStore, unchanged: Callable[[], None]) -> None:
    with pytest.raises(InvalidId, match=r"namespace is \d+ bytes") as info:
        store.put_memory([_cjk(150) for _ in range(20)], "k", {"v": 1})
    assert info.value.path == "namespace"
    unchanged()


def test_index_row_limit_is_reported_with_its_numbers(dsn: str, schema: str, unchanged: Callable[[], None]) -> None:
    # Past the library's own bounds (raised here), Postgres' btree limit speaks: with its numbers.
    with (
        StateStore(dsn, schema=schema, limits=Limits(max_id_length=20_000)) as store,
        pytest.raises(PayloadTooLarge) as info,
    ):
        store.create_conversation(_cjk(1500))
    assert "-1" not in str(info.value) and "index row" in str(info.value)
    assert info.value.size > info.value.limit > 0
    unchanged()


# --- item 13: arguments of the wrong type or out of range ------------------------------------------------

ref = StateRef.conversation("c")
ARGUMENT_CALLS: list[tuple[str, Callable[[StateStore], Any], str]] = [
    ("ttl nan", lambda s: s.put_memory(("n",), "k2", {"v": 1}, ttl=math.nan), "ttl"),
    ("ttl inf", lambda s: s.put_memory(("n",), "k2", {"v": 1}, ttl=math.inf), "ttl"),
    ("ttl 1e300", lambda s: s.put_memory(("n",), "k2", {"v": 1}, ttl=1e300), "ttl"),
    ("ttl str", lambda s: s.put_memory(("n",), "k2", {"v": 1}, ttl="10"), "ttl"),
    ("scratch ttl", lambda s: s.put_scratch("c", "k", 1, ttl=math.nan), "ttl"),
    ("memory version str", lambda s: s.put_memory(("n",), "k", {"v": 2}, expected_version="1"), "expected_version"),
    ("state version str", lambda s: s.put_state(ref, {}, expected_version="10"), "expected_version"),
    ("state version float", lambda s: s.patch_state(ref, {"x": 1}, expected_version=1.0), "expected_version"),
    ("update version", lambda s: s.update_conversation("c", status="failed", expected_version="1"), "expected_version"),
    ("expected_seq", lambda s: s.append_events("c", [NewEvent({})], expected_seq="1"), "expected_seq"),
    ("created_at", lambda s: s.append_events("c", [NewEvent({}, created_at="x")]), "events[0].created_at"),
    ("lease 0", lambda s: s.start_step("c", "w", "s", lease=0), "lease"),
    ("lease negative", lambda s: s.start_step("c", "w", "s", lease=-1), "lease"),
    ("lease nan", lambda s: s.start_step("c", "w", "s", lease=math.nan), "lease"),
    ("position 2**40", lambda s: s.start_step("c", "w", "s", position=2**40), "position"),
    ("position str", lambda s: s.complete_step("c", "w", "s", 1, position="1"), "position"),
]
READ_CALLS: list[tuple[str, Callable[[StateStore], Any], str]] = [
    ("events limit str", lambda s: s.list_events("c", limit="10"), "limit"),
    ("events limit 2.5", lambda s: s.list_events("c", limit=2.5), "limit"),
    ("events limit negative", lambda s: s.list_events("c", limit=-1), "limit"),
    ("events after_seq huge", lambda s: s.list_events("c", after_seq=10**20), "after_seq"),
    ("events since str", lambda s: s.list_events("c", since="yesterday"), "since"),
    ("events kinds int", lambda s: s.list_events("c", kinds=5), "kinds"),
    ("payloads limit", lambda s: s.list_event_payloads("c", limit=2.5), "limit"),
    ("load limit", lambda s: s.load_conversation("c", limit="1"), "limit"),
    ("conversations limit", lambda s: s.list_conversations(limit=-1), "limit"),
    ("conversations offset", lambda s: s.list_conversations(offset=10**20), "offset"),
    ("conversations updated_before", lambda s: s.list_conversations(updated_before="x"), "updated_before"),
    ("memory limit", lambda s: s.search_memory(("n",), limit=2.5), "limit"),
    ("memory offset", lambda s: s.search_memory(("n",), offset=-1), "offset"),
    ("namespaces limit", lambda s: s.list_memory_namespaces(limit=10**20), "limit"),
    ("history limit", lambda s: s.state_history(ref, limit="2"), "limit"),
    ("state at bogus", lambda s: s.get_state_at(ref, at="bogus"), "at"),
    ("state at version", lambda s: s.get_state_at(ref, version=-1), "version"),
]


@pytest.mark.parametrize(
    ("call", "path"), [c[1:] for c in ARGUMENT_CALLS + READ_CALLS], ids=[c[0] for c in ARGUMENT_CALLS + READ_CALLS]
)
def test_bad_arguments_are_typed_errors_and_nothing_is_written(
    store: StateStore, unchanged: Callable[[], None], call: Callable[[StateStore], Any], path: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        call(store)
    assert info.value.path == path
    unchanged()


def test_kinds_as_a_string_is_one_kind(store: StateStore) -> None:
    store.create_conversation("k")
    store.append_events("k", [NewEvent({"n": 1}), NewEvent({"n": 2}, kind="tool")])
    assert [e.payload for e in store.list_events("k", kinds="message")] == [{"n": 1}]
    assert [e.payload for e in store.load_conversation("k", kinds="tool").events] == [{"n": 2}]


def test_schema_names_are_bounded_to_63_bytes(dsn: str) -> None:
    with pytest.raises(InvalidId, match="63") as info:
        StateStore(dsn, schema="s" * 64)
    assert info.value.path == "schema"
    with pytest.raises(InvalidId, match="63"):
        StateStore(dsn, schema="é" * 32)  # 64 bytes


def test_setup_refuses_a_schema_newer_than_the_library(
    dsn: str, schema: str, fingerprint: Callable[[], dict[str, str]]
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (9999, 'from_the_future')").format(
                sql.Identifier(schema)
            )
        )
    before = fingerprint()
    with StateStore(dsn, schema=schema) as store, pytest.raises(SchemaError, match="9999"):
        store.setup()
    assert fingerprint() == before


def test_patches_cannot_grow_a_document_past_the_limit(
    dsn: str, schema: str, fingerprint: Callable[[], dict[str, str]]
) -> None:
    with StateStore(dsn, schema=schema, limits=Limits(max_payload_bytes=1000)) as store:
        store.create_conversation("g")
        ref = StateRef.conversation("g")
        store.patch_state(ref, {"a": "x" * 400})
        store.patch_state(ref, {"b": "x" * 400})  # version 2, ~820 bytes
        before = fingerprint()
        with pytest.raises(PayloadTooLarge) as info:
            store.patch_state(ref, {"c": "x" * 400})
        assert info.value.path == "data" and info.value.limit == 1000
        with pytest.raises(PayloadTooLarge):
            store.patch_state(ref, {"c": "x" * 400}, expected_version=2)
        with pytest.raises(VersionConflict):
            store.patch_state(ref, {"c": "x" * 400}, expected_version=1)  # a stale version is still a conflict
        assert fingerprint() == before
        assert store.patch_state(ref, {"c": "x"}, delete="a").data.keys() == {"b", "c"}  # shrinking is fine
        # A user document that a new conversation's state patch would grow: the conversation is not created.
        user = StateRef.user("app", "u")
        store.patch_state(user, {"a": "x" * 450, "b": "x" * 450})
        before = fingerprint()
        with pytest.raises(PayloadTooLarge) as info:
            store.create_conversation("h", state_patches=[(ref_of("h"), {"n": 1}), (user, {"c": "x" * 400})])
        assert info.value.path == "state_patches[1]"
        assert fingerprint() == before
        created = store.create_conversation("h", state_patches=[(ref_of("h"), {"n": 1})])
        assert created == store.get_conversation("h")  # the version its state write moved it to
        assert store.get_state(ref_of("h")).data == {"n": 1}  # type: ignore[union-attr]


def ref_of(conversation_id: str) -> StateRef:
    return StateRef.conversation(conversation_id)


@pytest.mark.parametrize(
    ("thread", "ns", "metadata", "error", "path"),
    [
        ("t" + S, "", {}, InvalidId, "conversation_id"),  # the thread id is the conversation id
        ("t", S, {}, InvalidId, "namespace"),
        ("t", "", {"m": S}, InvalidPayload, "metadata.m"),
    ],
    ids=["thread_id", "checkpoint_ns", "metadata"],
)
def test_lone_surrogates_in_langgraph_checkpoints(
    store: StateStore,
    unchanged: Callable[[], None],
    thread: str,
    ns: str,
    metadata: dict[str, Any],
    error: type[PgAgentStateError],
    path: str,
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

    saver = PostgresCheckpointer(store=store)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    with pytest.raises(error) as info:
        saver.put(config, empty_checkpoint(), metadata, {})  # type: ignore[arg-type]
    assert info.value.path == path  # type: ignore[attr-defined]
    lg = PostgresStore(store=store)
    with pytest.raises(InvalidId):
        lg.put(("n",), "k" + S, {"v": 1})
    with pytest.raises(InvalidPayload):
        lg.put(("n",), "k", {"v": [S]})
    unchanged()
