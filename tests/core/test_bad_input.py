"""Hostile input: exact round trips for anything JSON can hold, typed errors (and nothing written) for
anything else."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pgagentstate import (
    InvalidId,
    InvalidPayload,
    Limits,
    NewEvent,
    PayloadTooLarge,
    StateRef,
    StateStore,
)

STRANGE_TEXT = [
    "\x00",
    "a\x00b\x00",
    "\ue000",
    "\ue0000",  # the escape character followed by the NUL marker, as user text
    "\ue000\x00\ue000\ue000",
    "emoji 😀👍🏽 and RTL עברית",
    "\U0010ffff\ud7ff",
    "\\u0000 (backslash-u, not a NUL)",
    "x" * 1_000_000,
    "'; DROP TABLE conversations; --",
]


@pytest.mark.parametrize("text", STRANGE_TEXT, ids=range(len(STRANGE_TEXT)))
def test_any_text_round_trips_exactly(store: StateStore, text: str) -> None:
    store.create_conversation("c1")
    payload = {"text": text, text[:50]: [text[:10], {"k": text[:5]}]}
    (ev,) = store.append_events("c1", [NewEvent(payload)])
    assert ev.payload == payload
    (listed,) = store.list_events("c1")
    assert listed.payload == payload
    doc = store.put_state(StateRef.conversation("c1"), payload)
    assert doc.data == payload
    assert store.get_state(StateRef.conversation("c1")).data == payload  # type: ignore[union-attr]
    store.put_memory(("n",), "k", payload)
    assert store.get_memory(("n",), "k").value == payload  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": {1, 2}}, "$.a"),
        ({"a": [1, object()]}, "$.a[1]"),
        ({"a": math.nan}, "$.a"),
        ({"a": math.inf}, "$.a"),
        ({"a": {1: "int key"}}, "$.a"),
        ({"a": b"bytes"}, "$.a"),
    ],
)
def test_non_json_is_rejected_with_its_path_and_nothing_is_written(store: StateStore, value: Any, path: str) -> None:
    store.create_conversation("c1")
    with pytest.raises(InvalidPayload) as info:
        store.append_events("c1", [NewEvent({"ok": 1}), NewEvent(value)])
    assert info.value.path == path.replace("$", "events[1].payload")
    assert store.list_events("c1") == []
    with pytest.raises(InvalidPayload):
        store.put_state(StateRef.conversation("c1"), value)
    assert store.get_state(StateRef.conversation("c1")) is None


def test_nan_allowed_when_configured(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, limits=Limits(allow_nan=True)) as store:
        store.create_conversation("c1")
        payload = {"x": math.inf, "y": [-math.inf, 1.5], "text": "NaN Infinity \ue000N"}
        (ev,) = store.append_events("c1", [NewEvent({**payload, "nan": math.nan})])
        assert math.isnan(ev.payload.pop("nan"))
        assert ev.payload == payload


def test_payload_size_limit(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, limits=Limits(max_payload_bytes=1000)) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"t": "x" * 900})])
        with pytest.raises(PayloadTooLarge) as info:
            store.append_events("c1", [NewEvent({"t": "é" * 600})])  # 1200 bytes in UTF-8
        assert info.value.limit == 1000 and info.value.size > 1000
        assert len(store.list_events("c1")) == 1


def test_default_limit_is_8_mib(store: StateStore) -> None:
    store.create_conversation("c1")
    with pytest.raises(PayloadTooLarge):
        store.append_events("c1", [NewEvent("x" * (8 * 1024 * 1024 + 1))])


def test_nesting_depth_limit(store: StateStore) -> None:
    store.create_conversation("c1")
    deep: Any = "bottom"
    for _ in range(100):
        deep = [deep]
    with pytest.raises(InvalidPayload, match="nested deeper"):
        store.append_events("c1", [NewEvent(deep)])
    ok: Any = "bottom"
    for _ in range(60):
        ok = {"k": ok}
    (ev,) = store.append_events("c1", [NewEvent(ok)])
    assert ev.payload == ok


@pytest.mark.parametrize("bad", ["", "x" * 513, "a\x00b", 42, None, b"id", ["id"]])
def test_bad_ids_are_rejected(store: StateStore, bad: Any) -> None:
    with pytest.raises(InvalidId):
        store.create_conversation(bad)
    with pytest.raises(InvalidId):
        store.get_conversation(bad)
    with pytest.raises(InvalidId):
        store.run_once(bad, lambda key: None)
    assert store.list_conversations() == []


def test_sql_looking_ids_are_just_ids(store: StateStore) -> None:
    evil = "c1'); DELETE FROM pgagentstate.conversations; --"
    store.create_conversation("victim")
    store.create_conversation(evil)
    store.append_events(evil, [NewEvent({"x": 1})])
    assert {c.id for c in store.list_conversations()} == {"victim", evil}


def test_bad_schema_name_cannot_inject(dsn: str) -> None:
    weird = 'x"; DROP SCHEMA public; --'
    with StateStore(dsn, schema=weird) as store:
        try:
            store.setup()
            store.create_conversation("c1")
            assert store.get_conversation("c1") is not None
        finally:
            import psycopg
            from psycopg import sql

            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(weird)))
