"""The refund agent as a Google ADK ``LlmAgent`` with function tools, run by a ``Runner`` on
:class:`~pgagentstate.adk.PostgresSessionService` (the conversation and its state) and
:class:`~pgagentstate.adk.PostgresMemoryService` (what is remembered across sessions: the facts
pgagentstate's distillation worker found in the customer's earlier conversations, which ADK's own
``PreloadMemoryTool`` searches and puts into the model's request).

    python examples/adk_agent.py [DSN]

The model is ``ScriptedRefundLlm`` (``refund/scripted_adk.py``: the shared dialogue rules as a ``BaseLlm``), or
Gemini when ``GOOGLE_API_KEY`` is set. The tools are the durable refund workflow of ``refund/workflow.py``;
they also keep the facts in the session state (``order_id``, ``email``, ``reason``, ``refund``...).

A turn whose worker died is undone with ADK's own ``Runner.rewind_async`` (back to before the crashed
invocation) and run again: the tools' steps and ledger make the second run reuse what the first one paid.
"""

from __future__ import annotations

import os
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from pgagentstate import AsyncStateStore
from pgagentstate.adk import PostgresMemoryService, PostgresSessionService

from refund.agents import thread_key, tools_for, use_real_model
from refund.dialogue import INSTRUCTIONS
from refund.in_process import run
from refund.scripted_adk import ScriptedRefundLlm
from refund.workflow import ServiceUrls

APP_NAME = "refunds"


def _thread(tool_context: ToolContext) -> str:
    # The session is the WhatsApp conversation (refund.agents.thread_key). (Not a state key set at
    # create_session: a rewind recomputes state from the events alone, and initial state is in none of them.)
    return tool_context.session.id


def make_tools(store: AsyncStateStore, urls: ServiceUrls) -> list[Any]:
    """The three tools as plain functions (ADK reads their signatures and docstrings)."""

    async def check_refund_policy(order_id: str, email: str, reason: str, tool_context: ToolContext) -> dict[str, Any]:
        """Registra o pedido, o email e a razão e verifica se o reembolso é permitido pela política."""
        result = await tools_for(store, urls, _thread(tool_context)).check_refund_policy(order_id, email, reason)
        tool_context.state.update({"order_id": order_id, "email": email, "reason": reason})
        return result

    async def process_refund(order_id: str, tool_context: ToolContext) -> dict[str, Any]:
        """Paga o reembolso do pedido (idempotente)."""
        result = await tools_for(store, urls, _thread(tool_context)).call("process_refund", {"order_id": order_id})
        if "error" not in result:
            tool_context.state["refund"] = result
        return result

    async def send_confirmation(order_id: str, email: str, tool_context: ToolContext) -> dict[str, Any]:
        """Envia o comprovante do reembolso por email (idempotente)."""
        result = await tools_for(store, urls, _thread(tool_context)).call(
            "send_confirmation", {"order_id": order_id, "email": email})
        if "error" not in result:
            tool_context.state["receipt"] = result
        return result

    return [check_refund_policy, process_refund, send_confirmation]


def _text(event: Event) -> str:
    if event.content is None or event.get_function_calls() or event.get_function_responses():
        return ""
    return "".join(p.text or "" for p in event.content.parts or [] if not p.thought)


class AdkRefundAgent:
    """The refund ``LlmAgent``; one ADK session per WhatsApp conversation (app ``refunds``, user the customer)."""

    framework = "adk"

    def __init__(self, store: AsyncStateStore, urls: ServiceUrls, model: BaseLlm | str | None = None) -> None:
        if model is None:
            model = (os.environ.get("PGAGENTSTATE_DEMO_GEMINI_MODEL", "gemini-2.5-flash")
                     if use_real_model("GOOGLE_API_KEY") else ScriptedRefundLlm())
        self.agent = LlmAgent(name="refund_agent", model=model, instruction=INSTRUCTIONS,
                              tools=[*make_tools(store, urls), PreloadMemoryTool()])
        self.sessions = PostgresSessionService(store=store, setup=False)
        self.memory = PostgresMemoryService(store=store, setup=False)
        self.runner = Runner(app_name=APP_NAME, agent=self.agent, session_service=self.sessions,
                             memory_service=self.memory)

    async def respond(self, customer: str, text: str, *, retry: bool = False, conversation: int = 1) -> list[str]:
        sid = thread_key(customer, conversation)
        session = await self.sessions.get_session(app_name=APP_NAME, user_id=customer, session_id=sid)
        if session is None:
            session = await self.sessions.create_session(app_name=APP_NAME, user_id=customer, session_id=sid)
        if retry:
            users = [i for i, e in enumerate(session.events) if e.author == "user" and _text(e) == text]
            if users:
                answered = [t for e in session.events[users[-1] + 1:] if e.is_final_response() and (t := _text(e))]
                if answered:  # the turn finished; only its bookkeeping was lost
                    return answered
                await self.runner.rewind_async(user_id=customer, session_id=sid,
                                               rewind_before_invocation_id=session.events[users[-1]].invocation_id)
        replies: list[str] = []
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in self.runner.run_async(user_id=customer, session_id=sid, new_message=message):
            if event.author != "user" and event.is_final_response() and (reply := _text(event)):
                replies.append(reply)
        return replies

    async def aclose(self) -> None:
        await self.runner.close()


AGENT = AdkRefundAgent  # what refund.agents.load_agent starts in a worker


if __name__ == "__main__":
    run("Google ADK refund agent", AdkRefundAgent)
