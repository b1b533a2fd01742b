"""The refund dialogue's rules as a LangChain chat model: what ``examples/langgraph_agent.py`` runs without an
API key. Deterministic, and it remembers nothing itself: every fact is read back from the messages it is given
(the system message included: the agent puts the customer's long-term memories there).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from .dialogue import Msg, Reply, decide, remembered


def to_dialogue(messages: Sequence[BaseMessage]) -> list[Msg]:
    """LangChain messages as the dialogue rules read them."""
    out: list[Msg] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out += remembered(str(m.content))
        elif isinstance(m, HumanMessage):
            out.append(Msg("customer", str(m.content)))
        elif isinstance(m, AIMessage):
            out += [Msg("tool_call", tool=c["name"], args=c["args"]) for c in m.tool_calls]
            if m.content and not m.tool_calls:
                out.append(Msg("agent", str(m.content)))
        elif isinstance(m, ToolMessage):
            try:
                result = json.loads(str(m.content))
            except ValueError:
                result = {"error": str(m.content)}
            out.append(Msg("tool_result", tool=m.name or "", result=result))
    return out


class ScriptedRefundModel(BaseChatModel):
    """A chat model that follows the refund dialogue's rules: no API key, deterministic."""

    @property
    def _llm_type(self) -> str:
        return "pgagentstate-scripted-refund"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self  # the script knows the tools already

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        decision = decide(to_dialogue(messages))
        if isinstance(decision, Reply):
            message = AIMessage(content=decision.text)
        else:
            call = {"name": decision.name, "args": decision.args, "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])
