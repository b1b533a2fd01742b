"""The durable inbox: accepted once, worked per conversation in order, in parallel across conversations, and
recovered by another worker when one dies mid-turn — the ledger replaying what the dead worker paid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pgagentstate import (
    AsyncStateStore,
    IdempotencyConflict,
    InboxMessage,
    InvalidId,
    InvalidInput,
    LeaseLost,
    StateStore,
)
from pgagentstate.ops import operations


def msg(text: str) -> dict[str, str]:
    return {"role": "customer", "text": text}


def test_a_delivery_accepted_twice_is_one_message(store: StateStore) -> None:
    first = store.accept("wa:1", msg("Oi, quero reembolso"), key="wamid.A", channel="whatsapp", user_id="5511")
    again = store.accept("wa:1", msg("Oi, quero reembolso"), key="wamid.A")
    assert (first.seq, first.duplicate, first.status) == (1, False, "waiting")
    assert (again.seq, again.duplicate) == (1, True)
    stored = store.list_messages("wa:1")
    assert [(m.seq, m.delivery_id, m.message["text"]) for m in stored] == [(1, "wamid.A", "Oi, quero reembolso")]
    conversation = store.get_conversation("wa:1")
    assert conversation is not None and (conversation.channel, conversation.user_id) == ("whatsapp", "5511")
    second = store.accept("wa:1", msg("meu@email.com"), key="wamid.B")
    assert (second.seq, second.duplicate) == (2, False)


def test_another_message_under_a_used_key_is_refused(store: StateStore, fingerprint: Callable[[], Any]) -> None:
    store.accept("wa:1", msg("one"), key="wamid.A")
    before = fingerprint()
    with pytest.raises(IdempotencyConflict):
        store.accept("wa:1", msg("two"), key="wamid.A")
    with pytest.raises(InvalidId):
        store.accept("wa:1", msg("three"), key="")
    with pytest.raises(InvalidInput):
        store.accept("wa:2", {1, 2}, key="wamid.C")
    assert fingerprint() == before


def test_concurrent_accepts_store_each_delivery_once_without_gaps(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, max_size=8) as store:
        results: list[Any] = []
        barrier = threading.Barrier(8)

        def deliver(i: int) -> None:
            barrier.wait(10)
            # Four deliveries of wamid.SAME at once, and four different messages.
            key = "wamid.SAME" if i < 4 else f"wamid.{i}"
            results.append(store.accept("wa:burst", msg("same" if i < 4 else str(i)), key=key))

        threads = [threading.Thread(target=deliver, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(not r.duplicate for r in results) == 5
        assert len({r.seq for r in results if r.delivery_id == "wamid.SAME"}) == 1
        assert [m.seq for m in store.list_messages("wa:burst")] == [1, 2, 3, 4, 5]


def test_each_conversation_in_arrival_order_one_turn_at_a_time(dsn: str, schema: str) -> None:
    with StateStore(dsn, schema=schema, max_size=6) as store:
        for i in range(1, 6):
            for cid in ("a", "b"):
                store.accept(cid, msg(f"{cid}{i}"), key=f"{cid}-{i}")
        seen: dict[str, list[int]] = {"a": [], "b": []}
        running: set[str] = set()
        overlaps: list[str] = []
        guard = threading.Lock()

        def handler(m: InboxMessage) -> str:
            with guard:
                if m.conversation_id in running:
                    overlaps.append(f"{m.conversation_id}:{m.seq}")
                running.add(m.conversation_id)
            time.sleep(0.01)  # gives another loop the chance to take the same conversation (it must not)
            with guard:
                running.discard(m.conversation_id)
                seen[m.conversation_id].append(m.seq)
            return f"answered {m.message['text']}"

        handled = store.inbox(concurrency=4, poll=0.05).work(handler, until_idle=True)
        assert handled == 10 and overlaps == []
        assert seen == {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 4, 5]}
        done = store.list_messages("a")
        assert (done[0].status, done[0].result, done[0].attempts) == ("done", "answered a1", 1)


def test_conversations_run_in_parallel(dsn: str, schema: str) -> None:
    """Three conversations' turns meet at a barrier: only workers running them at the same time get past it."""
    with StateStore(dsn, schema=schema, max_size=6) as store:
        for cid in ("x", "y", "z"):
            store.accept(cid, msg("oi"), key=f"{cid}-1")
        barrier = threading.Barrier(3)

        def handler(m: InboxMessage) -> int:
            return barrier.wait(20)

        assert store.inbox(concurrency=3, max_attempts=1).work(handler, until_idle=True) == 3
        assert {m.status for cid in ("x", "y", "z") for m in store.list_messages(cid)} == {"done"}


