"""OpenAI Agents SDK adapter: a Postgres ``Session``, memory tools, idempotent tools and paused runs.

    from pgagentstate.openai_agents import PostgresSession, memory_tools, idempotent_function_tool, PausedRuns
    from pgagentstate.openai_agents import run_message  # an agent's turn for a message of the durable inbox
"""

from __future__ import annotations

try:
    import agents as _agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        "pgagentstate.openai_agents needs the OpenAI Agents SDK: pip install 'pgagentstate[openai-agents]'"
    ) from exc

from ._identity import Identity, StateContext, identity_of
from .idempotent import idempotent_function_tool, tool_call_key
from .inbox import run_message
from .memory import memory_instructions, memory_tools
from .paused import PausedRun, PausedRuns
from .session import InvalidItem, PostgresSession, SessionUserMismatch

__all__ = [
    "Identity",
    "InvalidItem",
    "PausedRun",
    "PausedRuns",
    "PostgresSession",
    "SessionUserMismatch",
    "StateContext",
    "idempotent_function_tool",
    "identity_of",
    "memory_instructions",
    "memory_tools",
    "run_message",
    "tool_call_key",
]
