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
    it without recording the message twice. ``conversation`` is which of the customer's conversations the
    message belongs to (1, 2, ...: see :func:`thread_key`); what the agent knows of the customer from an
    earlier one comes from long-term memory.
    """

    framework: str

    async def respond(self, customer: str, text: str, *, retry: bool = False, conversation: int = 1) -> list[str]: ...

    async def aclose(self) -> None: ...


def thread_key(customer: str, conversation: int = 1) -> str:
    """The customer's ``conversation``-th conversation (a WhatsApp customer service window, see
    :mod:`.webhook`): the number for the first, ``<number>~<n>`` after. Each framework names its thread or
    session after it, so a new conversation starts with an empty history."""
    return customer if conversation == 1 else f"{customer}~{conversation}"


def channel_conversation_id(customer: str, conversation: int = 1) -> str:
    """The customer's WhatsApp conversation: messages as delivered, the refund workflow and its ledger."""
    return f"whatsapp:{thread_key(customer, conversation)}"


def use_real_model(key_var: str) -> bool:
    """A real model when its API key is set, unless ``PGAGENTSTATE_DEMO_SCRIPTED=1`` forces the script."""
    return bool(os.environ.get(key_var)) and os.environ.get("PGAGENTSTATE_DEMO_SCRIPTED", "") not in ("1", "true")


def tools_for(store: AsyncStateStore, urls: ServiceUrls, thread: str) -> RefundTools:
    """The refund tools of the conversation ``thread`` (:func:`thread_key`; the customer's number for the first)."""
    return RefundTools(store, f"whatsapp:{thread}", urls)


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
