"""The timeline in the order the store recorded things (not the application's clock), state written with a
message folded into it, crashes and retries as their own entries, the user's and app's state (ADK), and one
rendering of every framework's tool calls."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from pgagentstate import NewEvent, StateRef, StateStore
from pgagentstate.ops import operations
from pgagentstate.ops.operations import message_text


def demo_turn(store: StateStore, cid: str) -> datetime:
    """One turn as the demo's webhook records it: the customer's message stamped with a simulated clock
    ten minutes ahead and a delivery mark, the refund (a step and a payment, in real time), the reply."""
    channel = StateRef.conversation(cid, "channel")
    sent = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    store.create_conversation(cid, framework="core", app="refunds", user_id="u1")
    store.append_events(cid, [NewEvent({"role": "customer", "text": "quero reembolso"}, author="customer",
                                       created_at=sent)],
                        state_patches=[(channel, {"turn:w1": {"status": "started"}})])
    store.run_step(cid, "refund", "process_refund",
                   lambda: store.run_once(f"{cid}/payment", lambda key: {"transaction_id": "txn_1"}, api="payment",
                                          conversation_id=cid))
    store.append_events(cid, [NewEvent({"role": "agent", "text": "reembolso feito"}, author="agent",
                                       created_at=sent + timedelta(seconds=1))],
                        state_patches=[(channel, {"turn:w1": {"status": "answered"}})])
    return sent


def test_entries_follow_the_log_not_the_applications_clock(store: StateStore) -> None:
    sent = demo_turn(store, "c1")
    tl = store.run(operations.timeline(store.context, "c1"))
    assert tl is not None
    titles = [e.title for e in tl.entries if not e.folded]
    # The message came first, then the refund it asked for, then the answer (by created_at the refund,
    # ten minutes "earlier", was drawn before the message).
    assert titles == [
        "#1 customer", "step refund/process_refund started", "call payment [c1/payment]", "call payment succeeded",
        "step refund/process_refund completed", "#2 agent",
    ]
    first = tl.entries[0]
    assert first.seq == 1 and first.sent_at == sent and first.at < sent


def test_state_written_with_a_message_is_folded_into_it(store: StateStore, cli) -> None:  # type: ignore[no-untyped-def]
    demo_turn(store, "c1")
    tl = store.run(operations.timeline(store.context, "c1"))
    assert tl is not None
    folded = [(e.seq, e.title, e.text) for e in tl.entries if e.folded]
    assert folded == [(1, "state 'channel' v1", "+turn:w1"), (2, "state 'channel' v2", "~turn:w1.status")]
    # Each folded entry sits right after its message.
    for i, e in enumerate(tl.entries):
        if e.folded:
            assert tl.entries[i - 1].seq == e.seq

    code, out, _ = cli("show", "c1")
    assert code == 0 and "state 'channel'" not in out.split("\nstate")[0]
    assert "2 state change(s) written with a message are folded into it" in out
    assert "(sent " in out
    code, out, _ = cli("show", "c1", "--all")
    assert code == 0 and "state 'channel' v2" in out


def test_a_killed_worker_and_a_failed_attempt_show_as_retries(store: StateStore, dsn: str, schema: str,
                                                              cli) -> None:  # type: ignore[no-untyped-def]
    store.create_conversation("c1")
    # A worker takes the step and the payment, then dies by SIGKILL before recording anything.
    crash = (
        "import os, signal\n"
        "from pgagentstate import StateStore\n"
        f"with StateStore({dsn!r}, schema={schema!r}, min_size=1, max_size=1) as s:\n"
        "    s.start_step('c1', 'refund', 'process_refund', lease=0.001)\n"
        "    s.run_once('c1/payment', lambda key: os.kill(os.getpid(), signal.SIGKILL), api='payment',\n"
        "               conversation_id='c1', lease=0.001)\n"
    )
    proc = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    time.sleep(0.01)  # both leases (1 ms) have run out
    # Another worker takes over; its first payment attempt fails, the next succeeds.
    def timeout(key: str) -> dict[str, str]:
        raise RuntimeError("payment timed out")

    store.start_step("c1", "refund", "process_refund")
    with pytest.raises(RuntimeError):
        store.run_once("c1/payment", timeout, api="payment", conversation_id="c1")
    store.fail_step("c1", "refund", "process_refund", "payment timed out")
    store.start_step("c1", "refund", "process_refund")
    store.run_once("c1/payment", lambda key: {"transaction_id": "txn_1"}, api="payment", conversation_id="c1")
    store.complete_step("c1", "refund", "process_refund", {"transaction_id": "txn_1"})

    tl = store.run(operations.timeline(store.context, "c1"))
    assert tl is not None
    retries = [(e.title, e.text) for e in tl.entries if e.kind == "retry"]
    assert [t for t, _ in retries] == [
        "step refund/process_refund retried", "call payment retried [c1/payment]",
        "step refund/process_refund retried", "call payment retried [c1/payment]",
    ]
    step_crash, call_crash, step_failed, call_failed = (text for _, text in retries)
    assert step_crash.startswith("attempt 1 never recorded an outcome: the worker died or stalled")
    assert call_crash.startswith("attempt 1 (owner ") and "never recorded an outcome" in call_crash
    assert call_failed.startswith("attempt 2 (owner ") and call_failed.endswith(" failed")
    assert step_failed == "attempt 2 failed: payment timed out"

    code, out, _ = cli("show", "c1")
    assert code == 0 and "retry" in out and "never recorded an outcome" in out


def test_user_and_app_state_are_shown(store: StateStore, cli) -> None:  # type: ignore[no-untyped-def]
    cid = "adk:shop/u1/s1"
    store.create_conversation(cid, app="shop", user_id="u1", framework="adk",
                              state_patches=[(StateRef.conversation(cid), {"cart": 2}),
                                             (StateRef.user("shop", "u1"), {"tier": "gold"}),
                                             (StateRef.app("shop"), {"currency": "BRL"})])
    store.put_state(StateRef.user("shop", "someone_else"), {"tier": "none"})
    tl = store.run(operations.timeline(store.context, cid))
    assert tl is not None
    assert {(v.label, str(v.data)) for v in tl.shared_state} == {
        ("user:state", "{'tier': 'gold'}"), ("app:state", "{'currency': 'BRL'}"),
    }
    code, out, _ = cli("show", cid)
    assert code == 0 and "'user:state' at version 1" in out and "gold" in out and "BRL" in out
    assert "someone_else" not in out and '"none"' not in out
    code, out, _ = cli("state", cid)
    assert code == 0 and '"cart": 2' in out and "'user:state'" in out  # names the others
    code, out, _ = cli("state", cid, "--name", "user:state")
    assert code == 0 and '"tier": "gold"' in out


NAMES = {"call_1": "issue_refund"}


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        # The Agents SDK: items
        ({"type": "function_call", "name": "issue_refund", "arguments": '{"order_id": "12345"}', "call_id": "call_1"},
         'issue_refund({"order_id":"12345"})'),
        ({"type": "function_call_output", "call_id": "call_1", "output": '{"transaction_id": "txn_1"}'},
         'issue_refund → {"transaction_id":"txn_1"}'),
        # ADK: event parts, snake or camel case
        ({"author": "refund_agent", "content": {"role": "model", "parts": [
            {"function_call": {"name": "issue_refund", "args": {"order_id": "12345"}, "id": "call_1"}}]}},
         'issue_refund({"order_id":"12345"})'),
        ({"content": {"role": "user", "parts": [
            {"functionResponse": {"name": "issue_refund", "response": {"transaction_id": "txn_1"}}}]}},
         'issue_refund → {"transaction_id":"txn_1"}'),
        # LangChain messages (LangGraph): an AI message's tool calls, a tool message
        ({"type": "ai", "content": "", "tool_calls": [{"name": "issue_refund", "args": {"order_id": "12345"},
                                                       "id": "call_1", "type": "tool_call"}]},
         'issue_refund({"order_id":"12345"})'),
        ({"type": "tool", "content": '{"transaction_id": "txn_1"}', "tool_call_id": "call_1", "name": None},
         'issue_refund → {"transaction_id":"txn_1"}'),
        # An ADK event without content: its actions (here the rewind of an invocation a crash interrupted)
        ({"author": "user", "actions": {"state_delta": {"email": None}, "artifact_delta": {},
                                        "rewind_before_invocation_id": "e-8a67"}},
         'rewind to before invocation e-8a67; state {"email":null}'),
    ],
)
def test_tool_calls_and_results_render_alike_across_frameworks(payload: object, expected: str) -> None:
    assert message_text(payload, NAMES) == expected


def test_the_timeline_names_an_agents_sdk_result_by_its_call(store: StateStore) -> None:
    store.create_conversation("c1", framework="openai_agents")
    store.append_events("c1", [
        NewEvent({"type": "function_call", "name": "issue_refund", "arguments": "{}", "call_id": "x"}),
        NewEvent({"type": "function_call_output", "call_id": "x", "output": "ok"}),
    ])
    tl = store.run(operations.timeline(store.context, "c1"))
    assert tl is not None and [e.text for e in tl.entries] == ["issue_refund({})", "issue_refund → ok"]
