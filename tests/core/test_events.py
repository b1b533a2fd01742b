from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgagentstate import AsyncStateStore, InvalidInput, NewEvent, NotFound, StateStore, VersionConflict


def test_append_assigns_contiguous_seq_and_keeps_order(store: StateStore) -> None:
    store.create_conversation("c1")
    first = store.append_events("c1", [NewEvent({"n": i}, author="customer") for i in range(3)])
    second = store.append_events("c1", [NewEvent({"n": 3}, kind="tool_call", author="agent")])
    assert [e.seq for e in first + second] == [1, 2, 3, 4]
    events = store.list_events("c1")
    assert [e.payload["n"] for e in events] == [0, 1, 2, 3]
    assert events[3].kind == "tool_call" and events[3].author == "agent"
    conv = store.get_conversation("c1")
    assert conv is not None and conv.last_seq == 4 and conv.version == 3


def test_reappending_the_same_event_id_is_a_no_op(store: StateStore) -> None:
    store.create_conversation("c1")
    a = store.append_events("c1", [NewEvent({"t": "hi"}, event_id="m1")])
    again = store.append_events("c1", [NewEvent({"t": "different"}, event_id="m1"),
                                       NewEvent({"t": "new"}, event_id="m2")])
    assert [e.event_id for e in again] == ["m1", "m2"]
    assert again[0] == a[0]  # the stored one, untouched
    assert [e.seq for e in store.list_events("c1")] == [1, 2]
    version = store.get_conversation("c1").version  # type: ignore[union-attr]
    store.append_events("c1", [NewEvent({}, event_id="m1")])
    assert store.get_conversation("c1").version == version  # type: ignore[union-attr]


def test_expected_seq_makes_the_append_conditional(store: StateStore) -> None:
    store.create_conversation("c1")
    store.append_events("c1", [NewEvent(1)], expected_seq=0)
    with pytest.raises(VersionConflict) as info:
        store.append_events("c1", [NewEvent(2)], expected_seq=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert [e.payload for e in store.list_events("c1")] == [1]


def test_append_to_missing_conversation(store: StateStore) -> None:
    with pytest.raises(NotFound):
        store.append_events("nope", [NewEvent({})])


def test_duplicate_ids_in_one_batch_are_rejected(store: StateStore) -> None:
    store.create_conversation("c1")
    with pytest.raises(InvalidInput):
        store.append_events("c1", [NewEvent(1, event_id="x"), NewEvent(2, event_id="x")])
    assert store.list_events("c1") == []


def test_list_limit_after_since_and_kinds(store: StateStore) -> None:
    store.create_conversation("c1")
    old = datetime.now(UTC) - timedelta(hours=1)
    store.append_events("c1", [NewEvent({"n": 0}, created_at=old)])
    store.append_events("c1", [NewEvent({"n": i}, kind="msg" if i % 2 else "tool") for i in range(1, 6)])
    assert [e.payload["n"] for e in store.list_events("c1", limit=2)] == [4, 5]
    assert store.list_events("c1", limit=0) == []
    assert [e.payload["n"] for e in store.list_events("c1", after_seq=4)] == [4, 5]
    assert [e.payload["n"] for e in store.list_events("c1", since=old + timedelta(minutes=1))] == [1, 2, 3, 4, 5]
    assert [e.payload["n"] for e in store.list_events("c1", kinds=["tool"])] == [2, 4]
    assert store.list_events("c1")[0].created_at == old
    with pytest.raises(InvalidInput):
        store.list_events("c1", limit=-1)


def test_pop_removes_exactly_the_last_and_never_reuses_its_seq(store: StateStore) -> None:
    store.create_conversation("c1")
    assert store.pop_event("c1") is None
    store.append_events("c1", [NewEvent(i) for i in range(3)])
    popped = store.pop_event("c1")
    assert popped is not None and popped.payload == 2 and popped.seq == 3
    assert store.get_conversation("c1").last_seq == 4  # type: ignore[union-attr]  # the log moved on
    (added,) = store.append_events("c1", [NewEvent("again")])
    assert added.seq == 5
    assert [e.payload for e in store.list_events("c1")] == [0, 1, "again"]
    popped = store.pop_event("c1")
    assert popped is not None and popped.seq == 5
    assert store.pop_event("c1").seq == 2  # type: ignore[union-attr]  # the newest one, across the gap


def test_clear(store: StateStore) -> None:
    store.create_conversation("c1")
    assert store.clear_events("c1") == 0
    assert store.get_conversation("c1").last_seq == 0  # type: ignore[union-attr]  # nothing changed
    store.append_events("c1", [NewEvent(i) for i in range(3)])
    assert store.clear_events("c1") == 3
    assert store.list_events("c1") == []
    assert store.pop_event("c1") is None
    (added,) = store.append_events("c1", [NewEvent("after")])
    assert added.seq == 5  # seq never goes back: nothing can be confused with a cleared event


@pytest.mark.parametrize("change", ["pop_and_append", "replace_tail", "replace_all", "pop", "clear"])
def test_expected_seq_and_cursors_see_every_change_of_the_log(store: StateStore, change: str) -> None:
    # ABA: a position read before the newest event was replaced must not pass for the current one, and a
    # reader's cursor must see the replacement.
    store.create_conversation("c1")
    ids = [e.event_id for e in store.append_events("c1", [NewEvent("a"), NewEvent("b")])]
    cursor = store.get_conversation("c1").last_seq  # type: ignore[union-attr]
    if change == "pop_and_append":
        store.pop_event("c1")
        store.append_events("c1", [NewEvent("B")])
    elif change == "replace_tail":
        store.replace_events("c1", [NewEvent("B")], tail=ids[1:])
    elif change == "replace_all":
        store.replace_events("c1", [NewEvent("a"), NewEvent("B")])
    elif change == "pop":
        store.pop_event("c1")
    else:
        store.clear_events("c1")
    with pytest.raises(VersionConflict):
        store.append_events("c1", [NewEvent("c")], expected_seq=cursor)
    new = [e.payload for e in store.list_events("c1", after_seq=cursor)]
    assert new == (["a", "B"] if change == "replace_all" else ["B"] if change.startswith(("pop_", "replace")) else [])
    position = store.get_conversation("c1").last_seq  # type: ignore[union-attr]
    assert position > cursor
    store.append_events("c1", [NewEvent("c")], expected_seq=position)


async def test_async_append_and_pop(astore: AsyncStateStore) -> None:
    await astore.create_conversation("c1")
    await astore.append_events("c1", [NewEvent({"role": "user", "content": "oi"}), NewEvent({"role": "agent"})])
    popped = await astore.pop_event("c1")
    assert popped is not None and popped.payload == {"role": "agent"}
    assert [e.seq for e in await astore.list_events("c1")] == [1]
