"""Double texting: one turn at a time per session, across processes and servers.

A customer who sends a second message while the agent is still answering the first starts a second
``runner.run_async`` on the same session. Without coordination the two runs race: with ADK's own services
one of them fails with ``StaleSessionError`` (or, with older ones, the histories interleave). Running each
turn under a Postgres advisory lock on the session's conversation makes the second turn wait for the first
and then start from the history the first one wrote, whichever process or server each runs in.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

from google.adk.events import Event
from google.adk.runners import Runner
from google.genai import types

from pgagentstate import AsyncStateStore

from ._ids import conversation_id_for
from .session_service import PostgresSessionService


@asynccontextmanager
async def serialized_turn(
    store: AsyncStateStore | PostgresSessionService,
    *,
    app_name: str,
    user_id: str,
    session_id: str,
    timeout: float | None = None,
) -> AsyncIterator[None]:
    """Hold the session's turn lock for the duration of the block.

    Every process that runs turns of the session this way takes them one at a time. ``timeout`` (seconds)
    bounds the wait; when it passes, the core's lock-timeout error is raised and nothing has run.
    """
    if isinstance(store, PostgresSessionService):
        store = await store.store()
    async with store.conversation_lock(conversation_id_for(app_name, user_id, session_id), timeout=timeout):
        yield


async def run_serialized(
    runner: Runner,
    *,
    user_id: str,
    session_id: str,
    new_message: types.Content | None = None,
    store: AsyncStateStore | None = None,
    timeout: float | None = None,
    **run_kwargs: Any,
) -> AsyncIterator[Event]:
    """``runner.run_async(...)`` holding the session's turn lock, so concurrent turns run in order.

    Usage::

        async with aclosing(run_serialized(runner, user_id=u, session_id=s, new_message=msg)) as events:
            async for event in events:
                ...

    The runner's session service must be a :class:`PostgresSessionService` unless ``store`` names the
    store to lock in. The lock is taken before the runner loads the session, so the turn sees every event
    of the turns before it. It is released when the run ends, fails or the generator is closed (use
    ``contextlib.aclosing`` when you may stop iterating early). Extra keyword arguments go to
    ``run_async`` (``run_config``, ``state_delta``, ...).
    """
    if store is None:
        service = runner.session_service
        if not isinstance(service, PostgresSessionService):
            raise TypeError(
                "run_serialized needs the runner's session service to be a PostgresSessionService, "
                f"or store=...; got {type(service).__name__}"
            )
        store = await service.store()
    async with serialized_turn(
        store, app_name=runner.app_name, user_id=user_id, session_id=session_id, timeout=timeout
    ), aclosing(
        runner.run_async(user_id=user_id, session_id=session_id, new_message=new_message, **run_kwargs)
    ) as events:
        async for event in events:
            yield event
