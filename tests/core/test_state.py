from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgagentstate import AsyncStateStore, InvalidInput, NotFound, StateRef, StateStore, VersionConflict


def test_put_get_and_cas(store: StateStore) -> None:
    store.create_conversation("c1")
    ref = StateRef.conversation("c1")
    assert store.get_state(ref) is None
    doc = store.put_state(ref, {"email": None}, expected_version=0)
    assert (doc.data, doc.version) == ({"email": None}, 1)
    with pytest.raises(VersionConflict) as info:
        store.put_state(ref, {"email": "x"}, expected_version=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    doc = store.put_state(ref, {"email": "meu@email.com"}, expected_version=1)
    assert doc.version == 2
    with pytest.raises(VersionConflict):
        store.put_state(ref, {"email": "stale"}, expected_version=1)
    got = store.get_state(ref)
    assert got is not None and got.data == {"email": "meu@email.com"} and got.version == 2


def test_cas_on_a_missing_document_conflicts_with_zero(store: StateStore) -> None:
    store.create_conversation("c1")
    with pytest.raises(VersionConflict) as info:
        store.put_state(StateRef.conversation("c1"), {}, expected_version=3)
    assert info.value.actual == 0


def test_patch_merges_on_the_server(store: StateStore) -> None:
    ref = StateRef.user("shop", "u1")
    store.patch_state(ref, {"a": 1, "b": 2})
    doc = store.patch_state(ref, {"b": 3, "c": {"nested": True}}, delete=["a"])
    assert doc.data == {"b": 3, "c": {"nested": True}} and doc.version == 2
    doc = store.patch_state(ref, delete=["missing"], expected_version=2)
    assert doc.version == 3


def test_scopes_are_separate_documents(store: StateStore) -> None:
    store.create_conversation("u1")
    refs = [StateRef.conversation("u1"), StateRef.user("shop", "u1"), StateRef.app("shop"),
            StateRef.user("other", "u1"), StateRef.conversation("u1", name="workflow")]
    for i, ref in enumerate(refs):
        store.put_state(ref, {"i": i})
    docs = store.get_states([*refs, StateRef.app("nobody")])
    assert [d.data["i"] if d else None for d in docs] == [0, 1, 2, 3, 4, None]


def test_conversation_state_needs_the_conversation(store: StateStore) -> None:
    with pytest.raises(NotFound):
        store.put_state(StateRef.conversation("ghost"), {"x": 1})
    with pytest.raises(NotFound):
        store.patch_state(StateRef.conversation("ghost"), {"x": 1}, expected_version=1)


def test_state_writes_bump_the_conversation_version(store: StateStore) -> None:
    store.create_conversation("c1")
    store.put_state(StateRef.conversation("c1"), {"x": 1})
    store.patch_state(StateRef.conversation("c1"), {"y": 2})
    assert store.get_conversation("c1").version == 3  # type: ignore[union-attr]


def test_history_and_time_travel(store: StateStore) -> None:
    store.create_conversation("c1")
    ref = StateRef.conversation("c1")
    store.put_state(ref, {"status": "awaiting_email"})
    middle = datetime.now(UTC)
    store.patch_state(ref, {"email": "meu@email.com", "status": "awaiting_reason"})
    store.patch_state(ref, {"reason": "quebrado", "status": "ready"})
    history = store.state_history(ref)
    assert [d.version for d in history] == [3, 2, 1]
    assert [d.version for d in store.state_history(ref, limit=1)] == [3]
    v2 = store.get_state_at(ref, version=2)
    assert v2 is not None and v2.data == {"email": "meu@email.com", "status": "awaiting_reason"}
    at = store.get_state_at(ref, at=middle)
    assert at is not None and at.data == {"status": "awaiting_email"}
    assert store.get_state_at(ref, version=0) is None


def test_bad_refs_and_data(store: StateStore) -> None:
    with pytest.raises(InvalidInput):
        store.put_state(StateRef.conversation(""), {})
    with pytest.raises(InvalidInput):
        store.put_state(StateRef.app("shop"), ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.put_state(StateRef("galaxy", "a", "b"), {})  # type: ignore[arg-type]


async def test_async_state(astore: AsyncStateStore) -> None:
    ref = StateRef.app("shop")
    await astore.put_state(ref, {"policy_days": 30})
    doc = await astore.get_state(ref)
    assert doc is not None and doc.data == {"policy_days": 30}