def test_double_texting_queues_behind_the_running_turn(store: StateStore) -> None:
    store.accept("wa:1", msg("Você vai enviar email?"), key="m1")
    first = store.claim_message(lease=30)
    assert first is not None and first.seq == 1 and first.status == "running"
    # The customer texts again while the first turn runs: accepted at once, queued behind it.
    second = store.accept("wa:1", msg("Alô?"), key="m2")
    assert (second.seq, second.status) == (2, "waiting")
    store.accept("wa:other", msg("oi"), key="o1")
    other = store.claim_message()
    assert other is not None and other.conversation_id == "wa:other"  # not wa:1's second message
    assert store.claim_message() is None  # wa:1 is busy, wa:other too
    store.finish_message(first, ["Sim!"])
    nxt = store.claim_message()
    assert nxt is not None and (nxt.conversation_id, nxt.seq, nxt.message["text"]) == ("wa:1", 2, "Alô?")


def test_an_expired_lease_is_taken_over_and_the_ledger_replays_the_payment(store: StateStore) -> None:
    paid: list[str] = []

    def pay(key: str) -> dict[str, str]:
        paid.append(key)
        return {"transaction_id": "txn_1"}

    store.accept("wa:1", msg("reembolso"), key="m1")
    dead = store.claim_message(lease=0.3, owner="worker-that-dies")
    assert dead is not None
    store.run_once("wa:1/refund/payment", pay, conversation_id="wa:1")  # then the worker vanishes
    while store.inbox_metrics().stale_leases == 0:
        time.sleep(0.05)
    resumed = store.claim_message(lease=30, owner="survivor")
    assert resumed is not None and (resumed.seq, resumed.attempts, resumed.resumed) == (1, 2, True)
    receipt = store.run_once("wa:1/refund/payment", pay, conversation_id="wa:1")
    assert receipt == {"transaction_id": "txn_1"} and paid == ["wa:1/refund/payment"]
    with pytest.raises(LeaseLost):  # the dead worker, back from a pause, cannot overwrite the survivor
        store.finish_message(dead, "late")
    store.finish_message(resumed, "reembolsado")
    assert store.inbox_metrics().recoveries == 1
    [done] = store.list_messages("wa:1")
    assert (done.status, done.result, done.worker) == ("done", "reembolsado", "survivor")


def test_a_failing_handler_is_retried_then_given_up_and_the_conversation_moves_on(store: StateStore) -> None:
    store.accept("wa:1", msg("boom"), key="m1")
    store.accept("wa:1", msg("fine"), key="m2")
    calls: list[int] = []

    def handler(m: InboxMessage) -> str:
        calls.append(m.seq)
        if m.message["text"] == "boom":
            raise RuntimeError("model unavailable")
        return "ok"

    inbox = store.inbox(max_attempts=2, retry_delay=0.05, poll=0.05)
    while [m.status for m in store.list_messages("wa:1")] != ["failed", "done"]:
        inbox.work(handler, until_idle=True)
        time.sleep(0.02)
    assert calls == [1, 1, 2]
    failed = store.list_messages("wa:1")[0]
    assert failed.attempts == 2 and failed.error == "RuntimeError: model unavailable"
    metrics = store.inbox_metrics()
    assert (metrics.failed, metrics.depth, metrics.recoveries) == (1, 0, 0)


def test_a_turn_that_keeps_killing_its_worker_is_given_up(store: StateStore) -> None:
    store.accept("wa:1", msg("poison"), key="m1")
    store.accept("wa:1", msg("fine"), key="m2")
    for _ in range(2):  # two workers claim the turn and die in it
        assert store.claim_message(lease=0.05) is not None
        while store.inbox_metrics().stale_leases == 0:
            time.sleep(0.02)
    calls: list[str] = []
    inbox = store.inbox(max_attempts=2)
    given_up = inbox.work_one(lambda m: calls.append(m.message["text"]))
    assert given_up is not None and given_up.attempts == 3 and calls == []  # not run a third time
    failed = store.list_messages("wa:1")[0]
    assert failed.status == "failed" and failed.error == "given up: claimed 3 times, never finished"
    assert inbox.work(lambda m: calls.append(m.message["text"]), until_idle=True) == 1 and calls == ["fine"]
    assert store.inbox_metrics().recoveries == 2


