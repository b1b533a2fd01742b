"""The async store's queue for pooled connections: first come, first served, one wake-up per hand-over.

With more tasks than connections (200 conversations on a pool of 10), psycopg_pool's own queue hands a
returned connection to a waiter through an ``asyncio.Condition`` under ``asyncio.wait_for``: the waiter
resumes three to four event-loop iterations later, each a pass over every ready task, while the connection
sits idle, and each wait puts a 10 s timer in the loop's heap. Measured with ``bench_core``'s turn (one
process, pool of 10, client and server on one core each): 0.39 ms of client CPU a turn at 10 conversations,
0.54 ms at 200 and 0.73 ms at 1,000, where turns/s fell from ~2,300 to ~1,500 and ~1,250. Waiting here
instead, so that the store never asks the pool for more connections than it has, kept it at 0.43-0.52 ms
and ~2,000 and ~1,800 turns/s.

A wait fails with ``PoolTimeout`` (reported as ``ConnectionLost``) only when no connection came back for
``stall`` seconds: a burst far larger than the pool waits as long as it keeps moving.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from psycopg_pool import PoolTimeout


class CheckoutQueue:
    """At most ``capacity()`` holders at once; the others wait in arrival order."""

    def __init__(self, capacity: Callable[[], int], *, stall: float) -> None:
        self._capacity = capacity
        self._stall = stall
        self._held = 0
        # (future, monotonic time it began waiting); a future already done was cancelled or failed
        self._waiting: collections.deque[tuple[asyncio.Future[None], float]] = collections.deque()
        self._moved = time.monotonic()  # when a holder last left
        self._watch: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        if not self._waiting and self._held < self._capacity():
            self._held += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((future, time.monotonic()))
        self._watch_stalls()
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._leave()  # handed a place, then cancelled before it resumed: pass the place on
            raise

    async def __aexit__(self, *exc: Any) -> None:
        self._leave()

    def _leave(self) -> None:
        self._held -= 1
        self._moved = time.monotonic()
        self._admit()

    def _admit(self) -> None:
        while self._waiting and self._held < self._capacity():
            future, _ = self._waiting.popleft()
            if not future.done():  # skip a waiter that was cancelled meanwhile
                self._held += 1
                future.set_result(None)

    def _watch_stalls(self) -> None:
        if self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(self._stall / 4, self._check_stalls)

    def _check_stalls(self) -> None:
        """Fail the waiters that have waited ``stall`` seconds during which no holder left."""
        self._watch = None
        now = time.monotonic()
        if now - self._moved >= self._stall:
            while self._waiting and now - self._waiting[0][1] >= self._stall:
                future, _ = self._waiting.popleft()
                if not future.done():
                    future.set_exception(
                        PoolTimeout(f"no pooled connection came back in {self._stall:g} s: all of them are held")
                    )
        if self._waiting:
            self._watch_stalls()


class ThreadCheckout:
    """The sync store's: threads wait in psycopg_pool's own queue, where the OS wakes the next one at once."""

    def __init__(self, capacity: Callable[[], int], *, stall: float) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None
