from __future__ import annotations

import pytest

from pgagentstate import AlreadyExists, InvalidInput, NewEvent, NotFound, StateRef, StateStore, VersionConflict


def test_create_get_and_duplicate(store: StateStore) -> None:
    conv = store.create_conversation("c1", app="shop", framework="adk", user_id="u1", channel="whatsapp",
                                     metadata={"order": "12345"})
    assert (conv.id, conv.app, conv.framework, conv.user_id, conv.channel) == ("c1", "shop", "adk", "u1", "whatsapp")
    assert conv.status == "active" and conv.version == 1 and conv.last_seq == 0
    assert conv.metadata == {"order": "12345"}
    with pytest.raises(AlreadyExists):
        store.create_conversation("c1")
    assert store.get_conversation("c1") == conv
    assert store.get_conversation("nope") is None


def test_ensure_returns_existing_without_changing_it(store: StateStore) -> None:
    first = store.ensure_conversation("c1", app="shop")
    again = store.ensure_conversation("c1", app="other")
    assert again == first


def test_update_status_metadata_and_version_check(store: StateStore) -> None:
    store.create_conversation("c1", metadata={"a": 1})
    updated = store.update_conversation("c1", status="waiting_customer", metadata={"b": 2})
    assert updated.status == "waiting_customer" and updated.metadata == {"a": 1, "b": 2} and updated.version == 2
    with pytest.raises(VersionConflict) as info:
        store.update_conversation("c1", status="completed", expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert store.update_conversation("c1", status="completed", expected_version=2).status == "completed"
    with pytest.raises(NotFound):
        store.update_conversation("missing", status="completed")
    with pytest.raises(InvalidInput):
        store.update_conversation("c1", status="exploded")


def test_list_filters_and_order(store: StateStore) -> None:
    store.create_conversation("a", app="shop", framework="adk", user_id="u1")
    store.create_conversation("b", app="shop", framework="langgraph", user_id="u2", status="completed")
    store.create_conversation("c", app="blog", framework="adk", user_id="u1")
    store.update_conversation("a", metadata={"touched": True})  # most recently updated now
    assert [c.id for c in store.list_conversations()] == ["a", "c", "b"]
    assert [c.id for c in store.list_conversations(app="shop")] == ["a", "b"]
    assert [c.id for c in store.list_conversations(framework="adk", user_id="u1")] == ["a", "c"]
    assert [c.id for c in store.list_conversations(status="completed")] == ["b"]
    assert [c.id for c in store.list_conversations(limit=1, offset=1)] == ["c"]


def test_delete_removes_everything_of_the_conversation(store: StateStore) -> None:
    store.create_conversation("c1", user_id="u1")
    store.append_events("c1", [NewEvent({"t": 1})])
    store.put_state(StateRef.conversation("c1"), {"x": 1})
    store.put_state(StateRef.user("app", "u1"), {"keep": True})
    store.complete_step("c1", "refund", "verify")
    store.put_scratch("c1", "k", 1)
    assert store.delete_conversation("c1") is True
    assert store.delete_conversation("c1") is False
    assert store.get_conversation("c1") is None
    assert store.list_events("c1") == []
    assert store.get_state(StateRef.conversation("c1")) is None
    assert store.state_history(StateRef.conversation("c1")) == []
    assert store.get_workflow("c1") == []
    assert store.list_scratch("c1") == {}
    # State of the user outlives the conversation.
    doc = store.get_state(StateRef.user("app", "u1"))
    assert doc is not None and doc.data == {"keep": True}
    # The id can be used again, from scratch.
    assert store.create_conversation("c1").version == 1


def test_tenants_do_not_see_each_other(store: StateStore) -> None:
    other = store.with_tenant("acme")
    store.create_conversation("c1", metadata={"tenant": "default"})
    assert other.get_conversation("c1") is None
    other.create_conversation("c1", metadata={"tenant": "acme"})
    a, b = store.get_conversation("c1"), other.get_conversation("c1")
    assert a is not None and b is not None
    assert a.metadata == {"tenant": "default"} and b.metadata == {"tenant": "acme"}
    assert [c.id for c in other.list_conversations()] == ["c1"]
    other.delete_conversation("c1")
    assert store.get_conversation("c1") is not None
