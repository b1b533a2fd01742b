"""The refund dialogue's rules as an Agents SDK ``Model``: what ``examples/openai_agents_agent.py`` runs without
an API key. Deterministic, and it remembers nothing itself: every fact is read back from the input items and
the instructions (where ``memory_instructions`` puts the customer's long-term memories).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agents import Model, ModelResponse, Usage
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call

from .dialogue import Msg, Reply, decide, remembered


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, Mapping))
    return ""


def to_dialogue(items: str | list[TResponseInputItem]) -> list[Msg]:
    """Responses-format input items as the dialogue rules read them."""
    if isinstance(items, str):
        return [Msg("customer", items)]
    out: list[Msg] = []
    names: dict[str, str] = {}
    for raw in items:
        item: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        kind = item.get("type", "message")
        if kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            out.append(Msg("tool_call", tool=str(item.get("name")), args=json.loads(item.get("arguments") or "{}")))
        elif kind == "function_call_output":
            output = item.get("output")
            try:
                result = json.loads(output) if isinstance(output, str) else output
            except ValueError:
                result = {"error": output}
            out.append(Msg("tool_result", tool=names.get(str(item.get("call_id")), ""), result=result))
        elif kind == "message" and item.get("role") in ("user", "assistant"):
            out.append(Msg("customer" if item["role"] == "user" else "agent", text_of(item.get("content"))))
    return out


class ScriptedRefundModel(Model):
    """A ``Model`` that follows the refund dialogue's rules: no API key, deterministic."""

    async def get_response(
        self, system_instructions: str | None, input: str | list[TResponseInputItem], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        decision = decide(remembered(system_instructions or "") + to_dialogue(input))
        if isinstance(decision, Reply):
            output = assistant_message(decision.text, item_id=f"msg_{uuid.uuid4().hex[:12]}")
        else:
            output = function_call(decision.name, decision.args, call_id=f"call_{uuid.uuid4().hex[:12]}")
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted refund model does not stream; use Runner.run")
