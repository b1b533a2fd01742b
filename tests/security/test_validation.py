"""Declared state shapes and the prompt sanitiser."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel, ConfigDict

from pgagentstate import NewEvent, StateRef, StateStore
from pgagentstate.errors import ValidationError
from pgagentstate.sanitize import Sanitizer
from pgagentstate.validation import PydanticSchema


class Refund(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str | None = None
    email: str | None = None
    step: int = 0


def test_writes_that_do_not_fit_are_rejected_before_the_database(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, state_schemas={"refund": PydanticSchema(Refund)}) as store:
        store.create_conversation("c1")
        ref = StateRef.conversation("c1", "refund")
        doc = store.put_state(ref, {"order_id": "12345"})
        assert doc.data == {"order_id": "12345", "email": None, "step": 0}  # stored as the model dumps it
        with pytest.raises(ValidationError):
            store.put_state(ref, {"order_id": "12345", "step": "three"})
        with pytest.raises(ValidationError):
            store.patch_state(ref, {"unknown_field": 1})
        with pytest.raises(ValidationError):
            store.append_events("c1", [NewEvent({"t": 1})], state_patches=[(ref, {"step": "x"})])
        assert store.list_events("c1") == []
        with pytest.raises(ValidationError), store.turn("c1", state_name="refund") as turn:
            turn.state["step"] = "not a number"
        assert store.patch_state(ref, {"step": "2"}).data["step"] == 2  # coerced as pydantic does
        assert len(store.state_history(ref)) == 2
        other = store.put_state(StateRef.conversation("c1", "free"), {"anything": {"goes": True}})
        assert other.version == 1


def test_a_stored_document_that_does_not_fit_raises_on_read(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, state_schemas={"refund": PydanticSchema(Refund)}) as store:
        store.create_conversation("c1")
        store.put_state(StateRef.conversation("c1", "refund"), {"email": "a@b"})
    with psycopg.connect(dsn, autocommit=True) as conn:  # tampered, or written by an old version
        conn.execute(
            sql.SQL('UPDATE {} SET data = data || \'{{"step": "garbage"}}\'').format(
                sql.Identifier(schema, "state_documents")
            )
        )
    with (
        StateStore(dsn, schema=schema, state_schemas={"refund": PydanticSchema(Refund)}) as store,
        pytest.raises(ValidationError, match="stored"),
    ):
        store.get_state(StateRef.conversation("c1", "refund"))


def test_sanitiser() -> None:
    clean = Sanitizer()
    assert clean.clean("<b>Oi</b>, quero reembolso\x00\x1b[31m\u202e &amp; <script>alert(1)</script>fim\n") == (
        "Oi, quero reembolso[31m & fim\n"
    )
    assert Sanitizer(max_length=3).clean("abcdef") == "abc"
    assert clean.clean_value({"t": ["<i>x</i>", 1]}) == {"t": ["x", 1]}


def test_store_sanitises_appended_events_only_when_asked(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, sanitizer=Sanitizer()) as store:
        store.create_conversation("c1")
        (ev,) = store.append_events("c1", [NewEvent({"text": "<img src=x onerror=alert(1)>oi\x07"})])
        assert ev.payload == {"text": "oi"} and store.list_events("c1")[0].payload == {"text": "oi"}
    with StateStore(dsn, schema=schema) as exact:
        (ev,) = exact.append_events("c1", [NewEvent({"text": "<b>exact</b>\x07"})])
        assert exact.list_events("c1")[-1].payload == {"text": "<b>exact</b>\x07"}
