"""Export and erase of one user (GDPR): everything of that user, nothing of anyone else."""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from pgagentstate import InvalidInput, StateRef, StateStore
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.ops import operations
from pgagentstate.ops.operations import RetentionPolicy

from .helpers import DIALOGUE, age_conversation, seed_refund

TABLES = ("conversations", "events", "state_documents", "state_changes", "workflow_steps", "idempotency_keys",
          "memories", "scratchpad", "snapshots", "snapshot_blobs", "snapshot_chunks", "snapshot_writes",
          "archived_conversations")


def _rows(dsn: str, schema: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        out = {}
        for table in TABLES:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
            assert row is not None
            out[table] = int(row[0])
        return out


def _seed_two_users(store: StateStore, dsn: str, schema: str) -> None:
    seed_refund(store, "u1_conv", user_id="u1")
    store.put_scratch("u1_conv", "draft", {"reply": "..."})
    store.put_snapshot("u1_graph", "s1", type="bytes", data=b"\x00checkpoint", framework="langgraph")
    store.update_conversation("u1_graph", metadata={})
    with psycopg.connect(dsn, autocommit=True) as conn:  # snapshots create conversations without a user
        conn.execute(f"UPDATE \"{schema}\".conversations SET user_id = 'u1' WHERE id = 'u1_graph'")
    store.put_state(StateRef.user("refunds", "u1"), {"language": "pt-BR"})
    store.put_memory(("memories", "u1"), "email", {"email": "meu@email.com"}, user_id="u1")
    # An archived conversation of u1, with its ledger entry.
    seed_refund(store, "u1_archived", user_id="u1")
    store.update_conversation("u1_archived", status="completed")
    age_conversation(dsn, schema, "u1_archived", 100)
    store.run(operations.gc(store.context, RetentionPolicy(completed_days=30, archive=True)))
    # Someone else, with the same shapes.
    seed_refund(store, "u2_conv", user_id="u2")
    store.put_state(StateRef.user("refunds", "u2"), {"language": "en"})
    store.put_memory(("memories", "u2"), "email", {"email": "other@email.com"}, user_id="u2")


def test_export_holds_everything_of_the_user(store: StateStore, dsn: str, schema: str) -> None:
    _seed_two_users(store, dsn, schema)
    doc = store.run(operations.export_user(store.context, "u1"))
    json.dumps(doc)  # JSON-ready
    assert doc["format"] == "pgagentstate.export.v1" and doc["user_id"] == "u1"
    convs = {c["id"]: c for c in doc["conversations"]}
    assert set(convs) == {"u1_conv", "u1_graph"}
    conv = convs["u1_conv"]
    assert [e["payload"]["text"] for e in conv["events"]] == [t for _, t in DIALOGUE]
    assert conv["state_versions"][-1]["data"]["email"] == "meu@email.com"
    assert len(conv["steps"]) == 4 and conv["scratchpad"][0]["value"] == {"reply": "..."}
    assert {k["key"]: k["request"] for k in conv["ledger"]} == {
        "u1_conv:refund": {"order": "12345"}, "u1_conv:email": {"to": "meu@email.com"},
    }
    (snap,) = convs["u1_graph"]["snapshots"]
    assert snap["snapshot_id"] == "s1" and snap["data_base64"] == "AGNoZWNrcG9pbnQ="
    assert doc["user_state_versions"] == [
        {"app": "refunds", "name": "state", "version": 1, "data": {"language": "pt-BR"},
         "changed_at": doc["user_state_versions"][0]["changed_at"]},
    ]
    assert [m["value"] for m in doc["memories"]] == [{"email": "meu@email.com"}]
    (archived,) = doc["archived_conversations"]
    assert archived["id"] == "u1_archived" and len(archived["document"]["events"]) == len(DIALOGUE)
    assert {k["key"] for k in doc["archived_ledger"]} == {"u1_archived:refund", "u1_archived:email"}
    assert "other@email.com" not in json.dumps(doc) and "u2_conv" not in json.dumps(doc)


def test_export_and_erase_cover_the_inbox(store: StateStore) -> None:
    store.accept("wa:u1", {"text": "Quero reembolso"}, key="wamid.1", user_id="u1")
    store.accept("wa:u2", {"text": "other@email.com"}, key="wamid.2", user_id="u2")
    doc = store.run(operations.export_user(store.context, "u1"))
    (conv,) = doc["conversations"]
    assert [(m["seq"], m["delivery_id"], m["message"]) for m in conv["inbox"]] == [
        (1, "wamid.1", {"text": "Quero reembolso"})]
    assert "other@email.com" not in json.dumps(doc)
    store.run(operations.erase_user(store.context, "u1"))
    assert store.list_messages("wa:u1") == [] and len(store.list_messages("wa:u2")) == 1


def test_erase_removes_the_user_and_only_the_user(store: StateStore, dsn: str, schema: str) -> None:
    _seed_two_users(store, dsn, schema)
    before = _rows(dsn, schema)
    planned = store.run(operations.erase_user(store.context, "u1", dry_run=True))
    assert _rows(dsn, schema) == before
    erased = store.run(operations.erase_user(store.context, "u1"))
    assert erased == planned
    assert erased == {"conversations": 2, "events": len(DIALOGUE), "state_versions": 5, "memories": 1,
                      "ledger_entries": 4, "archived_conversations": 1}
    assert store.run(operations.export_user(store.context, "u1"))["conversations"] == []
    after = _rows(dsn, schema)
    # What is left is exactly u2's.
    u2 = store.run(operations.export_user(store.context, "u2"))
    assert after["conversations"] == 1 and after["events"] == len(u2["conversations"][0]["events"])
    assert after["memories"] == 1 and after["idempotency_keys"] == 2 and after["archived_conversations"] == 0
    assert after["snapshots"] == 0 and after["scratchpad"] == 0
    assert after["state_documents"] == 2  # u2's conversation state and user state
    assert store.get_state(StateRef.user("refunds", "u2")) is not None
    assert store.get_state(StateRef.user("refunds", "u1")) is None


def test_erase_is_per_tenant_and_needs_a_user(store: StateStore) -> None:
    other = store.with_tenant("acme")
    other.create_conversation("c", user_id="u1")
    store.create_conversation("c", user_id="u1")
    assert store.run(operations.erase_user(store.context, "u1"))["conversations"] == 1
    assert other.get_conversation("c") is not None
    with pytest.raises(InvalidInput):
        store.run(operations.erase_user(store.context, ""))
    with pytest.raises(InvalidInput):
        store.run(operations.export_user(store.context, ""))


def test_export_and_archive_decrypt_with_the_stores_keys(dsn: str, schema: str) -> None:
    keys = StaticKeyProvider({"k1": os.urandom(32)}, "k1")
    with StateStore(dsn, schema=schema, encryption=Encryption(keys)) as store:
        seed_refund(store, "enc", user_id="u1")
        store.update_conversation("enc", status="completed")
        tl = store.run(operations.timeline(store.context, "enc"))
        assert tl is not None and tl.state_versions[-1].data["email"] == "meu@email.com"
        with psycopg.connect(dsn) as conn:  # really ciphertext in the table
            row = conn.execute(f'SELECT payload::text FROM "{schema}".events LIMIT 1').fetchone()
            assert row is not None and "reembolso" not in row[0] and row[0].startswith('"\ue000E')
        age_conversation(dsn, schema, "enc", 100)
        store.run(operations.gc(store.context, RetentionPolicy(completed_days=1, archive=True)))
        doc = store.run(operations.export_user(store.context, "u1"))
        (archived,) = doc["archived_conversations"]
        assert archived["document"]["events"][0]["payload"]["text"] == DIALOGUE[0][1]
        assert archived["document"]["state_versions"][-1]["data"]["email"] == "meu@email.com"
        assert {k["request"]["order"] for k in doc["archived_ledger"] if "order" in k["request"]} == {"12345"}
        checks = {c.name: c for c in store.run(operations.doctor(store.context, schema))}
        assert "this store encrypts at rest" in checks["encryption"].detail
