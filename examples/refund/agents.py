"""What the webhook needs from an agent, and finding a framework's agent.

Each framework's refund agent is one file of examples/ (``langgraph_agent.py``, ``adk_agent.py``,
``openai_agents_agent.py``, and ``core_agent.py`` without a framework), imported only when asked for:
a worker process imports one framework, the one it runs.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Protocol

from pgagentstate import AsyncStateStore

from .workflow import RefundTools, ServiceUrls

FRAMEWORKS = ("langgraph", "adk", "openai_agents")
LABELS = {"langgraph": "LangGraph", "adk": "Google ADK", "openai_agents": "OpenAI Agents SDK", "core": "core only"}


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


def load_agent(framework: str, store: AsyncStateStore, urls: ServiceUrls, **options: Any) -> RefundAgent:
    """The refund agent of ``framework`` (``core`` or one of :data:`FRAMEWORKS`)."""
    if framework != "core" and framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; use core or one of {', '.join(FRAMEWORKS)}")
    try:
        module = importlib.import_module(f"{framework}_agent")  # examples/<framework>_agent.py
    except ImportError as exc:
        raise AgentUnavailable(f"the {LABELS[framework]} refund agent is not available: {exc}") from exc
    agent: RefundAgent = module.AGENT(store, urls, **options)
    return agent