def test_metrics_and_health(store: StateStore) -> None:
    empty = store.inbox_metrics()
    assert (empty.depth, empty.oldest_seconds, empty.conversations) == (0, None, 0)
    for cid, key in (("a", "1"), ("a", "2"), ("b", "1")):
        store.accept(cid, msg(key), key=key)
    claimed = store.claim_message()
    assert claimed is not None
    m = store.inbox_metrics()
    assert (m.waiting, m.running, m.depth, m.conversations, m.stale_leases) == (2, 1, 3, 2, 0)
    assert m.oldest_seconds is not None and m.oldest_seconds >= 0
    store.finish_message(claimed, None)
    h = store.run(operations.health(store.context))
    assert (h.inbox.waiting, h.inbox.running, h.inbox.conversations) == (2, 0, 2)
    assert operations.to_jsonable(h)["inbox"]["waiting"] == 2


def test_claim_arguments_are_checked(store: StateStore) -> None:
    with pytest.raises(InvalidInput):
        store.claim_message(lease=-1)
    with pytest.raises(InvalidInput):
        store.inbox(concurrency=0)
    store.accept("a", msg("x"), key="1")
    claimed = store.claim_message()
    assert claimed is not None
    with pytest.raises(InvalidInput):
        store.fail_message(claimed, "x", retry_in=-1)


async def test_async_workers_stop_gracefully(astore: AsyncStateStore) -> None:
    import asyncio

    inbox = astore.inbox(concurrency=2, poll=0.05)
    answered: list[str] = []

    async def handler(m: InboxMessage) -> str:
        await asyncio.sleep(0)
        answered.append(m.message["text"])
        if len(answered) == 3:
            inbox.stop()  # e.g. SIGTERM: the loops claim nothing more and return
        return m.message["text"].upper()

    for i in range(3):
        await astore.accept("wa:async", msg(f"m{i}"), key=f"k{i}")
    handled = await asyncio.wait_for(inbox.work(handler), 60)
    assert handled == 3 and answered == ["m0", "m1", "m2"]
    assert [m.result for m in await astore.list_messages("wa:async")] == ["M0", "M1", "M2"]
    assert inbox.stopping


WORKER = """
import os, sys, time
from pathlib import Path
from pgagentstate import StateStore

effects = Path(os.environ["EFFECTS"])

def pay(key):
    # The external API: it records each call it gets (the test counts them).
    with effects.open("a") as f:
        f.write(key + "\\n")
    return {"transaction_id": "txn_" + key[-6:]}

def handler(m):
    receipt = store.run_once(m.conversation_id + "/payment", pay, conversation_id=m.conversation_id, lease=1.0)
    Path(os.environ["MARK"]).write_text(str(os.getpid()))
    time.sleep(120)  # the test kills us -9 here: paid, the turn not recorded

with StateStore(sys.argv[1], schema=sys.argv[2], max_size=2) as store:
    store.inbox(lease=1.0, poll=0.05).work(handler)
"""


@pytest.mark.slow
def test_kill_9_mid_turn_another_worker_resumes_without_redelivery(dsn: str, schema: str, tmp_path: Path) -> None:
    """A real worker process pays, then is killed -9 before its turn is recorded. Nobody delivers the message
    again: another worker takes the turn over when the lease (1 s) runs out, and the ledger replays the
    payment instead of paying twice."""
    effects, mark = tmp_path / "effects", tmp_path / "mark"
    with StateStore(dsn, schema=schema, max_size=2) as store:
        store.accept("wa:5511", msg("Produto chegou quebrado"), key="wamid.X")
        env = {**os.environ, "EFFECTS": str(effects), "MARK": str(mark)}
        proc = subprocess.Popen([sys.executable, "-c", WORKER, dsn, schema], env=env)
        try:
            deadline = time.monotonic() + 60
            while not mark.exists():
                assert time.monotonic() < deadline and proc.poll() is None, "the worker never paid"
                time.sleep(0.05)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert [m.status for m in store.list_messages("wa:5511")] == ["running"]
        while store.inbox_metrics().stale_leases == 0:  # the dead worker's lease runs out (1 s)
            assert time.monotonic() < deadline
            time.sleep(0.05)

        def resume(m: InboxMessage) -> dict[str, Any]:
            assert m.resumed
            receipt: dict[str, Any] = store.run_once(m.conversation_id + "/payment", lambda key: {"new": key},
                                                     conversation_id=m.conversation_id, lease=1.0)
            return receipt

        assert store.inbox(lease=5.0).work(resume, until_idle=True) == 1
        [done] = store.list_messages("wa:5511")
        assert (done.status, done.attempts) == ("done", 2)
        assert done.result == {"transaction_id": "txn_ayment"}  # the dead worker's receipt, replayed
        assert effects.read_text().splitlines() == ["wa:5511/payment"]  # paid once
        metrics = store.inbox_metrics()
        assert (metrics.recoveries, metrics.depth, metrics.stale_leases) == (1, 0, 0)
