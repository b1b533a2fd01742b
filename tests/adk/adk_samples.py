"""Helpers shared by the ADK adapter tests: event builders and a deterministic scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.events import Event
from google.adk.events.event_actions import EventActions
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.load_memory_tool import LoadMemoryResponse
from google.genai import types


def text_event(
    author: str,
    text: str,
    *,
    state_delta: dict[str, Any] | None = None,
    timestamp: float | None = None,
    invocation_id: str = "inv-1",
    partial: bool | None = None,
) -> Event:
    """An event carrying one text part (and optionally a state delta)."""
    kwargs: dict[str, Any] = {}
    if timestamp is not None:
        kwargs["timestamp"] = timestamp
    return Event(
        invocation_id=invocation_id,
        author=author,
        content=types.Content(role="user" if author == "user" else "model", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(state_delta or {})),
        partial=partial,
        **kwargs,
    )


def rich_event() -> Event:
    """An event using most of the fields ADK persists, to prove payloads round-trip whole."""
    return Event(
        invocation_id="inv-rich",
        author="root_agent",
        branch="root_agent.sub",
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="calling a tool"),
                types.Part(function_call=types.FunctionCall(id="fc-1", name="lookup", args={"order": 12345})),
                types.Part(
                    function_response=types.FunctionResponse(
                        id="fc-1", name="lookup", response={"status": "shipped", "items": [1, 2, 3]}
                    )
                ),
            ],
        ),
        actions=EventActions(
            state_delta={"order": {"id": 12345, "tags": ["a", "b"]}},
            artifact_delta={"receipt.pdf": 2},
            transfer_to_agent="billing",
            escalate=True,
            skip_summarization=True,
        ),
        long_running_tool_ids={"fc-1", "fc-0"},
        custom_metadata={"trace": {"id": "t-1", "ok": True}, "n": 1.5},
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=5, total_token_count=15
        ),
        finish_reason=types.FinishReason.STOP,
        model_version="scripted-1",
        turn_complete=True,
        error_code=None,
    )


def dump(event: Event) -> dict[str, Any]:
    """What a stored event must give back: its whole JSON form."""
    return event.model_dump(exclude_none=True, mode="json")


def last_user_text(request: LlmRequest) -> str:
    """The text of the newest user turn in a model request."""
    for content in reversed(request.contents or []):
        if content.role == "user" and content.parts:
            texts = [p.text for p in content.parts if p.text]
            if texts:
                return " ".join(texts)
    return ""


class ScriptedLlm(BaseLlm):
    """A model with no API behind it: answers ``echo: <last user message>``.

    ``delay`` keeps a turn open for a while (so two turns overlap in time unless something serialises
    them); ``seen`` records, per call, how many user messages the model saw in its prompt.
    """

    model: str = "scripted-echo"
    delay: float = 0.0
    seen: list[list[str]] = []  # noqa: RUF012 - pydantic copies the default per instance

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        users = [
            " ".join(p.text for p in c.parts or [] if p.text)
            for c in llm_request.contents or []
            if c.role == "user"
        ]
        self.seen.append(users)
        if self.delay:
            await asyncio.sleep(self.delay)
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=f"echo: {last_user_text(llm_request)}")]),
            turn_complete=True,
        )


class PreloadRecallLlm(BaseLlm):
    """Answers with the past conversations ADK's ``preload_memory`` tool put in the prompt (or 'none')."""

    model: str = "scripted-recall"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        recalled = "none"
        for content in llm_request.contents or []:
            for part in content.parts or []:
                if part.text and "<PAST_CONVERSATIONS>" in part.text:
                    recalled = part.text.split("<PAST_CONVERSATIONS>")[1].split("</PAST_CONVERSATIONS>")[0]
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"recalled: {recalled}")]))


class LoadMemoryLlm(BaseLlm):
    """Calls ADK's ``load_memory`` tool with the user's message, then answers with what it returned."""

    model: str = "scripted-load-memory"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = (llm_request.contents or [])[-1]
        for part in last.parts or []:
            if part.function_response is not None:
                # ADK wraps the tool's return value: {"result": LoadMemoryResponse} in the live run.
                result: Any = (part.function_response.response or {}).get("result")
                if isinstance(result, dict):
                    result = LoadMemoryResponse.model_validate(result)
                texts = [p.text or "" for m in result.memories for p in m.content.parts or []]
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text="found: " + " | ".join(texts))])
                )
                return
        yield LlmResponse(
            content=types.Content(
                role="model",
                parts=[
                    types.Part(
                        function_call=types.FunctionCall(
                            id="call-1", name="load_memory", args={"query": last_user_text(llm_request)}
                        )
                    )
                ],
            )
        )
