from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pgagentstate import (
    AsyncStateStore,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidPayload,
    StateStore,
)


def test_run_once_replays_the_recorded_result(store: StateStore) -> None:
    calls: list[str] = []

    def pay(key: str) -> dict[str, Any]:
        calls.append(key)
        return {"transaction_id": "txn_12345", "amount": 500}

    first = store.run_once("conv_12345:refund", pay, api="payment", request={"order": "12345"},
                           conversation_id="conv_12345")
    second = store.run_once("conv_12345:refund", pay, api="payment", request={"order": "12345"})
    assert first == second == {"transaction_id": "txn_12345", "amount": 500}
    assert calls == ["conv_12345:refund"]  # the key is handed to the API
    entry = store.get_ledger_entry("conv_12345:refund")
    assert entry is not None and entry.status == "succeeded" and entry.duplicate_hits == 1
    assert entry.api == "payment" and entry.conversation_id == "conv_12345" and entry.attempts == 1
    assert [e.key for e in store.list_ledger(conversation_id="conv_12345")] == ["conv_12345:refund"]


def test_same_key_different_request_conflicts(store: StateStore) -> None:
    store.run_once("k", lambda key: 1, api="payment", request={"amount": 500})
    with pytest.raises(IdempotencyConflict):
        store.run_once("k", lambda key: 2, api="payment", request={"amount": 900})


def test_a_failed_attempt_is_retried_with_the_same_key(store: StateStore) -> None:
    seen: list[str] = []

    def flaky(key: str) -> str:
        seen.append(key)
        if len(seen) == 1:
            raise TimeoutError("gateway timeout")
        return "ok"

    with pytest.raises(TimeoutError):
        store.run_once("k", flaky)
    entry = store.get_ledger_entry("k")
    assert entry is not None and entry.status == "failed" and "gateway timeout" in (entry.error or "")
    assert store.run_once("k", flaky) == "ok"
    assert seen == ["k", "k"]
    assert store.get_ledger_entry("k").attempts == 2  # type: ignore[union-attr]


def test_a_crashed_claim_is_taken_over_after_its_lease(store: StateStore, dsn: str, schema: str) -> None:
    # Simulate a worker that claimed the key and died: a claim row with a short lease and no outcome.
    from pgagentstate.ops import ledger

    gen = ledger.run_once(store._ctx, "k", lambda key: None, api="", request=None, conversation_id=None,
                          lease=0.2, wait=None)
    store.run(_claim_only(gen))
    with pytest.raises(IdempotencyInProgress):
        store.run_once("k", lambda key: "second", wait=0.05)
    time.sleep(0.3)
    assert store.run_once("k", lambda key: "second") == "second"
    assert store.get_ledger_entry("k").attempts == 2  # type: ignore[union-attr]


def _claim_only(gen: Any) -> Any:
    """Run an operation up to the point where it would call the side effect, then stop (a crash)."""
    from pgagentstate.ops.base import Call

    cmd = next(gen)
    while not isinstance(cmd, Call):
        result = yield cmd
        cmd = gen.send(result)
    gen.close()


def test_unrecordable_result_marks_the_attempt_failed(store: StateStore) -> None:
    with pytest.raises(InvalidPayload):
        store.run_once("k", lambda key: {1, 2})
    assert store.get_ledger_entry("k").status == "failed"  # type: ignore[union-attr]


def test_eight_concurrent_callers_run_the_side_effect_once(store: StateStore) -> None:
    calls = []
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def pay(key: str) -> dict[str, str]:
        calls.append(key)
        time.sleep(0.2)  # slow API: the other callers must wait, not call
        return {"transaction_id": "txn_1"}

    def worker() -> None:
        barrier.wait()
        results.append(store.run_once("refund-1", pay, api="payment"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [{"transaction_id": "txn_1"}] * 8
    assert store.get_ledger_entry("refund-1").duplicate_hits >= 1  # type: ignore[union-attr]


async def test_async_run_once_with_coroutine(astore: AsyncStateStore) -> None:
    calls = 0

    async def send_email(key: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        return {"message_id": "msg_67890"}

    assert await astore.run_once("email-1", send_email, api="email") == {"message_id": "msg_67890"}
    assert await astore.run_once("email-1", send_email, api="email") == {"message_id": "msg_67890"}
    assert calls == 1
