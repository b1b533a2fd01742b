"""Encryption at rest: nothing readable in the database, ciphertexts bound to their place, keys rotate."""

from __future__ import annotations

import base64
import json
import os

import psycopg
import pytest
from psycopg import sql

from pgagentstate import IntegrityError, NewEvent, StateRef, StateStore
from pgagentstate.crypto import Encryption, EnvKeyProvider, StaticKeyProvider, generate_key

SECRET = "meu@email.com"
K1, K2 = os.urandom(32), os.urandom(32)


def encrypted(
    dsn: str,
    schema: str,
    *,
    keys: dict[str, bytes] | None = None,
    active: str = "k1",
    required: bool = True,
    tenant: str = "default",
) -> StateStore:
    provider = StaticKeyProvider(keys or {"k1": K1}, active=active)
    return StateStore(dsn, schema=schema, tenant=tenant, encryption=Encryption(provider, required=required))


def dump(dsn: str, schema: str) -> str:
    """Everything stored in the schema, as text: what a database dump would reveal."""
    out = []
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
        for (table,) in tables:
            rows = conn.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(schema, table))).fetchall()
            out += [r[0] for r in rows]
    return "\n".join(out)


def fill(store: StateStore) -> None:
    store.create_conversation("c1", user_id="u1", metadata={"customer_email": SECRET})
    store.append_events(
        "c1", [NewEvent({"text": f"my email is {SECRET}"}, event_id="e1"), NewEvent({"text": "hi"}, event_id="e2")]
    )
    store.put_state(StateRef.conversation("c1"), {"email": SECRET, "order": "12345"})
    store.patch_state(StateRef.user("shop", "u1"), {"email": SECRET})
    store.append_events("c1", [NewEvent({"t": 3})], state_patches=[(StateRef.user("shop", "u1"), {"reason": "broken"})])
    store.put_memory(("users", "u1"), "email", {"text": f"email is {SECRET}", "kind": "contact"})
    store.put_scratch("c1", "draft", {"to": SECRET})
    store.run_step("c1", "refund", "understand", lambda: {"email": SECRET})
    store.run_once("refund-c1", lambda key: {"receipt_to": SECRET}, request={"email": SECRET})


def test_round_trip_and_nothing_readable_in_the_database(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        fill(store)
        conv = store.get_conversation("c1")
        assert conv is not None and conv.metadata == {"customer_email": SECRET}
        assert store.list_events("c1")[0].payload == {"text": f"my email is {SECRET}"}
        assert store.list_event_payloads("c1")[1] == {"text": "hi"}
        assert store.get_state(StateRef.conversation("c1")).data == {"email": SECRET, "order": "12345"}  # type: ignore[union-attr]
        assert store.get_state(StateRef.user("shop", "u1")).data == {"email": SECRET, "reason": "broken"}  # type: ignore[union-attr]
        assert store.get_memory(("users", "u1"), "email").value["text"] == f"email is {SECRET}"  # type: ignore[union-attr]
        (hit,) = store.search_memory(("users",), query="email address", filter={"kind": "contact"})
        assert hit.key == "email" and hit.score
        assert store.search_memory(("users",), filter={"kind": "other"}) == []
        assert store.list_scratch("c1") == {"draft": {"to": SECRET}}
        assert store.get_workflow("c1")[0].result == {"email": SECRET}
        assert store.get_ledger_entry("refund-c1").result == {"receipt_to": SECRET}  # type: ignore[union-attr]
        import json

        assert json.loads(store.list_events("c1", decode=False)[0].payload) == {"text": f"my email is {SECRET}"}
        with store.turn("c1") as turn:
            assert turn.state["email"] == SECRET
            turn.state["reason"] = "broken"
    text = dump(dsn, schema)
    assert SECRET not in text and "12345" not in text and "broken" not in text
    assert "c1" in text  # ids stay readable, as documented


def test_a_ciphertext_moved_elsewhere_does_not_decrypt(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        fill(store)
        store.create_conversation("c2")
        store.append_events("c2", [NewEvent({"text": "other"}, event_id="e1")])
    events = sql.Identifier(schema, "events")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Copy event e1 of c1 over event e2 of c1 (another row), and over e1 of c2 (another conversation).
        conn.execute(
            sql.SQL(
                "UPDATE {t} SET payload = (SELECT payload FROM {t} WHERE conversation_id = 'c1' "
                "AND event_id = 'e1') WHERE event_id = 'e2' OR conversation_id = 'c2'"
            ).format(t=events)
        )
    with encrypted(dsn, schema) as store:
        with pytest.raises(IntegrityError):
            store.list_events("c1")
        with pytest.raises(IntegrityError):
            store.list_events("c2")
    with encrypted(dsn, schema, tenant="other") as other:
        other.create_conversation("c1")
    with psycopg.connect(dsn, autocommit=True) as conn:  # and into another tenant's row
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} SELECT 'other', conversation_id, seq, event_id, kind, author, payload, "
                "created_at FROM {t} WHERE tenant_id = 'default' AND conversation_id = 'c1' AND seq = 1"
            ).format(t=events)
        )
        conn.execute(
            sql.SQL("UPDATE {} SET last_seq = 1 WHERE tenant_id = 'other'").format(
                sql.Identifier(schema, "conversations")
            )
        )
    with encrypted(dsn, schema, tenant="other") as other, pytest.raises(IntegrityError):
        other.list_events("c1")


