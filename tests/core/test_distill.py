"""Distillation: a conversation's new messages become facts in its user's memory, once per log position,
consolidated, committed with the watermark — also when the worker is killed -9 in the middle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from pgagentstate import HashEmbeddings, MemoryIndex, NewEvent, StateStore
from pgagentstate.distill import Distiller, Fact, Message, RuleExtractor
from pgagentstate.ui.distill_worker import DistillWorker

REFUND = [
    ("user", "Oi, quero reembolso no pedido #12345"),
    ("assistant", "Qual é seu email?"),
    ("user", "meu@email.com"),
    ("assistant", "Qual foi a razão da devolução?"),
    ("user", "Produto chegou quebrado"),
]


def say(store: StateStore, conversation: str, lines: Sequence[tuple[str, str]]) -> None:
    store.append_events(
        conversation, [NewEvent({"role": role, "content": text}, author=role) for role, text in lines]
    )


def facts(store: StateStore, user: str = "cliente") -> dict[str, str]:
    return {m.key: m.value["text"] for m in store.search_memory(("memories", user), limit=100)}


def test_the_refund_conversation_becomes_facts(store: StateStore) -> None:
    store.create_conversation("c1", user_id="cliente")
    say(store, "c1", REFUND)
    result = store.distill("c1")
    assert result is not None and (result.seq, result.facts, result.skipped) == (5, 3, False)
    assert facts(store) == {"email": "email: meu@email.com", "order": "order: 12345",
                            "reason": "reason: Produto chegou quebrado"}
    again = store.distill("c1")  # nothing new
    assert again is not None and again.skipped and facts(store) == {
        "email": "email: meu@email.com", "order": "order: 12345", "reason": "reason: Produto chegou quebrado"}
    # A later, new conversation of the same customer: only its new messages are read; a changed email
    # replaces the old one (history kept), the same order number writes nothing.
    store.create_conversation("c2", user_id="cliente")
    say(store, "c2", [("user", "meu email novo é novo@email.com"), ("user", "sobre o pedido #12345")])
    result = store.distill("c2")
    assert result is not None and result.facts == 1
    email = store.get_memory(("memories", "cliente"), "email")
    assert email is not None and email.value["text"] == "email: novo@email.com" and email.version == 2
    assert [h["text"] for h in email.value["history"]] == ["email: meu@email.com"]
    assert email.value["source"]["conversation"] == "c2"
    order = store.get_memory(("memories", "cliente"), "order")
    assert order is not None and order.version == 1
    assert store.distill("nope") is None


def test_distilled_after_every_turn_the_reason_is_still_found(store: StateStore) -> None:
    """The after-turn hook distils each turn on its own: the answer "Produto chegou quebrado" comes in a
    later batch than the question it answers. The extractor sees the messages just before the watermark
    as context (``new=False``), extracting from them nothing but what they say about the new ones."""
    store.create_conversation("c1", user_id="cliente")
    for i in range(0, len(REFUND), 2):  # customer message, then the agent's answer: a turn
        say(store, "c1", REFUND[i:i + 2])
        result = store.distill("c1")
        assert result is not None and not result.skipped
    assert facts(store) == {"email": "email: meu@email.com", "order": "order: 12345",
                            "reason": "reason: Produto chegou quebrado"}
    # Context is never extracted again: an email said in the previous batch does not come back over a
    # newer one from another conversation.
    newer = {"kind": "fact", "topic": "email", "text": "email: novo@x.com", "facts": ["email: novo@x.com"]}
    store.put_memory(("memories", "cliente"), "email", newer)
    say(store, "c1", [("user", "obrigado")])
    store.distill("c1")
    assert facts(store)["email"] == "email: novo@x.com"


def test_framework_layouts_and_a_pluggable_extractor(dsn: str, schema: str) -> None:
    calls: list[tuple[list[tuple[str, bool]], list[str]]] = []

    def extractor(messages: Sequence[Message], known: Sequence[Fact]) -> list[Fact]:
        calls.append(([(m.text, m.new) for m in messages], [f.text for f in known]))
        return [Fact("likes pix refunds"), Fact("likes pix refunds"), Fact("prefers Portuguese", "language")]

    with StateStore(dsn, schema=schema) as store:
        store.create_conversation("a1", user_id="u1", app="shop", framework="adk")
        say(store, "a1", [("user", "hello")])
        store.distill("a1", Distiller(extractor=extractor))
        keys = {m.key for m in store.search_memory(("adk", "shop", "u1", "memories"))}  # ADK's layout
        assert len(keys) == 2 and "language" in keys and any(k.startswith("fact:") for k in keys)
        say(store, "a1", [("user", "more")])
        store.distill("a1", Distiller(extractor=extractor))
        assert calls[1][0] == [("hello", False), ("more", True)]  # what was distilled before is context
        assert sorted(calls[1][1]) == ["likes pix refunds", "prefers Portuguese"]
        assert len(store.search_memory(("adk", "shop", "u1", "memories"))) == 2  # no duplicates


def test_facts_are_embedded_with_an_index(dsn: str, schema: str) -> None:
    index = MemoryIndex(dims=64, embed=HashEmbeddings(64), fields=["text"])
    with StateStore(dsn, schema=schema, memory_index=index) as store:
        store.setup()
        store.create_conversation("c1", user_id="cliente")
        say(store, "c1", REFUND)
        store.distill("c1")
        (hit, *_) = store.search_memory(("memories", "cliente"), query="email address", mode="vector")
        assert hit.key == "email"


def test_a_worker_finds_pending_conversations(store: StateStore) -> None:
    for i in range(3):
        store.create_conversation(f"w{i}", user_id=f"user{i}")
        say(store, f"w{i}", [("user", f"my email is user{i}@example.com")])
    assert sorted(store.pending_distillations()) == ["w0", "w1", "w2"]
    worker = DistillWorker(store)
    assert len(worker.run_pending()) == 3 and store.pending_distillations() == []
    assert facts(store, "user1") == {"email": "email: user1@example.com"}
    store.request_distill("w1")  # a NOTIFY: harmless without a listener


def test_the_rule_extractor() -> None:
    msgs = [Message(1, "user", "I prefer email receipts"), Message(2, "assistant", "Why do you return it?"),
            Message(3, "user", "it is too small"), Message(4, "user", "order 998877 please")]
    got = {f.topic: f.text for f in RuleExtractor()(msgs, [])}
    assert got == {"preference": "preference: email receipts", "reason": "reason: it is too small",
                   "order": "order: 998877"}


WORKER = """
import os, sys, time
from pgagentstate import StateStore
from pgagentstate.distill import Distiller, Fact

