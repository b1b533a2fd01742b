"""Factories for the LangGraph server's ``langgraph.json``: async context managers that open, set up and
close our checkpointer and store.

    {
      "checkpointer": {"path": "pgagentstate.langgraph.server:checkpointer",
                       "ttl": {"strategy": "delete", "default_ttl": 43200, "sweep_interval_minutes": 60}},
      "store": {"path": "pgagentstate.langgraph.server:store",
                "ttl": {"default_ttl": 10080, "sweep_interval_minutes": 60}}
    }

The server passes the sections on in ``$LANGGRAPH_CHECKPOINTER`` and ``$LANGGRAPH_STORE`` (JSON); the
database is ``$PGAGENTSTATE_DSN``, else a ``postgres`` ``$DATABASE_URI``, else as for a DSN-less store.
The checkpointer's ``ttl`` (thread TTL, also ``$LANGGRAPH_THREAD_TTL``) becomes our retention: every
``sweep_interval_minutes`` (default 5), threads not written for ``default_ttl`` minutes are deleted
(``strategy="delete"``) or cut to their latest checkpoint (``"keep_latest"``), as
:meth:`PostgresCheckpointer.aprune_idle` does. Keyword arguments (``schema=``, ...) go to the constructors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from .checkpointer import PostgresCheckpointer
from .store import PostgresStore

logger = logging.getLogger(__name__)

#: Thread TTL strategies, as the LangGraph server names them.
STRATEGIES = ("delete", "keep_latest")


def _dsn() -> str | None:
    uri = os.environ.get("PGAGENTSTATE_DSN") or os.environ.get("DATABASE_URI") or ""
    return uri if uri.startswith(("postgres://", "postgresql://")) else None


def _section(var: str) -> dict[str, Any]:
    raw = os.environ.get(var)
    return dict(json.loads(raw)) if raw else {}


def thread_ttl(section: Mapping[str, Any]) -> dict[str, Any] | None:
    """The thread TTL in force: ``$LANGGRAPH_THREAD_TTL`` (as the server reads it), else the checkpointer
    section's ``ttl``; None when there is none or it sets no ``default_ttl``."""
    raw = os.environ.get("LANGGRAPH_THREAD_TTL")
    ttl = dict(json.loads(raw)) if raw else dict(section.get("ttl") or {})
    if ttl.get("default_ttl") is None:
        return None
    strategy = str(ttl.get("strategy", "delete")).lower()
    if strategy not in STRATEGIES:
        raise ValueError(f"thread TTL strategy {strategy!r}: expected one of {list(STRATEGIES)}")
    return {**ttl, "strategy": strategy}


async def _retention(saver: PostgresCheckpointer, ttl: Mapping[str, Any]) -> None:
    idle = timedelta(minutes=float(ttl["default_ttl"]))
    every = float(ttl.get("sweep_interval_minutes") or 5) * 60.0
    while True:
        try:
            await saver.aprune_idle(idle, strategy=ttl["strategy"])
        except Exception:  # retried at the next interval
            logger.exception("thread TTL sweep failed")
        await asyncio.sleep(every)


@asynccontextmanager
async def checkpointer(**kwargs: Any) -> AsyncIterator[PostgresCheckpointer]:
    """``checkpointer.path``: a set-up checkpointer, with the thread TTL applied while it is open."""
    ttl = thread_ttl(_section("LANGGRAPH_CHECKPOINTER"))
    async with PostgresCheckpointer.from_conn_string(_dsn(), **kwargs) as saver:
        await saver.setup()
        sweeper = asyncio.create_task(_retention(saver, ttl)) if ttl else None
        try:
            yield saver
        finally:
            if sweeper is not None:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeper


@asynccontextmanager
async def store(**kwargs: Any) -> AsyncIterator[PostgresStore]:
    """``store.path``: a set-up store configured by the ``store`` section (``index``, ``ttl``); with a
    ``ttl``, its sweeper runs while the store is open."""
    section = _section("LANGGRAPH_STORE")
    memory = PostgresStore.from_langgraph_config(section, _dsn(), **kwargs)
    try:
        await memory.setup()
        if memory.ttl_config:
            await memory.start_ttl_sweeper()
        yield memory
    finally:
        await memory.aclose()
