"""Core calls that adapters rely on: atomic append + state patches, one-snapshot loads, cheap reads,
and exact JSON round trips for numbers jsonb would normalise."""

from __future__ import annotations

import asyncio
import json
import math
import os

import psycopg
import pytest
from psycopg import sql

from pgagentstate import AsyncStateStore, InvalidInput, NewEvent, StateRef, StateStore, VersionConflict
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.errors import NotFound
from pgagentstate.ops.snapshots import SnapshotBlob, SnapshotWrite, chunk_hash

from .statement_plans import captured


def test_append_with_state_patches_is_atomic_and_applied_once(store: StateStore) -> None:
    store.create_conversation("s1", app="shop", user_id="u1")
    patches = [
        (StateRef.conversation("s1"), {"step": 1}),
        (StateRef.user("shop", "u1"), {"email": "a@b"}),
        (StateRef.app("shop"), {"policy_days": 30}),
    ]
    (ev,) = store.append_events("s1", [NewEvent({"t": 1}, event_id="e1")], expected_seq=0, state_patches=patches)
    assert ev.seq == 1
    docs = store.get_states([ref for ref, _ in patches])
    assert [d.data if d else None for d in docs] == [{"step": 1}, {"email": "a@b"}, {"policy_days": 30}]
    # Re-delivery of the same event: no second application (versions unchanged).
    store.append_events("s1", [NewEvent({"t": 1}, event_id="e1")], state_patches=[(StateRef.app("shop"), {"x": 1})])
    app_doc = store.get_state(StateRef.app("shop"))
    assert app_doc is not None and app_doc.version == 1 and app_doc.data == {"policy_days": 30}
    # A stale append writes neither the event nor the patches.
    with pytest.raises(VersionConflict):
        store.append_events("s1", [NewEvent(2)], expected_seq=0, state_patches=[(StateRef.app("shop"), {"y": 2})])
    assert store.get_state(StateRef.app("shop")).data == {"policy_days": 30}  # type: ignore[union-attr]
    # Patches merge top-level keys and are recorded in the history.
    store.append_events("s1", [NewEvent(3)], state_patches=[(StateRef.conversation("s1"), {"step": 2, "n": None})])
    assert store.get_state(StateRef.conversation("s1")).data == {"step": 2, "n": None}  # type: ignore[union-attr]
    assert len(store.state_history(StateRef.conversation("s1"))) == 2


def test_state_patch_validation(store: StateStore) -> None:
    store.create_conversation("s1")
    with pytest.raises(InvalidInput):
        store.append_events("s1", [NewEvent(1)], state_patches=[(StateRef.conversation("other"), {"a": 1})])
    with pytest.raises(InvalidInput):
        store.append_events("s1", [NewEvent(1)], state_patches=[(StateRef.app("a"), {}), (StateRef.app("a"), {})])
    assert store.list_events("s1") == []


def test_load_conversation_in_one_snapshot(store: StateStore) -> None:
    store.create_conversation("s1", app="shop", user_id="u1")
    store.append_events(
        "s1", [NewEvent({"n": i}) for i in range(5)], state_patches=[(StateRef.user("shop", "u1"), {"k": "v"})]
    )
    loaded = store.load_conversation("s1", limit=2, states=[StateRef.user("shop", "u1"), StateRef.app("shop")])
    assert loaded.conversation is not None and loaded.conversation.last_seq == 5
    assert [e.payload["n"] for e in loaded.events] == [3, 4]
    assert loaded.states[0] is not None and loaded.states[0].data == {"k": "v"} and loaded.states[1] is None
    assert store.load_conversation("s1", limit=0).events == []
    missing = store.load_conversation("nope", states=[StateRef.app("shop")])
    assert missing.conversation is None and missing.events == []


