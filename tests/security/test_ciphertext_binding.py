"""Issue 14, items 1, 2, 10, 21, 22: rotation over escaped and colliding keys, damaged ciphertexts, an
unambiguous associated data (with the old encoding still readable and migrated by rotate-keys), and the
event and pending-write fields a ciphertext vouches for."""

from __future__ import annotations

import base64
import os

import psycopg
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg import sql

from pgagentstate import IntegrityError, NewEvent, StateRef, StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.ops.snapshots import SnapshotWrite

K1, K2 = os.urandom(32), os.urandom(32)


def encrypted(
    dsn: str, schema: str, keys: dict[str, bytes] | None = None, active: str = "k1", required: bool = True
) -> StateStore:
    provider = StaticKeyProvider(keys or {"k1": K1}, active=active)
    return StateStore(dsn, schema=schema, encryption=Encryption(provider, required=required))


def execute(dsn: str, schema: str, statement: str, *args: object) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(statement.encode(), args)


def legacy_seal(plaintext: str, *parts: str) -> str:
    """A ciphertext as stores wrote it before the associated data was length-prefixed: the fields joined
    by U+001F, envelope U+E000 E <key id> : <base64url(nonce | ciphertext | tag)>."""
    nonce = os.urandom(12)
    sealed = AESGCM(K1).encrypt(nonce, plaintext.encode(), "\x1f".join(parts).encode())
    return "\ue000Ek1:" + base64.urlsafe_b64encode(nonce + sealed).decode()


# --- item 1: rotation binds the real (unescaped) document key ------------------------------------------


def test_rotation_encrypts_plaintext_documents_with_escaped_keys(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as plain:
        plain.put_state(StateRef.app("shop"), {"a\x00b": 1, "\ue000x": 2})
        plain.create_conversation("c1", metadata={"x\x00y": 3})
    with encrypted(dsn, schema, required=False) as store:
        counts = store.rotate_keys(include_plaintext=True)
        assert counts["state_documents"] == 1 and counts["conversations"] == 1
    with encrypted(dsn, schema) as store:
        assert store.get_state(StateRef.app("shop")).data == {"a\x00b": 1, "\ue000x": 2}  # type: ignore[union-attr]
        assert store.get_conversation("c1").metadata == {"x\x00y": 3}  # type: ignore[union-attr]


def test_rotation_finishes_over_encrypted_documents_with_escaped_keys(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.put_state(StateRef.app("shop"), {"a\x00b": 1})
        store.create_conversation("c1", metadata={"x\x00y": 3})
    with encrypted(dsn, schema, {"k1": K1, "k2": K2}, active="k2") as store:
        counts = store.rotate_keys()
        assert counts["state_documents"] == 1 and counts["state_changes"] == 1 and counts["conversations"] == 1
        assert not any(store.rotate_keys().values())
    with encrypted(dsn, schema, {"k2": K2}, active="k2") as store:  # k1 retired
        assert store.get_state(StateRef.app("shop")).data == {"a\x00b": 1}  # type: ignore[union-attr]
        assert store.get_conversation("c1").metadata == {"x\x00y": 3}  # type: ignore[union-attr]


# --- item 2: pages follow the real composite key --------------------------------------------------------


def test_rotation_visits_documents_whose_joined_keys_collide(dsn: str, schema: str) -> None:
    refs = [StateRef.conversation("a\x1fb", "c"), StateRef.conversation("a", "b\x1fc")]
    with encrypted(dsn, schema) as store:
        for i, ref in enumerate(refs):
            store.create_conversation(ref.subject)
            store.put_state(ref, {"n": i})
    with encrypted(dsn, schema, {"k1": K1, "k2": K2}, active="k2") as store:
        assert store.rotate_keys(batch_size=1)["state_documents"] == 2
        assert not any(store.rotate_keys(batch_size=1).values())
    with encrypted(dsn, schema, {"k2": K2}, active="k2") as store:
        assert [store.get_state(ref).data for ref in refs] == [{"n": 0}, {"n": 1}]  # type: ignore[union-attr]


# --- item 10: a damaged ciphertext is an IntegrityError -------------------------------------------------


@pytest.mark.parametrize("envelope", ["\ue000Ek1:abc", "\ue000Ek1:AAAA", "\ue000E:k1:%%%", "\ue000E:k1:"])
def test_a_damaged_ciphertext_is_an_integrity_error(dsn: str, schema: str, envelope: str) -> None:
    with encrypted(dsn, schema) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"t": 1}, event_id="e1")])
        execute(dsn, schema, "UPDATE events SET payload = to_jsonb(%s::text)", envelope)
        with pytest.raises(IntegrityError):
            store.list_events("c1")


