"""Retention: TTL expiry, archive or delete of old conversations, failed/abandoned grace periods, checkpoint
compaction, ledger retention — batched, dry-runnable, skipping rows in use, and exclusive per tenant."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

from pgagentstate import InvalidInput, StateRef, StateStore
from pgagentstate.cli import main
from pgagentstate.ops import operations
from pgagentstate.ops.operations import GC_LOCK_NAME, RetentionPolicy

from .helpers import age_conversation, execute, seed_refund


def _count(dsn: str, schema: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".{table}').fetchone()
        assert row is not None
        return int(row[0])


def test_expired_scratchpad_and_memories_go_live_ones_stay(store: StateStore, dsn: str, schema: str) -> None:
    store.create_conversation("c")
    store.put_scratch("c", "old", 1, ttl=0.001)
    store.put_scratch("c", "live", 2, ttl=3600)
    store.put_scratch("c", "forever", 3)
    store.put_memory(("m",), "old", {"v": 1}, ttl=0.001)
    store.put_memory(("m",), "live", {"v": 2})
    time.sleep(0.02)
    report = store.run(operations.gc(store.context, RetentionPolicy()))
    assert report.planned == {"scratchpad": 1, "memory": 1} and report.done == report.planned
    assert set(store.list_scratch("c")) == {"live", "forever"}
    assert _count(dsn, schema, "scratchpad") == 2 and _count(dsn, schema, "memories") == 1


def test_completed_conversations_are_deleted_with_their_state_but_the_ledger_stays(
    store: StateStore, dsn: str, schema: str
) -> None:
    seed_refund(store, "old")
    seed_refund(store, "recent")
    for cid in ("old", "recent"):
        store.update_conversation(cid, status="completed")
    age_conversation(dsn, schema, "old", 40)
    report = store.run(operations.gc(store.context, RetentionPolicy(completed_days=30)))
    assert report.done["completed"] == 1
    assert store.get_conversation("old") is None and store.get_conversation("recent") is not None
    assert store.get_state(StateRef.conversation("old")) is None
    assert store.state_history(StateRef.conversation("old")) == []
    assert store.get_ledger_entry("old:refund") is not None      # the record of the payment outlives it
    assert store.get_state(StateRef.conversation("recent")) is not None


def test_archive_keeps_one_document_that_reads_back(store: StateStore, dsn: str, schema: str) -> None:
    seed_refund(store, "conv_12345", user_id="u1")
    store.append_events("conv_12345", [operations_event("with \x00 NUL")])
    store.update_conversation("conv_12345", status="completed", metadata={"channel_id": "wa"})
    age_conversation(dsn, schema, "conv_12345", 40)
    report = store.run(operations.gc(store.context, RetentionPolicy(completed_days=30, archive=True)))
    assert report.done["completed"] == 1
    assert store.get_conversation("conv_12345") is None
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f'SELECT id, user_id, status, document::text FROM "{schema}".archived_conversations')
        ((cid, user, status, text),) = rows.fetchall()
    assert (cid, user, status) == ("conv_12345", "u1", "completed")
    doc = operations.read_archive(store.context, json.loads(text))
    assert doc["conversation"]["metadata"] == {"channel_id": "wa"}
    assert [e["payload"]["text"] for e in doc["events"]][-1] == "with \x00 NUL"
    assert len(doc["events"]) == 9 and len(doc["steps"]) == 4 and len(doc["ledger"]) == 2
    assert doc["state_versions"][-1]["data"]["email"] == "meu@email.com"
    # Archives are purged after their own retention.
    execute(dsn, schema, "UPDATE {schema}.archived_conversations SET archived_at = now() - interval '400 days'")
    report = store.run(operations.gc(store.context, RetentionPolicy(archive_days=365)))
    assert report.done["archive"] == 1 and _count(dsn, schema, "archived_conversations") == 0


def operations_event(text: str) -> object:
    from pgagentstate import NewEvent

    return NewEvent({"role": "customer", "text": text}, author="customer")


def test_failed_grace_period_and_abandonment(store: StateStore, dsn: str, schema: str) -> None:
    store.create_conversation("failed_old", status="failed")
    store.create_conversation("failed_new", status="failed")
    store.create_conversation("idle", status="waiting_customer")
    store.create_conversation("busy", status="waiting_customer")
    age_conversation(dsn, schema, "failed_old", 8)
    age_conversation(dsn, schema, "idle", 3)
    policy = RetentionPolicy(failed_days=7, abandon_idle_days=2, abandoned_days=30)
    report = store.run(operations.gc(store.context, policy))
    assert report.done == {"abandon": 1, "scratchpad": 0, "memory": 0, "failed": 1, "abandoned": 0}
    assert store.get_conversation("failed_old") is None and store.get_conversation("failed_new") is not None
    idle = store.get_conversation("idle")
    assert idle is not None and idle.status == "abandoned"       # marked, kept for its own grace period
    assert store.get_conversation("busy").status == "waiting_customer"  # type: ignore[union-attr]


def test_dry_run_counts_and_changes_nothing(store: StateStore, dsn: str, schema: str) -> None:
    for i in range(3):
        store.create_conversation(f"c{i}", status="completed")
        age_conversation(dsn, schema, f"c{i}", 100)
    report = store.run(operations.gc(store.context, RetentionPolicy(completed_days=30), dry_run=True))
    assert report.dry_run and report.planned["completed"] == 3 and report.done["completed"] == 0
    assert _count(dsn, schema, "conversations") == 3


def test_batches_and_progress(store: StateStore, dsn: str, schema: str) -> None:
    for i in range(5):
        store.create_conversation(f"c{i}", status="completed")
        age_conversation(dsn, schema, f"c{i}", 100)
    seen: list[tuple[str, int, int]] = []
    report = store.run(
        operations.gc(store.context, RetentionPolicy(expire_ttl=False, completed_days=1), batch_size=2,
                      progress=lambda task, done, total: seen.append((task, done, total)))
    )
    assert report.done == {"completed": 5} and report.batches == 3      # 2 + 2 + 1
    assert seen == [("completed", 0, 5), ("completed", 2, 5), ("completed", 4, 5), ("completed", 5, 5)]
    assert _count(dsn, schema, "conversations") == 0


def test_a_conversation_in_use_is_skipped_not_waited_for(store: StateStore, dsn: str, schema: str) -> None:
    for cid in ("a", "b"):
        store.create_conversation(cid, status="completed")
        age_conversation(dsn, schema, cid, 100)
    with psycopg.connect(dsn) as conn:           # another worker holds "a" (e.g. a turn committing)
        conn.execute(f'SELECT 1 FROM "{schema}".conversations WHERE id = %s FOR UPDATE', ("a",))
        report = store.run(operations.gc(store.context, RetentionPolicy(completed_days=1)))
        assert report.done["completed"] == 1
        conn.rollback()
    assert store.get_conversation("a") is not None and store.get_conversation("b") is None
    store.run(operations.gc(store.context, RetentionPolicy(completed_days=1)))
    assert store.get_conversation("a") is None


def test_checkpoints_are_compacted_to_the_newest_per_namespace(store: StateStore, dsn: str, schema: str) -> None:
    for cid in ("old", "new"):
        parent = None
        for i in range(3):
            for ns in ("", "sub"):
                store.put_snapshot(cid, f"s{i}", namespace=ns, parent_id=parent, type="bytes", data=b"x" * 10,
                                   framework="langgraph")
            parent = f"s{i}"
    execute(dsn, schema, "UPDATE {schema}.snapshots SET created_at = now() - interval '10 days' "
            "WHERE conversation_id = 'old'")
    plan = store.run(operations.gc_plan(store.context, RetentionPolicy(expire_ttl=False, snapshot_days=5)))
    assert plan == {"snapshots": 4}
    report = store.run(operations.gc(store.context, RetentionPolicy(expire_ttl=False, snapshot_days=5)))
    assert report.done == {"snapshots": 4}
    assert sorted((s.namespace, s.snapshot_id) for s in store.list_snapshots("old")) == [("", "s2"), ("sub", "s2")]
    assert len(store.list_snapshots("new")) == 6


def test_finished_ledger_entries_expire(store: StateStore, dsn: str, schema: str) -> None:
    store.run_once("old", lambda key: 1)
    store.run_once("new", lambda key: 2)
    execute(dsn, schema, "UPDATE {schema}.idempotency_keys SET updated_at = now() - interval '100 days' "
            "WHERE key = 'old'")
    report = store.run(operations.gc(store.context, RetentionPolicy(expire_ttl=False, ledger_days=90)))
    assert report.done == {"ledger": 1}
    assert store.get_ledger_entry("old") is None and store.get_ledger_entry("new") is not None


def test_finished_inbox_messages_expire(store: StateStore, dsn: str, schema: str) -> None:
    for key in ("old", "new", "waiting"):
        store.accept("wa:1", {"text": key}, key=key)
    for _ in range(2):
        claimed = store.claim_message()
        assert claimed is not None
        store.finish_message(claimed, "ok")
    execute(dsn, schema, "UPDATE {schema}.inbox_messages SET finished_at = now() - interval '40 days' "
            "WHERE delivery_id = 'old'")
    report = store.run(operations.gc(store.context, RetentionPolicy(expire_ttl=False, inbox_days=30)))
    assert report.done == {"inbox": 1}
    assert [m.delivery_id for m in store.list_messages("wa:1")] == ["new", "waiting"]
    claimed = store.claim_message()  # the queue goes on where it was
    assert claimed is not None and claimed.delivery_id == "waiting"


def test_policy_rejects_negative_ages() -> None:
    with pytest.raises(InvalidInput):
        RetentionPolicy(completed_days=-1)


def test_cli_gc_gives_way_to_a_running_gc(store: StateStore, dsn: str, schema: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    store.create_conversation("c", status="completed")
    age_conversation(dsn, schema, "c", 100)
    base = ["gc", "--dsn", dsn, "--schema", schema, "--completed-days", "1"]
    with store.advisory_lock(GC_LOCK_NAME):        # another host's gc is running
        assert main([*base, "--json"]) == 0
        (item,) = json.loads(capsys.readouterr().out)
        assert item["locked"] is True and item["report"] is None
        assert main([*base, "--fail-if-locked"]) == 3
        assert "another gc holds the lock" in capsys.readouterr().out
    assert store.get_conversation("c") is not None
    assert main([*base, "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["locked"] is False and item["report"]["done"]["completed"] == 1
    assert store.get_conversation("c") is None


def test_two_collectors_at_once_end_with_everything_collected_once(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema) as store:
        for i in range(40):
            store.create_conversation(f"c{i:02}", status="completed")
        execute(dsn, schema, "UPDATE {schema}.conversations SET updated_at = now() - interval '100 days'")
    results: list[int] = []
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            with StateStore(dsn, schema=schema, max_size=3) as s:
                r = s.run(operations.gc(s.context, RetentionPolicy(completed_days=1), batch_size=3))
                results.append(r.done["completed"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=collect) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sum(results) == 40 and _count(dsn, schema, "conversations") == 0


def test_all_tenants(store: StateStore, dsn: str, schema: str, capsys: pytest.CaptureFixture[str]) -> None:
    for tenant in ("t1", "t2"):
        s = store.with_tenant(tenant)
        s.create_conversation("c", status="completed")
    execute(dsn, schema, "UPDATE {schema}.conversations SET updated_at = now() - interval '100 days'")
    assert main(["gc", "--dsn", dsn, "--schema", schema, "--completed-days", "1", "--all-tenants", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert [(i["tenant"], i["report"]["done"]["completed"]) for i in items] == [("t1", 1), ("t2", 1)]