def test_load_conversation_payloads_only(dsn: str, schema: str) -> None:
    """Only the events' (seq, JSON text), the same as list_events(decode=False) gives, in the same snapshot
    as the conversation; plain and encrypted stores alike."""
    provider = StaticKeyProvider({"k1": os.urandom(32)}, active="k1")
    for encryption in (None, Encryption(provider)):
        with StateStore(dsn, schema=schema, encryption=encryption) as store:
            cid = f"p-{encryption is not None}"
            store.create_conversation(cid, app="shop", user_id="u1")
            events = [NewEvent({"text": "a\x00b", "n": i}, kind="odd" if i % 2 else "even") for i in range(5)]
            store.append_events(cid, events, state_patches=[(StateRef.user("shop", "u1"), {"k": "v"})])
            loaded = store.load_conversation(cid, kinds=["even"], limit=2, states=[StateRef.user("shop", "u1")],
                                             payloads_only=True)  # fmt: skip
            raw = store.list_events(cid, kinds=["even"], limit=2, decode=False)
            assert loaded.events == [] and loaded.payloads == [(e.seq, e.payload) for e in raw]
            assert [json.loads(p)["n"] for _, p in loaded.payloads] == [2, 4]
            assert json.loads(loaded.payloads[0][1])["text"] == "a\x00b"
            assert loaded.conversation is not None and loaded.conversation.last_seq == 5
            assert loaded.states[0] is not None and loaded.states[0].data == {"k": "v"}
            assert store.load_conversation(cid, payloads_only=True, limit=0).payloads == []
            assert store.load_conversation("nope", payloads_only=True).payloads == []


def test_raw_json_payloads_and_payload_only_reads(store: StateStore) -> None:
    store.create_conversation("s1")
    payloads = [{"text": "a\x00b", "n": 1e16}, {"text": "plain"}]
    store.append_events("s1", [NewEvent(p) for p in payloads])
    raw = store.list_events("s1", decode=False)
    assert [json.loads(e.payload) for e in raw] == [{"text": "a\x00b", "n": 1e16}, {"text": "plain"}]
    assert store.list_event_payloads("s1") == payloads
    assert store.list_event_payloads("s1", limit=1) == payloads[1:]


@pytest.mark.parametrize("number", [1e16, 1e300, -0.0, 1.7976931348623157e308, 5e-324, 123456789012345678.0])
def test_floats_round_trip_as_floats(store: StateStore, number: float) -> None:
    store.create_conversation("s1")
    store.append_events("s1", [NewEvent({"x": number, "list": [number]})])
    (back,) = store.list_event_payloads("s1")
    assert type(back["x"]) is float and back["x"] == number and back["list"] == [number]
    assert math.copysign(1.0, back["x"]) == math.copysign(1.0, number)


async def test_concurrent_pops_remove_one_event_each(dsn: str, schema: str) -> None:
    async with AsyncStateStore(dsn, schema=schema, max_size=6) as a, AsyncStateStore(dsn, schema=schema) as b:
        await a.create_conversation("c")
        await a.append_events("c", [NewEvent(i) for i in range(30)])
        popped = await asyncio.gather(*[(a if i % 2 else b).pop_event("c") for i in range(12)])
        assert sorted(e.payload for e in popped if e is not None) == list(range(18, 30))
        assert [e.payload for e in await a.list_events("c")] == list(range(18))


async def test_append_racing_the_creation_of_its_conversation(dsn: str, schema: str) -> None:
    async with AsyncStateStore(dsn, schema=schema, max_size=8) as store:

        async def create_then_append(i: int) -> None:
            await store.ensure_conversation("new")
            await store.append_events("new", [NewEvent({"i": i, "part": p}) for p in range(2)])

        await asyncio.gather(*[create_then_append(i) for i in range(16)])
        events = await store.list_events("new")
        assert [e.seq for e in events] == list(range(1, 33))
        for first, second in zip(events[::2], events[1::2], strict=True):
            assert first.payload["i"] == second.payload["i"] and (first.payload["part"], second.payload["part"]) == (
                0,
                1,
            )


def test_writes_say_whether_they_were_stored(store: StateStore) -> None:
    """Writes may arrive before their conversation's first snapshot (stored, creating it), and after
    delete_snapshot_conversation (dropped, False) until a new chain revives the conversation."""
    write = [SnapshotWrite("t1", 0, "messages", "json", b"[]")]
    assert store.put_snapshot_writes("w1", "s1", write) is True  # before the first snapshot
    assert store.put_snapshot_writes("w1", "s1", write) is True  # a retry: stored already
    store.put_snapshot("w1", "s1", type="json", data=b"{}")
    store.delete_snapshot_conversation("w1")
    assert store.put_snapshot_writes("w1", "s1", write) is False
    assert store.get_conversation("w1") is None
    store.put_snapshot("w1", "s2", type="json", data=b"{}")  # a new chain
    assert store.put_snapshot_writes("w1", "s2", write) is True
    snap = store.get_snapshot("w1")
    assert snap is not None and [w.task_id for w in snap.writes] == ["t1"]