# --- item 21: unambiguous associated data, old encoding readable and migrated ----------------------------


def test_fields_that_contain_the_old_separator_do_not_share_a_place(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.create_conversation("a\x1fb")
        store.create_conversation("a")
        store.append_events("a\x1fb", [NewEvent({"secret": 1}, event_id="c")])
        store.append_events("a", [NewEvent({"public": 1}, event_id="b\x1fc")])
        # conversation a\x1fb / event c copied over conversation a / event b\x1fc
        execute(
            dsn, schema,
            "UPDATE events SET payload = (SELECT payload FROM events WHERE conversation_id = %s) "
            "WHERE conversation_id = %s", "a\x1fb", "a",
        )
        with pytest.raises(IntegrityError):
            store.list_events("a")


def test_ciphertexts_of_the_old_encoding_read_and_rotate_keys_migrates_them(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"t": "old"}, event_id="e1")])
        store.put_state(StateRef.conversation("c1"), {"email": "x"})
        execute(dsn, schema, "UPDATE events SET payload = to_jsonb(%s::text)",
                legacy_seal('{"t":"old"}', "default", "event", "c1", "e1"))
        old_key = legacy_seal('"x"', "default", "state", "conversation", "", "c1", "state", "email")
        execute(dsn, schema, "UPDATE state_documents SET data = jsonb_build_object('email', %s::text)", old_key)
        assert store.list_events("c1")[0].payload == {"t": "old"}
        assert store.get_state(StateRef.conversation("c1")).data == {"email": "x"}  # type: ignore[union-attr]
        counts = store.rotate_keys()  # same active key: rewritten for the encoding alone
        assert counts["events"] == 1 and counts["state_documents"] == 1
        assert not any(store.rotate_keys().values())
        assert store.list_events("c1")[0].payload == {"t": "old"}
        assert store.get_state(StateRef.conversation("c1")).data == {"email": "x"}  # type: ignore[union-attr]


# --- item 22: what an event's and a pending write's ciphertext vouches for ------------------------------


@pytest.mark.parametrize("column", ["kind", "author"])
def test_an_events_kind_and_author_are_bound(dsn: str, schema: str, column: str) -> None:
    with encrypted(dsn, schema) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"t": 1}, kind="tool_call", author="agent", event_id="e1")])
        execute(dsn, schema, f"UPDATE events SET {column} = 'user'")
        with pytest.raises(IntegrityError):
            store.list_events("c1")
        with pytest.raises(IntegrityError):
            store.list_event_payloads("c1")


def test_a_pending_write_moved_to_another_channel_does_not_decrypt(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.put_snapshot("t1", "s1", type="json", data=b"{}")
        store.put_snapshot_writes("t1", "s1", writes=[SnapshotWrite("task", 0, "messages", "json", b'["hi"]')])
        assert store.get_snapshot("t1").writes[0].data == b'["hi"]'  # type: ignore[union-attr]
        execute(dsn, schema, "UPDATE snapshot_writes SET channel = 'approved'")
        with pytest.raises(IntegrityError):
            store.get_snapshot("t1")


def test_sealed_bytes_of_the_old_encoding_read_and_rotate_keys_migrates_them(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.put_snapshot("t1", "s1", type="json", data=b"{}")
        store.put_snapshot_writes("t1", "s1", writes=[SnapshotWrite("task", 0, "messages", "json", b"new")])
        nonce = os.urandom(12)
        old_ad = "\x1f".join(("default", "snapshot_write", "t1", "", "s1", "task", "0")).encode()
        old = b"\x00\xeeBk1:" + nonce + AESGCM(K1).encrypt(nonce, b'["old"]', old_ad)
        execute(dsn, schema, "UPDATE snapshot_writes SET data = %s", old)
        assert store.get_snapshot("t1").writes[0].data == b'["old"]'  # type: ignore[union-attr]
        assert store.rotate_keys()["snapshot_writes"] == 1
        assert not any(store.rotate_keys().values())
        assert store.get_snapshot("t1").writes[0].data == b'["old"]'  # type: ignore[union-attr]
