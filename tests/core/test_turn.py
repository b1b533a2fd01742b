from __future__ import annotations

import pytest

from pgagentstate import AsyncStateStore, NewEvent, NotFound, StateRef, StateStore, VersionConflict


def test_turn_loads_and_commits_atomically(store: StateStore) -> None:
    with store.turn("c1", create=True, channel="whatsapp") as turn:
        assert turn.events == [] and turn.state == {} and turn.state_version == 0
        turn.append({"role": "customer", "text": "quero reembolso #12345"}, author="customer")
        turn.append({"role": "agent", "text": "Qual é seu email?"}, author="agent")
        turn.state["order_id"] = "12345"
        turn.set_status("waiting_customer")
    assert [e.seq for e in turn.appended] == [1, 2]
    conv = store.get_conversation("c1")
    assert conv is not None and conv.status == "waiting_customer" and conv.channel == "whatsapp"
    with store.turn("c1", recent=1) as turn:
        assert [e.payload["text"] for e in turn.events] == ["Qual é seu email?"]
        assert turn.state == {"order_id": "12345"} and turn.state_version == 1
        turn.state["email"] = "meu@email.com"
    doc = store.get_state(StateRef.conversation("c1"))
    assert doc is not None and doc.data == {"order_id": "12345", "email": "meu@email.com"}


def test_a_concurrent_change_makes_the_turn_fail_and_write_nothing(store: StateStore) -> None:
    store.create_conversation("c1")
    with pytest.raises(VersionConflict), store.turn("c1") as turn:
        turn.append({"text": "from turn"})
        turn.state["x"] = 1
        store.append_events("c1", [NewEvent({"text": "someone else"})])  # another worker
    assert [e.payload["text"] for e in store.list_events("c1")] == ["someone else"]
    assert store.get_state(StateRef.conversation("c1")) is None


def test_an_exception_in_the_turn_discards_it(store: StateStore) -> None:
    store.create_conversation("c1")
    with pytest.raises(RuntimeError), store.turn("c1") as turn:
        turn.append({"text": "lost"})
        raise RuntimeError("model crashed")
    assert store.list_events("c1") == []


def test_turn_without_create_needs_the_conversation(store: StateStore) -> None:
    with pytest.raises(NotFound), store.turn("ghost"):
        pass


def test_turn_without_changes_does_not_bump_the_version(store: StateStore) -> None:
    store.create_conversation("c1")
    with store.turn("c1"):
        pass
    assert store.get_conversation("c1").version == 1  # type: ignore[union-attr]


async def test_async_turn(astore: AsyncStateStore) -> None:
    async with astore.turn("c1", create=True) as turn:
        turn.append({"text": "oi"})
        turn.state["n"] = 1
    async with astore.turn("c1") as turn:
        assert turn.state == {"n": 1} and len(turn.events) == 1
