"""A store's pools and the event loops they belong to (the asyncio store only).

A psycopg pool belongs to the event loop it was opened in. ``asyncio.run`` ends by cancelling every task
of its loop, and an open pool treats the cancellation of a connection attempt as a failed connection and
tries again for up to ``reconnect_timeout`` (5 minutes): the loop's shutdown waits that long. So each
pool the store opens gets a task that closes it when its loop shuts down.
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg_pool import AsyncConnectionPool


def close_at_loop_end(pool: AsyncConnectionPool[Any]) -> asyncio.Task[None]:
    """A task of the running loop that closes ``pool`` when it is cancelled (keep a reference to it)."""
    return asyncio.ensure_future(_wait_then_close(pool))


async def _wait_then_close(pool: AsyncConnectionPool[Any]) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await pool.close()
        raise