def test_a_state_value_moved_to_another_key_does_not_decrypt(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        store.create_conversation("c1")
        store.put_state(StateRef.conversation("c1"), {"email": SECRET, "nickname": "x"})
    docs = sql.Identifier(schema, "state_documents")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET data = jsonb_set(data, '{{nickname}}', data->'email')").format(docs))
    with encrypted(dsn, schema) as store, pytest.raises(IntegrityError):
        store.get_state(StateRef.conversation("c1"))


def test_plaintext_rows_are_rejected_when_encryption_is_required(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as plain:
        plain.create_conversation("c1")
        plain.append_events("c1", [NewEvent({"text": "old plaintext"})])
    with encrypted(dsn, schema) as store, pytest.raises(IntegrityError, match="not encrypted"):
        store.list_events("c1")
    with encrypted(dsn, schema, required=False) as lenient:
        assert lenient.list_events("c1")[0].payload == {"text": "old plaintext"}
        lenient.append_events("c1", [NewEvent({"text": "new"})])
        # Encrypt what was written before encryption was on, then require it.
        assert lenient.rotate_keys(include_plaintext=True)["events"] == 1
    with encrypted(dsn, schema) as store:
        assert [e.payload["text"] for e in store.list_events("c1")] == ["old plaintext", "new"]
    with StateStore(dsn, schema=schema) as no_keys, pytest.raises(IntegrityError, match="configure"):
        no_keys.list_events("c1")


def test_key_rotation(dsn: str, schema: str) -> None:
    with encrypted(dsn, schema) as store:
        fill(store)
    both = {"k1": K1, "k2": K2}
    with encrypted(dsn, schema, keys=both, active="k2") as store:
        store.append_events("c1", [NewEvent({"text": "written with k2"})])
        assert len(store.list_events("c1")) == 4  # old rows still read
        text = dump(dsn, schema)
        assert "\ue000E:k1:" in text and "\ue000E:k2:" in text
        seen: list[tuple[str, int, int]] = []
        counts = store.rotate_keys(
            batch_size=2, progress=lambda table, scanned, changed: seen.append((table, scanned, changed))
        )
        assert counts["events"] == 3 and counts["state_documents"] == 2 and counts["memories"] == 1
        assert seen and seen[0][0] == "events"
        assert store.rotate_keys() == {k: 0 for k in counts}  # resumable: nothing left to do
    assert "\ue000E:k1:" not in dump(dsn, schema)
    with encrypted(dsn, schema, keys={"k2": K2}, active="k2") as store:  # k1 retired
        assert store.get_state(StateRef.user("shop", "u1")).data == {"email": SECRET, "reason": "broken"}  # type: ignore[union-attr]
        assert store.get_ledger_entry("refund-c1").result == {"receipt_to": SECRET}  # type: ignore[union-attr]


def test_encrypting_plaintext_memories_drops_their_search_terms(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as plain:
        plain.put_memory(("users", "u1"), "email", {"text": f"email is {SECRET} since 2019"})
        assert "2019" in dump(dsn, schema)  # the value and its search terms
    with encrypted(dsn, schema, required=False) as store:
        assert store.rotate_keys(include_plaintext=True)["memories"] == 1
        assert "2019" not in dump(dsn, schema)
        (hit,) = store.search_memory(("users",), query="2019")  # still found, by the decrypting search
        assert hit.key == "email"


def test_env_key_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    k1, k2 = generate_key(), generate_key()
    monkeypatch.setenv("PGAGENTSTATE_ENCRYPTION_KEYS", f"old:{k1},new:{k2}")
    provider = EnvKeyProvider()
    assert provider.active_key_id() == "new" and provider.get_key("old") == base64.b64decode(k1)
    monkeypatch.setenv("PGAGENTSTATE_ENCRYPTION_ACTIVE_KEY", "old")
    assert EnvKeyProvider().active_key_id() == "old"


def test_rotate_keys_command(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgagentstate.cli import main

    with encrypted(dsn, schema) as store:
        fill(store)
    k1, k2 = base64.b64encode(K1).decode(), base64.b64encode(K2).decode()
    monkeypatch.setenv("PGAGENTSTATE_ENCRYPTION_KEYS", f"k1:{k1},k2:{k2}")
    assert main(["rotate-keys", "--dsn", dsn, "--schema", schema, "--batch-size", "3", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["events"] == 3 and counts["memories"] == 1
    assert "\ue000E:k1:" not in dump(dsn, schema)
    monkeypatch.delenv("PGAGENTSTATE_ENCRYPTION_KEYS")
    assert main(["rotate-keys", "--dsn", dsn, "--schema", schema]) == 2


def test_a_store_without_keys_refuses_encrypted_payloads_on_every_read(dsn: str, schema: str) -> None:
    """The payload-only read (sessions' get_items) refuses as the full reads do: it returned the
    ciphertext envelopes as if they were payloads before."""
    with encrypted(dsn, schema) as store:
        store.create_conversation("c1")
        store.append_events("c1", [NewEvent({"text": "meu@email.com"}), NewEvent("plain")])
    with StateStore(dsn, schema=schema) as keyless:
        for read in (keyless.list_events, keyless.list_event_payloads):
            with pytest.raises(IntegrityError, match="encrypted"):
                read("c1")
