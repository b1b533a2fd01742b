"""Listing with filters and health, the merged timeline of one conversation, diffs and time travel."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from pgagentstate import InvalidInput, StateRef, StateStore
from pgagentstate.ops import operations
from pgagentstate.ops.operations import Change, diff, message_text

from .helpers import DIALOGUE, age_conversation, seed_refund


def test_list_filters_and_health(store: StateStore, dsn: str, schema: str) -> None:
    seed_refund(store, "conv_a", user_id="u1", framework="langgraph")
    store.create_conversation("conv_b", framework="adk", user_id="u2", status="completed")
    store.create_conversation("other_c", framework="adk", user_id="u2", status="active")
    store.start_step("other_c", "wf", "s", lease=0.001)
    age_conversation(dsn, schema, "conv_b", 10)
    age_conversation(dsn, schema, "other_c", 3)
    time.sleep(0.02)

    def ids(**kw: object) -> list[str]:
        return [s.conversation.id for s in store.run(operations.list_conversations(store.context, **kw))]

    assert ids() == ["conv_a", "other_c", "conv_b"]            # newest activity first
    assert ids(framework="adk") == ["other_c", "conv_b"]
    assert ids(user_id="u1") == ["conv_a"]
    assert ids(status="completed") == ["conv_b"]
    assert ids(health="abandoned") == ["other_c"]               # active but idle 3 days
    assert ids(health="abandoned", idle=5 * 86400) == []
    assert ids(stuck_only=True) == ["other_c"]
    assert ids(idle_over=timedelta(days=2)) == ["other_c", "conv_b"]
    assert ids(active_within=timedelta(days=1)) == ["conv_a"]
    assert ids(id_prefix="conv_") == ["conv_a", "conv_b"]
    assert ids(limit=1, offset=1) == ["other_c"]

    (a,) = store.run(operations.list_conversations(store.context, user_id="u1"))
    assert a.health == "waiting_customer" and a.calls == 2 and a.duplicate_hits == 1 and a.stuck_steps == 0
    assert a.conversation.last_seq == len(DIALOGUE)


def test_list_rejects_unknown_categories(store: StateStore) -> None:
    with pytest.raises(InvalidInput):
        store.run(operations.list_conversations(store.context, health="lost"))
    with pytest.raises(InvalidInput):
        store.run(operations.list_conversations(store.context, status="archived"))
    with pytest.raises(InvalidInput):
        store.run(operations.list_conversations(store.context, limit=0))


def test_timeline_has_messages_state_versions_steps_and_calls_in_order(store: StateStore) -> None:
    seed_refund(store, "conv_12345")
    tl = store.run(operations.timeline(store.context, "conv_12345"))
    assert tl is not None
    assert [e.payload["text"] for e in tl.events] == [text for _, text in DIALOGUE]
    assert [(v.version, [c.path for c in v.changes]) for v in tl.state_versions] == [
        (1, ["order_id"]), (2, ["email"]), (3, ["reason"]), (4, ["refund"]),
    ]
    assert tl.state_versions[-1].data == {
        "order_id": "12345", "email": "meu@email.com", "reason": "Produto chegou quebrado", "refund": "txn_12345",
    }
    assert [s.step for s in tl.steps] == ["understand", "verify_policy", "process_refund", "send_confirmation"]
    assert all(s.status == "completed" for s in tl.steps)
    payment = next(k for k in tl.ledger if k.api == "payment")
    assert payment.result == {"transaction_id": "txn_12345", "amount": 500} and payment.duplicate_hits == 1
    # The merged timeline is in time order and holds every kind.
    assert [e.at for e in tl.entries] == sorted(e.at for e in tl.entries)
    kinds = {e.kind for e in tl.entries}
    assert kinds == {"message", "state", "step", "call"}
    texts = [e.text for e in tl.entries if e.kind == "message"]
    assert texts[2] == "meu@email.com"
    # The email was given before the payment ran, and the payment before the confirmation.
    titles = [e.title for e in tl.entries]
    assert titles.index("state 'state' v2") < titles.index("call payment succeeded") < titles.index(
        "call email succeeded")
    assert tl.health == "waiting_customer"


def test_timeline_of_a_missing_conversation_is_none(store: StateStore) -> None:
    assert store.run(operations.timeline(store.context, "nope")) is None


def test_timeline_event_limit_and_scratchpad(store: StateStore) -> None:
    seed_refund(store, "c")
    store.put_scratch("c", "draft", {"x": 1})
    store.put_scratch("c", "old", 1, ttl=0.001)
    time.sleep(0.02)
    tl = store.run(operations.timeline(store.context, "c", event_limit=2))
    assert tl is not None and [e.seq for e in tl.events] == [7, 8]
    assert {(s.key, s.expired) for s in tl.scratchpad} == {("draft", False), ("old", True)}


def test_state_at_version_and_time(store: StateStore) -> None:
    store.create_conversation("c")
    ref = StateRef.conversation("c")
    store.put_state(ref, {"step": 1})
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    store.patch_state(ref, {"step": 2, "email": "a@b"})
    assert store.run(operations.state_at(store.context, "c", version=1)).data == {"step": 1}  # type: ignore[union-attr]
    assert store.run(operations.state_at(store.context, "c", at=middle)).version == 1  # type: ignore[union-attr]
    assert store.run(operations.state_at(store.context, "c")).version == 2  # type: ignore[union-attr]
    assert store.run(operations.state_at(store.context, "c", at=middle - timedelta(hours=1))) is None
    with pytest.raises(InvalidInput):
        store.run(operations.state_at(store.context, "c", version=0))
    with pytest.raises(InvalidInput):
        store.run(operations.state_at(store.context, "c", at=datetime.now()))  # naive


def test_diff_descends_into_objects() -> None:
    old = {"a": 1, "b": {"x": 1, "y": 2}, "c": [1], "d": True}
    new = {"a": 1, "b": {"x": 2}, "c": [1, 2], "e": None, "d": 1}
    assert diff(old, new) == [
        Change("b.x", "changed", 1, 2),
        Change("b.y", "removed", 2, None),
        Change("c", "changed", [1], [1, 2]),
        Change("d", "changed", True, 1),
        Change("e", "added", None, None),
    ]
    assert diff(None, {"k": 1}) == [Change("k", "added", None, 1)]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"role": "user", "text": "oi"}, "oi"),
        ({"role": "user", "content": "olá"}, "olá"),
        ({"role": "assistant", "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]},
         "a b"),
        ({"content": {"role": "model", "parts": [{"text": "adk"}]}}, "adk"),
        ({"type": "function_call", "name": "refund", "arguments": "{}"}, "refund({})"),
        ("plain", "plain"),
        ({"other": 1}, '{"other":1}'),
    ],
)
def test_message_text_across_framework_shapes(payload: object, expected: str) -> None:
    assert message_text(payload) == expected
