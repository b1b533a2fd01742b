"""A LangGraph thread in the operator tools: its messages (tool calls included), state values and the
interrupt it waits on, read from its checkpoints by the core (which never imports langgraph), in
``conversations``, ``show``, ``state`` and the viewer's API — with and without encryption at rest."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

from pgagentstate import StateStore
from pgagentstate.cli import main
from pgagentstate.crypto import Encryption, StaticKeyProvider
from pgagentstate.langgraph import PostgresCheckpointer
from pgagentstate.ops import operations
from pgagentstate.ui.server import make_server

THREAD = "whatsapp-5511999999999"
Cli = Callable[..., tuple[int, str, str]]
KEY = bytes(range(32))


class Refund(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    order_id: str
    refund: dict[str, Any]


def refund_graph() -> Any:
    def agent(state: Refund) -> dict[str, Any]:
        call = {"name": "issue_refund", "args": {"order_id": "12345"}, "id": "call_1", "type": "tool_call"}
        return {"order_id": "12345", "messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: Refund) -> dict[str, Any]:
        return {"refund": {"transaction_id": "txn_12345", "amount": 500},
                "messages": [ToolMessage(content='{"transaction_id": "txn_12345"}', tool_call_id="call_1",
                                         name="issue_refund")]}

    def approve(state: Refund) -> dict[str, Any]:
        answer = interrupt("approve the refund of 500 BRL?")
        return {"messages": [AIMessage(content=f"approved: {answer}")]}

    builder = StateGraph(Refund)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "approve")
    builder.add_edge("approve", END)
    return builder


def run_thread(saver: PostgresCheckpointer) -> None:
    graph = refund_graph().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": THREAD}}
    graph.invoke({"messages": [HumanMessage("quero reembolso do pedido #12345")]}, config)


def check_view(tl: operations.Timeline | None) -> None:
    assert tl is not None and tl.thread is not None
    assert [(m.role, m.text) for m in tl.thread.messages] == [
        ("human", "quero reembolso do pedido #12345"),
        ("ai", 'issue_refund({"order_id":"12345"})'),
        ("tool", 'issue_refund → {"transaction_id":"txn_12345"}'),
    ]
    assert tl.thread.values[-1].values == {"order_id": "12345", "refund": {"transaction_id": "txn_12345",
                                                                            "amount": 500}}
    (waiting,) = [s for s in tl.thread.signals if s.kind == "interrupt"]
    assert waiting.pending and waiting.value[0]["value"] == "approve the refund of 500 BRL?"
    texts = [e.text for e in tl.entries]
    assert texts.index("quero reembolso do pedido #12345") < texts.index('issue_refund({"order_id":"12345"})')
    assert "approve the refund of 500 BRL?" in texts
    assert [e.at for e in tl.entries] == sorted(e.at for e in tl.entries)


@pytest.fixture
def cli(dsn: str, schema: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    def run(*argv: str) -> tuple[int, str, str]:
        code = main([argv[0], "--dsn", dsn, "--schema", schema, *argv[1:]])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_a_thread_is_rendered_from_its_checkpoints(saver: PostgresCheckpointer, store: StateStore, cli: Cli) -> None:
    run_thread(saver)
    check_view(store.run(operations.timeline(store.context, THREAD)))

    code, out, _ = cli("conversations", "--framework", "langgraph", "--json")
    (row,) = json.loads(out)
    assert code == 0 and row["conversation"]["id"] == THREAD
    assert row["messages"] == 3  # the thread's three messages, where the log has 0 events
    code, out, _ = cli("conversations")
    assert code == 0 and "msgs" in out and " 3 " in next(line for line in out.splitlines() if THREAD in line)

    code, out, _ = cli("show", THREAD)
    assert code == 0 and "(empty)" not in out
    for needle in ("quero reembolso do pedido #12345", 'issue_refund({"order_id":"12345"})',
                   'issue_refund → {"transaction_id":"txn_12345"}', "interrupt (waiting for input)",
                   "approve the refund of 500 BRL?", "'checkpoint:values' at version"):
        assert needle in out, needle

    code, out, err = cli("state", THREAD)
    assert code == 0, err
    assert '"order_id": "12345"' in out and '"txn_12345"' in out and "checkpoint:values" in out
    code, out, err = cli("state", THREAD, "--at", "1")
    assert code == 0 and '"order_id": "12345"' in out and "txn_12345" not in out, err


def test_the_viewer_api_has_the_thread(saver: PostgresCheckpointer, store: StateStore) -> None:
    run_thread(saver)
    server = make_server(store, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{base}/api/conversations", timeout=10) as r:
            (row,) = json.loads(r.read())
        assert row["id"] == THREAD and row["messages"] == 3
        with urllib.request.urlopen(f"{base}/api/conversations/{THREAD}", timeout=10) as r:
            tl = json.loads(r.read())
        assert [e["text"] for e in tl["entries"] if e["kind"] == "message"][:2] == [
            "quero reembolso do pedido #12345", 'issue_refund({"order_id":"12345"})']
        assert tl["thread"]["checkpoints"] >= 4
    finally:
        server.shutdown()
        server.server_close()


def test_an_encrypted_thread_is_rendered_decrypted(dsn: str, schema: str) -> None:
    enc = Encryption(StaticKeyProvider({"k1": KEY}, active="k1"), required=True)
    with PostgresCheckpointer.from_conn_string(dsn, schema=schema, encryption=enc) as saver:
        run_thread(saver)
    with StateStore(dsn, schema=schema, encryption=enc, min_size=1, max_size=1) as store:
        check_view(store.run(operations.timeline(store.context, THREAD)))


def test_state_of_a_thread_that_holds_only_messages_says_so(saver: PostgresCheckpointer, cli: Cli) -> None:
    from langgraph.graph import MessagesState

    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda state: {"messages": [AIMessage(content="oi")]})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    builder.compile(checkpointer=saver).invoke({"messages": [HumanMessage("olá")]},
                                               {"configurable": {"thread_id": "only-messages"}})
    code, _, err = cli("state", "only-messages")
    assert code == 1 and "its checkpoints hold only its 2 messages (show lists them)" in err
