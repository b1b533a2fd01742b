"""Messages of every framework as one line of text for the operator tools, tool calls and results included.

One rendering for all: a call is ``issue_refund({"order_id":"12345"})`` and its result
``issue_refund → {"transaction_id":"txn_1"}``, whether it came as an Agents SDK item (``function_call``,
``function_call_output``), an ADK event part (``function_call`` / ``function_response``, snake or camel
case) or a LangChain message (``tool_calls`` of an AI message, a ``tool`` message). An ADK event without
content says what its actions did (``state {"remembered":true}``, a rewind).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: How long one rendered value may get before it is cut (the detail views still have the raw payload).
LIMIT = 300


def compact(value: Any, limit: int = LIMIT) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(value: Any) -> str:
    """A tool's arguments or result: JSON text is parsed first, so every framework renders alike."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            text: str = value
            return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"
    return compact(value)


def tool_call(name: Any, args: Any) -> str:
    body = "" if args is None or args == "" else _value(args)
    return f"{name or 'tool'}({body})"


def tool_result(name: Any, result: Any) -> str:
    return f"{name or 'tool'} → {_value(result)}"


def _tool_part(part: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """The rendering of a tool call or result, or None if ``part`` is neither."""
    call = part.get("function_call", part.get("functionCall"))
    if isinstance(call, Mapping):
        return tool_call(call.get("name"), call.get("args"))
    response = part.get("function_response", part.get("functionResponse"))
    if isinstance(response, Mapping):
        return tool_result(response.get("name"), response.get("response"))
    kind = part.get("type")
    if kind in ("function_call", "tool_call") and "name" in part:
        return tool_call(part["name"], part.get("arguments", part.get("args")))
    if kind == "function_call_output":
        return tool_result(names.get(str(part.get("call_id"))), part.get("output"))
    if kind == "tool" and "tool_call_id" in part:  # a LangChain ToolMessage
        return tool_result(part.get("name") or names.get(str(part["tool_call_id"])), part.get("content"))
    return None


def _actions(actions: Any) -> str:
    """An ADK event without content: what its actions did (a rewind of an interrupted invocation, a state
    change, a transfer), or "" when there is nothing to say."""
    if not isinstance(actions, Mapping):
        return ""
    said = []
    if actions.get("rewind_before_invocation_id"):
        said.append(f"rewind to before invocation {actions['rewind_before_invocation_id']}")
    if actions.get("transfer_to_agent"):
        said.append(f"transfer to {actions['transfer_to_agent']}")
    if actions.get("escalate"):
        said.append("escalate")
    if isinstance(actions.get("state_delta"), Mapping) and actions["state_delta"]:
        said.append(f"state {compact(actions['state_delta'])}")
    return "; ".join(said)


def call_names(payloads: list[Any]) -> dict[str, str]:
    """call id -> tool name, from the calls among ``payloads`` (an output item names only its call id)."""
    names: dict[str, str] = {}

    def visit(p: Any) -> None:
        if isinstance(p, Mapping):
            if p.get("type") in ("function_call", "tool_call") and isinstance(p.get("name"), str):
                call_id = p.get("call_id", p.get("id"))
                if call_id is not None:
                    names[str(call_id)] = p["name"]
            calls = p.get("tool_calls")
            for c in calls if isinstance(calls, list) else ():
                if isinstance(c, Mapping) and isinstance(c.get("name"), str) and c.get("id") is not None:
                    names[str(c["id"])] = c["name"]

    for p in payloads:
        visit(p)
    return names


def message_text(payload: Any, names: Mapping[str, str] | None = None) -> str:
    """The human-readable text of an event payload, across the shapes the frameworks store: ``text`` or
    ``content`` as a string, a list of parts with ``text``, ADK's ``content.parts``, tool calls and results
    (see the module); else compact JSON. ``names`` maps call ids to tool names (:func:`call_names`)."""
    names = names or {}
    if isinstance(payload, str):
        return payload
    if isinstance(payload, Mapping):
        tool = _tool_part(payload, names)
        if tool is not None:
            return tool
        calls = payload.get("tool_calls")
        if isinstance(calls, list) and calls:
            said = message_text(payload.get("content"), names) if payload.get("content") else ""
            rendered = "; ".join(
                tool_call(c.get("name"), c.get("args")) for c in calls if isinstance(c, Mapping)
            )
            return f"{said} {rendered}" if said else rendered
        for key in ("text", "content", "message", "output"):
            value = payload.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, Mapping) and "parts" in value:
                return message_text(value["parts"], names)
            if isinstance(value, list):
                joined = message_text(value, names)
                if joined:
                    return joined
        if isinstance(payload.get("parts"), list):
            return message_text(payload["parts"], names)
        actions = _actions(payload.get("actions"))
        if actions:
            return actions
    if isinstance(payload, list):
        texts = [message_text(p, names) for p in payload]
        if all(isinstance(p, Mapping) and ("text" in p or "parts" in p) for p in payload) or all(texts):
            return " ".join(t for t in texts if t)
    return compact(payload)
