from pgagentstate import AsyncStateStore, NewEvent, StateRef, StateStore


def test_sync_round_trip(store: StateStore) -> None:
    store.ensure_conversation("c1", app="demo")
    store.append_events("c1", [NewEvent({"text": "hi"})])
    store.put_state(StateRef.conversation("c1"), {"email": "meu@email.com"})
    assert [e.payload for e in store.list_events("c1")] == [{"text": "hi"}]
    doc = store.get_state(StateRef.conversation("c1"))
    assert doc is not None and doc.data == {"email": "meu@email.com"}


async def test_async_round_trip(astore: AsyncStateStore) -> None:
    await astore.ensure_conversation("c1", app="demo")
    await astore.append_events("c1", [NewEvent({"text": "hi"}), NewEvent({"text": "there"})])
    assert [e.seq for e in await astore.list_events("c1")] == [1, 2]
