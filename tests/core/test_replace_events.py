"""replace_events: one transaction that swaps the newest events (or the whole log) for new ones."""

from __future__ import annotations

import os
import threading

import pytest

from pgagentstate import AlreadyExists, AsyncStateStore, Event, NewEvent, NotFound, StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider


def seed(store: StateStore, n: int, cid: str = "c1") -> list[str]:
    store.create_conversation(cid)
    return [e.event_id for e in store.append_events(cid, [NewEvent({"n": i}, event_id=f"m{i}") for i in range(n)])]


def payloads(store: StateStore, cid: str = "c1") -> list[object]:
    return [e.payload for e in store.list_events(cid)]


def test_whole_history_is_replaced_and_the_log_goes_on(store: StateStore) -> None:
    seed(store, 4)
    new = store.replace_events("c1", [NewEvent({"summary": "a"}), NewEvent({"summary": "b"})])
    assert new is not None and [e.payload for e in new] == [{"summary": "a"}, {"summary": "b"}]
    assert payloads(store) == [{"summary": "a"}, {"summary": "b"}]
    assert [e.seq for e in new] == [5, 6]  # like a clear then an append: seqs are not reused
    (after,) = store.append_events("c1", [NewEvent({"n": "next"})])
    assert after.seq == 7


def test_the_tail_is_replaced_and_the_older_events_stay(store: StateStore) -> None:
    ids = seed(store, 5)
    new = store.replace_events("c1", [NewEvent({"summary": "3+4"})], tail=ids[3:])
    assert new is not None and [e.seq for e in new] == [6]  # after the log's position: seqs are not reused
    assert payloads(store) == [{"n": 0}, {"n": 1}, {"n": 2}, {"summary": "3+4"}]
    (after,) = store.append_events("c1", [NewEvent({"n": "next"})])
    assert after.seq == 7
    assert [e.seq for e in store.list_events("c1")] == [1, 2, 3, 6, 7]


def test_a_stale_tail_changes_nothing(store: StateStore) -> None:
    ids = seed(store, 3)
    store.append_events("c1", [NewEvent({"n": "meanwhile"}, event_id="late")])
    before = store.list_events("c1")
    assert store.replace_events("c1", [NewEvent({"summary": "x"})], tail=ids[1:]) is None
    assert store.list_events("c1") == before
    store.pop_event("c1")
    store.pop_event("c1")  # the tail's last event is gone: stale too
    assert store.replace_events("c1", [NewEvent({"summary": "x"})], tail=ids[1:]) is None
    assert payloads(store) == [{"n": 0}, {"n": 1}]


def test_prune_deletes_the_oldest_events_while_it_accepts_them(store: StateStore) -> None:
    # More expired events than one batch of the prefix read, then one to keep, then an expired one that
    # stays because pruning stops at the first event it refuses.
    store.create_conversation("c1")
    old = [NewEvent({"expired": True, "n": i}) for i in range(130)]
    keep = [NewEvent({"expired": False}), NewEvent({"expired": True, "n": "late"})]
    tail = store.append_events("c1", [*old, *keep, NewEvent({"n": "tail"})])[-1:]
    seen: list[Event] = []

    def expired(event: Event) -> bool:
        seen.append(event)
        return bool(event.payload["expired"])

    new = store.replace_events("c1", [NewEvent({"summary": "tail"})], tail=[tail[0].event_id], prune=expired)
    assert new is not None
    assert payloads(store) == [{"expired": False}, {"expired": True, "n": "late"}, {"summary": "tail"}]
    assert len(seen) == 131  # it stopped at the first refusal
    assert [e.seq for e in store.list_events("c1")] == [131, 132, 134]


def test_a_failure_inside_the_replacement_leaves_the_old_history(store: StateStore) -> None:
    ids = seed(store, 3)
    before = store.list_events("c1")
    # The new event's id is one of the events that stay: the insert fails after the cut has run.
    with pytest.raises(AlreadyExists):
        store.replace_events("c1", [NewEvent({"summary": "x"}, event_id="m0")], tail=ids[2:])
    assert store.list_events("c1") == before

    def boom(event: Event) -> bool:
        raise RuntimeError("predicate failed")

    with pytest.raises(RuntimeError, match="predicate failed"):
        store.replace_events("c1", [NewEvent({"summary": "x"})], tail=ids[2:], prune=boom)
    assert store.list_events("c1") == before
    # The lock was released: a later replacement goes through.
    assert store.replace_events("c1", [NewEvent({"summary": "x"})], tail=ids[2:]) is not None


def test_missing_conversation_and_empty_replacement(store: StateStore) -> None:
    with pytest.raises(NotFound):
        store.replace_events("nope", [NewEvent({"a": 1})])
    ids = seed(store, 3)
    assert store.replace_events("c1", [], tail=ids[1:]) == []
    assert payloads(store) == [{"n": 0}]


def test_two_replacements_of_one_tail_one_wins(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as store:
        ids = seed(store, 4)
    results: list[object] = []
    barrier = threading.Barrier(2)

    def worker(label: str) -> None:
        with StateStore(dsn, schema=schema) as own:
            barrier.wait()
            results.append(own.replace_events("c1", [NewEvent({"summary": label})], tail=ids[2:]))

    threads = [threading.Thread(target=worker, args=(label,)) for label in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r is None for r in results) == [False, True]
    with StateStore(dsn, schema=schema) as store:
        stored = payloads(store)
    assert stored[:2] == [{"n": 0}, {"n": 1}] and len(stored) == 3 and "summary" in stored[2]  # type: ignore[operator]


def test_encrypted_events_are_replaced_and_pruned_decrypted(dsn: str, schema: str) -> None:
    provider = StaticKeyProvider({"k1": os.urandom(32)}, active="k1")
    with StateStore(dsn, schema=schema, encryption=Encryption(provider)) as store:
        ids = seed(store, 3)
        new = store.replace_events("c1", [NewEvent({"summary": "s"})], tail=ids[2:],
                                   prune=lambda e: e.payload["n"] == 0)
        assert new is not None
        assert payloads(store) == [{"n": 1}, {"summary": "s"}]


async def test_async_replace(astore: AsyncStateStore) -> None:
    await astore.create_conversation("c1")
    old = await astore.append_events("c1", [NewEvent({"n": i}) for i in range(3)])
    new = await astore.replace_events("c1", [NewEvent({"summary": "all"})], tail=[e.event_id for e in old])
    assert new is not None and [e.seq for e in new] == [4]
    assert [e.payload for e in await astore.list_events("c1")] == [{"summary": "all"}]