def slow(messages, known):
    # Extraction done: the test kills us -9 now, before the facts and the watermark are committed.
    open(os.environ["MARK"], "w").write("extracted")
    time.sleep(60)
    return [Fact("never written", "x")]

with StateStore(sys.argv[1], schema=sys.argv[2]) as store:
    store.distill("k1", Distiller(extractor=slow, lease=1.0))
"""


@pytest.mark.slow
def test_kill_9_mid_distillation_loses_and_duplicates_nothing(dsn: str, schema: str, tmp_path: Path) -> None:
    with StateStore(dsn, schema=schema) as store:
        store.create_conversation("k1", user_id="cliente")
        say(store, "k1", REFUND)
        mark = tmp_path / "mark"
        env = {**os.environ, "MARK": str(mark)}
        proc = subprocess.Popen([sys.executable, "-c", WORKER, dsn, schema], env=env)
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the worker never reached extraction"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert facts(store) == {} and store.pending_distillations() == ["k1"]  # nothing half-written
        entry = store.get_ledger_entry("distill:k1:5")
        assert entry is not None and entry.status == "in_progress"
        time.sleep(1.2)  # the dead worker's lease runs out
        result = store.distill("k1", Distiller(lease=1.0))
        assert result is not None and result.facts == 3
        assert set(facts(store)) == {"email", "order", "reason"}
        assert store.distill("k1") is not None and store.pending_distillations() == []
        assert len(facts(store)) == 3  # a retry does not write them twice
