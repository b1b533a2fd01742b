"""A store's pools and the event loops they belong to (the asyncio store only).

A psycopg pool belongs to the event loop it was opened in. ``asyncio.run`` ends by cancelling every task
of its loop: an open pool then treats the cancelled connection attempts as failed connections and tries
again for up to ``reconnect_timeout`` (5 minutes), so the loop's shutdown waits that long; and its
``close()``, run then, fails on its cancelled workers before closing any connection. So each pool the store
opens gets a :class:`LoopCloser`, which closes its connections when its loop shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool


class LoopCloser:
    """Knows a pool's connections (``track`` is the pool's ``configure=`` callback) and closes them, then
    the pool, when the loop it was started in cancels its tasks at shutdown."""

    def __init__(self) -> None:
        self._connections: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()
        self._task: asyncio.Task[None] | None = None

    async def track(self, conn: AsyncConnection[Any]) -> None:
        self._connections.add(conn)

    def start(self, pool: AsyncConnectionPool[Any]) -> None:
        """Watch for the shutdown of the running loop."""
        self._task = asyncio.ensure_future(self._wait_then_close(pool))

    def stop(self) -> None:
        """The pool was closed the ordinary way: nothing left to do."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _wait_then_close(self, pool: AsyncConnectionPool[Any]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            with contextlib.suppress(asyncio.CancelledError):
                await pool.close()  # marks it closed, so that no connection is added any more
            self.finish()
            raise

    def finish(self) -> None:
        """Close every connection of the pool at once; needs no event loop (its own may be closed)."""
        for conn in list(self._connections):
            conn.pgconn.finish()
