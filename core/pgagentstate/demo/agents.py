"""What the webhook needs from an agent, the framework-free agent, and finding a framework's agent.

A framework's refund agent lives next to its adapter, in ``pgagentstate.<framework>.refund_agent``
(so it ships in the wheel and ``pgagentstate demo`` works from an installed package), and is imported
only when asked for: the core never imports a framework.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Protocol

from ..aio import AsyncStateStore
from .dialogue import Msg, Reply, decide
from .workflow import RefundTools, ServiceUrls

FRAMEWORKS = ("langgraph", "adk", "openai_agents")
LABELS = {"langgraph": "LangGraph", "adk": "Google ADK", "openai_agents": "OpenAI Agents SDK", "core": "core only"}
MAX_STEPS = 8  # model calls per turn: the refund takes 4 (3 tools + the answer)


class AgentUnavailable(RuntimeError):
    """The framework (or its adapter) is not installed."""


class RefundAgent(Protocol):
    """A refund agent that keeps everything it knows in Postgres.

    ``respond`` handles one customer message and returns the replies. ``retry=True`` says an earlier
    attempt at this same message started and did not finish (its worker crashed): the agent must resume
    it without recording the message twice.
    """

    framework: str

    async def respond(self, customer: str, text: str, *, retry: bool = False) -> list[str]: ...

    async def aclose(self) -> None: ...


def channel_conversation_id(customer: str) -> str:
    """The customer's WhatsApp conversation: messages as delivered, the refund workflow and its ledger."""
    return f"whatsapp:{customer}"


def use_real_model(key_var: str) -> bool:
    """A real model when its API key is set, unless ``PGAGENTSTATE_DEMO_SCRIPTED=1`` forces the script."""
    return bool(os.environ.get(key_var)) and os.environ.get("PGAGENTSTATE_DEMO_SCRIPTED", "") not in ("1", "true")


def tools_for(store: AsyncStateStore, urls: ServiceUrls, customer: str) -> RefundTools:
    return RefundTools(store, channel_conversation_id(customer), urls)


class CoreRefundAgent:
    """The same agent with no framework: ``store.turn`` loads the history, the dialogue rules decide.

    Its history is the conversation ``core:<customer>``; a turn commits only when it ends, so a crashed
    attempt leaves nothing behind and a retry simply runs again (the tools are durable).
    """

    framework = "core"

    def __init__(self, store: AsyncStateStore, urls: ServiceUrls) -> None:
        self.store = store
        self.urls = urls

    async def respond(self, customer: str, text: str, *, retry: bool = False) -> list[str]:
        tools = tools_for(self.store, self.urls, customer)
        async with self.store.turn(
            f"core:{customer}", recent=500, create=True, framework="core", channel="whatsapp", user_id=customer
        ) as turn:
            history = [Msg(**e.payload) for e in turn.events]
            new = [Msg("customer", text)]
            for _ in range(MAX_STEPS):
                decision = decide(history + new)
                if isinstance(decision, Reply):
                    new.append(Msg("agent", decision.text))
                    break
                result = await tools.call(decision.name, decision.args)
                new += [
                    Msg("tool_call", tool=decision.name, args=decision.args),
                    Msg("tool_result", tool=decision.name, result=result),
                ]
            for msg in new:
                turn.append(
                    {
                        "role": msg.role,
                        "text": msg.text,
                        "tool": msg.tool,
                        "args": dict(msg.args),
                        "result": msg.result,
                    },
                    author=msg.role,
                )
            turn.set_status("waiting_customer")
        return [m.text for m in new if m.role == "agent"]

    async def aclose(self) -> None:
        return None


def load_agent(framework: str, store: AsyncStateStore, urls: ServiceUrls, **options: Any) -> RefundAgent:
    """The refund agent of ``framework`` (``core`` or one of :data:`FRAMEWORKS`)."""
    if framework == "core":
        return CoreRefundAgent(store, urls)
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use core or one of {', '.join(FRAMEWORKS)}")
    try:
        module = importlib.import_module(f"pgagentstate.{framework}.refund_agent")
    except ImportError as exc:
        raise AgentUnavailable(f"the {LABELS[framework]} refund agent is not available: {exc}") from exc
    agent: RefundAgent = module.build_agent(store, urls, **options)
    return agent
