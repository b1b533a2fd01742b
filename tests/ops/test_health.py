"""Conversation health: counts per category with idle open conversations as abandoned, stuck steps, and
the duplicate calls the ledger stopped — from one snapshot, per tenant."""

from __future__ import annotations

import time

import pytest

from pgagentstate import AsyncStateStore, InvalidInput, StateStore
from pgagentstate.ops import operations

from .helpers import age_conversation, execute, seed_refund


def _make(store: StateStore, cid: str, status: str) -> None:
    store.create_conversation(cid, framework="core", status=status)


def test_counts_every_category_and_moves_idle_open_conversations_to_abandoned(
    store: StateStore, dsn: str, schema: str
) -> None:
    for i, status in enumerate(["active", "active", "waiting_customer", "awaiting_approval", "completed",
                                "failed", "abandoned"]):
        _make(store, f"c{i}", status)
    # Idle for two days: an active and a waiting one are abandoned; a completed one stays completed.
    for cid in ("c1", "c2", "c4"):
        age_conversation(dsn, schema, cid, 2)

    h = store.run(operations.health(store.context, idle=86400))
    assert h.conversations == {
        "active": 1, "waiting_customer": 0, "awaiting_approval": 1, "completed": 1, "failed": 1, "abandoned": 3,
    }
    assert h.total == 7
    # A longer idle time: nothing is idle long enough any more.
    h = store.run(operations.health(store.context, idle=3 * 86400))
    assert h.conversations["abandoned"] == 1 and h.conversations["active"] == 2


def test_stuck_steps_and_duplicate_calls(store: StateStore) -> None:
    seed_refund(store, "conv_12345")
    store.start_step("conv_12345", "refund", "stuck_one", lease=0.01)   # its worker "dies"
    store.start_step("conv_12345", "refund", "running", lease=3600)
    store.fail_step("conv_12345", "refund", "broken", "timeout")
    time.sleep(0.05)

    h = store.run(operations.health(store.context))
    assert h.stuck_steps == 1
    assert [(s.conversation_id, s.step) for s in h.stuck] == [("conv_12345", "stuck_one")]
    assert h.running_steps == 1 and h.failed_steps == 1
    assert h.duplicate_calls_stopped == 1 and h.keys_with_duplicates == 1
    assert h.ledger_entries == 2 and h.ledger_failed == 0
    # Each further replay counts.
    store.run_once("conv_12345:refund", lambda key: None, api="payment", request={"order": "12345"})
    store.run_once("conv_12345:email", lambda key: None, api="email", request={"to": "meu@email.com"})
    h = store.run(operations.health(store.context))
    assert h.duplicate_calls_stopped == 3 and h.keys_with_duplicates == 2


def test_a_claim_whose_worker_vanished_is_reported(store: StateStore, dsn: str, schema: str) -> None:
    store.create_conversation("c1")
    store.run_once("k1", lambda key: {"ok": True}, conversation_id="c1")
    execute(dsn, schema, "UPDATE {schema}.idempotency_keys SET status = 'in_progress', "
            "lease_expires_at = now() - interval '1 minute'")
    h = store.run(operations.health(store.context))
    assert h.ledger_stale_claims == 1


def test_health_is_per_tenant(store: StateStore) -> None:
    other = store.with_tenant("acme")
    other.create_conversation("x", status="failed")
    other.start_step("x", "wf", "s", lease=0.001)
    _make(store, "mine", "completed")
    time.sleep(0.02)
    mine = store.run(operations.health(store.context))
    theirs = other.run(operations.health(other.context))
    assert mine.total == 1 and mine.conversations["completed"] == 1 and mine.stuck_steps == 0
    assert theirs.total == 1 and theirs.conversations["failed"] == 1 and theirs.stuck_steps == 1


def test_bad_arguments_are_typed_errors(store: StateStore) -> None:
    with pytest.raises(InvalidInput):
        store.run(operations.health(store.context, idle=-1))
    with pytest.raises(InvalidInput):
        store.run(operations.health(store.context, stuck_limit=0))


async def test_health_runs_on_the_async_store(astore: AsyncStateStore) -> None:
    await astore.create_conversation("a", status="awaiting_approval")
    h = await astore.run(operations.health(astore.context))
    assert h.conversations["awaiting_approval"] == 1 and h.total == 1
