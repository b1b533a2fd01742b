"""LangGraph adapter: a checkpointer and a long-term memory store on Postgres.

    from pgagentstate.langgraph import PostgresCheckpointer, PostgresStore

    with PostgresCheckpointer.from_conn_string(DB_URI) as checkpointer:
        checkpointer.setup()
        graph = builder.compile(checkpointer=checkpointer)

Threads are pgagentstate conversations (``framework="langgraph"``), next to ADK and Agents SDK sessions.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base as _checkpoint_base  # noqa: F401
    import langgraph.store.base as _store_base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError("pgagentstate.langgraph needs LangGraph: pip install 'pgagentstate[langgraph]'") from exc

from .checkpointer import PostgresCheckpointer
from .inbox import arun_message, run_message
from .store import PostgresStore

__all__ = ["PostgresCheckpointer", "PostgresStore", "arun_message", "run_message"]
