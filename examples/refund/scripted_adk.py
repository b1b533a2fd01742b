"""The refund dialogue's rules as an ADK ``BaseLlm``: what ``examples/adk_agent.py`` runs without an API key.
Deterministic, and it remembers nothing itself: every fact is read back from the request's contents (the
customer's long-term memories among them: ADK's ``PreloadMemoryTool`` puts them there).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from .dialogue import Msg, Reply, decide, remembered


def to_dialogue(contents: list[types.Content]) -> list[Msg]:
    """ADK request contents as the dialogue rules read them."""
    out: list[Msg] = []
    for content in contents:
        for part in content.parts or []:
            if part.function_call is not None:
                out.append(Msg("tool_call", tool=part.function_call.name or "", args=part.function_call.args or {}))
            elif part.function_response is not None:
                out.append(Msg("tool_result", tool=part.function_response.name or "",
                               result=part.function_response.response))
            elif part.text and not part.thought and "<PAST_CONVERSATIONS>" in part.text:
                out += remembered(part.text)  # PreloadMemoryTool's block: memory, not the customer speaking
            elif part.text and not part.thought:
                out.append(Msg("customer" if content.role == "user" else "agent", part.text))
    return out


class ScriptedRefundLlm(BaseLlm):
    """A ``BaseLlm`` that follows the refund dialogue's rules: no API key, deterministic."""

    model: str = "pgagentstate-scripted-refund"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        decision = decide(to_dialogue(llm_request.contents))
        if isinstance(decision, Reply):
            part = types.Part(text=decision.text)
        else:
            part = types.Part(function_call=types.FunctionCall(
                name=decision.name, args=decision.args, id=f"adk-{uuid.uuid4().hex[:12]}"))
        # Zero usage rather than none: ADK's telemetry warns on every response that has no usage at all.
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0, candidates_token_count=0,
                                                           total_token_count=0)
        yield LlmResponse(content=types.Content(role="model", parts=[part]), turn_complete=True,
                          usage_metadata=usage)
