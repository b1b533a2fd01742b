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


def test_a_turn_bumps_the_version_once(store: StateStore) -> None:
    store.create_conversation("c1")
    with store.turn("c1") as turn:
        turn.append({"text": "a"})
        turn.append({"text": "b"})
        turn.state["x"] = 1
        turn.set_status("waiting_customer")
    conv = store.get_conversation("c1")
    assert conv is not None and (conv.version, conv.last_seq, conv.status) == (2, 2, "waiting_customer")
    assert [d.version for d in store.state_history(StateRef.conversation("c1"))] == [1]


def test_a_retried_turn_keeps_the_events_its_first_attempt_stored(store: StateStore) -> None:
    """The worker committed, then died before answering; the retry sends the same event ids again."""
    store.create_conversation("c1")
    with store.turn("c1") as first:
        first.append({"text": "quero reembolso"}, event_id="msg-1")
    with store.turn("c1") as retry:
        retry.append({"text": "quero reembolso"}, event_id="msg-1")
        retry.append({"text": "Qual é seu email?"}, author="agent", event_id="msg-2")
        retry.state["step"] = "awaiting_email"
    assert [(e.seq, e.event_id) for e in retry.appended] == [(1, "msg-1"), (2, "msg-2")]
    assert [e.event_id for e in store.list_events("c1")] == ["msg-1", "msg-2"]
    assert store.get_state(StateRef.conversation("c1")).data == {"step": "awaiting_email"}  # type: ignore[union-attr]
    with store.turn("c1") as again:  # everything stored already: nothing to write
        again.append({"text": "quero reembolso"}, event_id="msg-1")
    assert [e.seq for e in again.appended] == [1]
    assert store.get_conversation("c1").version == 3  # type: ignore[union-attr]


def test_a_state_document_changed_behind_the_conversations_back_fails_the_turn(
    store: StateStore, dsn: str, schema: str
) -> None:
    """Every state write bumps the conversation's version, so the version check covers the document; a
    document changed some other way (raw SQL here) must still fail the compare-and-swap, and the turn."""
    import psycopg

    with store.turn("c1", create=True) as turn:
        turn.state["x"] = 1
    turn = store.turn("c1").load()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".state_documents SET version = 7')
    turn.append({"text": "lost"})
    turn.state["x"] = 2
    with pytest.raises(VersionConflict) as info:
        turn.commit()
    assert (info.value.expected, info.value.actual) == (1, 7)
    assert store.list_events("c1") == [] and store.get_conversation("c1").version == 2  # type: ignore[union-attr]


def test_a_conversation_deleted_during_the_turn_fails_it(store: StateStore) -> None:
    store.create_conversation("c1")
    turn = store.turn("c1").load()
    store.delete_conversation("c1")
    turn.append({"text": "into the void"})
    with pytest.raises(NotFound):
        turn.commit()
    assert store.get_conversation("c1") is None


def test_turn_events_keep_nul_and_escape_characters(store: StateStore) -> None:
    tricky = {"text": "a\x00b \ue000 c", "nested": ["\ue0000", {"k\x00": 1.5e300}]}
    store.create_conversation("c1")
    store.append_events("c1", [NewEvent(tricky, author="bot \ue000", kind="k\ue000")])
    with store.turn("c1") as turn:
        (event,) = turn.events
    assert (event.payload, event.author, event.kind) == (tricky, "bot \ue000", "k\ue000")
    assert turn.events == store.list_events("c1")