def test_a_snapshot_whose_chunk_is_gone_is_not_read_short(store: StateStore, dsn: str, schema: str) -> None:
    """A chunk deleted under a read (a concurrent prune) makes the blob unreadable (NotFound) rather than a
    shorter list; the blob reads whole while its chunks are there."""
    blob = SnapshotBlob("messages", "v1", "list", (b"msgpack\0one", b"msgpack\0two", b"msgpack\0three"))
    store.put_snapshot("p1", "s1", type="json", data=b"{}", blobs=[blob], channel_versions={"messages": "v1"})
    snap = store.get_snapshot("p1")
    assert snap is not None
    assert snap.blobs["messages"].chunks == blob.chunks
    assert snap.blobs["messages"].hashes == tuple(chunk_hash(c) for c in blob.chunks)
    with psycopg.connect(dsn, autocommit=True) as conn:
        chunks = sql.Identifier(schema, "snapshot_chunks")
        gone = conn.execute(
            sql.SQL("DELETE FROM {} WHERE conversation_id = 'p1' AND hash = "
                    "(SELECT hash FROM {} WHERE conversation_id = 'p1' LIMIT 1)").format(chunks, chunks)
        ).rowcount
    assert gone == 1
    with pytest.raises(NotFound, match="chunks of channel 'messages'"):
        store.get_snapshot("p1")


def test_a_snapshot_without_blobs_is_written_by_the_lean_statement_with_the_same_effects(
    store: StateStore, dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put that sends no blob (a step that changed only values kept in the body) skips the chunk, blob and
    check CTEs, and still refreshes the conversation for retention, keeps chains linear and returns the stamp
    a head read gives."""
    store.put_snapshot("l1", "s1", type="json", data=b"{}",
                       blobs=(SnapshotBlob("messages", "1", "json", (b"[1]",)),))  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET updated_at = now() - interval '1 day' WHERE id = 'l1'").format(
            sql.Identifier(schema, "conversations")))
    with captured(monkeypatch) as sent:
        stamp = store.put_snapshot("l1", "s2", parent_id="s1", type="json", data=b'{"a": 1}',
                                   channel_versions={"messages": "1"})  # fmt: skip
    assert [s.name for s in sent] == ["snapshot_put_lean"]
    head = store.get_snapshot_head("l1")
    assert head is not None and (head.snapshot_id, head.stamp) == ("s2", stamp)
    got = store.get_snapshot("l1")
    assert got is not None and (got.data, got.blobs["messages"].version) == (b'{"a": 1}', "1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        (age,) = conn.execute(sql.SQL("SELECT now() - updated_at < interval '1 hour' FROM {} WHERE id = 'l1'").format(
            sql.Identifier(schema, "conversations"))).fetchone() or (None,)
    assert age is True
    with pytest.raises(VersionConflict):
        store.put_snapshot("l1", "s3", parent_id="s1", type="json", data=b"{}")


def test_the_head_stamp_names_the_stored_version_of_the_newest_snapshot(store: StateStore) -> None:
    """What a saver that kept the snapshot it stored needs: the head's id and stamp, and its pending writes,
    without its blobs. Storing the head again, or a newer snapshot, changes what the head says."""
    assert store.get_snapshot_head("h1") is None
    first = store.put_snapshot("h1", "s1", type="json", data=b"{}")
    second = store.put_snapshot("h1", "s2", parent_id="s1", type="json", data=b"{}")
    head = store.get_snapshot_head("h1")
    assert head is not None and (head.snapshot_id, head.stamp, head.writes) == ("s2", second, ())
    assert first != second
    store.put_snapshot_writes("h1", "s2", [SnapshotWrite("t1", 0, "messages", "json", b"[1]")])
    head = store.get_snapshot_head("h1")
    assert head is not None and [(w.task_id, w.channel, w.data) for w in head.writes] == [("t1", "messages", b"[1]")]
    again = store.put_snapshot("h1", "s2", parent_id="s1", type="json", data=b'{"a": 1}')
    head = store.get_snapshot_head("h1")
    assert head is not None and head.stamp == again != second
    assert store.get_snapshot_head("h1", namespace="sub") is None
