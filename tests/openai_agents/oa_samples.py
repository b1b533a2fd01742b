"""Session items of every kind the Agents SDK stores, as plain JSON values (what a Session receives)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, function_tool
from agents.memory import Session
from agents.testing import ScriptedModel

SessionFactory = Callable[..., Session]

USER_TEXT: dict[str, Any] = {"content": "Oi, quero reembolso no pedido #12345", "role": "user"}

USER_PARTS: dict[str, Any] = {
    "type": "message",
    "role": "user",
    "content": [
        {"type": "input_text", "text": "what is in this picture? 🙂 ção"},
        {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"},
        {"type": "input_file", "file_id": "file-123"},
    ],
}

SYSTEM: dict[str, Any] = {"role": "system", "content": "You are terse."}

ASSISTANT: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [
        {
            "type": "output_text",
            "text": "Qual é seu email?",
            "annotations": [{"type": "url_citation", "url": "https://x.y", "title": "t", "start_index": 0,
                             "end_index": 3}],
            "logprobs": [],
        }
    ],
}

REFUSAL: dict[str, Any] = {
    "id": "msg_2",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "refusal", "refusal": "I can't help with that."}],
}

FUNCTION_CALL: dict[str, Any] = {
    "arguments": "{\"order_id\":\"12345\",\"amount\":19.99}",
    "call_id": "call_abc",
    "name": "refund",
    "type": "function_call",
    "id": "fc_1",
    "status": "completed",
}

FUNCTION_OUTPUT: dict[str, Any] = {"call_id": "call_abc", "output": "refunded 12345", "type": "function_call_output"}

FUNCTION_OUTPUT_PARTS: dict[str, Any] = {
    "call_id": "call_def",
    "type": "function_call_output",
    "output": [{"type": "input_text", "text": "structured"}, {"type": "input_image", "image_url": "data:,"}],
}

REASONING: dict[str, Any] = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"text": "The user wants a refund.", "type": "summary_text"}],
    "content": [{"text": "step 1", "type": "reasoning_text"}],
    "encrypted_content": "gAAAAABo" + "x" * 200,
}

REASONING_BARE: dict[str, Any] = {"id": "rs_2", "type": "reasoning", "summary": []}

HANDOFF_CALL: dict[str, Any] = {
    "arguments": "{}",
    "call_id": "call_h1",
    "name": "transfer_to_billing",
    "type": "function_call",
    "id": "call_h1",
}

HANDOFF_OUTPUT: dict[str, Any] = {
    "call_id": "call_h1",
    "output": "{\"assistant\": \"billing\"}",
    "type": "function_call_output",
}

WEB_SEARCH: dict[str, Any] = {
    "id": "ws_1",
    "type": "web_search_call",
    "status": "completed",
    "action": {"type": "search", "query": "postgres jsonb"},
}

FILE_SEARCH: dict[str, Any] = {
    "id": "fs_1",
    "type": "file_search_call",
    "status": "completed",
    "queries": ["refund policy"],
    "results": [{"file_id": "f1", "filename": "policy.pdf", "score": 0.87, "text": "30 days",
                 "attributes": {"page": 3, "public": True, "ratio": 1.5}}],
}

COMPUTER_CALL: dict[str, Any] = {
    "id": "cu_1",
    "type": "computer_call",
    "call_id": "call_cu",
    "status": "completed",
    "pending_safety_checks": [],
    "action": {"type": "click", "button": "left", "x": 10, "y": 20},
}

MCP_APPROVAL: dict[str, Any] = {
    "type": "mcp_approval_request",
    "id": "mcpr_1",
    "arguments": "{}",
    "name": "delete_repo",
    "server_label": "gh",
}

ITEM_REFERENCE: dict[str, Any] = {"type": "item_reference", "id": "msg_0"}

# Edge values a JSON store must not bend: NUL and the private-use escape character, big and negative
# numbers, floats that look like ints, empty containers, deep nesting, nulls.
EDGE: dict[str, Any] = {
    "call_id": "call_edge",
    "type": "function_call_output",
    "output": "nul:\x00 pua:\ue000 tab:\t quote:\" backslash:\\ emoji:🧾 rtl:שלום",
    "extra": {
        "big": 2**62,
        "neg": -17,
        "float": 1.5,
        "float_int": 2.0,
        "small": 1e-9,
        "empty_list": [],
        "empty_obj": {},
        "none": None,
        "bools": [True, False],
        "deep": {"a": {"b": {"c": {"d": [1, [2, [3]]]}}}},
        "": "empty key",
    },
}

ALL_ITEMS: list[dict[str, Any]] = [
    SYSTEM,
    USER_TEXT,
    USER_PARTS,
    REASONING,
    REASONING_BARE,
    FUNCTION_CALL,
    FUNCTION_OUTPUT,
    FUNCTION_OUTPUT_PARTS,
    HANDOFF_CALL,
    HANDOFF_OUTPUT,
    ASSISTANT,
    REFUSAL,
    WEB_SEARCH,
    FILE_SEARCH,
    COMPUTER_CALL,
    MCP_APPROVAL,
    ITEM_REFERENCE,
    EDGE,
]


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: The order number.
    """
    return f"order {order_id}: delivered broken"


def support_agents(model: ScriptedModel) -> Agent[Any]:
    """A triage agent with one tool and a handoff to billing, both driven by `model`."""
    billing: Agent[Any] = Agent(name="billing", instructions="You handle refunds.", model=model)
    return Agent(
        name="triage",
        instructions="You triage support requests.",
        tools=[lookup_order],
        handoffs=[billing],
        model=model,
    )
