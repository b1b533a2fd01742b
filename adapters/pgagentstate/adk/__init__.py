"""Google ADK adapter: Postgres session and memory services, turn serialisation, ``adk web`` URI schemes.

    from pgagentstate.adk import PostgresSessionService, PostgresMemoryService, run_serialized
    from pgagentstate.adk import run_message  # an agent's turn for a message of the durable inbox
"""

from __future__ import annotations

try:
    import google.adk as _adk  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError("pgagentstate.adk needs Google ADK: pip install 'pgagentstate[adk]'") from exc

from ._ids import conversation_id_for, session_id_of
from .inbox import run_message
from .memory_service import PostgresMemoryService
from .registry import register_services
from .serialize import run_serialized, serialized_turn
from .session_service import STALE_SESSION_MESSAGE, PostgresSessionService

__all__ = [
    "STALE_SESSION_MESSAGE",
    "PostgresMemoryService",
    "PostgresSessionService",
    "conversation_id_for",
    "register_services",
    "run_message",
    "run_serialized",
    "serialized_turn",
    "session_id_of",
]
